"""NestedFP kernel layout constants, checked on the CPU."""
import re
from pathlib import Path

import numpy as np
import pytest

from mactile.gpu.nestedfp.codegen import wgmma_source
from mactile.gpu.nestedfp.kernels import KPERM, choose_config, unpermute_k


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


def test_wgmma_source_shapes():
    src = wgmma_source((8, 256))
    assert "m64n8k16.f32.f16.f16" in src and "m64n256k32.f32.e4m3.e4m3" in src
    assert "m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0" in src  # ss_f16
    assert src.count('"+f"(d[') == 3 * (4 + 128)


def test_config_choice():
    c = choose_config(1, 4096, 4096, "fp8")
    assert c.bn == 8 and c.wg == 1 and c.split > 1
    c = choose_config(2048, 4096, 4096, "fp16")
    assert c.bn == 256 and c.wg == 2 and c.split == 1 and c.smem_a("fp16")
    assert c.smem("fp16") <= 227 * 1024
    # FP16, 8 < M <= 64: the register-fed wgmma kernel (measured faster than smem-A/streaming)
    for m in (9, 37, 64):
        c = choose_config(m, 8192, 8192, "fp16")
        assert c.a_src == "regs" and not c.smem_a("fp16") and c.stages == 6
    assert choose_config(64, 8192, 8192, "fp8").a_src == "auto"
    c = choose_config(64, 28672, 4096, "fp16")  # 448 tiles, no K split: shared-memory A
    assert c.split == 1 and c.smem_a("fp16")
    # FP16, 128 < M <= 256: the 256-token smem-A tile, 2-way K split below one wave of tiles
    c = choose_config(256, 8192, 8192, "fp16")
    assert (c.wg, c.bn, c.stages, c.split) == (2, 256, 4, 2) and c.smem_a("fp16")
    assert choose_config(256, 28672, 4096, "fp16").split == 1  # 224 tiles fill the SMs
    assert choose_config(256, 8192, 8192, "fp8").bn == 128
    assert choose_config(100, 8192, 8192, "fp16").bn == 128


def test_stream_config():
    from mactile.gpu.nestedfp.kernels import StreamConfig, choose_stream
    assert choose_stream(65, 4096, 4096, "fp16") is None
    assert choose_stream(8, 4096, 4096, "fp16").nt == 1
    c = choose_stream(1, 4096, 4096, "fp8")
    assert c.nt == 1 and c.fuse
    assert choose_stream(8, 4096, 4096, "fp8").fuse
    assert choose_stream(9, 4096, 4096, "fp8") is None
    assert choose_stream(1, 28672, 4096, "fp8") is None  # the table's wgmma choice
    assert choose_stream(64, 6144, 4096, "fp16") is None  # register-fed wgmma kernel
    assert choose_stream(16, 4096, 14336, "fp16") is None
    assert choose_stream(8, 4096, 4096, "fp16") == StreamConfig(1, 1, 4, 2, 2, sps=8)
    c = choose_stream(3, 1000, 1000, "fp16")  # not in the table
    assert c.sps == 16
    sps = c.spans(4096, 4096 // c.block_rows)
    assert 1 <= sps <= 64 and c.smem(sps) <= 227 * 1024
    for nt in range(1, 9):  # shared memory of every automatic span count fits two blocks per SM
        c = StreamConfig(nt)
        assert c.smem(c.spans(14336, 4096 // c.block_rows)) <= 113 * 1024
    with pytest.raises(ValueError, match="must divide"):
        StreamConfig(nt=1, rt=3, wr=1)
