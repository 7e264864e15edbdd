"""Token samplers for :mod:`mactile.torch.generate`: greedy, temperature/top-k, and ReSET's
step-aware temperature policy in PyTorch, bit for bit the golden model's decisions.

Every sampler is a callable ``sampler(logits [B, V]) -> tokens [B] (int64)`` built from torch
operations only (no host synchronisation, no allocation outside torch's allocator), so that a
decode step including its sampler can be captured in a CUDA graph. A stateful sampler keeps
its state in tensors updated in place and lists them in :meth:`state_tensors` (the generator
saves and restores them around the warm-up run that precedes a capture).

:class:`StepAwareTemperatureSampler` ports :class:`mactile.golden.StepAwareTemperature`
operation by operation: FP32 ``exp``/``log`` with the golden polynomial sequence (each
multiply and add a separate rounded torch operation: no fused multiply-add in eager mode),
sums in the order of the golden :class:`~mactile.golden.reset_temperature.ReductionLayout`,
float64 per-sequence statistics, and the same counter-based generator (splitmix64 in wrapping
int64 arithmetic with logical shifts). Its ``backend="op"`` runs
``torch.ops.mactile.reset_temperature_step`` instead (the GPU kernel of
:mod:`mactile.gpu.temperature` on torch's stream, state in the same tensors).
"""
from __future__ import annotations

import numpy as np
import torch

from mactile.golden.elements import FP32
from mactile.golden.reset_temperature import EXP_COEFFS, EXP_T_MIN, LN2, LOG2E, LOG_COEFFS, ReductionLayout

__all__ = ["Greedy", "TemperatureSampler", "StepAwareTemperatureSampler", "exp_f32", "log_f32",
           "uniform", "scan_prefixes"]


class Greedy:
    """The most likely token (``argmax``; the first index on ties)."""

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.argmax(logits, dim=-1)

    def state_tensors(self) -> list[torch.Tensor]:
        return []

    def __repr__(self) -> str:
        return "Greedy()"


class TemperatureSampler:
    """Sampling from ``softmax(logits / temperature)``, optionally restricted to the ``top_k``
    most likely tokens, by the exponential-race (Gumbel-max) trick, as gpt-fast does:
    ``argmax(p / q)`` with ``q ~ Exp(1)`` -- graph-capturable (torch's CUDA generator)."""

    def __init__(self, temperature: float = 1.0, *, top_k: int | None = None):
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature!r}")
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
        self.temperature, self.top_k = float(temperature), top_k

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        z = logits.float() / self.temperature
        if self.top_k is not None and self.top_k < z.shape[-1]:
            kth = torch.topk(z, self.top_k, dim=-1).values[..., -1:]
            z = torch.where(z < kth, torch.full_like(z, -float("inf")), z)
        p = torch.softmax(z, dim=-1)
        q = torch.empty_like(p).exponential_(1)
        return torch.argmax(p / q, dim=-1)

    def state_tensors(self) -> list[torch.Tensor]:
        return []

    def __repr__(self) -> str:
        return f"TemperatureSampler(temperature={self.temperature}, top_k={self.top_k})"


# ----------------------------------------------------------------------------- golden arithmetic
_EXP_C = [float(c) for c in EXP_COEFFS]
_LOG_C = [float(c) for c in LOG_COEFFS]


def exp_f32(x: torch.Tensor) -> torch.Tensor:
    """:func:`mactile.golden.reset_temperature.exp_f32` on float32 tensors (x <= 0)."""
    f32 = torch.float32
    t = x.to(f32) * float(LOG2E)
    under = t < float(EXP_T_MIN)
    t = torch.where(under, torch.zeros_like(t), t)
    n = torch.round(t)  # half to even, as np.rint
    f = t - n
    p = torch.full_like(f, _EXP_C[0])
    for c in _EXP_C[1:]:
        p = p * f
        p = p + c
    two_n = ((n.to(torch.int32) + FP32.bias) << FP32.man_bits).view(f32)
    return torch.where(under, torch.zeros_like(p), p * two_n)


