"""ReSET W4A4 path on the GPU: activation quantization bit-exact with golden NVFP4 (and its
exact FP16 values for the tensor-core path), the GEMV and the engine against the golden
float64 product (FP32-accumulation bound), exact cases, PDL chains, errors."""
import numpy as np
import pytest

from fp4_gpu_util import GPU, cupy, poisoned, replay_in_graph
from mactile.golden import NVFP4
from mactile.gpu.check import check_close, reference
from mactile.gpu.packing import (pack_activation, pack_w4a16, quantized_from_arrays,
                                 unpack_activation)

pytestmark = GPU


def _wide_range(rng, M, K):
    """FP16 activations spanning many binades, with zeros, -0, subnormals and the FP16 max."""
    x = rng.standard_normal((M, K)) * np.exp2(rng.uniform(-14, 4, (M, K // 16, 1))).repeat(16, 2).reshape(M, K)
    x = x.astype(np.float16)
    x[0, :16] = 0
    x[0, 16:32] = np.float16(-0.0)
    if K >= 64:
        x[-1, 32:48] = (rng.standard_normal(16) * 2.0 ** -20).astype(np.float16)  # subnormals
        x[-1, 48] = np.float16(-65504.0)
    return x


@pytest.mark.parametrize("M,K", [(1, 16), (1, 4096), (3, 1040), (2, 16384), (1, 25600), (8, 5120), (2, 16400),
                                 (8, 28672)])
def test_quantize_bit_exact(M, K, rng):
    """Both quantizer kernels (eight plain CTAs up to QA_SOLO_MAX_ELEMENTS = M * K, one
    cluster above; both sides of the limit are here) against golden, bit for bit."""
    cp = cupy()
    from mactile.gpu import quantize_activation
    for trial in range(3):
        x = _wide_range(rng, M, K) if trial else (rng.standard_normal((M, K)) * 3).astype(np.float16)
        a = quantize_activation(cp.asarray(x), sync=True)
        got = unpack_activation(a)
        want = NVFP4().quantize(x)
        assert got.tensor_scale == want.tensor_scale
        np.testing.assert_array_equal(got.scales, want.scales)
        np.testing.assert_array_equal(got.codes, want.codes)
        # padding columns written as zeros
        KA = a.KA
        if KA > K:
            assert int(a.codes[:, K // 2:].max()) == 0 and int(a.scales[:, K // 16:].max()) == 0
        # the tensor-core path's operands: the same codes, FP4 value x block scale in FP16
        # (exact: no rounding), the tensor scale per token
        d = quantize_activation(cp.asarray(x), sync=True, dequant=True)
        np.testing.assert_array_equal(d.codes.get(), a.codes.get())
        np.testing.assert_array_equal(d.scales.get(), a.scales.get())
        exact = (want.dequantize().astype(np.float64) / np.float64(want.tensor_scale)).reshape(M, K)
        np.testing.assert_array_equal(d.dequant.get().astype(np.float64), exact)
        np.testing.assert_array_equal(np.signbit(d.dequant.get()), np.signbit(exact))
        np.testing.assert_array_equal(d.col_scale.get(), np.full(M, want.tensor_scale, np.float32))


def test_quantize_ties_and_saturation():
    """Scaled values on FP4 midpoints (ties to even) and block maxima that hit 448/6 exactly."""
    cp = cupy()
    from mactile.gpu import quantize_activation
    # amax 2688 -> D32 = 1; a block with max 6 -> scale 1 exactly; then x are the scaled values
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, -6.0])
    x = np.zeros((1, 64), np.float16)
    x[0, :16] = mids
    x[0, 16] = 2688.0
    x[0, 32:48] = mids * 0.5
    got = unpack_activation(quantize_activation(cp.asarray(x), sync=True))
    want = NVFP4().quantize(x)
    np.testing.assert_array_equal(got.codes, want.codes)
    np.testing.assert_array_equal(got.scales, want.scales)


def _weight(rng, N, K):
    w = rng.standard_normal((N, K)).astype(np.float32) * rng.uniform(0.1, 2, (N, 1)).astype(np.float32)
    return NVFP4().quantize(w)


@pytest.mark.parametrize("M", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("NK", [(203, 1040), (96, 5120)], ids=["N203-K1040", "N96-K5120"])
def test_gemv_against_golden(M, NK, rng):
    cp = cupy()
    from mactile.gpu import linear_w4a4
    N, K = NK
    qw = _weight(rng, N, K)
    pw = pack_w4a16(qw, layouts=("rowmajor",)).to(cp)
    x = (rng.standard_normal((M, K)) * rng.uniform(0.3, 3, (M, 1))).astype(np.float16)
    for out_dtype in (np.float16, np.float32):
        y = poisoned((M, N), out_dtype)
        linear_w4a4(cp.asarray(x), pw, out=y, sync=True)
        qa = NVFP4().quantize(x)
        y_ref, abs_sum = reference(qa.dequantize(), qw.dequantize())
        check_close(y.get(), y_ref, abs_sum, K, what="w4a4")


@pytest.mark.parametrize("M", [1, 2, 5, 8, 40])
def test_engine_against_golden(M, rng):
    """The tensor-core path (quantizer's exact FP16 values on the GEMM engine) against the
    golden float64 product, FP16 and FP32 outputs, M within and beyond the GEMV's 1..8."""
    cp = cupy()
    from mactile.gpu import linear_w4a4
    N, K = 203, 1040
    qw = _weight(rng, N, K)
    pw = pack_w4a16(qw).to(cp)  # both layouts
    x = (rng.standard_normal((M, K)) * rng.uniform(0.3, 3, (M, 1))).astype(np.float16)
    qa = NVFP4().quantize(x)
    y_ref, abs_sum = reference(qa.dequantize(), qw.dequantize())
    for out_dtype in (np.float16, np.float32):
        y = poisoned((M, N), out_dtype)
        linear_w4a4(cp.asarray(x), pw, out=y, kernel="engine", sync=True)
        check_close(y.get(), y_ref, abs_sum, K, what="w4a4 engine")


def test_engine_exact(rng):
    """Narrow scale ranges (every partial sum exact in FP32): the engine path equals the
    golden product bit for bit (hand-made operands: the quantizer is tested above)."""
    cp = cupy()
    from mactile.gpu.packing import PackedActivation
    from mactile.gpu.w4a4 import gemm_w4a4_engine
    N, K = 256, 1536

    def q(rows):
        codes = rng.integers(0, 16, (rows, K), dtype=np.uint8)
        sc = (rng.integers(6, 9, (rows, K // 16)) << 3 | rng.integers(0, 8, (rows, K // 16))).astype(np.uint8)
        return quantized_from_arrays(NVFP4(), codes, sc, 0.5)

    qw = q(N)
    pw = pack_w4a16(qw, layouts=("frag",)).to(cp)
    for M in (1, 3, 8, 24):
        qa = q(M)
        vals = qa.dequantize().reshape(M, K) / 0.5  # FP4 value x block scale: exact in FP16
        assert np.array_equal(vals.astype(np.float16).astype(np.float64), vals)
        a = PackedActivation(M, K, None, None, None, dequant=cp.asarray(vals.astype(np.float16)),
                             col_scale=cp.full(M, 0.5, dtype=cp.float32))
        y_ref, _ = reference(qa.dequantize(), qw.dequantize())
        y = poisoned((M, N), np.float32)
        gemm_w4a4_engine(a, pw, out=y, sync=True)
        np.testing.assert_array_equal(y.get(), y_ref.astype(np.float32))


def test_gemv_exact(rng):
    """Golden-packed activations and weights with narrow scale ranges: exact in FP32."""
    cp = cupy()
    from mactile.gpu import gemv_w4a4
    N, K, M = 150, 1536, 4

    def q(rows):
        codes = rng.integers(0, 16, (rows, K), dtype=np.uint8)
        sc = (rng.integers(6, 9, (rows, K // 16)) << 3 | rng.integers(0, 8, (rows, K // 16))).astype(np.uint8)
        return quantized_from_arrays(NVFP4(), codes, sc, 0.5)

    qa, qw = q(M), q(N)
    pw = pack_w4a16(qw, layouts=("rowmajor",)).to(cp)
    a = pack_activation(qa, xp=cp)
    y_ref, _ = reference(qa.dequantize(), qw.dequantize())
    for n_ctas in (1, 5, None):
        y = poisoned((M, N), np.float32)
        gemv_w4a4(a, pw, out=y, n_ctas=n_ctas, sync=True)
        np.testing.assert_array_equal(y.get(), y_ref.astype(np.float32))
    # tile-aligned partitions (3 row tiles x 3 k-units) and deeper pipelines
    from mactile.gpu.w4a4 import tile_aligned_ctas
    for slots, S in ((2, 3), (6, 5), (9, 10), (132, 2)):
        y = poisoned((M, N), np.float32)
        gemv_w4a4(a, pw, out=y, n_ctas=tile_aligned_ctas(3, 3, slots), stages=S, sync=True)
        np.testing.assert_array_equal(y.get(), y_ref.astype(np.float32))
    qa1 = quantized_from_arrays(NVFP4(), qa.codes.reshape(M, K)[:1], qa.scales.reshape(M, -1)[:1], 0.5)
    y1_ref, _ = reference(qa1.dequantize(), qw.dequantize())
    for S in (3, 5, 10):  # M = 1 (MT = 1) with the trial's stage counts
        y = poisoned((1, N), np.float32)
        gemv_w4a4(pack_activation(qa1, xp=cp), pw, out=y, n_ctas=tile_aligned_ctas(3, 3, 6), stages=S,
                  sync=True)
        np.testing.assert_array_equal(y.get(), y1_ref.astype(np.float32))


@pytest.mark.parametrize("NK", [(150, 1536), (203, 1040), (64, 512), (300, 3584)],
                         ids=["N150-K1536", "N203-K1040", "N64-K512", "N300-K3584"])
def test_gemv_rows_exact(NK, rng):
    """The row-streaming M = 1 GEMV on narrow-range operands (every partial sum exact in
    FP32) equals the golden product bit for bit: both CTA shapes, CTA counts from one (all
    row groups in one CTA) to one per row group, partial last chunks (K = 1040: one lane of
    the second 1024-k chunk; 3584: half a chunk), rows beyond N; the FP16 output is the
    exact sum rounded once."""
    cp = cupy()
    from mactile.gpu.w4a4 import ROWS_NW, gemv_w4a4, gemv_w4a4_rows
    N, K = NK

    def q(rows):
        codes = rng.integers(0, 16, (rows, K), dtype=np.uint8)
        sc = (rng.integers(6, 9, (rows, K // 16)) << 3 | rng.integers(0, 8, (rows, K // 16))).astype(np.uint8)
        return quantized_from_arrays(NVFP4(), codes, sc, 0.5)

    qa, qw = q(1), q(N)
    pw = pack_w4a16(qw, layouts=("rowmajor",)).to(cp)
    a = pack_activation(qa, xp=cp)
    y_ref, _ = reference(qa.dequantize(), qw.dequantize())
    n_rg = -(-N // 64) * 8
    for nw in ROWS_NW:
        for C in (1, 2, 7, n_rg, None):
            y = poisoned((1, N), np.float32)
            gemv_w4a4_rows(a, pw, out=y, n_ctas=C, nw=nw, sync=True)
            np.testing.assert_array_equal(y.get(), y_ref.astype(np.float32), err_msg=f"nw={nw} C={C}")
    y16 = poisoned((1, N), np.float16)
    gemv_w4a4(a, pw, out=y16, sync=True)  # M = 1 default: the row-streaming kernel
    np.testing.assert_array_equal(y16.get(), y_ref.astype(np.float32).astype(np.float16))


@pytest.mark.parametrize("kernel", ["gemv", "gemv-early", "engine"])
@pytest.mark.parametrize("M", [1, 3, 8])
def test_pdl_chain_reads_previous_layer(M, kernel, rng, monkeypatch):
    """Programmatic dependent launch of quantizer and GEMV: a chain of layers, each
    quantizing the previous layer's output (the GEMV streams its first weight stages before
    griddepcontrol.wait, the activations after), eager and replayed from a CUDA graph,
    equals the same chain launched without PDL, bit for bit; the first layer equals golden."""
    cp = cupy()
    from mactile.gpu import linear_w4a4, pdl
    if not pdl.available():
        pytest.skip("no CUDA driver library for programmatic dependent launch")
    if kernel == "gemv-early":  # the row-streaming GEMV (M = 1) with its early trigger on
        if M != 1:
            pytest.skip("the early trigger is the M = 1 row-streaming kernel's")
        from mactile.gpu import w4a4
        monkeypatch.setattr(w4a4, "ROWS_EARLY_TRIGGER_MIN_K", 0)
        kernel = "gemv"
    K = 2048
    # weights of norm ~1 per output: the values stay O(1) down the chain
    qws = [NVFP4().quantize((rng.standard_normal((K, K)) / np.sqrt(K)).astype(np.float32)) for _ in range(4)]
    pws = [pack_w4a16(q, layouts=("rowmajor" if kernel == "gemv" else "frag",)).to(cp) for q in qws]
    x_host = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
    x0 = cp.asarray(x_host)

    def chain(use_pdl, ys):
        x = x0
        for pw, y in zip(pws, ys):
            linear_w4a4(x, pw, out=y, pdl=use_pdl, kernel=kernel)
            x = y
        return ys

    ref = [y.get() for y in chain(False, [cp.empty((M, K), dtype=cp.float16) for _ in pws])]
    assert np.isfinite(ref[-1]).all() and np.abs(ref[-1]).max() > 0
    y_ref, abs_sum = reference(NVFP4().quantize(x_host).dequantize(), qws[0].dequantize())
    check_close(ref[0], y_ref, abs_sum, K, what="w4a4 first layer")
    got = chain(True, [poisoned((M, K), np.float16) for _ in pws])
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(r, g.get())
    ys = [cp.empty((M, K), dtype=cp.float16) for _ in pws]
    replay_in_graph(lambda: chain(True, ys), ys)
    np.testing.assert_array_equal(ref[-1], ys[-1].get())


def test_errors(rng):
    cp = cupy()
    from mactile.golden import RaZeR
    from mactile.gpu import gemv_w4a4, quantize_activation
    x = cp.asarray(rng.standard_normal((9, 64)).astype(np.float16))
    pw = pack_w4a16(_weight(rng, 64, 64)).to(cp)
    with pytest.raises(ValueError, match="M = 1..8"):
        gemv_w4a4(quantize_activation(x), pw)
    with pytest.raises(ValueError, match="multiple of the NVFP4 block"):
        quantize_activation(cp.asarray(rng.standard_normal((2, 40)).astype(np.float16)))
    pr = pack_w4a16(RaZeR().quantize(rng.standard_normal((64, 64)).astype(np.float32))).to(cp)
    with pytest.raises(ValueError, match="nvfp4 weights"):
        gemv_w4a4(quantize_activation(x[:2]), pr)
    with pytest.raises(ValueError, match="K = 64"):
        gemv_w4a4(quantize_activation(cp.asarray(rng.standard_normal((2, 128)).astype(np.float16))), pw)
