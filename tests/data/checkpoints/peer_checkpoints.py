"""NVFP4 and MXFP4 checkpoints written by compressed-tensors itself, with its dequantization.

Run where the peer is installed (never a project dependency)::

    python -m venv .peers-venv && .peers-venv/bin/pip install torch==2.13.0 compressed-tensors
    .peers-venv/bin/python tests/data/checkpoints/peer_checkpoints.py

For each layout it writes a folder beside itself, as compressed-tensors lays a model out:

``ct_nvfp4/``
    ``nvfp4-pack-quantized``: per layer ``<name>.weight_packed`` (U8 ``[N, K/2]``),
    ``<name>.weight_scale`` (F8_E4M3 ``[N, K/16]``), ``<name>.weight_global_scale`` (F32
    ``[1]``), plus an unquantized BF16 tensor; two shards and ``model.safetensors.index.json``;
``ct_mxfp4/``
    ``mxfp4-pack-quantized``: ``weight_packed`` and ``weight_scale`` (U8 E8M0), one file;
``modelopt_nvfp4/`` (when nvidia-modelopt is importable; it runs on CPU)
    ModelOpt's NVFP4 export: ``<name>.weight`` (U8 ``[N, K_pad/2]``), ``weight_scale``
    (F8_E4M3), ``weight_scale_2`` (F32 scalar), ``input_scale`` (F32 scalar), quantized by
    ``NVFP4QTensor.quantize`` (an odd K = 40 zero-padded to 48 by ModelOpt itself), with
    ``hf_quant_config.json``;
``gptoss_mxfp4/``
    the gpt-oss layout ``<name>_blocks`` (U8 ``[E, N, K/32, 16]``) and ``<name>_scales``
    (U8 E8M0), bytes chosen here (random codes, all-zero blocks, the smallest scale code 0
    and the largest whose values stay finite in BF16, 252), dequantized by transformers'
    ``convert_moe_packed_tensors``;
``expected.npz``
    ``<folder>/<layer>``: the peer's own dequantized weight
    (``NVFP4PackedCompressor.decompress`` / ``MXFP4PackedCompressor.decompress``,
    ``NVFP4QTensor.dequantize``, ``convert_moe_packed_tensors``), BF16 bits as ``uint16``;
    ``meta``: JSON with the versions and the calls made.

Scales come from the peer too: ``generate_gparam`` (the global scale ``448 * 6 / amax``)
and ``calculate_qparams`` on the per-group minima and maxima, exactly as llm-compressor's
observers feed them. ``tests/golden/test_checkpoints.py`` reads these files without torch.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _weights():
    """Named float32 weights [N, K]: ordinary, all-zero blocks, odd row count, tiny and
    wide-range values, exact FP4 ties of the scale."""
    rng = np.random.default_rng(46)
    w = {}
    w["model.layers.0.mlp.up_proj"] = rng.standard_normal((32, 64)) * 0.05
    z = rng.standard_normal((16, 64)) * 0.02
    z[:4] = 0.0            # whole rows of zero blocks
    z[8:, 16:32] = 0.0     # one zero block in each of the last rows
    w["model.layers.0.mlp.down_proj"] = z
    w["model.layers.1.self_attn.q_proj"] = rng.standard_normal((7, 96)) * 0.1   # odd N
    tiny = rng.standard_normal((8, 32)) * 1e-6                                  # subnormal E4M3 scales
    tiny[0, :16] = rng.standard_normal(16) * 3.0                                 # one large block
    w["model.layers.1.self_attn.k_proj"] = tiny
    ties = np.tile(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0]), (4, 4)) / 6.0
    ties[:, ::3] *= -1
    w["model.layers.1.self_attn.v_proj"] = ties
    return {k: v.astype(np.float32) for k, v in w.items()}


def _bf16_bits(t) -> np.ndarray:
    import torch

    return t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16)


def _compress(name: str, weight, scheme_name: str):
    """compressed-tensors' own scales, compressed state dict and dequantized weight."""
    import torch
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    scheme: QuantizationScheme = preset_name_to_scheme(scheme_name, ["Linear"])
    args = scheme.weights
    g = args.group_size
    x = torch.from_numpy(weight).to(torch.bfloat16)  # the model dtype
    groups = x.float().unflatten(-1, (x.shape[-1] // g, g))
    gmin, gmax = groups.amin(dim=-1), groups.amax(dim=-1)
    sd = {"weight": x}
    if scheme_name.startswith("NVFP4"):
        gs = generate_gparam(x.float().min(), x.float().max())
        scale, _ = calculate_qparams(gmin, gmax, args, global_scale=gs)
        sd["weight_scale"], sd["weight_global_scale"] = scale, gs
        comp = NVFP4PackedCompressor
    else:
        scale, _ = calculate_qparams(gmin, gmax, args)
        sd["weight_scale"] = scale
        comp = MXFP4PackedCompressor
    packed = comp.compress(sd, scheme)
    deq = comp.decompress(dict(packed), scheme)["weight"]
    return {f"{name}.{k}": v for k, v in packed.items()}, deq, scheme


def _modelopt(weights, expected, meta) -> None:
    """ModelOpt's own NVFP4 quantizer and dequantizer, on CPU."""
    try:
        import modelopt
        from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
    except ImportError as e:
        print(f"skipping modelopt_nvfp4: {e}")
        return
    import torch
    from safetensors.torch import save_file

    out = HERE / "modelopt_nvfp4"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    ws = dict(weights)
    rng = np.random.default_rng(4046)
    ws["model.layers.2.mlp.gate_proj"] = (rng.standard_normal((6, 40)) * 0.07).astype(np.float32)
    tensors = {}
    for name, w in ws.items():
        x = torch.from_numpy(w).to(torch.bfloat16)
        qt, s, s2 = NVFP4QTensor.quantize(x, 16)
        packed = qt._quantized_data
        # ModelOpt pads K to whole blocks before quantizing; its dequantize reshapes to the
        # unpadded shape, which the padded data does not fill: dequantize the stored tensor.
        qt.metadata["shape"] = torch.Size((packed.shape[0], packed.shape[1] * 2))
        deq = qt.dequantize(dtype=torch.bfloat16, scale=s, double_scale=s2, block_sizes={-1: 16})
        expected[f"modelopt_nvfp4/{name}"] = _bf16_bits(deq)
        tensors[f"{name}.weight"] = packed.contiguous()
        tensors[f"{name}.weight_scale"] = s.contiguous()
        tensors[f"{name}.weight_scale_2"] = s2.reshape(()).contiguous()
        tensors[f"{name}.input_scale"] = torch.tensor(0.5 / (6 * 448), dtype=torch.float32)
    tensors["model.norm.weight"] = torch.ones(16, dtype=torch.bfloat16)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    hf = {"producer": {"name": "modelopt", "version": modelopt.__version__},
          "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None,
                           "group_size": 16, "exclude_modules": ["lm_head"]}}
    (out / "hf_quant_config.json").write_text(json.dumps(hf, indent=4) + "\n")
    meta["layouts"]["modelopt_nvfp4"] = {
        "modelopt": modelopt.__version__,
        "quantize": "NVFP4QTensor.quantize(x_bf16, 16)",
        "dequantize": "NVFP4QTensor.dequantize(dtype=bfloat16, scale, double_scale)"}


def _gptoss(expected, meta) -> None:
    """gpt-oss expert tensors with bytes chosen here, dequantized by transformers."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    out = HERE / "gptoss_mxfp4"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    rng = np.random.default_rng(4047)
    tensors = {}
    for name, (e, n, g) in {"model.layers.0.mlp.experts.gate_up_proj": (2, 16, 2),
                            "model.layers.0.mlp.experts.down_proj": (2, 8, 1)}.items():
        blocks = rng.integers(0, 256, (e, n, g, 16), dtype=np.uint8)
        scales = rng.integers(118, 132, (e, n, g), dtype=np.uint8)
        blocks[0, 0] = 0          # all-zero blocks
        scales[0, 1, 0] = 0       # 2**-127: subnormal in BF16 and FP32
        scales[1, 0, 0] = 252     # 6 * 2**125 is finite in BF16; 253.. would overflow
        blocks[1, 1, 0] = 0x77    # +6 everywhere
        tb, ts = torch.from_numpy(blocks), torch.from_numpy(scales)
        deq = convert_moe_packed_tensors(tb, ts, dtype=torch.bfloat16)
        expected[f"gptoss_mxfp4/{name}"] = _bf16_bits(deq)
        tensors[f"{name}_blocks"], tensors[f"{name}_scales"] = tb, ts
        tensors[f"{name}_bias"] = torch.zeros(e, n, dtype=torch.bfloat16)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = {"quantization_config": {"quant_method": "mxfp4",
                                   "modules_to_not_convert": ["model.layers.*.self_attn"]}}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    meta["layouts"]["gptoss_mxfp4"] = {
        "transformers": transformers.__version__,
        "dequantize": "transformers.integrations.mxfp4.convert_moe_packed_tensors(blocks, "
                      "scales, dtype=bfloat16) (returns [E, K, N])"}


def main() -> None:
    import compressed_tensors
    import torch
    from safetensors.torch import save_file

    weights = _weights()
    expected, meta = {}, {"compressed_tensors": compressed_tensors.__version__,
                          "torch": torch.__version__, "layouts": {}}
    for folder, scheme_name, fmt in (("ct_nvfp4", "NVFP4A16", "nvfp4-pack-quantized"),
                                     ("ct_mxfp4", "MXFP4A16", "mxfp4-pack-quantized")):
        out = HERE / folder
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        tensors, scheme = {}, None
        for name, w in weights.items():
            t, deq, scheme = _compress(name, w, scheme_name)
            tensors.update(t)
            expected[f"{folder}/{name}"] = _bf16_bits(deq)
        tensors["model.embed_tokens.weight"] = torch.from_numpy(
            np.linspace(-1, 1, 8 * 16, dtype=np.float32).reshape(8, 16)).to(torch.bfloat16)
        config = {"quantization_config": {
            "quant_method": "compressed-tensors", "format": fmt,
            "config_groups": {"group_0": scheme.model_dump(mode="json")},
            "ignore": ["lm_head"]}}
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        names = sorted(tensors)
        if folder == "ct_nvfp4":  # sharded, with the index transformers writes
            half = len(names) // 2
            shards = {"model-00001-of-00002.safetensors": names[:half],
                      "model-00002-of-00002.safetensors": names[half:]}
            weight_map, total = {}, 0
            for fname, keys in shards.items():
                save_file({k: tensors[k].contiguous() for k in keys}, str(out / fname),
                          metadata={"format": "pt"})
                for k in keys:
                    weight_map[k] = fname
                    total += tensors[k].numel() * tensors[k].element_size()
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            # as transformers' save_pretrained writes it
            (out / "model.safetensors.index.json").write_text(
                json.dumps(index, indent=2, sort_keys=True) + "\n")
        else:
            save_file({k: tensors[k].contiguous() for k in names}, str(out / "model.safetensors"),
                      metadata={"format": "pt"})
        meta["layouts"][folder] = {
            "format": fmt, "scheme": scheme_name,
            "quantize": "generate_gparam + calculate_qparams on per-group min/max, then "
                        f"{'NVFP4' if folder == 'ct_nvfp4' else 'MXFP4'}PackedCompressor.compress",
            "dequantize": f"{'NVFP4' if folder == 'ct_nvfp4' else 'MXFP4'}PackedCompressor.decompress"
                          " (compressed_tensors/compressors/*/base.py)"}
    _modelopt(weights, expected, meta)
    _gptoss(expected, meta)
    np.savez_compressed(HERE / "expected.npz", meta=np.asarray(json.dumps(meta)), **expected)
    print(f"wrote {', '.join(meta['layouts'])} and expected.npz to {HERE}")


if __name__ == "__main__":
    main()
