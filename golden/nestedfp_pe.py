"""Bit-exact model of the NestedFP dual-mode processing element, and of the plain FP16 and
FP8 MACs it is compared with.

Source: 004_a14d4b71d1ae7c1e.txt Sec. 4.2 (Figure 4: the split and the reconstruction),
Sec. 4.3 (FP8 mode: "a single global scaling factor (256)"). The RTL is
:mod:`mactile.rtl.mac.nestedfp_pe`; it has the same stages, so a test can compare any of
them:

``operand`` (the stored bytes -> the weight, the activation code -> its value) ->
``product`` (exact, as an FP32 bit pattern) -> ``accumulate`` (FP32 register).

Modes of the dual PE (input ``mode`` each cycle):

* ``fp16`` (mode 0): the weight is the FP16 word rebuilt from the two stored bytes by the
  reconstruction of Figure 4b (:func:`mactile.golden.nestedfp.nestedfp_merge`), the
  activation an FP16 code; the product is ``a * w``.
* ``fp8`` (mode 1): the weight is the upper byte read as E4M3, the activation an E4M3 code
  (the low byte of ``a``); the product is ``a * w`` of the raw E4M3 values. The factor
  ``2**-8`` between the upper byte's E4M3 value and the FP16 weight is NestedFP's one global
  scale (Sec. 4.2: "a fixed scaling factor ... 2^8"; Sec. 4.3: "a single global scaling
  factor (256)"); it is applied with the output scale, outside the PE.

Where each rounding happens (named; the paper gives no datapath, so this is the usual
tensor-core reading, FP32 accumulation):

* **product: none** (``PRODUCT_ROUNDING = "exact"``). Two FP16 significands (11 bits with
  the hidden bit) give at most 22 bits, within FP32's 24, and every product of two finite
  FP16 values lies between 2^-48 and 2^32, inside FP32's normal range; E4M3 products
  (4 x 4 bits, 2^-18 .. 2^17.6) likewise. So the product is an FP32 value exactly; the
  model checks it (:func:`product_bits` raises if it were not).
* **accumulator: one FP32 round-to-nearest-even per term** (``ACC_ROUNDING = "rne"``):
  ``acc <- RNE(acc + p)`` with gradual underflow, overflow to +-Inf and the canonical quiet
  NaN ``0x7FC00000`` (:func:`mactile.golden.tensorcore.fp32_add_bits`, the project's FP32
  adder).
* Special values: an FP16 Inf activation gives a +-Inf product (NaN against a zero weight),
  an FP16 NaN or an E4M3 NaN code (``S.1111.111``) a NaN product. A rebuilt weight is
  always finite (bit 14 is 0 after the reconstruction: ``|w| < 2``).

Control each cycle: ``clear`` starts a new sum with this cycle's product (``acc <- p``, so
a single product is seen bit for bit, -0 included; ``clear`` without ``valid`` gives +0),
``valid`` low holds the sum.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .elements import FP8_E4M3, FP16
from .nestedfp import nestedfp_merge
from .tensorcore import FP32_QNAN, fp32_add_bits

__all__ = ["PE_MODES", "MODE_FP16", "MODE_FP8", "PRODUCT_ROUNDING", "ACC_ROUNDING",
           "NestedFpPe", "product_bits", "fp16_values", "e4m3_values"]

#: ``modes`` of a PE: the dual NestedFP PE, and the two plain MACs it is measured against.
PE_MODES = ("dual", "fp16", "fp8")
#: ``mode`` input of the dual PE.
MODE_FP16, MODE_FP8 = 0, 1
#: Named rounding choices (module docstring).
PRODUCT_ROUNDING = "exact"
ACC_ROUNDING = "rne"


@functools.lru_cache(maxsize=None)
def fp16_values() -> np.ndarray:
    """float64 value of every FP16 code (Inf and NaN included)."""
    return np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)


@functools.lru_cache(maxsize=None)
def e4m3_values() -> np.ndarray:
    """float64 value of every E4M3 code (NaN for ``S.1111.111``)."""
    return np.asarray(FP8_E4M3.values, dtype=np.float64)


def product_bits(a_values, w_values) -> np.ndarray:
    """FP32 bit patterns (uint32) of the exact products of float64 operand values.

    NaN results (NaN operands, Inf x 0) are the canonical quiet NaN. Raises ``ArithmeticError``
    if a product were not exactly an FP32 value (it always is for FP16 and E4M3 operands;
    module docstring).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.asarray(a_values, np.float64) * np.asarray(w_values, np.float64)
        p32 = p.astype(np.float32)
        finite = np.isfinite(p)
        if not np.array_equal(p32[finite].astype(np.float64), p[finite]):
            raise ArithmeticError("a product is not exactly an FP32 value")
    bits = p32.view(np.uint32).copy()
    bits[np.isnan(p)] = FP32_QNAN
    return bits


