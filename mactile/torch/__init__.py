"""PyTorch integration: every mactile GPU path as a ``torch.library`` op and an ``nn.Module``.

Needs torch (``pip install 'mactile[torch]'``); ``import mactile`` and ``mactile.golden`` do
not import it.

* :mod:`.ops` -- custom ops ``torch.ops.mactile.{w4a16, w4a4, nestedfp, flexq,
  reset_temperature_step}``, each with a fake implementation (``torch.compile``), a CPU
  implementation (the golden model) and a CUDA one (mactile.gpu's kernels on torch's
  stream, through torch's allocator);
* :class:`QuantLinear` -- an ``nn.Linear`` stored packed in a golden format;
* :func:`quantize_model` -- replace a model's linear layers, with a summary of the bytes saved;
* :func:`save_quantized` / :func:`load_quantized` -- safetensors files of quantized models;
* :mod:`.decoder`, :mod:`.generate`, :mod:`.sampling` -- a Llama / Qwen3 decoder with a static
  KV cache, CUDA-graph decoding, greedy / sampled / ReSET step-aware sampling, NestedFP's
  per-step precision policy; :mod:`.e2e_bench` -- ``mactile bench e2e``.

>>> import torch
>>> from mactile.torch import quantize_model
>>> model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
>>> summary = quantize_model(model, "nvfp4", progress=False)
>>> summary.layers_replaced, summary.bytes_before > 3 * summary.bytes_after
(2, True)
>>> model(torch.randn(3, 512)).shape
torch.Size([3, 256])
"""
from . import ops
from ._formats import KINDS, MODES, layer_kind, spec_json
from .convert import (DEFAULT_EXCLUDE, QuantizeSummary, dequantized_model, load_quantized,
                      quantize_model, read_quantized, save_quantized)
from .modules import QuantLinear

__all__ = ["ops", "QuantLinear", "quantize_model", "QuantizeSummary", "DEFAULT_EXCLUDE",
           "save_quantized", "load_quantized", "read_quantized", "dequantized_model",
           "KINDS", "MODES", "layer_kind", "spec_json"]
