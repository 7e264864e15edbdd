"""``QuantLinear``: an ``nn.Linear`` whose weight is stored packed in a golden format.

The packed tensors are registered buffers, so ``state_dict()`` holds them, ``.to(device)``
moves them and ``torch.compile`` sees them; ``forward`` calls one ``torch.ops.mactile`` op
(:mod:`mactile.torch.ops`): the GPU kernel on CUDA tensors, the golden model on the CPU.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from . import ops as _ops  # noqa: F401 (registers torch.ops.mactile)
from ._formats import MODES, default_mode, format_from_spec, layer_kind, resolve_format, spec_json

__all__ = ["QuantLinear"]

_NP_TO_TORCH = {np.dtype(np.uint8): torch.uint8, np.dtype(np.uint16): torch.int16,
                np.dtype(np.uint32): torch.int32, np.dtype(np.float16): torch.float16,
                np.dtype(np.float32): torch.float32, np.dtype(np.int32): torch.int32}


def _t(a: np.ndarray) -> torch.Tensor:
    """A torch tensor with ``a``'s bits (unsigned 16/32-bit stored as signed: same bits)."""
    a = np.ascontiguousarray(a)
    dt = _NP_TO_TORCH[a.dtype]
    if a.dtype in (np.dtype(np.uint16), np.dtype(np.uint32)):
        a = a.view(np.int16 if a.dtype == np.uint16 else np.int32)
    return torch.from_numpy(a.copy()).to(dt)


_EMPTY_U8 = np.zeros((0,), np.uint8)


def _refresh_hook(module, _incompatible_keys) -> None:
    """After ``load_state_dict``: the Python scalars read again from the loaded buffers (a
    named function, so that ``torch.save(model)`` can pickle the hook)."""
    module._refresh()


