"""NestedFP kernel layout constants, checked on the CPU."""
import re
from pathlib import Path

import numpy as np
import pytest

from mactile.gpu.nestedfp.kernels import KPERM, unpermute_k


def test_kperm_is_the_mma_fragment_order():
    """Thread t's four bytes 4t..4t+3 are the f16 A-fragment k = 2t, 2t+1, 2t+8, 2t+9."""
    for t in range(4):
        assert list(KPERM[4 * t:4 * t + 4]) == [2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9]
    assert sorted(KPERM) == list(range(16))
    src = (Path(__file__).parents[2] / "gpu/nestedfp/nestedfp.cu").read_text()
    expr = re.search(r"int kperm\(int p\) \{ return (.*?); \}", src).group(1)
    assert [eval(expr.replace("p", str(p))) for p in range(16)] == list(KPERM)


def test_unpermute(rng):
    a = rng.integers(0, 256, size=(3, 48), dtype=np.uint8)
    phys = a.reshape(3, 3, 16)[:, :, KPERM].reshape(3, 48)
    assert np.array_equal(unpermute_k(phys), a)


def test_stream_config():
    from mactile.gpu.nestedfp.kernels import StreamConfig
    c = StreamConfig(1, 1, 4, 2, 2, sps=16)
    sps = c.spans(4096, 4096 // c.block_rows)
    assert sps == 16 and c.smem(sps) <= 227 * 1024
    for nt in range(1, 9):  # shared memory of every automatic span count fits two blocks per SM
        c = StreamConfig(nt)
        assert c.smem(c.spans(14336, 4096 // c.block_rows)) <= 113 * 1024
    with pytest.raises(ValueError, match="must divide"):
        StreamConfig(nt=1, rt=3, wr=1)