def log_f32(s: torch.Tensor) -> torch.Tensor:
    """:func:`mactile.golden.reset_temperature.log_f32` on float32 tensors (s >= 1)."""
    f32 = torch.float32
    bits = s.to(f32).view(torch.int32)
    k = ((bits & FP32.exp_mask) >> FP32.man_bits) - FP32.bias
    m = ((bits & FP32.man_mask) | (FP32.bias << FP32.man_bits)).view(f32)
    q = (m - 1.0) / (m + 1.0)
    q2 = q * q
    p = torch.full_like(q, _LOG_C[0])
    for c in _LOG_C[1:]:
        p = p * q2
        p = p + c
    return k.to(f32) * float(LN2) + p * q


_M64 = (1 << 64) - 1


def _s64(v: int) -> int:
    """An unsigned 64-bit constant as the signed int64 with the same bits."""
    v &= _M64
    return v - (1 << 64) if v >= 1 << 63 else v


def _lsr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def uniform(seed: int, seq: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """:func:`mactile.golden.reset_temperature.uniform` for int64 tensors of sequence ids and
    positions (wrapping int64 arithmetic gives the golden's mod-2**64 results)."""
    z = seq.to(torch.int64) * _s64(0xD1B54A32D192ED03) + pos.to(torch.int64) * _s64(0xABC98388FB8FAC03)
    z = z + _s64(seed * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15)
    z = (z ^ _lsr(z, 30)) * _s64(0xBF58476D1CE4E5B9)
    z = (z ^ _lsr(z, 27)) * _s64(0x94D049BB133111EB)
    z = z ^ _lsr(z, 31)
    return (_lsr(z, 40).to(torch.float64) * 2.0 ** -24).to(torch.float32)


def _hs_scan(x: torch.Tensor) -> torch.Tensor:
    """Hillis-Steele inclusive scan over the last axis (32 lanes), FP32."""
    idx = torch.arange(x.shape[-1], device=x.device)
    o = 1
    while o < 32:
        y = torch.zeros_like(x)
        y[..., o:] = x[..., :-o]
        x = torch.where(idx >= o, x + y, x)
        o *= 2
    return x


def scan_order(V: int, layout: ReductionLayout, device=None) -> torch.Tensor:
    """Position of each vocabulary index in the layout's scan order (int64 ``[V]``)."""
    C, T, R = layout.cluster, layout.threads, layout.r(V)
    i = torch.arange(C * T * R, device=device)
    return (((i // (T * R)) * T + i % T) * R + (i // T) % R)[:V]


def scan_prefixes(vals: torch.Tensor, layout: ReductionLayout):
    """Batched :func:`mactile.golden.reset_temperature.scan_prefixes`: ``vals [B, V]`` FP32 ->
    ``(total [B], G [B, V])`` in the layout's summation order."""
    B, V = vals.shape
    C, T, R = layout.cluster, layout.threads, layout.r(V)
    if T % 32:
        raise ValueError(f"layout threads must be a multiple of 32, got {T}")
    pad = torch.zeros(B, C * T * R, dtype=torch.float32, device=vals.device)
    pad[:, :V] = vals
    a = pad.view(B, C, R, T)
    s = torch.empty_like(a)
    acc = torch.zeros(B, C, T, dtype=torch.float32, device=vals.device)
    for r in range(R):  # sequential within a thread
        acc = acc + a[:, :, r, :]
        s[:, :, r, :] = acc
    W = T // 32
    lane = _hs_scan(acc.view(B, C, W, 32))
    wt = torch.zeros(B, C, 32, dtype=torch.float32, device=vals.device)
    wt[..., :W] = lane[..., 31]
    wi = _hs_scan(wt)[..., :W]
    we = torch.cat([torch.zeros_like(wi[..., :1]), wi[..., :-1]], dim=-1)
    ti = (we[..., None] + lane).reshape(B, C, T)
    te = torch.cat([torch.zeros_like(ti[..., :1]), ti[..., :-1]], dim=-1)
    ei = te[:, :, None, :] + s
    tot = ti[..., -1]
    co = [torch.zeros(B, dtype=torch.float32, device=vals.device)]
    for c in range(C):  # sequential chain over the CTAs
        co.append(co[-1] + tot[:, c])
    off = torch.stack(co[:C], dim=1)
    G = (off[:, :, None, None] + ei).reshape(B, -1)[:, :V]
    return co[C], G


class StepAwareTemperatureSampler:
    """ReSET's step-aware temperature policy for a fixed batch of ``batch`` sequence slots.

    Parameters
    ----------
    batch : int
        Sequence slots (slot ``b`` keeps its state until :meth:`reset`).
    step_end_mask : torch.Tensor
        Boolean ``[V]``: tokens that end a reasoning step (a blank line in the paper).
    tau0, t_low, t_high, window, seed
        As :class:`mactile.golden.StepAwareTemperature` (paper: 0.6, 0.1, 1.0, 32).
    layout : ReductionLayout
        Summation order; the default is the GPU kernel's (8 CTAs x 1024 threads), so that the
        torch and the GPU backends and the golden model make the same decisions.
    seq_ids : sequence of int, optional
        Sequence ids of the slots for the random generator (default ``0..batch-1``).
    backend : {"torch", "op", "auto"}
        ``torch``: this module's port; ``op``: ``torch.ops.mactile.reset_temperature_step``
        (CUDA tensors, the default layout); ``auto``: the op where it runs, else the port.

    After each call the last step's ``temperature``, ``entropy``, ``h_step``, ``h_bar`` and
    ``tau`` are in :attr:`last` (tensors ``[B]``).
    """

    def __init__(self, batch: int, step_end_mask: torch.Tensor, *, tau0: float = 0.6, t_low: float = 0.1,
                 t_high: float = 1.0, window: int = 32, seed: int = 0,
                 layout: ReductionLayout | None = None, seq_ids=None, backend: str = "torch"):
        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a positive integer, got {batch!r}")
        if not (t_low > 0 and t_high > 0):
            raise ValueError("temperatures t_low and t_high must be positive")
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        if backend not in ("torch", "op", "auto"):
            raise ValueError(f"backend must be 'torch', 'op' or 'auto', got {backend!r}")
        mask = torch.as_tensor(step_end_mask)
        if mask.ndim != 1:
            raise ValueError(f"step_end_mask must be 1-D [V], got shape {tuple(mask.shape)}")
        self.batch, self.tau0, self.t_low, self.t_high = batch, float(tau0), float(t_low), float(t_high)
        self.window, self.seed = window, seed
        self.layout = layout or ReductionLayout()
        dev = mask.device
        self.mask = mask.to(torch.bool)
        self.V = int(mask.shape[0])
        self.order = scan_order(self.V, self.layout, dev)
        f = np.float32
        self.inv_lo, self.inv_hi = float(f(f(1.0) / f(t_low))), float(f(f(1.0) / f(t_high)))
        self.seq_ids = (torch.arange(batch, device=dev) if seq_ids is None
                        else torch.as_tensor(seq_ids, dtype=torch.int64, device=dev))
        if self.seq_ids.shape != (batch,):
            raise ValueError(f"seq_ids must have {batch} entries")
        z64 = dict(dtype=torch.float64, device=dev)
        zi = dict(dtype=torch.int64, device=dev)
        self.count, self.t0, self.step_n = (torch.zeros(batch, **zi) for _ in range(3))
        self.sum_all, self.step_sum = torch.zeros(batch, **z64), torch.zeros(batch, **z64)
        self.prev_end = torch.zeros(batch, dtype=torch.int32, device=dev)  # the op's dtype
        self.ring = torch.zeros(batch, window, **z64)
        self.last: dict[str, torch.Tensor] = {}
        self.backend = self._pick_backend(backend, dev)

    def _pick_backend(self, backend: str, dev) -> str:
        if backend == "torch":
            return "torch"
        why = None
        if dev.type != "cuda":
            why = "the step-end mask is not a CUDA tensor"
        elif self.layout != ReductionLayout():
            why = f"the kernel sums in the default layout, not {self.layout}"
        else:
            try:
                import mactile.torch.ops  # noqa: F401,PLC0415  (registers torch.ops.mactile.*)
                self._op_fn = torch.ops.mactile.reset_temperature_step
                from mactile.gpu.runtime import gpu_skip_reason  # noqa: PLC0415
                why = gpu_skip_reason()
            except Exception as e:  # noqa: BLE001  -- no op, no CuPy: say why
                why = f"{type(e).__name__}: {e}"
        if not why:
            self._mask_u8 = self.mask.to(torch.uint8)
            return "op"
        if backend == "op":
            raise RuntimeError(f"StepAwareTemperatureSampler: backend 'op' is not available: {why}")
        return "torch"

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.count, self.sum_all, self.t0, self.step_sum, self.step_n, self.prev_end, self.ring]

    def reset(self) -> None:
        """Forget every slot's state."""
        for t in self.state_tensors():
            t.zero_()

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.ndim != 2 or logits.shape != (self.batch, self.V):
            raise ValueError(f"logits must be [{self.batch}, {self.V}], got {tuple(logits.shape)}")
        if self.backend == "op":
            return self._op(logits)
        return self._torch(logits)

    def _op(self, logits: torch.Tensor) -> torch.Tensor:
        """``torch.ops.mactile.reset_temperature_step``: the GPU kernel on torch's stream."""
        z = logits if logits.dtype in (torch.float16, torch.float32) else logits.float()
        out = self._op_fn(z.contiguous(), self._mask_u8, self.seq_ids, *self.state_tensors(),
                          self.tau0, self.t_low, self.t_high, self.seed)
        self.last = dict(zip(("temperature", "entropy", "h_step", "h_bar", "tau"), out[1:]))
        return out[0].to(torch.int64)

    def _torch(self, logits: torch.Tensor) -> torch.Tensor:
        z = logits.to(torch.float32)
        d = z - z.max(dim=-1, keepdim=True).values
        e = exp_f32(d)
        S, _ = scan_prefixes(e, self.layout)
        Wt, _ = scan_prefixes(e * d, self.layout)
        H = log_f32(S) - Wt / S
        H64 = H.to(torch.float64)
        w = self.window
        t = self.count
        new = self.prev_end.bool()
        self.t0.copy_(torch.where(new, t, self.t0))
        self.step_sum.copy_(torch.where(new, torch.zeros_like(self.step_sum), self.step_sum))
        self.step_n.copy_(torch.where(new, torch.zeros_like(self.step_n), self.step_n))
        self.sum_all.add_(H64)
        hbar = self.sum_all / (t + 1).to(torch.float64)
        self.step_sum.add_(H64)
        self.step_n.add_(1)
        self.ring.scatter_(1, (t % w)[:, None], H64[:, None])
        nwin = torch.clamp(t + 1, max=w)
        acc = torch.zeros_like(H64)
        for j in range(w):  # oldest to newest, as the golden loop
            p = t - nwin + 1 + j
            v = self.ring.gather(1, (p % w)[:, None])[:, 0]
            acc = torch.where(j < nwin, acc + v, acc)
        hstep = torch.where(t - self.t0 < w, acc / nwin.to(torch.float64), self.step_sum / self.step_n.to(torch.float64))
        tau = torch.where(hstep <= hbar, torch.full_like(hstep, self.tau0), hstep)
        low = H64 < tau
        temp = torch.where(low, torch.full_like(H, self.t_low), torch.full_like(H, self.t_high))
        inv = torch.where(low, torch.full_like(H, self.inv_lo), torch.full_like(H, self.inv_hi))
        e2 = exp_f32(d * inv[:, None])
        S2, G = scan_prefixes(e2, self.layout)
        target = uniform(self.seed, self.seq_ids, t) * S2
        pos = e2 > 0
        ok = pos & (G > target[:, None])
        big = torch.iinfo(torch.int64).max
        first = torch.argmin(torch.where(ok, self.order, big), dim=-1)
        lastpos = torch.argmax(torch.where(pos, self.order, -1), dim=-1)
        tok = torch.where(ok.any(dim=-1), first, lastpos)
        self.prev_end.copy_(self.mask[tok].to(torch.int32))
        self.count.add_(1)
        self.last = {"temperature": temp, "entropy": H, "h_step": hstep, "h_bar": hbar, "tau": tau}
        return tok

    def __repr__(self) -> str:
        return (f"StepAwareTemperatureSampler(batch={self.batch}, tau0={self.tau0}, t_low={self.t_low}, "
                f"t_high={self.t_high}, window={self.window}, seed={self.seed}, backend={self.backend!r})")