class QuantLinear(nn.Module):
    """``y = x @ W.T + b`` with ``W`` quantized to a golden format and packed for the GPU.

    Parameters
    ----------
    in_features, out_features : int
    bias : bool
        Whether the layer has a bias (kept in ``dtype``, added after the product).
    format : str or golden BlockFormat
        ``nvfp4``, ``mxfp4``, ``razer``, ``razer-g128`` (FP4 weights), ``nestedfp`` /
        ``nestedfp8`` (NestedFP, FP16 weights as two byte planes) or ``int-group`` (FlexQ,
        6 bits in groups of 128); a name or a spec object (any of its options).
    convention : str, optional
        A convention preset of :mod:`mactile.golden.conventions` (``ocp``, ``torchao``,
        ``microxcaling``) for a format given by name. The GPU kernels implement the ``ocp``
        convention only; other conventions run on the CPU (golden).
    mode : str, optional
        The path: ``w4a16`` (default) or ``w4a4`` (ReSET's NVFP4 activations; nvfp4 only)
        for FP4 weights, ``fp16`` or ``fp8`` for NestedFP (default ``fp16``, ``fp8`` for
        ``nestedfp8``; :attr:`mode` may be changed between calls), ``w6a6`` or ``w6a8`` for
        FlexQ.
    layouts : tuple of str, optional
        FP4 kernel layouts to pack (:func:`mactile.gpu.pack_w4a16`; default every layout
        the format's kernels read: ``frag`` for the engine and ``rowmajor`` for the
        CUDA-core GEMV and ReSET's W4A4 GEMV).
    dtype : torch.dtype
        dtype of the bias.

    The weight starts as zeros; :meth:`from_linear` quantizes an ``nn.Linear``'s, and
    ``load_state_dict`` loads packed tensors saved from a layer of the same configuration.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, format="nvfp4",
                 convention: str | None = None, mode: str | None = None, layouts=None,
                 dtype: torch.dtype = torch.float16, device=None, _weight: np.ndarray | None = None):
        super().__init__()
        fmt = resolve_format(format, convention)
        self.kind = layer_kind(fmt)
        self.fmt = fmt
        self.spec = spec_json(fmt)
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.layouts = None if layouts is None else tuple(layouts)
        self._mode = None
        self.mode = default_mode(fmt) if mode is None else mode
        if _weight is None:
            _weight = np.zeros((self.out_features, self.in_features), np.float32)
        self._pack(_weight)
        if bias:
            self.bias = nn.Parameter(torch.zeros(self.out_features, dtype=dtype), requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self.register_load_state_dict_post_hook(_refresh_hook)
        if device is not None:
            self.to(device)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_linear(cls, linear: nn.Linear, format="nvfp4", *, convention: str | None = None,
                    mode: str | None = None, layouts=None) -> "QuantLinear":
        """Quantize ``linear``'s weight with the golden quantizer (from its float32 values)
        and pack it, on the CPU; the layer is then moved to ``linear``'s device. The bias is
        kept as it is."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        w = linear.weight
        b = linear.bias
        q = cls(linear.in_features, linear.out_features, b is not None, format=format,
                convention=convention, mode=mode, layouts=layouts,
                dtype=b.dtype if b is not None else w.dtype,
                _weight=w.detach().to("cpu", torch.float32).numpy())
        if b is not None:
            q.bias.data.copy_(b.detach().cpu())
        return q.to(w.device)

    @property
    def mode(self) -> str:
        """The path this layer runs (changeable between calls, e.g. NestedFP per step)."""
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        allowed = MODES[self.kind]
        if mode not in allowed:
            raise ValueError(f"QuantLinear: mode {mode!r} does not apply to {self.fmt.describe()}; "
                             f"choose {', '.join(allowed)}")
        if mode == "w4a4":
            from mactile.golden import NVFP4  # noqa: PLC0415

            if type(self.fmt) is not NVFP4 or self.fmt.block_size != 16:
                raise ValueError(f"QuantLinear: mode 'w4a4' (ReSET) takes nvfp4 weights with block 16, "
                                 f"got {self.fmt.describe()}")
        self._mode = mode

    def _buffer(self, name: str, t: torch.Tensor) -> None:
        self.register_buffer(name, t, persistent=True)

    def _pack(self, w: np.ndarray) -> None:
        """Quantize the float32 weight ``w [out, in]`` and register the packed buffers."""
        fmt = self.fmt
        if self.kind == "fp4":
            from mactile.gpu.packing import pack_w4a16  # noqa: PLC0415

            q = fmt.quantize(w)
            kfmt_q = q
            if hasattr(fmt, "convention") and not fmt.is_default_convention():
                import dataclasses  # noqa: PLC0415

                from mactile.golden import DEFAULT_CONVENTION  # noqa: PLC0415
                # the storage is the same under every convention: pack it with the default's spec
                kfmt_q = dataclasses.replace(q, format=dataclasses.replace(fmt, convention=DEFAULT_CONVENTION))
            p = pack_w4a16(kfmt_q, layouts=self.layouts)
            frag = p.layouts["frag"]
            self._buffer("codes", _t(frag["codes"]))
            self._buffer("scales", _t(frag["scales"]))
            rm = p.layouts.get("rowmajor")
            self._buffer("rm_codes", _t(rm["codes"] if rm else _EMPTY_U8))
            self._buffer("rm_scales", _t(rm["scales"] if rm else _EMPTY_U8))
            # FP32 bits as int32: a model's .half() / .to(bfloat16) casts floating buffers
            ts = np.array([] if q.tensor_scale is None else [q.tensor_scale], np.float32)
            self._buffer("tensor_scale", torch.from_numpy(ts.view(np.int32)))
            self._buffer("out_log2", torch.tensor([int(frag.get("out_log2", 0))], dtype=torch.int32))
        elif self.kind == "nestedfp":
            from mactile.golden import nestedfp_eligible, nestedfp_split  # noqa: PLC0415
            from mactile.gpu.nestedfp.kernels import K_PAD, KPERM, ROW_PAD  # noqa: PLC0415

            N, K = w.shape
            if K % 16:
                raise ValueError(f"nestedfp: K = {K} must be a multiple of 16 (the kernels' chunks)")
            w16 = w.astype(np.float16)
            if nestedfp_eligible(w16, fmt.threshold):
                u, lo = nestedfp_split(w16)
                Np, Kp = -(-N // ROW_PAD) * ROW_PAD, -(-K // K_PAD) * K_PAD
                planes = []
                for a in (u, lo):
                    full = np.zeros((Np, Kp), np.uint8)
                    full[:N, :K] = a
                    planes.append(full.reshape(Np, Kp // 16, 16)[:, :, KPERM].reshape(Np, Kp))
                self._buffer("upper", _t(planes[0]))
                self._buffer("lower", _t(planes[1]))
                self._buffer("fp16_weight", torch.zeros((0,), dtype=torch.int16))
            else:  # NestedFP's exception layer: FP16 weights, FP16 in both modes
                self._buffer("upper", torch.zeros((0,), dtype=torch.uint8))
                self._buffer("lower", torch.zeros((0,), dtype=torch.uint8))
                self._buffer("fp16_weight", torch.from_numpy(w16.view(np.int16).copy()))  # FP16 bits
        else:  # flexq
            from mactile.gpu.flexq.layout import WEIGHT_TILE, pack_quantized  # noqa: PLC0415

            p = pack_quantized(fmt.quantize(w), tile=WEIGHT_TILE)
            self._buffer("planes", _t(p.planes))
            self._buffer("wscales", _t(p.scales))
        self._refresh()

    def _refresh(self) -> None:
        """Python copies of the scalars the ops take (after packing or loading)."""
        if self.kind == "fp4":
            self._has_ts = bool(self.tensor_scale.numel())
            self._ts = float(self.tensor_scale.cpu().numpy().view(np.float32)[0]) if self._has_ts else 1.0
            self._out_log2 = int(self.out_log2.cpu()[0])

    # ------------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        N, K = self.out_features, self.in_features
        if self.kind == "fp4":
            op = torch.ops.mactile.w4a4 if self._mode == "w4a4" else torch.ops.mactile.w4a16
            y = op(x2, self.codes, self.scales, self.rm_codes, self.rm_scales, self.spec, N, K,
                   self._ts, self._has_ts, self._out_log2)
        elif self.kind == "nestedfp":
            y = torch.ops.mactile.nestedfp(x2, self.upper, self.lower, self.fp16_weight, N, K, self._mode)
        else:
            y = torch.ops.mactile.flexq(x2, self.planes, self.wscales, N, K, int(self._mode[-1]))
        y = y.reshape(*lead, N)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y

    # ------------------------------------------------------------------ inspection
    def dequantized_weight(self) -> torch.Tensor:
        """The weight this layer multiplies in its mode, float32 ``[out, in]`` on the CPU
        (FP4 / FlexQ: the golden dequantized weight; NestedFP FP16 mode: the FP16 weights;
        NestedFP FP8 mode: the upper plane as E4M3 times ``2**-8``)."""
        N, K = self.out_features, self.in_features
        if self.kind == "fp4":
            return _ops.fp4_weight(self.codes.cpu(), self.scales.cpu(), self.rm_codes.cpu(),
                                   self.rm_scales.cpu(), self.spec, N, K, self._ts, self._has_ts,
                                   self._out_log2).clone()
        if self.kind == "nestedfp":
            w = _ops.nestedfp_weight(self.upper.cpu(), self.lower.cpu(), self.fp16_weight.cpu(), N, K, self._mode)
            return w.clone() if self._mode == "fp16" or self.fp16_weight.numel() else w * 2.0 ** -8
        return _ops.flexq_weight(self.planes.cpu(), self.wscales.cpu(), N, K).clone()

    def quantized(self):
        """The golden ``Quantized`` weight (FP4 formats), rebuilt bit for bit from the buffers."""
        if self.kind != "fp4":
            raise ValueError(f"quantized(): only FP4 layers store a golden Quantized; this is {self.kind}")
        return _ops.fp4_quantized(self.codes.cpu(), self.scales.cpu(), self.rm_codes.cpu(),
                                  self.rm_scales.cpu(), self.spec, self.out_features, self.in_features,
                                  self._ts, self._has_ts, self._out_log2)

    @property
    def nbytes(self) -> int:
        """Bytes of the packed weight buffers (the bias not counted)."""
        return int(sum(b.numel() * b.element_size() for _, b in self.named_buffers(recurse=False)))

    @property
    def eligible(self) -> bool:
        """NestedFP: whether the weights are stored as planes (else an FP16 exception layer)."""
        return self.kind != "nestedfp" or not self.fp16_weight.numel()

    def extra_repr(self) -> str:
        extra = "" if self.kind != "nestedfp" or self.eligible else ", exception layer (FP16)"
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, format={self.fmt.describe()}, mode={self._mode}{extra}")

    # ------------------------------------------------------------------ files
    def config(self) -> dict:
        """What :meth:`load` needs to rebuild this layer (JSON-serializable)."""
        return {"in_features": self.in_features, "out_features": self.out_features,
                "bias": self.bias is not None, "spec": self.spec, "mode": self._mode,
                "layouts": None if self.layouts is None else list(self.layouts),
                "dtype": str(self.bias.dtype if self.bias is not None else torch.float16).removeprefix("torch.")}

    @classmethod
    def from_config(cls, cfg: dict, device=None) -> "QuantLinear":
        """An empty (zero-weight) layer of a :meth:`config`; load its tensors next."""
        return cls(cfg["in_features"], cfg["out_features"], cfg["bias"],
                   format=format_from_spec(cfg["spec"]), mode=cfg["mode"], layouts=cfg["layouts"],
                   dtype=getattr(torch, cfg["dtype"]), device=device)

    def save(self, path) -> None:
        """Write the packed tensors and the configuration to a safetensors file (atomically)."""
        from .convert import save_quantized  # noqa: PLC0415

        save_quantized(self, path)

    @classmethod
    def load(cls, path, device=None) -> "QuantLinear":
        """A layer from a file written by :meth:`save`."""
        from .convert import read_quantized  # noqa: PLC0415

        cfgs, tensors = read_quantized(path)
        if list(cfgs) != [""]:
            raise ValueError(f"{path}: holds a model's layers ({len(cfgs)}), not one QuantLinear; "
                             "use mactile.torch.load_quantized")
        layer = cls.from_config(cfgs[""])
        layer.load_state_dict(tensors)
        return layer.to(device) if device is not None else layer

