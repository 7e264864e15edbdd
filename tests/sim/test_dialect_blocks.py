"""The stimulus generators of the dialect benches hit what their names promise (checked
with the golden stage functions; no simulator needed)."""
import numpy as np
import pytest

from mactile.golden.dialect import (N_DIALECTS, CountTie, preprocess, select_two_stage,
                                    stage1_pair, stage2_counts)
from mactile.golden.dialect_mse import quantize_fixed_mse
from mactile.sim.benches.dialect_blocks import (RANDOM_KINDS, corner_blocks,
                                                mse_corner_blocks, random_blocks)


@pytest.mark.parametrize("b", [16, 32, 64])
def test_corner_blocks_hit_their_targets(b):
    blocks = corner_blocks(b, np.random.default_rng(b))
    for name, x in blocks.items():
        assert x.dtype == np.float16 and x.shape[1] == b and np.isfinite(x).all(), name
        se, mt, _ = preprocess(x)
        pair = stage1_pair(mt.max(axis=1))
        ce, co = stage2_counts(mt, pair)
        dialect = select_two_stage(mt)
        if name.startswith("dialect-"):
            assert (dialect == int(name.split("-")[1])).all(), name
        elif name == "count-tie":
            assert (ce == co).all()
            assert (dialect % 2 == 0).all() and (select_two_stage(mt, CountTie.ODD) % 2 == 1).all()
        elif name == "count-tie+-1":
            assert (np.abs(ce - co) == 1).all()
        elif name == "max-7.75":
            assert (mt.max(axis=1) == 31).all() and (pair == 0).all()
        elif name == "max-rounding":
            assert set(mt.max(axis=1).tolist()) == set(range(16, 31))
        elif name == "subnormal":
            assert (se == 0).all() and (pair == 7).all()
        elif name == "zero":
            assert (mt == 0).all()
        elif name == "every-code" and b >= 32:
            assert set(mt[0].tolist()) == set(range(32))
    ties = blocks["count-tie"]
    pairs = stage1_pair(preprocess(ties)[1].max(axis=1))
    assert set(pairs.tolist()) == set(range(N_DIALECTS // 2))


def test_mse_corner_blocks_pick_their_dialect():
    blocks = mse_corner_blocks(32, np.random.default_rng(0))
    for d in range(N_DIALECTS):
        _, dialect, _, errors = quantize_fixed_mse(blocks[f"mse-dialect-{d}"])
        assert (dialect == d).all() and (errors[:, d] == 0).all()
    _, dialect, _, errors = quantize_fixed_mse(blocks["mse-tie"])
    assert ((errors == errors.min(axis=1, keepdims=True)).sum(axis=1) > 1).all()


def test_random_blocks_cover_every_kind_and_fp16_range():
    out = random_blocks(600, 32, np.random.default_rng(1))
    assert set(out) == set(RANDOM_KINDS)
    x = np.concatenate(list(out.values()))
    assert len(x) >= 600 and np.isfinite(x).all()
    se = preprocess(x)[0]
    assert se.min() == 0 and se.max() == 30
