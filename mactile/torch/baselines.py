"""Linear layers of the end-to-end benchmark's baselines and peers (not mactile formats).

* :class:`Fp8Linear`: E4M3 weights and activations through ``torch._scaled_mm`` (cuBLASLt),
  FP32 scales, FP16 output; per-tensor scales (weight scale fixed, activation scale from the
  activation's amax at run time) or per-row scales (``scaling="row"``: one scale per weight
  row and per token).
* :class:`Int4TinyGemmLinear`: PyTorch's int4 weight-only kernel ("tinygemm",
  ``torch._weight_int4pack_mm``) with gpt-fast's asymmetric group quantization (group 128,
  ``inner_k_tiles`` 8), BF16 activations (the kernel takes BF16 only; converted at the layer's
  edges).
* :func:`gemlite_a16w4`: GemLite's A16W4 Triton layer from the same int4 group quantization
  (GemLite's HQQ convention ``w = (q - zero) * scale``), or the reason it is unavailable.

Each is built from an ``nn.Linear`` (``from_linear``) on the GPU and replaces it in a model.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["Fp8Linear", "Int4TinyGemmLinear", "int4_group_quantize", "gemlite_a16w4", "E4M3_MAX"]

E4M3_MAX = 448.0


class Fp8Linear(nn.Module):
    """``y = x @ W.T`` in FP8 E4M3 through ``torch._scaled_mm`` (see the module docstring)."""

    def __init__(self, weight_t: torch.Tensor, w_scale: torch.Tensor, *, scaling: str, out_dtype):
        super().__init__()
        self.register_buffer("weight_t", weight_t)  # [K, N], column-major (a transposed row-major W)
        self.register_buffer("w_scale", w_scale)
        self.scaling, self.out_dtype = scaling, out_dtype
        self.in_features, self.out_features = weight_t.shape

    @classmethod
    def from_linear(cls, lin: nn.Linear, *, scaling: str = "tensor") -> "Fp8Linear":
        if scaling not in ("tensor", "row"):
            raise ValueError(f"scaling must be 'tensor' or 'row', got {scaling!r}")
        if lin.bias is not None:
            raise ValueError("Fp8Linear: layers with a bias are not supported")
        w = lin.weight.detach().float()
        amax = w.abs().amax(dim=1, keepdim=True) if scaling == "row" else w.abs().amax()
        s = (amax / E4M3_MAX).clamp(min=1e-12)
        wq = (w / s).to(torch.float8_e4m3fn)
        ws = s.reshape(1, -1).contiguous() if scaling == "row" else s.reshape(())
        return cls(wq.t(), ws, scaling=scaling, out_dtype=lin.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead, K = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, K)
        M = x2.shape[0]
        pad = (-M) % 16  # cuBLASLt FP8 wants the token count a multiple of 16
        if pad:
            x2 = torch.nn.functional.pad(x2, (0, 0, 0, pad))
        xf = x2.float()
        amax = xf.abs().amax(dim=1, keepdim=True) if self.scaling == "row" else xf.abs().amax()
        xs = (amax / E4M3_MAX).clamp(min=1e-12)
        xq = (xf / xs).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(xq, self.weight_t, scale_a=xs.reshape(-1, 1) if self.scaling == "row" else xs,
                             scale_b=self.w_scale, out_dtype=self.out_dtype)
        return y[:M].reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, e4m3, scaling={self.scaling}"


def int4_group_quantize(w: torch.Tensor, group_size: int = 128):
    """gpt-fast's asymmetric 4-bit group quantization along K: ``q in 0..15``,
    ``w ~ q * scale + min`` per group of ``group_size``. Returns ``(q [N, K] int32,
    scale [N, K/g] fp32, min [N, K/g] fp32)``."""
    N, K = w.shape
    if K % group_size:
        raise ValueError(f"K = {K} is not a multiple of the group size {group_size}")
    g = w.detach().float().reshape(N, K // group_size, group_size)
    mx, mn = g.amax(-1), g.amin(-1)
    scale = ((mx - mn) / 15).clamp(min=1e-6)
    q = ((g - mn[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.int32).reshape(N, K)
    return q, scale, mn


class Int4TinyGemmLinear(nn.Module):
    """PyTorch's int4 weight-only GEMM (tinygemm), as gpt-fast's ``WeightOnlyInt4Linear``."""

    def __init__(self, packed, scales_zeros, *, group_size: int, in_features: int, out_features: int, out_dtype):
        super().__init__()
        self.register_buffer("weight", packed)
        self.register_buffer("scales_and_zeros", scales_zeros)
        self.group_size, self.in_features, self.out_features, self.out_dtype = (
            group_size, in_features, out_features, out_dtype)

    @classmethod
    def from_linear(cls, lin: nn.Linear, *, group_size: int = 128, inner_k_tiles: int = 8) -> "Int4TinyGemmLinear":
        if lin.bias is not None:
            raise ValueError("Int4TinyGemmLinear: layers with a bias are not supported")
        N, K = lin.weight.shape
        if K % (inner_k_tiles * 16) or N % 8:
            raise ValueError(f"tinygemm needs K % {inner_k_tiles * 16} == 0 and N % 8 == 0, got N={N} K={K}")
        q, scale, mn = int4_group_quantize(lin.weight, group_size)
        u8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)  # [N, K/2], the packing of torch >= 2.5
        packed = torch._convert_weight_to_int4pack(u8, inner_k_tiles)
        zeros = mn + scale * 8  # tinygemm dequantizes (q - 8) * scale + zero
        sz = torch.stack([scale, zeros], dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)  # [K/g, N, 2]
        return cls(packed, sz, group_size=group_size, in_features=K, out_features=N, out_dtype=lin.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = torch._weight_int4pack_mm(x.reshape(-1, self.in_features).to(torch.bfloat16), self.weight,
                                      self.group_size, self.scales_and_zeros)
        return y.to(self.out_dtype).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, int4 g{self.group_size} (tinygemm)"


class _GemLite(nn.Module):
    """Holds a GemLite layer (flattens the leading dimensions it may not take)."""

    def __init__(self, layer, K: int, N: int):
        super().__init__()
        self.layer, self.in_features, self.out_features = layer, K, N

    def forward(self, x):
        lead = x.shape[:-1]
        return self.layer(x.reshape(-1, self.in_features)).reshape(*lead, self.out_features)


def gemlite_a16w4(lin: nn.Linear, *, group_size: int = 128):
    """GemLite A16W4 (FP16 activations, 4-bit group weights) built from ``lin``; raises
    ``ImportError`` when gemlite is not installed."""
    import gemlite  # noqa: F401,PLC0415

    N, K = lin.weight.shape
    q, scale, mn = int4_group_quantize(lin.weight, group_size)
    dt = lin.weight.dtype
    zero = (-mn / scale)  # (q - zero) * scale == q * scale + mn
    Wq, sc, z = q.to(torch.uint8), scale.to(dt), zero.to(dt)
    try:
        from gemlite.helper import A16W4_HQQ_INT  # noqa: PLC0415
        layer = A16W4_HQQ_INT(device=str(lin.weight.device)).from_weights(Wq, sc, z)
    except ImportError:
        from gemlite.core import DType, GemLiteLinearTriton  # noqa: PLC0415
        gdt = DType.FP16 if dt == torch.float16 else DType.BF16
        layer = GemLiteLinearTriton(4, group_size=group_size, in_features=K, out_features=N,
                                    input_dtype=gdt, output_dtype=gdt)
        layer.pack(Wq, sc, z, bias=None)
    return _GemLite(layer, K, N)
