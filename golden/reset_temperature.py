"""ReSET's step-aware temperature policy (002_adb391b0b44d3bdd.txt Sec. 4, Eq. 1-3), with
arithmetic defined bit for bit so that a GPU kernel can reproduce every decision.

Per decoding position ``t`` of a sequence (FIGURES.md, ReSET notes):

1. token entropy ``H_t`` (nats) of ``softmax(logits)`` at temperature 1;
2. a step ends at a token marked in ``step_end_mask`` (a blank line in the paper); the
   token *after* it opens a new step at ``t0 = t``;
3. running global mean ``Hbar = (1/(t+1)) sum_{i<=t} H_i``;
4. hybrid step-entropy estimator (Eq. 3): the mean of the window of the last ``w`` entropies
   (spanning the step boundary; ``min(w, t+1)`` of them) while ``t - t0 < w``, else the mean
   within the step ``(1/(t-t0+1)) sum_{i=t0}^{t} H_i``;
5. threshold (Eq. 2): ``tau_t = tau0`` if ``Hstep <= Hbar`` else ``Hstep``;
6. temperature (Eq. 1): ``T_low`` if ``H_t < tau_t`` else ``T_high``;
7. sample the next token from ``softmax(logits / T)`` with a counter-based generator
   (``seed``, sequence id, position): reproducible and independent of batching.

Arithmetic (named, so that kernels can match it exactly)
--------------------------------------------------------
* Per-token work is FP32, one IEEE round-to-nearest operation at a time, no fused
  multiply-add: ``exp`` is :func:`exp_f32` (``2**n`` times a degree-6 polynomial in
  ``f = t - rint(t)``, ``t = x * log2(e)``; ``0`` below ``t = -125``), ``log`` is
  :func:`log_f32` (exponent split plus an odd polynomial in ``s = (m-1)/(m+1)``).
* Sums run in the order of a :class:`ReductionLayout` (the GPU's: ``cluster`` CTAs per
  sequence, ``threads`` per CTA, ``r`` elements per thread): sequential within a thread,
  a Hillis-Steele inclusive scan over the 32 lanes of a warp, the same scan over the warp
  totals, a sequential chain over the CTAs. Element ``i`` belongs to CTA ``i // (threads*r)``,
  thread ``i % threads`` and slot ``(i % (threads*r)) // threads`` of that thread.
* ``H = log(S) - W/S`` with ``S = sum e_i``, ``W = sum e_i * d_i``, ``d_i = z_i - max z``,
  ``e_i = exp_f32(d_i)``.
* Sampling: ``e'_i = exp_f32(d_i * invT)`` with ``invT = float32(1)/float32(T)``; the same
  scan gives every element an inclusive prefix ``G`` (see :func:`scan_prefixes`); the
  token is the first element in scan order with ``e' > 0`` and ``G > u * S'`` (``u`` from
  :func:`uniform`), else the last element with ``e' > 0``.
* Per-sequence statistics (running sums, window) are float64; decisions compare float64.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import validate
from .elements import FP32

__all__ = ["ReductionLayout", "StepAwareTemperature", "StepResult", "exp_f32", "log_f32",
           "uniform", "scan_prefixes", "EXP_COEFFS", "LOG_COEFFS"]

_F = np.float32
LOG2E = _F(1.4426950408889634)
LN2 = _F(0.6931471805599453)
#: 2**f on [-0.5, 0.5], Horner coefficients from the highest degree (Taylor of e**(f ln2)).
EXP_COEFFS = tuple(_F(np.log(2.0) ** k / np.prod(np.arange(1, k + 1, dtype=np.float64)))
                   for k in range(6, -1, -1))
#: ln(m) = 2 s (1 + s^2/3 + s^4/5 + ...), s = (m-1)/(m+1); Horner coefficients in s^2.
LOG_COEFFS = tuple(_F(2.0 / (2 * k + 1)) for k in range(7, -1, -1))
EXP_T_MIN = _F(-125.0)


def exp_f32(x) -> np.ndarray:
    """exp(x) for x <= 0 with the defined FP32 op sequence (see module docstring)."""
    x = np.asarray(x, dtype=_F)
    t = (x * LOG2E).astype(_F)
    under = t < EXP_T_MIN
    t = np.where(under, _F(0.0), t).astype(_F)
    n = np.rint(t).astype(_F)
    f = (t - n).astype(_F)
    p = np.full(f.shape, EXP_COEFFS[0], dtype=_F)
    for c in EXP_COEFFS[1:]:
        p = ((p * f).astype(_F) + c).astype(_F)
    two_n = ((n.astype(np.int32) + FP32.bias) << FP32.man_bits).astype(np.uint32).view(_F)
    return np.where(under, _F(0.0), (p * two_n).astype(_F)).astype(_F)


def log_f32(s) -> np.ndarray:
    """ln(s) for s >= 1 (normal FP32) with the defined op sequence."""
    s = np.asarray(s, dtype=_F)
    bits = s.view(np.uint32)
    k = ((bits & FP32.exp_mask) >> FP32.man_bits).astype(np.int32) - FP32.bias
    m = ((bits & FP32.man_mask) | (FP32.bias << FP32.man_bits)).astype(np.uint32).view(_F)
    q = ((m - _F(1.0)).astype(_F) / (m + _F(1.0)).astype(_F)).astype(_F)
    q2 = (q * q).astype(_F)
    p = np.full(q.shape, LOG_COEFFS[0], dtype=_F)
    for c in LOG_COEFFS[1:]:
        p = ((p * q2).astype(_F) + c).astype(_F)
    return ((k.astype(_F) * LN2).astype(_F) + (p * q).astype(_F)).astype(_F)


def uniform(seed: int, seq: int, pos: int) -> np.float32:
    """Counter-based U[0,1) in FP32: splitmix64 of (seed, sequence id, position), top 24 bits."""
    m = (1 << 64) - 1
    z = (seed * 0x9E3779B97F4A7C15 + seq * 0xD1B54A32D192ED03 + pos * 0xABC98388FB8FAC03) & m
    z = (z + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    z ^= z >> 31
    return _F((z >> 40) * 2.0 ** -24)


@dataclass(frozen=True)
class ReductionLayout:
    """Summation order of the per-token sums (must match the kernel that is compared)."""

    cluster: int = 8
    threads: int = 1024

    def __post_init__(self):
        for name in ("cluster", "threads"):
            object.__setattr__(self, name, validate.integer("ReductionLayout", name,
                                                            getattr(self, name), lo=1))

    def r(self, vocab: int) -> int:
        return -(-vocab // (self.cluster * self.threads))


def _hs_scan(x: np.ndarray) -> np.ndarray:
    """Hillis-Steele inclusive scan over the last axis (32 lanes), FP32, in place order."""
    x = x.astype(_F).copy()
    n = x.shape[-1]
    o = 1
    while o < 32:
        y = np.zeros_like(x)
        y[..., o:] = x[..., :-o]
        x = np.where(np.arange(n) >= o, (x + y).astype(_F), x).astype(_F)
        o *= 2
    return x


def scan_prefixes(vals: np.ndarray, layout: ReductionLayout):
    """Total and per-element inclusive prefix ``G`` of ``vals`` [V] in the layout's order.

    Returns ``(total, G, order)``: ``G[i]`` for vocab index i, ``order[i]`` the element's
    position in scan order (CTA, thread, slot).
    """
    V = vals.shape[0]
    C, T = layout.cluster, layout.threads
    R = layout.r(V)
    pad = np.zeros(C * T * R, dtype=_F)
    pad[:V] = vals
    a = pad.reshape(C, R, T)  # element i = c*T*R + r*T + j
    s = np.zeros((C, R, T), dtype=_F)
    acc = np.zeros((C, T), dtype=_F)
    for r in range(R):
        acc = (acc + a[:, r, :]).astype(_F)
        s[:, r, :] = acc
    P = acc  # thread totals [C, T]
    W = T // 32
    I = _hs_scan(P.reshape(C, W, 32))  # lane inclusive
    wt = np.zeros((C, 32), dtype=_F)
    wt[:, :W] = I[:, :, 31]
    WI = _hs_scan(wt)[:, :W]  # warp inclusive
    WE = np.concatenate([np.zeros((C, 1), _F), WI[:, :-1]], axis=1)
    TI = (WE[:, :, None] + I).astype(_F).reshape(C, T)
    TE = np.concatenate([np.zeros((C, 1), _F), TI[:, :-1]], axis=1)
    EI = (TE[:, None, :] + s).astype(_F)  # [C, R, T]
    tot = TI[:, -1]
    CO = np.zeros(C + 1, dtype=_F)
    for c in range(C):
        CO[c + 1] = _F(CO[c] + tot[c])
    G = (CO[:C, None, None] + EI).astype(_F).reshape(-1)[:V]
    j = np.arange(C * T * R) % T
    r = (np.arange(C * T * R) // T) % R
    c = np.arange(C * T * R) // (T * R)
    order = ((c * T + j) * R + r)[:V]
    return CO[C], G, order


@dataclass
class StepResult:
    """Per-sequence outputs of one decoding step."""

    tokens: np.ndarray      # int32 [B]
    temperature: np.ndarray  # float32 [B]
    entropy: np.ndarray      # float32 [B], nats
    h_step: np.ndarray       # float64 [B]
    h_bar: np.ndarray        # float64 [B]
    tau: np.ndarray          # float64 [B]


@dataclass
class StepAwareTemperature:
    """Golden ReSET sampler with per-sequence state.

    Parameters
    ----------
    tau0 : float
        Global entropy threshold (the 80th-percentile token entropy of a calibration set;
        about 0.6 in the paper's Sec. 3.2).
    t_low, t_high : float
        Temperatures of sharpened and other tokens (paper: 0.1 and 1.0).
    window : int
        ``w`` of Eq. 3 (paper: 32).
    seed : int
        Seed of the counter-based generator.
    layout : ReductionLayout
        Summation order (match the kernel's to compare bit for bit).
    """

    tau0: float = 0.6
    t_low: float = 0.1
    t_high: float = 1.0
    window: int = 32
    seed: int = 0
    layout: ReductionLayout = field(default_factory=ReductionLayout)
    state: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        who = "StepAwareTemperature"
        self.tau0 = validate.real(who, "tau0", self.tau0)
        self.t_low = validate.real(who, "t_low (a temperature)", self.t_low, lo=0, lo_open=True)
        self.t_high = validate.real(who, "t_high (a temperature)", self.t_high, lo=0,
                                    lo_open=True)
        self.window = validate.integer(who, "window", self.window, lo=1)
        self.seed = validate.integer(who, "seed", self.seed, lo=0)
        if not isinstance(self.layout, ReductionLayout):
            raise TypeError(f"{who}: layout must be a ReductionLayout, got {self.layout!r}")

    def _seq(self, sid: int) -> dict:
        st = self.state.get(sid)
        if st is None:
            st = {"count": 0, "sum_all": 0.0, "t0": 0, "step_sum": 0.0, "step_n": 0,
                  "prev_end": False, "ring": np.zeros(self.window, np.float64)}
            self.state[sid] = st
        return st

    def reset(self, seq_ids=None) -> None:
        """Forget the state of the given sequence ids (all when None)."""
        if seq_ids is None:
            self.state.clear()
        else:
            for s in seq_ids:
                self.state.pop(int(s), None)

    def step(self, logits, step_end_mask, seq_ids=None) -> StepResult:
        """One decoding step for a batch of logits ``[B, V]`` (float16/float32).

        ``step_end_mask`` is a boolean ``[V]`` marking tokens that end a reasoning step;
        ``seq_ids`` (default ``0..B-1``) name the sequences whose state is used.
        """
        z = np.asarray(logits)
        if z.ndim != 2:
            raise ValueError(f"logits must be [batch, vocab], got shape {z.shape}")
        if z.dtype not in (np.float16, np.float32):
            raise ValueError(f"logits must be float16 or float32, got {z.dtype}")
        z = z.astype(_F)
        if not np.isfinite(z).all():
            raise ValueError("logits hold NaN or Inf")
        B, V = z.shape
        mask = np.asarray(step_end_mask, dtype=bool)
        if mask.shape != (V,):
            raise ValueError(f"step_end_mask must have shape ({V},), got {mask.shape}")
        ids = np.arange(B) if seq_ids is None else np.asarray(seq_ids, dtype=np.int64)
        inv_lo = _F(_F(1.0) / _F(self.t_low))
        inv_hi = _F(_F(1.0) / _F(self.t_high))
        out = StepResult(np.zeros(B, np.int32), np.zeros(B, _F), np.zeros(B, _F),
                         np.zeros(B), np.zeros(B), np.zeros(B))
        w = self.window
        for b in range(B):
            st = self._seq(int(ids[b]))
            d = (z[b] - np.max(z[b])).astype(_F)
            e = exp_f32(d)
            S, _, _ = scan_prefixes(e, self.layout)
            Wt, _, _ = scan_prefixes((e * d).astype(_F), self.layout)
            H = _F(log_f32(S) - _F(Wt / S))
            t = st["count"]
            if st["prev_end"]:
                st["t0"], st["step_sum"], st["step_n"] = t, 0.0, 0
            st["sum_all"] += float(H)
            st["count"] = t + 1
            hbar = st["sum_all"] / (t + 1)
            st["step_sum"] += float(H)
            st["step_n"] += 1
            st["ring"][t % w] = float(H)
            if t - st["t0"] < w:
                nwin = min(w, t + 1)
                acc = 0.0
                for p in range(t - nwin + 1, t + 1):  # oldest to newest
                    acc += st["ring"][p % w]
                hstep = acc / nwin
            else:
                hstep = st["step_sum"] / st["step_n"]
            tau = self.tau0 if hstep <= hbar else hstep
            low = float(H) < tau
            T = _F(self.t_low if low else self.t_high)
            inv = inv_lo if low else inv_hi
            e2 = exp_f32((d * inv).astype(_F))
            S2, G, order = scan_prefixes(e2, self.layout)
            target = _F(uniform(self.seed, int(ids[b]), t) * S2)
            ok = (e2 > 0) & (G > target)
            if ok.any():
                tok = int(np.flatnonzero(ok)[np.argmin(order[ok])])
            else:
                pos = np.flatnonzero(e2 > 0)
                tok = int(pos[np.argmax(order[pos])])
            st["prev_end"] = bool(mask[tok])
            out.tokens[b], out.temperature[b], out.entropy[b] = tok, T, H
            out.h_step[b], out.h_bar[b], out.tau[b] = hstep, hbar, tau
        return out
