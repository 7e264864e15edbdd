"""W4A16 kernels on the GPU against the golden float64 GEMM (FP32-accumulation bound of
mactile.gpu.check), exact-arithmetic cases (atol=0), poisoned outputs, odd shapes, errors."""
import numpy as np
import pytest

from fp4_gpu_util import GPU, cupy, exact_case_weight, poisoned
from mactile.golden import NVFP4, RaZeR, RaZeRG128
from mactile.gpu.check import check_close, reference
from mactile.gpu.packing import pack_w4a16

pytestmark = GPU

FORMATS = [NVFP4(), RaZeR(), RaZeRG128(special_values=(5.0, 7.5))]
FIDS = ["nvfp4", "razer", "razer-g128"]


def _kernels():
    from mactile.gpu import gemm_tc, gemv_cc
    return {"tc": gemm_tc, "cc": gemv_cc}


def _weight(fmt, N, K, rng):
    w = rng.standard_normal((N, K)).astype(np.float32) * rng.uniform(0.05, 2.0, (N, 1)).astype(np.float32)
    w[:, ::29] *= 7.0
    return fmt.quantize(w)


@pytest.mark.parametrize("fmt", FORMATS, ids=FIDS)
@pytest.mark.parametrize("NK", [(203, 1152), (64, 4096)], ids=["N203-K1152", "N64-K4096"])
@pytest.mark.parametrize("kind,M", [("tc", 1), ("tc", 5), ("tc", 16), ("tc", 37), ("tc", 130),
                                    ("cc", 1), ("cc", 3), ("cc", 8)])
@pytest.mark.parametrize("out_dtype", [np.float16, np.float32], ids=["f16", "f32"])
def test_against_golden(fmt, NK, kind, M, out_dtype, rng):
    cp = cupy()
    N, K = NK
    q = _weight(fmt, N, K, rng)
    pw = pack_w4a16(q).to(cp)
    x = (rng.standard_normal((M, K)) * rng.uniform(0.2, 3.0, (M, 1))).astype(np.float16)
    y = poisoned((M, N), out_dtype)
    _kernels()[kind](cp.asarray(x), pw, out=y, sync=True)
    y_ref, abs_sum = reference(x, q.dequantize())
    check_close(y.get(), y_ref, abs_sum, K, what=f"{kind}/{fmt.name}")


@pytest.mark.parametrize("fmt", FORMATS, ids=FIDS)
@pytest.mark.parametrize("kind,M", [("tc", 3), ("tc", 70), ("cc", 1), ("cc", 6)])
def test_exact_arithmetic_every_partition(fmt, kind, M, rng):
    cp = cupy()
    N, K = 197, 1152
    q = exact_case_weight(fmt, N, K, rng)
    x1 = (rng.integers(-8, 9, (1, K)) * 0.125).astype(np.float16)
    x = np.concatenate([x1] + [(rng.integers(-8, 9, (1, K)) * 0.125).astype(np.float16) for _ in range(M - 1)])
    y_ref, _ = reference(x, q.dequantize())
    assert np.abs(y_ref).max() < 2 ** 15  # exactness premise
    pw = pack_w4a16(q).to(cp)
    outs = []
    for n_ctas in (1, 7, None):
        y = poisoned((M, N), np.float32)
        _kernels()[kind](cp.asarray(x), pw, out=y, n_ctas=n_ctas, sync=True)
        np.testing.assert_array_equal(y.get(), y_ref.astype(np.float32))
        outs.append(y.get())
    if kind == "cc" and fmt == "nvfp4":  # tile-aligned partitions, deeper pipelines
        from mactile.gpu.w4a4 import tile_aligned_ctas
        for slots, S in ((4, 4), (8, 5), (12, 10)):
            y = poisoned((M, N), np.float32)
            _kernels()[kind](cp.asarray(x), pw, out=y, n_ctas=tile_aligned_ctas(4, 3, slots), stages=S,
                             sync=True)
            np.testing.assert_array_equal(y.get(), y_ref.astype(np.float32))


