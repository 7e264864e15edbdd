"""Bit-exact model of the INT group dot-product units: FlexQ's bit-plane INT6 unit and the
direct INT6 / INT8 multiplier arrays it is measured against.

Source: 003_c7ba18c8b0833de1.txt Sec. 4.2-4.3, Eq. 5-6: an integer dot product of
``bits``-wide two's-complement codes equals ``sum_{s,t} w_s w_t popcount(A_s AND B_t)``
over their bit planes (:func:`mactile.golden.intgroup.plane_weights`, the top plane
negative), which binary (1-bit AND + popcount) arrays compute; the FP16 group scales are
applied once per group, at the end (the epilogue of FlexQ's kernel, and of
:mod:`mactile.gpu.flexq`). The RTL is :mod:`mactile.rtl.mac.intgroup_dot`, with the same
stages:

``beat`` (``lanes`` code pairs -> their integer dot: bit-plane popcounts shifted by
``s + t`` and signed, or ``lanes`` multipliers) -> ``accumulate`` (a two's-complement
register of ``acc_bits``, the narrowest that holds ``group_size`` worst-case products) ->
``scale`` (``y = FP32(acc * s_a * s_w)``).

Where the rounding happens (named; ``SCALE_ROUNDING = "rne-once"``): nowhere before the
scale stage (integer arithmetic is exact), and once there: ``acc * s_a * s_w`` is formed
exactly (at most 19 + 11 + 11 bits for INT6) and rounded to FP32 nearest-even. This is
what the GPU epilogue computes for a group, ``fmaf((float)acc, s_w * s_a, facc)`` with
``facc = 0`` (the FP16 scale product is exact in FP32, the integer is exact in FP32, and
``fmaf`` rounds once); the running FP32 sum over groups belongs to the next stage. The
result is never subnormal or infinite (between 2^-48 and 2^49 in magnitude for INT6).

Scale inputs are FP16 bit patterns with finite values (:class:`~mactile.golden.intgroup.
IntGroup` makes non-negative ones; a sign bit is honoured). Inf/NaN scale codes are outside
the unit's domain: the quantizer never makes them (``IntGroup.input_range``), and
:meth:`GroupDotUnit.scale` refuses them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .intgroup import bitplanes, plane_weights
from .mac import signed_width
from .tensorcore import fp32_round

__all__ = ["GroupDotUnit", "STRUCTURES", "SCALE_ROUNDING"]

#: How a unit forms a beat's dot product.
STRUCTURES = ("bitplane", "multiplier")
SCALE_ROUNDING = "rne-once"
_FP16_MAN, _FP16_EXP_TOP, _FP16_LSB = 10, 31, -24  # value = sig * 2**(max(E, 1) - 25)


@dataclass(frozen=True)
class GroupDotUnit:
    """Golden model of one group dot-product unit.

    Parameters
    ----------
    bits : int
        Operand width (6 for FlexQ's W6A6; 8 for the INT8 comparison).
    lanes : int
        Code pairs per cycle (a beat).
    group_size : int
        Elements per quantization group (FlexQ: 128); a group is ``group_size // lanes``
        beats.
    structure : {"bitplane", "multiplier"}
        ``bitplane``: ``bits x bits`` AND arrays with popcounts (Eq. 5); ``multiplier``:
        ``lanes`` signed multipliers. Both give the same integers.
    """

    bits: int = 6
    lanes: int = 16
    group_size: int = 128
    structure: str = "bitplane"

    def __post_init__(self):
        for name, lo in (("bits", 2), ("lanes", 1), ("group_size", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if self.bits > 8:
            raise ValueError(f"bits must be at most 8, got {self.bits}")
        if self.group_size % self.lanes:
            raise ValueError(f"group_size {self.group_size} is not a multiple of lanes "
                             f"{self.lanes}")
        if self.structure not in STRUCTURES:
            raise ValueError(f"structure must be one of {', '.join(STRUCTURES)}, "
                             f"got {self.structure!r}")

    @property
    def min_int(self) -> int:
        return -(1 << (self.bits - 1))

    @property
    def max_int(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def beats(self) -> int:
        return self.group_size // self.lanes

    @property
    def product_range(self) -> tuple[int, int]:
        return self.min_int * self.max_int, self.min_int * self.min_int

    @property
    def acc_bits(self) -> int:
        """Narrowest two's-complement width holding ``group_size`` extreme products."""
        lo, hi = self.product_range
        return signed_width(self.group_size * lo, self.group_size * hi)

    @property
    def pop_bits(self) -> int:
        """Width of one plane pair's popcount over the lanes."""
        return int(self.lanes).bit_length()

    # ------------------------------------------------------------------ beat
    def plane_counts(self, a, w) -> np.ndarray:
        """``popcount(A_s AND W_t)`` over the last (lane) axis: shape ``(bits, bits) +
        a.shape[:-1]``."""
        pa, pw = bitplanes(a, self.bits), bitplanes(w, self.bits)
        return (pa[:, None].astype(np.int64) & pw[None, :]).sum(axis=-1)

    def beat_dot(self, a, w) -> np.ndarray:
        """Integer dot of each beat (last axis: the lanes), by the unit's structure."""
        a, w = np.asarray(a, np.int64), np.asarray(w, np.int64)
        if self.structure == "multiplier":
            return (a * w).sum(axis=-1)
        pw = plane_weights(self.bits)
        wst = (pw[:, None] * pw[None, :]).reshape((self.bits, self.bits) + (1,) * (a.ndim - 1))
        return (wst * self.plane_counts(a, w)).sum(axis=(0, 1))

    # ------------------------------------------------------------------ accumulate
    def accumulate(self, beats, valid, clear) -> np.ndarray:
        """``acc <- (clear ? 0 : acc) + (valid ? beat : 0)`` after each cycle, from 0, in
        ``acc_bits`` two's complement (a stream of at most ``group_size`` extreme products
        never wraps)."""
        d = np.where(np.asarray(valid, bool), np.asarray(beats, np.int64), 0)
        c = np.asarray(clear, bool)
        total = np.concatenate([[0], np.cumsum(d)])  # total[i] = sum of d[:i]
        last = np.maximum.accumulate(np.where(c, np.arange(len(c)), 0))  # last clear (or 0)
        acc = total[1:] - total[last]  # the sum from the last clear, its own beat included
        w = self.acc_bits
        return ((acc + (1 << (w - 1))) % (1 << w)) - (1 << (w - 1))

    # ------------------------------------------------------------------ scale
    @staticmethod
    def fp16_parts(code: int) -> tuple[int, int, int]:
        """(sign, significand, exponent) of a finite FP16 code: value ``(-1)**sign * sig *
        2**exp``. Raises ``ValueError`` on Inf/NaN."""
        code = int(code)
        e, f = (code >> _FP16_MAN) & _FP16_EXP_TOP, code & ((1 << _FP16_MAN) - 1)
        if e == _FP16_EXP_TOP:
            raise ValueError(f"scale 0x{code:04x} is Inf/NaN: outside the unit's domain")
        sig = f | ((e != 0) << _FP16_MAN)
        return (code >> 15) & 1, sig, max(e, 1) - 1 + _FP16_LSB

    def scale(self, acc: int, sa: int, sw: int) -> int:
        """FP32 bits of ``acc * s_a * s_w`` rounded once to nearest-even (a zero keeps the
        sign ``s_a ^ s_w ^ (acc < 0)``)."""
        ga, ma, ea = self.fp16_parts(sa)
        gw, mw, ew = self.fp16_parts(sw)
        acc = int(acc)
        sign = ga ^ gw ^ int(acc < 0)
        return fp32_round(sign, abs(acc) * ma * mw, ea + ew)

    def run(self, ports: dict) -> dict[str, np.ndarray]:
        """``acc`` and ``y`` after each cycle of one stream (``ports``: ``a``, ``w`` of
        shape (cycles, lanes), ``sa``, ``sw``, ``valid``, ``clear`` of shape (cycles,)).
        The scales are registered with every valid beat; ``y`` scales the current sum by
        the last valid beat's scales (0 before any)."""
        v = np.asarray(ports["valid"], bool)
        acc = self.accumulate(self.beat_dot(ports["a"], ports["w"]), v, ports["clear"])
        sa_q = sw_q = 0
        y = np.empty(len(acc), np.int64)
        for i in range(len(acc)):
            if v[i]:
                sa_q, sw_q = int(ports["sa"][i]), int(ports["sw"][i])
            y[i] = self.scale(int(acc[i]), sa_q, sw_q)
        return {"acc": acc, "y": y}
