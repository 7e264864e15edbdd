"""NestedFP kernels on the GPU against the golden split/merge and GEMM references (gpu)."""
import numpy as np
import pytest

from mactile.golden.block import InputError
from mactile.golden.fp8token import nestedfp8_matmul_reference, per_token_e4m3
from mactile.golden.nestedfp import nestedfp_merge, nestedfp_split

pytestmark = pytest.mark.gpu


def _all_patterns():
    """Every FP16 word with the exponent MSB clear (|w| < 2): 32768 values as (128, 256)."""
    a = np.arange(1 << 16, dtype=np.uint32)
    a = a[(a & 0x4000) == 0].astype(np.uint16)
    return a.reshape(128, 256)


def test_split_bit_exact_exhaustive(cp):
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    w = _all_patterns().view(np.float16)
    layer = NestedFPLinear(cp.asarray(w), threshold=1.9)  # eligibility is checked below
    assert layer.eligible is False  # |w| up to 1.999 > 1.9
    from mactile.gpu.nestedfp.kernels import split_planes, unpermute_k
    up, lo = split_planes(cp.asarray(w))
    gu, gl = nestedfp_split(w)
    assert np.array_equal(unpermute_k(up.get())[:128], gu)  # rows padded to ROW_PAD with zeros
    assert np.array_equal(unpermute_k(lo.get())[:128], gl)
    assert not up.get()[128:].any() and not lo.get()[128:].any()


# GEMM engine configurations (bn, wgs, sched, n_ctas[, early]): deepest pipeline; None = the
# default choice (the engine with the tuning table); early: the weight copies before the PDL
# wait set against the format's rule (tuning candidates)
CFGS = [None, (8, 4, 1, 0), (16, 2, 1, 3), (16, 2, 1, 3, 0), (64, 2, 0, 0), (128, 2, 0, 5), (128, 2, 0, 5, 12),
        (256, 2, 0, 0)]


def _cfg(c, mode="fp16"):
    from mactile.gpu.engine import EngineConfig, max_stages
    if c is None:
        return None
    fmt = "nestedfp16" if mode == "fp16" else "nestedfp8"
    bn, wgs, sched, n_ctas, *early = c
    return EngineConfig(bn, max_stages(fmt, bn, wgs), wgs, n_ctas, sched, *early)


# streaming kernel shapes (nt, rt, wr, wk, ku[, sps]) (in STREAM_TEST)
SCFGS = [(1, 1, 4, 2, 2), (1, 2, 2, 3, 1, 3), (5, 1, 2, 2, 3), (8, 1, 4, 2, 2, 2), (2, 1, 8, 1, 4)]


def _scfg(c, fuse=True):
    from mactile.gpu.nestedfp.kernels import StreamConfig
    return StreamConfig(*c[:5], sps=c[5] if len(c) > 5 else None, fuse=fuse)


@pytest.mark.parametrize("c", CFGS, ids=str)
def test_fp16_reconstruction_exact(cp, c):
    """X = identity: Y = W^T exactly, for every eligible FP16 pattern (|w| <= 1.75)."""
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    w = _all_patterns().view(np.float16).copy()
    w[np.abs(w.astype(np.float32)) > 1.75] = np.float16(0.5)
    layer = NestedFPLinear(cp.asarray(w))
    assert layer.eligible
    eye = cp.eye(256, dtype=cp.float16)
    y = cp.full((256, 128), np.nan, dtype=cp.float16)
    layer(eye, mode="fp16", config=_cfg(c), y=y)
    got = y.get().T
    assert np.array_equal(got.astype(np.float32), w.astype(np.float32))  # -0 reads as +0
    # and the golden merge of the planes gives the same words
    u, lo = layer.planes()
    assert np.array_equal(nestedfp_merge(u, lo), w.view(np.uint16))


@pytest.mark.parametrize("c", SCFGS, ids=str)
def test_stream_fp16_reconstruction_exact(cp, c):
    """Streaming kernel, X = identity rows (8 nt at a time): Y = W^T exactly."""
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    w = _all_patterns().view(np.float16).copy()
    w[np.abs(w.astype(np.float32)) > 1.75] = np.float16(0.5)
    layer = NestedFPLinear(cp.asarray(w))
    eye = cp.eye(256, dtype=cp.float16)
    step = 8 * c[0]
    got = np.empty((256, 128), np.float16)
    for r0 in range(0, 256, step):
        rows = min(step, 256 - r0)
        y = cp.full((rows, 128), np.nan, dtype=cp.float16)
        layer(eye[r0:r0 + rows], mode="fp16", config=_scfg(c), y=y)
        got[r0:r0 + rows] = y.get()
    assert np.array_equal(got.T.astype(np.float32), w.astype(np.float32))