def test_broken_lookup_table_is_caught(rng):
    """A deliberately wrong lookup decode (LUT byte of code 3 changed) breaks the stated
    bound: nvfp4 on the CUDA cores, razer on the tensor cores (nvfp4's tensor-core decode
    has no table: see the next test)."""
    import dataclasses
    cp = cupy()
    N, K, M = 64, 1024, 2
    from mactile.gpu import gemm_tc, gemv_cc
    for fmt, fn in ((NVFP4(), gemv_cc), (RaZeR(), gemm_tc)):
        q = _weight(fmt, N, K, rng)
        pw = pack_w4a16(q).to(cp)
        bad = list(pw.fmt.lut)
        bad[0] = (bad[0] & 0x00FFFFFF) | (((bad[0] >> 24) + 2) << 24)  # code 3: 1.5 -> 2.0
        pw.fmt = dataclasses.replace(pw.fmt, lut=tuple(bad))
        x = rng.standard_normal((M, K)).astype(np.float16)
        y_ref, abs_sum = reference(x, q.dequantize())
        y = fn(cp.asarray(x), pw, out_dtype=np.float32, sync=True)
        with pytest.raises(AssertionError, match="exceeds"):
            check_close(y.get(), y_ref, abs_sum, K)


def test_broken_bit_placement_is_caught(rng, monkeypatch):
    """nvfp4's tensor-core bit-placement decode with a deliberately wrong word layout (the
    mantissa and exponent-LSB bits of one slot swapped) breaks the stated bound."""
    from mactile.gpu import formats, gemm_tc, packing
    cp = cupy()
    N, K, M = 64, 1024, 2
    q = _weight(NVFP4(), N, K, rng)
    good = formats.bp_bit_positions()

    def broken():
        pos = good.copy()
        pos[0, [0, 1]] = pos[0, [1, 0]]
        return pos

    monkeypatch.setattr(packing, "bp_bit_positions", broken)
    pw = pack_w4a16(q).to(cp)
    x = rng.standard_normal((M, K)).astype(np.float16)
    y_ref, abs_sum = reference(x, q.dequantize())
    y = gemm_tc(cp.asarray(x), pw, out_dtype=np.float32, sync=True)
    with pytest.raises(AssertionError, match="exceeds"):
        check_close(y.get(), y_ref, abs_sum, K)


def test_deterministic(rng):
    cp = cupy()
    q = _weight(RaZeR(), 640, 2048, rng)
    pw = pack_w4a16(q).to(cp)
    x = cp.asarray(rng.standard_normal((4, 2048)).astype(np.float16))
    from mactile.gpu import gemm_tc, gemv_cc
    for fn in (gemm_tc, gemv_cc):
        a = fn(x, pw, out_dtype=np.float32, sync=True).get()
        b = fn(x, pw, out_dtype=np.float32, sync=True).get()
        np.testing.assert_array_equal(a, b)


def test_errors(rng):
    cp = cupy()
    from mactile.gpu import gemm_tc, gemv_cc
    q = _weight(NVFP4(), 64, 256, rng)
    pw_host = pack_w4a16(q)
    pw = pw_host.to(cp)
    x = cp.asarray(rng.standard_normal((9, 256)).astype(np.float16))
    with pytest.raises(ValueError, match="M <= 8"):
        gemv_cc(x, pw)
    with pytest.raises(TypeError, match="float16"):
        gemm_tc(x.astype(cp.float32), pw)
    with pytest.raises(ValueError, match=r"\[M, 256\]"):
        gemm_tc(x[:, :128], pw)
    with pytest.raises(TypeError, match="host"):
        gemm_tc(x, pw_host)
    with pytest.raises(TypeError, match="CuPy"):
        gemm_tc(x.get(), pw)
    with pytest.raises(ValueError, match="C-contiguous"):
        gemm_tc(cp.asarray(rng.standard_normal((2, 512)).astype(np.float16))[:, ::2], pw)
    with pytest.raises(ValueError, match="out_dtype"):
        gemm_tc(x, pw, out_dtype=np.int8)
    pw_frag = pack_w4a16(q, layouts=("frag",)).to(cp)
    with pytest.raises(ValueError, match="no 'rowmajor' layout"):
        gemv_cc(x[:2], pw_frag)
