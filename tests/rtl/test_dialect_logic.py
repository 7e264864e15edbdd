"""The derived range logic of the DialectFP4 quantizer (rtl/dialect/logic.py): pure Python,
checked against the golden tables and the paper's Figure 5c / Sec. 3.3 formulas."""
import itertools
from pathlib import Path

import numpy as np
import pytest

from mactile.golden.dialect import FORMATBOOK, beneficial_ranges, quantize_index
from mactile.rtl.dialect.logic import (Cube, eval_sop, format_sop, minimize, quantize_ranges,
                                       range_cubes, stage2_logic, stage2_table_markdown)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rtl-dialect.md"


def _bit(k, i):
    return (k >> i) & 1


def paper_d4(k):
    """Figure 5c: [4] & ![3] & ((![2] & [1]) | ([2] & !(&[1:0])))."""
    return _bit(k, 4) & (1 - _bit(k, 3)) & (
        ((1 - _bit(k, 2)) & _bit(k, 1)) | (_bit(k, 2) & (1 - (_bit(k, 1) & _bit(k, 0)))))


def paper_d5(k):
    """Figure 5c: (![4] & (&[3:1])) | ([4] & !(|[3:1]))."""
    b3, b2, b1 = _bit(k, 3), _bit(k, 2), _bit(k, 1)
    return ((1 - _bit(k, 4)) & b3 & b2 & b1) | (_bit(k, 4) & (1 - (b3 | b2 | b1)))


def test_stage2_logic_is_exactly_each_beneficial_range():
    rng = beneficial_ranges()
    for d, (lo, hi, cubes) in enumerate(stage2_logic()):
        assert (lo, hi) == tuple(rng[d])
        for k in range(32):
            assert eval_sop(cubes, k) == (lo <= k < hi), (d, k)


def test_derived_logic_equals_the_papers_figure_5c():
    logic = stage2_logic()
    for k in range(32):
        assert eval_sop(logic[4][2], k) == bool(paper_d4(k)), k
        assert eval_sop(logic[5][2], k) == bool(paper_d5(k)), k
    # d5's minimum form is the paper's own two product terms.
    assert format_sop(logic[5][2]) == "(![4] & [3] & [2] & [1]) | ([4] & ![3] & ![2] & ![1])"


def test_sec_3_3_example_range_of_value_10():
    """Value 10 (half units) of the dialect 0.5*[13,10,6,4,3,2,1,0] (dialect 4) is
    [8.0, 11.5) = 5'b10000..5'b10110, checked by k[4] & !k[3] & !(&k[2:0])."""
    lo, hi = quantize_ranges(4)[6]
    assert FORMATBOOK[4][6] == 10 and (lo, hi) == (16, 23)
    cubes = range_cubes(lo, hi)
    for k in range(32):
        paper = _bit(k, 4) & (1 - _bit(k, 3)) & (1 - (_bit(k, 2) & _bit(k, 1) & _bit(k, 0)))
        assert eval_sop(cubes, k) == bool(paper), k
    assert eval_sop(cubes, 0b10001)  # the paper's 8.5 -> 10


def test_quantize_ranges_reproduce_golden_quantize_index():
    k = np.arange(32)
    for d in range(16):
        ranges = quantize_ranges(d)
        want = quantize_index(k[None, :], np.array([d]))[0]
        for m in range(32):
            hits = [i for i, r in enumerate(ranges) if eval_sop(range_cubes(*r), m)]
            assert hits == [want[m]], (d, m, hits)


def _all_cubes(nbits):
    for mask in range(1 << nbits):
        for value in range(1 << nbits):
            if value & ~mask == 0:
                yield Cube(mask, value)


@pytest.mark.parametrize("seed", range(40))
def test_minimize_is_a_minimum_cover(seed):
    """On 3-bit functions: a correct cover, with no cover of fewer product terms."""
    rng = np.random.default_rng(seed)
    ones = frozenset(int(i) for i in np.nonzero(rng.integers(0, 2, 8))[0])
    got = minimize(ones, 3)
    assert {m for m in range(8) if eval_sop(got, m)} == ones
    implicants = [c for c in _all_cubes(3) if all(m in ones for m in range(8) if c.covers(m))]
    for k in range(len(got)):
        for combo in itertools.combinations(implicants, k):
            assert {m for m in range(8) if eval_sop(combo, m)} != ones


def test_minimize_constants_and_bad_minterms():
    assert minimize(frozenset(), 5) == ()
    assert minimize(frozenset(range(32)), 5) == (Cube(0, 0),)
    assert format_sop(()) == "0"
    with pytest.raises(ValueError, match="minterms must lie in 0..31"):
        minimize(frozenset({32}), 5)


def test_docs_table_is_current():
    assert stage2_table_markdown() in DOCS.read_text()
