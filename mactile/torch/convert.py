"""``quantize_model``: replace the ``nn.Linear`` layers of a torch model by ``QuantLinear``;
saving and loading quantized models with safetensors."""
from __future__ import annotations

import fnmatch
import json
import sys
from dataclasses import dataclass, field

import torch
from torch import nn

from ._formats import resolve_format
from .modules import QuantLinear

__all__ = ["quantize_model", "QuantizeSummary", "DEFAULT_EXCLUDE", "save_quantized", "load_quantized",
           "read_quantized", "dequantized_model"]

#: Layers left in their original precision unless ``exclude`` says otherwise: the LM head.
#: It is often tied to the token embedding (replacing it would untie and duplicate the
#: weight), and the papers' end-to-end runs quantize the decoder blocks' linear layers.
DEFAULT_EXCLUDE = ("lm_head", "*.lm_head")

_META_KEY = "mactile.quantized"


@dataclass
class QuantizeSummary:
    """What :func:`quantize_model` did.

    ``replaced``: ``(name, out_features, in_features, bytes before, bytes after)`` per layer
    (weight and bias); ``skipped``: ``(name, reason)`` per ``nn.Linear`` left as it was.
    """

    format: str
    mode: str | None
    replaced: list = field(default_factory=list)
    skipped: list = field(default_factory=list)

    @property
    def layers_replaced(self) -> int:
        return len(self.replaced)

    @property
    def bytes_before(self) -> int:
        return sum(r[3] for r in self.replaced)

    @property
    def bytes_after(self) -> int:
        return sum(r[4] for r in self.replaced)

    @property
    def bytes_saved(self) -> int:
        return self.bytes_before - self.bytes_after

    def as_dict(self) -> dict:
        return {"format": self.format, "mode": self.mode, "layers_replaced": self.layers_replaced,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "bytes_saved": self.bytes_saved,
                "replaced": [dict(zip(("name", "out_features", "in_features", "bytes_before", "bytes_after"), r))
                             for r in self.replaced],
                "skipped": [dict(zip(("name", "reason"), s)) for s in self.skipped]}

    def __getitem__(self, key):
        return self.as_dict()[key]

    def __str__(self) -> str:
        mb = 1 << 20
        ratio = self.bytes_before / self.bytes_after if self.bytes_after else float("nan")
        lines = [f"{self.layers_replaced} linear layers -> {self.format} ({self.mode or 'default mode'}): "
                 f"{self.bytes_before / mb:.2f} MiB -> {self.bytes_after / mb:.2f} MiB "
                 f"({ratio:.2f}x smaller, {self.bytes_saved / mb:.2f} MiB saved)"]
        lines += [f"  kept {name}: {why}" for name, why in self.skipped]
        return "\n".join(lines)


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _patterns(p, what: str) -> tuple:
    if p is None:
        return ()
    if isinstance(p, str):
        return (p,)
    try:
        return tuple(str(x) for x in p)
    except TypeError:
        raise TypeError(f"{what} must be a glob string or a list of them, got {p!r}") from None