def _data(rng, m, n, k):
    x = rng.standard_normal((m, k)).astype(np.float16)
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16)
    w[0, :3] = [1.75, -1.75, 6e-8]
    return x, w


@pytest.mark.parametrize("m,n,k", [(1, 128, 256), (37, 200, 272), (64, 384, 1024), (200, 136, 512),
                                   (300, 136, 512)])
@pytest.mark.parametrize("c", [None, (16, 2, 1, 3), (128, 2, 0, 2)], ids=str)
def test_fp16_mode_matches_fp16_gemm(cp, rng, m, n, k, c):
    """|y - x w^T| <= 2 K 2^-24 sum|x||w| + 2^-11 |ref| (FP32 accumulation in any order,
    FP16 output rounding); and the same bound against cuBLAS on the original weights."""
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    x, w = _data(rng, m, n, k)
    layer = NestedFPLinear(cp.asarray(w))
    y = cp.full((m, n), np.nan, dtype=cp.float16)
    layer(cp.asarray(x), mode="fp16", config=_cfg(c), y=y)
    got = y.get().astype(np.float64)
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    ref = xd @ wd.T
    mag = np.abs(xd) @ np.abs(wd).T
    bound = 2 * k * 2.0**-24 * mag + 2.0**-11 * np.abs(ref) + 2.0**-24
    assert (np.abs(got - ref) <= bound).all()
    cub = (cp.asarray(x) @ cp.asarray(w).T).get().astype(np.float64)
    assert (np.abs(got - cub) <= 2 * bound).all()


@pytest.mark.parametrize("m,n,k", [(1, 128, 256), (37, 200, 272), (64, 384, 1024), (300, 136, 512)])
@pytest.mark.parametrize("c", [None, (8, 4, 1, 2), (8, 2, 1, 2, 0), (8, 1, 1, 0), (64, 1, 0, 3), (128, 2, 0, 1),
                               (128, 2, 0, 1, 12), (256, 2, 0, 3), (256, 2, 1, 0)], ids=str)
def test_fp8_mode_matches_golden(cp, rng, m, n, k, c):
    """E4M3 activations bit-exact with golden; y within 2^-9 sum|x_k u_k| s 2^-8 of the
    golden FP8 GEMM (Hopper's FP8 wgmma accumulates with fewer bits than FP32) plus FP16
    output rounding; relative Frobenius error < 2^-10."""
    from mactile.gpu.nestedfp.kernels import NestedFPLinear, quantize_e4m3, unpermute_k
    x, w = _data(rng, m, n, k)
    layer = NestedFPLinear(cp.asarray(w))
    xq, sc = quantize_e4m3(cp.asarray(x), layer.kp)
    codes, scales = per_token_e4m3(x)
    assert np.array_equal(unpermute_k(xq.get())[:, :k], codes)
    assert not unpermute_k(xq.get())[:, k:].any()
    assert np.array_equal(sc.get(), scales)
    y = cp.full((m, n), np.nan, dtype=cp.float16)
    layer(cp.asarray(x), mode="fp8", config=_cfg(c, "fp8"), y=y)
    got = y.get().astype(np.float64)
    upper, _ = nestedfp_split(w)
    ref = nestedfp8_matmul_reference(codes, scales, upper)
    from mactile.golden.elements import FP8_E4M3
    mag = np.ldexp(np.abs(FP8_E4M3.values[codes]) @ np.abs(FP8_E4M3.values[upper]).T
                   * scales[:, None].astype(np.float64), -8)
    err = np.abs(got - ref)
    print(f"fp8 max err / mag = {np.max(err / np.maximum(mag, 1e-30)):.3g}")
    assert (err <= 2.0**-9 * mag + 2.0**-11 * np.abs(ref) + 2.0**-24).all()
    assert np.linalg.norm(got - ref) <= 2.0**-10 * np.linalg.norm(ref)


