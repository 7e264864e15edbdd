"""Range checks as two-level logic, derived from the golden DialectFP4 tables.

BlockDialect (001_eabebf91b09c2719.txt Sec. 3.2, Figure 5c; Sec. 3.3) turns every range
check on the 5-bit ``Mag_trunc`` into "simple logical operations" found by enumerating
the 5-bit cases, e.g. dialect 4's beneficial range [4.5, 5.75) is
``[4] & ![3] & ((![2] & [1]) | ([2] & !(&[1:0])))``. This module does that enumeration
programmatically: the minterms of a half-open range ``[lo, hi)`` are minimised
(Quine-McCluskey, then an exact minimum cover) to a sum of products of the bits. Nothing
here is written per dialect; the ranges come from :func:`~mactile.golden.dialect.beneficial_ranges`
and :data:`~mactile.golden.dialect.FORMATBOOK`.

Pure Python (no Amaranth), so the derivation is testable and printable on its own.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from mactile.golden.dialect import FORMATBOOK, N_DIALECTS, beneficial_ranges

__all__ = ["Cube", "minimize", "range_cubes", "format_sop", "eval_sop",
           "stage2_logic", "quantize_ranges", "stage2_table_markdown", "MAG_BITS"]

#: Width of ``Mag_trunc`` (3 integer + 2 fraction bits): the quarter-unit grid.
MAG_BITS = 5


@dataclass(frozen=True, order=True)
class Cube:
    """A product term: bit ``i`` must equal ``value >> i & 1`` wherever ``mask >> i & 1``."""

    mask: int
    value: int

    def covers(self, m: int) -> bool:
        return (m & self.mask) == self.value

    def literals(self) -> int:
        return bin(self.mask).count("1")


def _primes(minterms: frozenset[int], nbits: int) -> list[Cube]:
    """Prime implicants by Quine-McCluskey merging."""
    full = (1 << nbits) - 1
    current = {Cube(full, m) for m in minterms}
    primes: set[Cube] = set()
    while current:
        merged: set[Cube] = set()
        used: set[Cube] = set()
        for a, b in itertools.combinations(sorted(current), 2):
            if a.mask != b.mask:
                continue
            diff = a.value ^ b.value
            if diff and not diff & (diff - 1):  # differ in exactly one cared-for bit
                merged.add(Cube(a.mask & ~diff, a.value & ~diff))
                used.update((a, b))
        primes |= current - used
        current = merged
    return sorted(primes)


@functools.lru_cache(maxsize=None)
def minimize(minterms: frozenset[int], nbits: int = MAG_BITS) -> tuple[Cube, ...]:
    """A minimum sum of products of the boolean function true exactly on ``minterms``.

    Fewest product terms first, then fewest literals; among equals the first in a fixed
    order, so the result is deterministic. An empty set gives no cubes (constant 0), the
    full set one cube with mask 0 (constant 1).
    """
    if not minterms:
        return ()
    if any(not 0 <= m < (1 << nbits) for m in minterms):
        raise ValueError(f"minterms must lie in 0..{(1 << nbits) - 1}")
    primes = _primes(frozenset(minterms), nbits)
    cover_of = [frozenset(m for m in minterms if p.covers(m)) for p in primes]
    for k in range(1, len(primes) + 1):
        best = None
        for combo in itertools.combinations(range(len(primes)), k):
            if frozenset().union(*(cover_of[i] for i in combo)) == minterms:
                lits = sum(primes[i].literals() for i in combo)
                if best is None or lits < best[0]:
                    best = (lits, combo)
        if best is not None:
            return tuple(primes[i] for i in best[1])
    raise AssertionError("unreachable: the primes cover every minterm")


def range_cubes(lo: int, hi: int, nbits: int = MAG_BITS) -> tuple[Cube, ...]:
    """Minimum sum of products for ``lo <= m < hi`` on an ``nbits`` unsigned ``m``."""
    top = 1 << nbits
    lo, hi = max(int(lo), 0), min(int(hi), top)
    return minimize(frozenset(range(lo, hi)), nbits)


def eval_sop(cubes, m: int) -> bool:
    """Value of the sum of products at ``m``."""
    return any(c.covers(m) for c in cubes)


def format_sop(cubes, nbits: int = MAG_BITS) -> str:
    """The sum of products in the paper's notation: ``[4] & ![3] & [1] | ...``."""
    if not cubes:
        return "0"
    terms = []
    for c in cubes:
        lits = [("" if c.value >> i & 1 else "!") + f"[{i}]"
                for i in reversed(range(nbits)) if c.mask >> i & 1]
        terms.append(" & ".join(lits) if lits else "1")
    return " | ".join(f"({t})" if len(cubes) > 1 and " & " in t else t for t in terms)


def stage2_logic() -> list[tuple[int, int, tuple[Cube, ...]]]:
    """Per dialect: ``(lo, hi, cubes)`` of its beneficial range (quarter units of
    ``Mag_trunc``) and the logic that detects it (Figure 5c, for all 16 dialects)."""
    rng = beneficial_ranges()
    return [(int(lo), int(hi), range_cubes(lo, hi)) for lo, hi in rng]


def quantize_ranges(dialect: int) -> list[tuple[int, int]]:
    """Half-open ``Mag_trunc`` ranges ``[lo, hi)`` (quarter units) that map to each index
    0..7 of ``dialect``: nearest value, ties to the larger, the top range open to 32
    (the clamp to the largest value). Sec. 3.3's example: value 10 of dialect 4 is
    ``[8.0, 11.5)`` half units, i.e. ``[16, 23)`` quarter units."""
    t = FORMATBOOK[dialect]
    if not 0 <= dialect < N_DIALECTS:
        raise ValueError(f"dialect must be 0..{N_DIALECTS - 1}, got {dialect}")
    # Midpoint of half-unit values a, b is (a + b) / 2 half units = a + b quarter units.
    mids = [int(t[i] + t[i + 1]) for i in range(7)]
    bounds = [0] + mids + [1 << MAG_BITS]
    return [(bounds[i], bounds[i + 1]) for i in range(8)]


def stage2_table_markdown() -> str:
    """The derived Figure 5c logic of every dialect, as a Markdown table (docs page)."""
    rows = ["| dialect | beneficial range | Mag_trunc codes | derived logic |",
            "| --- | --- | --- | --- |"]
    for d, (lo, hi, cubes) in enumerate(stage2_logic()):
        rows.append(f"| {d} | [{lo / 4:g}, {hi / 4:g}) | {lo:05b}..{hi - 1:05b} | "
                    f"`{format_sop(cubes)}` |")
    return "\n".join(rows)