class _Progress:
    """tqdm on stderr when installed, else one line per layer rewritten in place."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.n, self.bar = total, enabled, 0, None
        if enabled:
            try:
                from tqdm.auto import tqdm  # noqa: PLC0415
                self.bar = tqdm(total=total, desc="mactile: quantizing", unit="layer", file=sys.stderr)
            except ImportError:
                pass

    def step(self, name: str) -> None:
        self.n += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(name, refresh=False)
            self.bar.update(1)
        else:
            sys.stderr.write(f"\rmactile: quantizing {self.n}/{self.total} {name}\x1b[K")
            sys.stderr.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
        elif self.total:
            sys.stderr.write("\n")


def _nbytes(m: nn.Module) -> int:
    return int(sum(t.numel() * t.element_size() for t in list(m.parameters(recurse=False)) +
                   list(m.buffers(recurse=False))))


def quantize_model(model: nn.Module, format="nvfp4", *, convention: str | None = None,
                   mode: str | None = None, include=None, exclude=None,
                   layouts=None, progress: bool = True) -> QuantizeSummary:
    """Replace ``model``'s ``nn.Linear`` layers by :class:`QuantLinear` in place.

    Parameters
    ----------
    format, convention, mode, layouts
        As :class:`QuantLinear` (one format for every replaced layer).
    include : str or list of str, optional
        Globs (``fnmatch``) over the layers' qualified names (``model.layers.0.mlp.up_proj``);
        only matching layers are replaced (default: every ``nn.Linear``).
    exclude : str or list of str, optional
        Globs of layers to keep (None: :data:`DEFAULT_EXCLUDE`, the LM head; pass ``()``
        to quantize it too).
    progress : bool
        A progress bar on stderr (tqdm when installed), then the summary.

    Returns
    -------
    QuantizeSummary
        The layers replaced with their bytes before and after, and every ``nn.Linear`` kept
        with the reason (excluded, or its shape does not fit the format: e.g. ``in_features``
        not a multiple of the block size).
    """
    fmt = resolve_format(format, convention)
    inc = _patterns(include, "include")
    exc = DEFAULT_EXCLUDE if exclude is None else _patterns(exclude, "exclude")
    todo, summary = [], QuantizeSummary(fmt.describe(), mode)
    for name, m in model.named_modules():
        if type(m) is not nn.Linear:  # subclasses may compute something else
            continue
        if inc and not _matches(name, inc):
            summary.skipped.append((name, "not in include"))
        elif _matches(name, exc):
            summary.skipped.append((name, "excluded"))
        else:
            todo.append(name)
    bar = _Progress(len(todo), progress)
    try:
        for name in todo:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            lin = getattr(parent, child)
            before = _nbytes(lin)
            try:
                q = QuantLinear.from_linear(lin, fmt, mode=mode, layouts=layouts)
            except ValueError as e:  # the golden quantizer's InputError is a ValueError
                summary.skipped.append((name, str(e)))
            else:
                setattr(parent, child, q)
                summary.replaced.append((name, lin.out_features, lin.in_features, before, _nbytes(q)))
            bar.step(name)
    finally:
        bar.close()
    if summary.mode is None and summary.replaced:
        summary.mode = model.get_submodule(summary.replaced[0][0]).mode
    if progress:
        print(f"mactile: {summary}", file=sys.stderr)
    return summary


# --------------------------------------------------------------------------- files
def _configs(module: nn.Module) -> dict:
    if isinstance(module, QuantLinear):
        return {"": module.config()}
    return {name: m.config() for name, m in module.named_modules() if isinstance(m, QuantLinear)}


def save_quantized(module: nn.Module, path) -> None:
    """Write ``module``'s state (a :class:`QuantLinear` or a model holding some) to a
    safetensors file, with each quantized layer's configuration in the file's metadata.
    Tied weights are stored once (``safetensors.torch.save_model``). The file appears whole
    or not at all."""
    from safetensors.torch import save_model  # noqa: PLC0415

    from mactile.golden.fileio import atomic_outputs  # noqa: PLC0415

    meta = {_META_KEY: json.dumps(_configs(module), sort_keys=True)}
    with atomic_outputs(path) as (tmp,):
        save_model(module, str(tmp), metadata=meta)


def read_quantized(path):
    """``(configs by layer name, tensors by state-dict key)`` of a file of :func:`save_quantized`."""
    from safetensors import safe_open  # noqa: PLC0415

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if _META_KEY not in meta:
            raise ValueError(f"{path}: not a mactile quantized file (no {_META_KEY!r} metadata)")
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return json.loads(meta[_META_KEY]), tensors


def load_quantized(model: nn.Module, path, *, strict: bool = True) -> nn.Module:
    """Load a file of :func:`save_quantized` into ``model`` built from the same architecture
    (unquantized): each layer named in the file is replaced by an empty :class:`QuantLinear`
    of its configuration first, then every tensor is loaded. Returns ``model``."""
    from safetensors.torch import load_model  # noqa: PLC0415

    cfgs, _ = read_quantized(path)
    for name, cfg in cfgs.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old = getattr(parent, child)
        dev = next(iter(old.parameters()), torch.empty(0)).device
        setattr(parent, child, QuantLinear.from_config(cfg, device=dev))
    load_model(model, str(path), strict=strict)
    for m in model.modules():
        if isinstance(m, QuantLinear):
            m._refresh()
    return model


def dequantized_model(model: nn.Module) -> nn.Module:
    """Replace every :class:`QuantLinear` of ``model`` by an ``nn.Linear`` holding its
    :meth:`~QuantLinear.dequantized_weight` in float32 (the reference the quantized model
    is compared with), in place; returns ``model``."""
    for name, m in list(model.named_modules()):
        if not isinstance(m, QuantLinear):
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        lin = nn.Linear(m.in_features, m.out_features, bias=m.bias is not None, dtype=torch.float32)
        with torch.no_grad():
            lin.weight.copy_(m.dequantized_weight())
            if m.bias is not None:
                lin.bias.copy_(m.bias.float().cpu())
        setattr(parent, child, lin.to(m.codes.device if m.kind == "fp4" else next(m.buffers()).device))
    return model