@dataclass(frozen=True)
class NestedFpPe:
    """Golden model of one processing element.

    Parameters
    ----------
    modes : {"dual", "fp16", "fp8"}
        ``dual``: the NestedFP PE (ports ``a`` FP16/E4M3, ``w_upper``, ``w_lower``,
        ``mode``); ``fp16``: a plain FP16 MAC (``a``, ``w`` FP16 codes); ``fp8``: a plain
        E4M3 MAC (``a``, ``w`` E4M3 codes). All accumulate in FP32.
    """

    modes: str = "dual"

    def __post_init__(self):
        if self.modes not in PE_MODES:
            raise ValueError(f"modes must be one of {', '.join(PE_MODES)}, got {self.modes!r}")

    @property
    def a_bits(self) -> int:
        """Width of the activation port."""
        return FP8_E4M3.bits if self.modes == "fp8" else FP16.bits

    # ------------------------------------------------------------------ operand
    @staticmethod
    def weight_word(upper, lower) -> np.ndarray:
        """FP16 bit patterns of the rebuilt weights (Figure 4b)."""
        return nestedfp_merge(np.asarray(upper, np.uint8), np.asarray(lower, np.uint8))

    def operand_values(self, ports: dict) -> tuple[np.ndarray, np.ndarray]:
        """float64 values of the activation and the weight of each cycle."""
        a = np.asarray(ports["a"], np.int64)
        if self.modes == "fp16":
            return fp16_values()[a], fp16_values()[np.asarray(ports["w"], np.int64)]
        if self.modes == "fp8":
            return e4m3_values()[a], e4m3_values()[np.asarray(ports["w"], np.int64)]
        upper = np.asarray(ports["w_upper"], np.int64)
        lower = np.asarray(ports["w_lower"], np.int64)
        fp8 = np.asarray(ports["mode"], np.int64) == MODE_FP8
        w16 = self.weight_word(upper, lower).astype(np.int64)
        av = np.where(fp8, e4m3_values()[a & 0xFF], fp16_values()[a])
        wv = np.where(fp8, e4m3_values()[upper], fp16_values()[w16])
        return av, wv

    # ------------------------------------------------------------------ product
    def products(self, ports: dict) -> np.ndarray:
        """FP32 bit patterns of each cycle's exact product."""
        return product_bits(*self.operand_values(ports))

    # ------------------------------------------------------------------ accumulate
    @staticmethod
    def accumulate(products, valid, clear, *, acc: int = 0) -> np.ndarray:
        """The accumulator register after each cycle (uint32 FP32 patterns), from ``acc``.

        ``acc <- clear ? (valid ? p : +0) : (valid ? RNE(acc + p) : acc)``.
        """
        p = np.asarray(products, np.int64)
        v = np.asarray(valid, bool)
        c = np.asarray(clear, bool)
        out = np.empty(len(p), np.uint32)
        for i in range(len(p)):
            if c[i]:
                acc = int(p[i]) if v[i] else 0
            elif v[i]:
                acc = fp32_add_bits(acc, int(p[i]))
            out[i] = acc
        return out

    def run(self, ports: dict) -> np.ndarray:
        """``acc`` after each cycle of one stream (``ports``: 1-D int arrays, ``valid`` and
        ``clear`` included), starting from the reset value +0."""
        return self.accumulate(self.products(ports), ports["valid"], ports["clear"])
