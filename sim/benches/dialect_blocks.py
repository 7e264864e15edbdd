"""FP16 stimulus blocks for the DialectFP4 quantizer benches: named corner cases and
random distributions (docs/rtl-dialect.md, "Verification").

Blocks are built in ``Mag_trunc`` terms where a case is about the selection logic: under
the shared exponent field 15 (scale ``2**-2``) an element with ``Mag_trunc`` m is
``(m + f) / 16`` with ``f`` in [0, 1) on a 1/64 grid, exact in FP16. Generators that aim
at a dialect or a count tie are checked against the golden stage functions by the tests.
"""
from __future__ import annotations

import numpy as np

from mactile.golden.elements import FP16
from mactile.golden.dialect import (FORMATBOOK, N_DIALECTS, beneficial_ranges,
                                    stage1_pair)

__all__ = ["from_mag_trunc", "dialect_block", "tie_block", "corner_blocks",
           "mse_corner_blocks", "random_blocks", "RANDOM_KINDS"]


def from_mag_trunc(codes, rng, *, signs=None) -> np.ndarray:
    """FP16 values whose Mag_trunc (under shared exponent field 15) are ``codes``, each with
    a random exact fraction below the quarter step. A code >= 16 must be present for the
    block's exponent field to be 15."""
    codes = np.asarray(codes, dtype=np.int64)
    frac = rng.integers(0, 64, codes.shape)
    x = ((codes * 64 + frac) / 1024.0).astype(np.float16)   # exact in FP16
    if signs is None:
        signs = rng.integers(0, 2, codes.shape)
    return np.where(signs == 1, -x, x).astype(np.float16)


def _fill(rng, n, lo_excl: list[tuple[int, int]], top: int) -> np.ndarray:
    """n codes in [0, top] outside every range of lo_excl."""
    pool = [c for c in range(top + 1) if not any(a <= c < b for a, b in lo_excl)]
    return rng.choice(pool, n)


