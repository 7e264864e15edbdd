"""Fixed-point MSE dialect selection: the datapath of BlockDialect's Table 7 comparison point.

Source: 001_eabebf91b09c2719.txt Sec. 4.3, "Resource Overhead of Real-time MSE
Calculation" and Table 7. The paper's MSE unit runs "16 rounds (per dialect) of
quantization, each involving ... square mean error accumulations for every block
element", and, because FP16 arithmetic is costly, it "convert[s] into fixed-point
representation and truncate[s] the lower bits". The paper gives no widths; this model
names them (docs/rtl-dialect.md):

``frac_bits`` (F, default 6)
    The scaled magnitude ``|x| / 2**SE`` is converted to unsigned fixed point with 3
    integer and F fraction bits, **truncated** (the same alignment as the two-stage
    unit's preprocessing, which is the case F = 2): ``mag_fx = floor(|x| * 2**F / 2**SE)``.
``err_frac_bits`` (G, default 6)
    Each element's squared error ``(mag_fx / 2**F - q / 2)**2`` is exact in 2F fraction
    bits; it is **truncated** to G fraction bits before accumulation
    (``floor(e**2 * 2**G)``). G = 2F keeps it exact.

Per dialect the block's error is the exact integer sum of the truncated squares; the
dialect with the smallest sum wins, **ties to the lower dialect id** (as the golden
floating-point :func:`~mactile.golden.dialect.select_mse`). Elements are quantized as in
the two-stage unit: nearest value, ties to the larger magnitude, clamped to the dialect's
largest value. Since every decision threshold is a multiple of 0.25, the index from
``mag_fx`` equals the index from ``Mag_trunc`` and from the exact magnitude, so F and G
change only which dialect is chosen.

Stages (each a function, so RTL tests can compare intermediate values):
:func:`fixed_magnitude` -> :func:`dialect_errors` -> :func:`select_fixed_mse` ->
:func:`quantize_fixed_mse`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dialect import FORMATBOOK, N_DIALECTS, fp16_fields, quantize_index

__all__ = ["MseFixedPoint", "fixed_magnitude", "dialect_errors", "select_fixed_mse",
           "quantize_fixed_mse", "MAG_INT_BITS"]

#: Integer bits of a scaled magnitude: the block maximum lies in [4, 8).
MAG_INT_BITS = 3
#: FP16 significand bits including the implicit one.
_SIG_BITS = 11


@dataclass(frozen=True, kw_only=True)
class MseFixedPoint:
    """Widths of the fixed-point MSE selector (see the module docstring).

    Parameters
    ----------
    frac_bits : int
        F, fraction bits of the truncated scaled magnitude, 2..8 (8 keeps every bit of an
        element in the block maximum's binade).
    err_frac_bits : int
        G, fraction bits kept of each squared error, 0..2F (2F: exact squares).
    """

    frac_bits: int = 6
    err_frac_bits: int = 6

    def __post_init__(self):
        for name in ("frac_bits", "err_frac_bits"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise TypeError(f"MseFixedPoint: {name} must be an int, got {v!r}")
        if not 2 <= self.frac_bits <= _SIG_BITS - MAG_INT_BITS:
            raise ValueError(f"MseFixedPoint: frac_bits must be in 2..{_SIG_BITS - MAG_INT_BITS}"
                             f", got {self.frac_bits}")
        if not 0 <= self.err_frac_bits <= 2 * self.frac_bits:
            raise ValueError(f"MseFixedPoint: err_frac_bits must be in 0..2*frac_bits = "
                             f"{2 * self.frac_bits}, got {self.err_frac_bits}")

    @property
    def mag_bits(self) -> int:
        """Width of ``mag_fx``."""
        return MAG_INT_BITS + self.frac_bits

    @property
    def abs_err_bits(self) -> int:
        """Width of ``|mag_fx - q * 2**(F-1)|``: below 4.0 (a magnitude under 8 clamped to a
        largest value of at least 4), so 2 integer + F fraction bits."""
        return 2 + self.frac_bits

    @property
    def sq_bits(self) -> int:
        """Width of one truncated squared error (below 16: 4 integer + G fraction bits)."""
        return 4 + self.err_frac_bits

    def sum_bits(self, block_size: int) -> int:
        """Width of a block's error sum."""
        return self.sq_bits + int(np.ceil(np.log2(block_size)))


def _check_blocks(x16_blocks) -> np.ndarray:
    x = np.asarray(x16_blocks)
    if x.dtype != np.float16 or x.ndim != 2:
        raise TypeError(f"expected a 2-d float16 array of blocks (n, B), got {x.dtype} "
                        f"with shape {x.shape}")
    return x


def fixed_magnitude(x16_blocks: np.ndarray, frac_bits: int):
    """Shared exponent field, truncated fixed-point magnitudes and signs of FP16 blocks.

    Returns
    -------
    se_field : (n,) int64
        Largest FP16 exponent field per block (as :func:`~mactile.golden.dialect.preprocess`).
    mag_fx : (n, B) int64
        ``floor(|x| * 2**frac_bits / 2**SE)``, ``3 + frac_bits`` bits. With
        ``frac_bits=2`` this is ``Mag_trunc``.
    sign : (n, B) int64
    """
    MseFixedPoint(frac_bits=frac_bits, err_frac_bits=0)  # validates frac_bits
    sign, ef, sig, e_eff = fp16_fields(_check_blocks(x16_blocks))
    se_field = ef.max(axis=1)
    # |x| / 2**SE = sig * 2**(e_eff - max(SE,1) - 8); keep frac_bits fraction bits.
    shift = np.maximum(se_field, 1)[:, None] - e_eff + (_SIG_BITS - MAG_INT_BITS - frac_bits)
    mag_fx = np.right_shift(sig, np.minimum(shift, 31))
    return se_field, mag_fx, sign


def dialect_errors(mag_fx: np.ndarray, spec: MseFixedPoint) -> np.ndarray:
    """Truncated squared-error sum of every block under every dialect, shape ``(n, 16)``,
    in units of ``2**-err_frac_bits``."""
    f, g = spec.frac_bits, spec.err_frac_bits
    mag_fx = np.asarray(mag_fx, dtype=np.int64)
    n = mag_fx.shape[0]
    out = np.zeros((n, N_DIALECTS), dtype=np.int64)
    for d in range(N_DIALECTS):
        idx = quantize_index(mag_fx, np.full(n, d), unit=1 << f)
        # q half units -> q * 2**(F-1) in units of 2**-F.
        err = mag_fx - (FORMATBOOK[d][idx] << (f - 1))
        out[:, d] = ((err * err) >> (2 * f - g)).sum(axis=1)
    return out


def select_fixed_mse(errors: np.ndarray) -> np.ndarray:
    """Dialect with the smallest error sum per block, ties to the lower id."""
    return np.argmin(np.asarray(errors), axis=1).astype(np.int64)  # argmin: first minimum


def quantize_fixed_mse(x16_blocks: np.ndarray, spec: MseFixedPoint | None = None):
    """The whole fixed-point MSE unit on FP16 blocks ``(n, B)``.

    Returns
    -------
    se_field : (n,) int64
    dialect : (n,) int64
    codes : (n, B) int64
        ``sign << 3 | index`` as :class:`~mactile.golden.dialect.DialectFP4` stores them.
    errors : (n, 16) int64
        The per-dialect error sums the choice was made on.
    """
    spec = MseFixedPoint() if spec is None else spec
    se_field, mag_fx, sign = fixed_magnitude(x16_blocks, spec.frac_bits)
    errors = dialect_errors(mag_fx, spec)
    dialect = select_fixed_mse(errors)
    idx = quantize_index(mag_fx, dialect, unit=1 << spec.frac_bits)
    return se_field, dialect, (sign << 3) | idx, errors
