"""``torch.library`` ops for the work of a decoder layer between its linear layers.

==============================================  ===============================================
op                                              what it computes
==============================================  ===============================================
``mactile::add_rmsnorm(x, r, w, eps)``           ``h = x + r`` and ``w * rmsnorm(h)`` (returns
                                                ``(h, y)``; ``r`` empty: ``h`` is ``x``)
``mactile::rope_kv(q, k, v, cos, sin, pos, ...)``  per-head q/k RMSNorm (optional), rotary
                                                embedding at ``pos``, ``k``/``v`` written into
                                                the static caches (mutated); returns ``q``
                                                ``[B, H, T, D]``
``mactile::decode_attention(q, kc, vc, pos)``    causal grouped-query attention of ``q`` over
                                                the caches; returns ``[B, T, H * D]``
``mactile::silu_mul(g, u)``                      SwiGLU's ``silu(g) * u``
==============================================  ===============================================

The **CPU** implementation of each op is the decoder's eager torch code (the reference:
:class:`mactile.torch.decoder.Decoder` with ``fused_ops=False``), in any dtype, so a decoder
that calls the ops computes on the CPU exactly what the eager decoder computes. The **CUDA**
implementation runs the kernels of :mod:`mactile.gpu.decode_ops` on FP16 tensors (other
dtypes take the CPU code's torch ops on the GPU): one launch per op (two for the
attention), positions read on the device, so a captured decode step replays at any position.
Their roundings are torch's except the RMSNorm statistic and the attention's sums (FP32, in
another order); the GPU tests bound the difference. Each op has a fake implementation for
``torch.compile``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._bridge import on_torch_stream, view

__all__ = ["add_rmsnorm", "rope_kv", "decode_attention", "silu_mul", "attention_rows_max", "OPS"]


def _fused_cuda(*ts) -> bool:
    return all(t.device.type == "cuda" and t.dtype == torch.float16 for t in ts if t.numel())


# --------------------------------------------------------------------------- references
def rmsnorm_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The decoder's RMSNorm: the statistic in FP32, cast back before the weight."""
    dt = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(dt)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` (``x [B, heads, T, D]``, ``cos``/``sin [T, D]`` in
    ``x``'s dtype)."""
    c, s = cos[None, None], sin[None, None]
    return x * c + _rotate_half(x) * s


def attention_ref(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The decoder's attention over a cache: ``q [B, H, T, D]``, caches ``[B, Hkv, S, D]``,
    query ``t`` sees keys ``0..pos[t]``; GQA as ``G*T`` rows per key/value head. Returns
    ``[B, T, H*D]``."""
    B, H, T, D = q.shape
    Hkv, S = kc.shape[1], kc.shape[2]
    G = H // Hkv
    allowed = torch.arange(S, device=q.device)[None, :] <= pos[:, None]  # [T, S]
    m = allowed.repeat(G, 1) if G > 1 else allowed
    mask = torch.where(m, torch.zeros((), dtype=q.dtype, device=q.device),
                       torch.full((), float("-inf"), dtype=q.dtype, device=q.device))[None, None]
    qg = q.reshape(B, Hkv, G * T, D)
    y = F.scaled_dot_product_attention(qg, kc, vc, attn_mask=mask)
    return y.reshape(B, H, T, D).transpose(1, 2).reshape(B, T, H * D)


# --------------------------------------------------------------------------- add_rmsnorm
@torch.library.custom_op("mactile::add_rmsnorm", mutates_args=())
def add_rmsnorm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, y)``: ``h = x + r`` (``x`` itself, copied, when ``r`` is empty) and ``y = w *
    rmsnorm(h)``, over the last dimension."""
    h = x + r if r.numel() else x.clone()
    return h, rmsnorm_ref(h, w, eps)


@add_rmsnorm.register_kernel("cuda")
def _add_rmsnorm_cuda(x, r, w, eps):
    from mactile.gpu.decode_ops import NORM_MAX_DIM  # noqa: PLC0415
    from mactile.gpu.decode_ops import add_rmsnorm as k  # noqa: PLC0415

    D = x.shape[-1]
    if not _fused_cuda(x, r, w) or D % 2 or D > NORM_MAX_DIM:
        h = x + r if r.numel() else x.clone()
        return h, rmsnorm_ref(h, w, eps)
    x2 = x.reshape(-1, D).contiguous()
    y = torch.empty_like(x2)
    h = torch.empty_like(x2)
    with on_torch_stream(x.device) as cp:
        if r.numel():
            k(view(cp, x2), view(cp, w.contiguous()), eps, residual=view(cp, r.reshape(-1, D).contiguous()),
              out=view(cp, y), h_out=view(cp, h))
        else:
            h.copy_(x2)
            k(view(cp, x2), view(cp, w.contiguous()), eps, out=view(cp, y))
    return h.view(x.shape), y.view(x.shape)


@add_rmsnorm.register_fake
def _add_rmsnorm_fake(x, r, w, eps):
    return torch.empty_like(x), torch.empty_like(x)


# --------------------------------------------------------------------------- rope_kv
def _rope_kv_body(q, k, v, cos, sin, pos, k_cache, v_cache, q_norm, k_norm, eps):
    """The reference (the decoder's eager code), on any device and dtype."""
    B, T, _ = q.shape
    Hkv, D = k_cache.shape[1], k_cache.shape[3]
    H = q.shape[2] // D
    qh = q.reshape(B, T, H, D)
    kh = k.reshape(B, T, Hkv, D)
    if q_norm.numel():
        qh, kh = rmsnorm_ref(qh, q_norm, eps), rmsnorm_ref(kh, k_norm, eps)
    c = cos[pos].to(q.dtype)
    s = sin[pos].to(q.dtype)
    qr = rope_ref(qh.transpose(1, 2), c, s)
    kr = rope_ref(kh.transpose(1, 2), c, s)
    k_cache[:B].index_copy_(2, pos, kr.to(k_cache.dtype))
    v_cache[:B].index_copy_(2, pos, v.reshape(B, T, Hkv, D).transpose(1, 2).to(v_cache.dtype))
    return qr.contiguous()


@torch.library.custom_op("mactile::rope_kv", mutates_args=("k_cache", "v_cache"))
def rope_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            pos: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, q_norm: torch.Tensor,
            k_norm: torch.Tensor, eps: float) -> torch.Tensor:
    """Rotary embedding and cache writes of one attention layer.

    ``q [B, T, H*D]``, ``k``/``v [B, T, Hkv*D]``; ``cos``/``sin`` the FP32 tables ``[P, D]``
    (row ``pos[t]`` for token ``t``); caches ``[Bc, Hkv, S, D]`` (``Bc >= B``), written at
    ``pos`` for the first ``B`` sequences; ``q_norm``/``k_norm`` the per-head RMSNorm
    weights ``[D]`` (empty: none). Returns the rotated ``q [B, H, T, D]``.
    """
    return _rope_kv_body(q, k, v, cos, sin, pos, k_cache, v_cache, q_norm, k_norm, eps)


@rope_kv.register_kernel("cuda")
def _rope_kv_cuda(q, k, v, cos, sin, pos, k_cache, v_cache, q_norm, k_norm, eps):
    from mactile.gpu.decode_ops import HEAD_DIMS  # noqa: PLC0415
    from mactile.gpu.decode_ops import rope_kv as kern  # noqa: PLC0415

    B, T, _ = q.shape
    Hkv, D = k_cache.shape[1], k_cache.shape[3]
    H = q.shape[2] // D
    ok = (_fused_cuda(q, k, v, k_cache, v_cache, q_norm, k_norm) and D in HEAD_DIMS
          and cos.dtype == torch.float32 and k_cache.is_contiguous() and v_cache.is_contiguous()
          and all(t.stride(-1) == 1 for t in (q, k, v)))
    if not ok:
        return _rope_kv_body(q, k, v, cos, sin, pos, k_cache, v_cache, q_norm, k_norm, eps)
    q2, k2, v2 = (t.reshape(B * T, t.shape[2]) for t in (q, k, v))  # views: rows keep their stride
    qo = torch.empty((B, H, T, D), dtype=q.dtype, device=q.device)
    p = pos.to(torch.int64).contiguous()
    with on_torch_stream(q.device) as cp:
        kern(view(cp, q2), view(cp, k2), view(cp, v2), view(cp, cos.contiguous()), view(cp, sin.contiguous()),
             view(cp, p), view(cp, k_cache), view(cp, v_cache), T=T, q_out=view(cp, qo),
             q_norm=view(cp, q_norm.contiguous()) if q_norm.numel() else None,
             k_norm=view(cp, k_norm.contiguous()) if k_norm.numel() else None, eps=eps)
    return qo


@rope_kv.register_fake
def _rope_kv_fake(q, k, v, cos, sin, pos, k_cache, v_cache, q_norm, k_norm, eps):
    B, T, _ = q.shape
    D = k_cache.shape[3]
    return q.new_empty((B, q.shape[2] // D, T, D))


# --------------------------------------------------------------------------- attention
def attention_rows_max() -> int:
    """Query rows per key/value head (``G * T``) the CUDA attention kernel takes."""
    from mactile.gpu.decode_ops import ATT_ROWS_MAX  # noqa: PLC0415

    return ATT_ROWS_MAX


@torch.library.custom_op("mactile::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     pos: torch.Tensor) -> torch.Tensor:
    """Causal attention of ``q [B, H, T, D]`` over the first ``B`` sequences of the caches
    ``[Bc, Hkv, S, D]`` (query ``t`` sees keys ``0..pos[t]``), scale ``1/sqrt(D)``; returns
    ``[B, T, H*D]``."""
    B = q.shape[0]
    return attention_ref(q, k_cache[:B], v_cache[:B], pos)


@decode_attention.register_kernel("cuda")
def _decode_attention_cuda(q, k_cache, v_cache, pos):
    from mactile.gpu.decode_ops import ATT_ROWS_MAX, HEAD_DIMS  # noqa: PLC0415
    from mactile.gpu.decode_ops import decode_attention as kern  # noqa: PLC0415

    B, H, T, D = q.shape
    G = H // k_cache.shape[1]
    if not (_fused_cuda(q, k_cache, v_cache) and D in HEAD_DIMS and G * T <= ATT_ROWS_MAX
            and k_cache.is_contiguous() and v_cache.is_contiguous()):
        return attention_ref(q, k_cache[:B], v_cache[:B], pos)
    q = q.contiguous()
    y = torch.empty((B, T, H * D), dtype=q.dtype, device=q.device)
    p = pos.to(torch.int64).contiguous()
    with on_torch_stream(q.device) as cp:
        kern(view(cp, q), view(cp, k_cache), view(cp, v_cache), view(cp, p), T=T,
             out=view(cp, y).reshape(B, T, H, D))
    return y


@decode_attention.register_fake
def _decode_attention_fake(q, k_cache, v_cache, pos):
    B, H, T, D = q.shape
    return q.new_empty((B, T, H * D))


# --------------------------------------------------------------------------- silu_mul
@torch.library.custom_op("mactile::silu_mul", mutates_args=())
def silu_mul(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``silu(g) * u`` (SwiGLU), elementwise, same shapes."""
    return F.silu(g) * u


@silu_mul.register_kernel("cuda")
def _silu_mul_cuda(g, u):
    from mactile.gpu.decode_ops import silu_mul as kern  # noqa: PLC0415

    if not _fused_cuda(g, u) or g.stride(-1) != 1 or u.stride(-1) != 1:
        return F.silu(g) * u
    n = g.shape[-1]
    g2 = g.reshape(-1, n) if g.is_contiguous() else g.flatten(0, -2)
    u2 = u.reshape(-1, n) if u.is_contiguous() else u.flatten(0, -2)
    y = torch.empty(g.shape, dtype=g.dtype, device=g.device)
    with on_torch_stream(g.device) as cp:
        kern(view(cp, g2), view(cp, u2), out=view(cp, y).reshape(-1, n))
    return y


@silu_mul.register_fake
def _silu_mul_fake(g, u):
    return torch.empty_like(g)


#: Every op of this module (``torch.ops.mactile.<name>``).
OPS = ("add_rmsnorm", "rope_kv", "decode_attention", "silu_mul")