def dialect_block(d: int, b: int, rng, *, n_in: int | None = None) -> np.ndarray:
    """A block the two-stage procedure maps to dialect ``d``: the maximum picks d's pair,
    more elements in d's beneficial range than in its mate's."""
    k, ranges = d // 2, beneficial_ranges()
    top = rng.choice([m for m in range(32) if int(stage1_pair(m)) == k and m >= 16])
    mine, mate = tuple(ranges[d]), tuple(ranges[d ^ 1])
    n_in = n_in if n_in is not None else int(rng.integers(2, b // 2))
    n_mate = int(rng.integers(0, n_in))
    codes = np.concatenate([[top], rng.integers(*mine, n_in), rng.integers(*mate, n_mate),
                            _fill(rng, b - 1 - n_in - n_mate, [mine, mate], top)])
    return from_mag_trunc(rng.permutation(codes), rng)


def tie_block(k: int, b: int, rng, c_even: int, c_odd: int) -> np.ndarray:
    """A block of pair ``k`` with ``c_even`` / ``c_odd`` elements in the two ranges."""
    ranges = beneficial_ranges()
    top = rng.choice([m for m in range(32) if int(stage1_pair(m)) == k and m >= 16])
    ev, od = tuple(ranges[2 * k]), tuple(ranges[2 * k + 1])
    codes = np.concatenate([[top], rng.integers(*ev, c_even), rng.integers(*od, c_odd),
                            _fill(rng, b - 1 - c_even - c_odd, [ev, od], top)])
    return from_mag_trunc(rng.permutation(codes), rng)


def _bits(pattern) -> np.ndarray:
    return np.asarray(pattern, dtype=np.uint16).view(np.float16)


def corner_blocks(b: int, rng) -> dict[str, np.ndarray]:
    """Named corner cases, each ``(n, b)`` float16."""
    out: dict[str, list[np.ndarray]] = {}

    def add(name, block):
        out.setdefault(name, []).append(np.asarray(block, dtype=np.float16))

    add("zero", np.zeros(b))
    add("zero", _bits(np.full(b, 0x8000)))                          # all -0
    add("zero", _bits(rng.choice([0, 0x8000], b)))
    for _ in range(6):                                               # FP16 subnormals only
        add("subnormal", _bits(rng.integers(0, 1 << FP16.man_bits, b)
                               | (rng.integers(0, 2, b) << (FP16.bits - 1))))
    add("subnormal", _bits(np.r_[1, np.zeros(b - 1, np.int64)]))       # the smallest one
    add("subnormal", _bits(np.full(b, FP16.man_mask)))              # the largest one
    for _ in range(4):                                               # exponent fields 0 and 1
        add("subnormal+min-normal", _bits(rng.integers(0, 2 << FP16.man_bits, b)))
    for m in range(16, 32):                                          # every rounding of the max
        for _ in range(2):
            codes = np.r_[m, rng.integers(0, m + 1, b - 1)]
            add("max-7.75" if m == 31 else "max-rounding", from_mag_trunc(codes, rng))
    for e in (1, 15, 30):                                            # 7.75 at several exponents
        pat = np.r_[(e << FP16.man_bits) | 0x3C0 | rng.integers(0, 0x40),  # 1.1111 x 2**e
                    rng.integers(0, e << FP16.man_bits, b - 1)]
        add("max-7.75", _bits(pat))
    for d in range(N_DIALECTS):                                      # every dialect
        for _ in range(3):
            add(f"dialect-{d}", dialect_block(d, b, rng))
    for k in range(N_DIALECTS // 2):                                 # every count tie and +-1
        for c in (0, 1, 3, (b - 1) // 2):
            add("count-tie", tie_block(k, b, rng, c, c))
            if c:
                add("count-tie+-1", tie_block(k, b, rng, c, c - 1))
                add("count-tie+-1", tie_block(k, b, rng, c - 1, c))
    for big in (65504.0, -65504.0, 1000.0, -3.0, 2.0 ** -14):        # a single large outlier
        for rest in (1e-2, 1e-5, 0.0):
            x = rng.standard_normal(b) * rest
            x[rng.integers(b)] = big
            add("outlier", x)
    add("fp16-max", np.full(b, 65504.0))
    add("fp16-max", rng.choice([65504.0, -65504.0, 32768.0, 0.0], b))
    codes = np.r_[31, np.arange(32), rng.integers(0, 32, max(0, b - 33))][:b]
    add("every-code", from_mag_trunc(codes, rng))                    # every Mag_trunc value
    return {k: np.stack(v) for k, v in out.items()}


#: Random block kinds: four distributions with a per-block scale, log-uniform magnitudes
#: per element, and uniformly random finite FP16 bit patterns.
RANDOM_KINDS = ("normal", "laplace", "uniform", "student-t3", "log-uniform", "fp16-bits")


def mse_corner_blocks(b: int, rng) -> dict[str, np.ndarray]:
    """Extra cases for the MSE selector: blocks made of one dialect's own values (zero
    error for that dialect only) and blocks on which several dialects tie."""
    out: dict[str, list[np.ndarray]] = {}
    for d in range(N_DIALECTS):
        for _ in range(2):
            q = np.r_[FORMATBOOK[d], rng.choice(FORMATBOOK[d], b - FORMATBOOK.shape[1])]
            x = (rng.permutation(q) / 8.0).astype(np.float16)      # 0.5 q under scale 2**-2
            out.setdefault(f"mse-dialect-{d}", []).append(
                np.where(rng.integers(0, 2, b) == 1, -x, x).astype(np.float16))
    shared = FORMATBOOK[:, :5][0]                                  # values all dialects have
    for top in (8, 9, 10):                                          # 4.0, 4.5, 5.0 on top
        q = np.r_[top, rng.choice(shared, b - 1)]
        out.setdefault("mse-tie", []).append((rng.permutation(q) / 8.0).astype(np.float16))
    out["mse-tie"].append(np.zeros(b, np.float16))
    out["mse-tie"].append(np.full(b, np.float16(FP16.min_value)))
    return {k: np.stack(v) for k, v in out.items()}


def random_blocks(n: int, b: int, rng) -> dict[str, np.ndarray]:
    """``n`` random blocks split over several distributions, each block with its own scale
    (log-uniform over FP16's range)."""
    per = -(-n // len(RANDOM_KINDS))
    out = {}
    for kind in RANDOM_KINDS:
        if kind == "fp16-bits":
            pat = (rng.integers(0, FP16.exp_mask, (per, b))
                   | (rng.integers(0, 2, (per, b)) << (FP16.bits - 1)))
            out[kind] = _bits(pat)
            continue
        if kind == "log-uniform":
            x = np.exp2(rng.uniform(-24, 15.9, (per, b))) * rng.choice([-1, 1], (per, b))
        else:
            base = {"normal": lambda: rng.standard_normal((per, b)),
                    "laplace": lambda: rng.laplace(size=(per, b)),
                    "uniform": lambda: rng.uniform(-1, 1, (per, b)),
                    "student-t3": lambda: rng.standard_t(3, (per, b))}[kind]()
            x = base * np.exp2(rng.uniform(-20, 12, (per, 1)))
        with np.errstate(over="ignore"):
            x16 = x.astype(np.float16)
        out[kind] = np.where(np.isfinite(x16), x16, np.float16(65504.0)).astype(np.float16)
    return out