@pytest.mark.parametrize("m,k", [(1, 16), (3, 272), (16, 8192), (5, 25600), (130, 4096), (3, 65552)])
def test_quantize_e4m3_bit_exact(cp, rng, m, k):
    """The per-token quantizer equals golden ``per_token_e4m3`` bit for bit at every width it
    meets: one chunk, a partial last round of chunks, the benchmark's widths, many rows, and a
    row wider than the registers hold (> 65536: its last chunk is read twice); with a zero
    row (scale 0), a row of E4M3 ties (x / s exactly between two codes) and rows of 0.01 to
    300 in magnitude; the K padding is zero; a row view at an odd offset is copied to a
    16-byte boundary first. (Shown once on the H100: with two codes of a chunk swapped in the
    kernel's K order, every case fails.)"""
    from mactile.gpu.nestedfp.kernels import K_PAD, quantize_e4m3, unpermute_k
    x = (rng.standard_normal((m, k)) * rng.choice([0.01, 1.0, 300.0], size=(m, 1))).astype(np.float16)
    x[0, : min(k, 8)] = 0
    if m > 1:
        x[1] = 0  # scale 0: codes of x itself (all zero)
    if m > 2:  # amax 448: s = 1, and x = 1.0625 lies midway between E4M3 codes 1.0 and 1.125
        x[2, :] = np.float16(1.0625)
        x[2, 0] = np.float16(448.0)
    kp = -(-k // K_PAD) * K_PAD
    xq, sc = quantize_e4m3(cp.asarray(x), kp)
    codes, scales = per_token_e4m3(x)
    got = unpermute_k(xq.get())
    assert np.array_equal(got[:, :k], codes)
    assert not got[:, k:].any()
    assert np.array_equal(sc.get(), scales)
    # a view starting 2 bytes into a buffer (not 16-byte aligned)
    buf = cp.zeros(m * k + 1, dtype=cp.float16)
    buf[1:] = cp.asarray(x).ravel()
    xq2, sc2 = quantize_e4m3(buf[1:].reshape(m, k), kp)
    assert np.array_equal(xq2.get(), xq.get()) and np.array_equal(sc2.get(), sc.get())


@pytest.mark.parametrize("k", [256, 70000])
def test_quantize_e4m3_flags_non_finite(cp, rng, k):
    from mactile.gpu.nestedfp.kernels import K_PAD, quantize_e4m3
    x = rng.standard_normal((3, k)).astype(np.float16)
    x[1, k - 5] = np.inf  # in the re-read part of a wide row
    with pytest.raises(InputError, match="NaN or Inf"):
        quantize_e4m3(cp.asarray(x), -(-k // K_PAD) * K_PAD)
    x[1, k - 5] = 1.0
    quantize_e4m3(cp.asarray(x), -(-k // K_PAD) * K_PAD)  # finite again: no error
    with pytest.raises(InputError, match="multiple of 16"):
        quantize_e4m3(cp.asarray(x[:, :24]), K_PAD)


@pytest.mark.parametrize("sched", [0, 1])
def test_fp8_two_promotion_passes_equal_one(cp, rng, sched):
    """A 256-token tile promotes each stage's partial sums in two passes of 128 tokens: every
    output gets the same FP32 additions as in a 128-token tile, so the bits are equal (ragged
    M over two token tiles, K over several 128-wide stages)."""
    from mactile.gpu.engine import EngineConfig, max_stages
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    x, w = _data(rng, 300, 200, 1152)
    layer = NestedFPLinear(cp.asarray(w))
    got = {}
    for bn in (128, 256):
        cfg = EngineConfig(bn, max_stages("nestedfp8", bn, 2), 2, 0, sched if bn == 256 else 0)
        got[bn] = layer(cp.asarray(x), mode="fp8", config=cfg).get().view(np.uint16)
    assert np.array_equal(got[256], got[128])


@pytest.mark.parametrize("m,n,k", [(1, 128, 256), (5, 200, 272), (37, 384, 1024), (64, 136, 2048)])
@pytest.mark.parametrize("c", SCFGS, ids=str)
def test_stream_fp16_matches_fp16_gemm(cp, rng, m, n, k, c):
    """Streaming kernel (mma.sync, FP32 accumulation): the FP16-mode bound above."""
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    if m > 8 * c[0]:
        pytest.skip("M above this shape's token tiles")
    x, w = _data(rng, m, n, k)
    layer = NestedFPLinear(cp.asarray(w))
    y = cp.full((m, n), np.nan, dtype=cp.float16)
    layer(cp.asarray(x), mode="fp16", config=_scfg(c), y=y)
    got = y.get().astype(np.float64)
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    ref = xd @ wd.T
    bound = 2 * k * 2.0**-24 * (np.abs(xd) @ np.abs(wd).T) + 2.0**-11 * np.abs(ref) + 2.0**-24
    assert (np.abs(got - ref) <= bound).all()


@pytest.mark.parametrize("m,n,k", [(1, 128, 256), (5, 200, 272), (37, 384, 1024), (64, 136, 2048)])
@pytest.mark.parametrize("c", SCFGS, ids=str)
@pytest.mark.parametrize("fuse", [True, False])
def test_stream_fp8_matches_golden(cp, rng, m, n, k, c, fuse):
    """Streaming FP8 mode: E4M3 operands carried exactly as FP16 (times 2^-8 each), FP32
    accumulation, so the golden FP8 GEMM is met to FP32-accumulation accuracy:
    |y - ref| <= 2 K 2^-24 sum|x_q u| s 2^-8 + 2^-11 |ref|. One activation code off by one
    step moves y by about 2^-4 of one term, far above this bound (so the fused quantizer is
    checked too)."""
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    if m > 8 * c[0]:
        pytest.skip("M above this shape's token tiles")
    x, w = _data(rng, m, n, k)
    layer = NestedFPLinear(cp.asarray(w))
    y = cp.full((m, n), np.nan, dtype=cp.float16)
    layer(cp.asarray(x), mode="fp8", config=_scfg(c, fuse), y=y)
    got = y.get().astype(np.float64)
    codes, scales = per_token_e4m3(x)
    upper, _ = nestedfp_split(w)
    ref = nestedfp8_matmul_reference(codes, scales, upper)
    from mactile.golden.elements import FP8_E4M3
    mag = np.ldexp(np.abs(FP8_E4M3.values[codes]) @ np.abs(FP8_E4M3.values[upper]).T
                   * scales[:, None].astype(np.float64), -8)
    err = np.abs(got - ref)
    assert (err <= 2 * k * 2.0**-24 * mag + 2.0**-11 * np.abs(ref) + 2.0**-24).all(), \
        np.max(err / np.maximum(mag, 1e-30))


def test_stream_fused_nan_check(cp, rng):
    from mactile.gpu.nestedfp.kernels import NestedFPLinear, StreamConfig
    layer = NestedFPLinear(cp.asarray(_data(rng, 1, 64, 128)[1]))
    bad = cp.ones((2, 128), dtype=cp.float16)
    bad[1, 100] = cp.nan
    with pytest.raises(InputError, match="NaN or Inf"):
        layer(bad, mode="fp8", config=StreamConfig(nt=1, fuse=True), check_finite=True)
    layer(cp.ones((2, 128), dtype=cp.float16), mode="fp8", config=StreamConfig(nt=1),
          check_finite=True)
    with pytest.raises(InputError, match="M <= 8"):
        layer(cp.ones((9, 128), dtype=cp.float16), config=StreamConfig(nt=1))


def test_ineligible_layer_falls_back_to_fp16(cp, rng):
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    x, w = _data(rng, 5, 64, 128)
    w[3, 9] = 1.8
    layer = NestedFPLinear(cp.asarray(w))
    assert not layer.eligible and layer.upper is None
    ref = cp.asarray(x) @ cp.asarray(w).T
    for mode in ("fp16", "fp8"):
        assert cp.array_equal(layer(cp.asarray(x), mode=mode), ref)
    with pytest.raises(ValueError, match="not eligible"):
        layer.planes()
    assert NestedFPLinear(cp.asarray(w), threshold=1.8192).eligible  # the authors' limit


def test_errors(cp, rng):
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    with pytest.raises(InputError, match="multiple of 16"):
        NestedFPLinear(cp.zeros((8, 40), dtype=cp.float16))
    with pytest.raises(InputError, match="float16"):
        NestedFPLinear(cp.zeros((8, 64), dtype=cp.float32))
    layer = NestedFPLinear(cp.asarray(_data(rng, 1, 64, 128)[1]))
    with pytest.raises(ValueError, match="mode must be one of"):
        layer(cp.zeros((2, 128), dtype=cp.float16), mode="int8")
    with pytest.raises(InputError, match="do not match K = 128"):
        layer(cp.zeros((2, 64), dtype=cp.float16))
    bad = cp.ones((2, 128), dtype=cp.float16)
    bad[0, 0] = cp.inf
    with pytest.raises(InputError, match="NaN or Inf"):
        layer(bad, mode="fp8", check_finite=True)
