"""FlexQ kernels on the GPU against the golden IntGroup / bit-plane identity (marker: gpu)."""
import numpy as np
import pytest

from mactile.golden import IntGroup, bitplane_matmul
from mactile.golden.block import InputError
from mactile.gpu.flexq.layout import pack_quantized

pytestmark = pytest.mark.gpu


def _acts(rng, m, k):
    """Random FP16 activations with named corner cases: an all-zero group, tiny values
    (subnormal FP16 scales), one outlier per row, exact .5 ties after division."""
    x = (rng.standard_normal((m, k)) * rng.uniform(0.01, 8, (m, 1))).astype(np.float16)
    x[0, :128] = 0
    if m > 1:
        x[1, 128:256] = (rng.standard_normal(128) * 1e-6).astype(np.float16)
    x[:, 5] = 40.0
    if m > 2:  # scale 40/31 rounded to FP16; put values at (n + 0.5) * scale
        s = np.float32(np.float16(np.float32(40.0) / np.float32(31)))
        x[2, :128] = (np.float32(s) * (np.arange(128) % 20 - 9.5)).astype(np.float16)
        x[2, 5] = 40.0
    return x


@pytest.mark.parametrize("bits,tile", [(6, 8), (8, 8), (6, 16)])
@pytest.mark.parametrize("rows", [1, 13, 40])
def test_quantize_pack_bit_exact(cp, rng, bits, tile, rows):
    from mactile.gpu.flexq.kernels import quantize_pack
    x = _acts(rng, rows, 384)
    got = quantize_pack(cp.asarray(x), bits=bits, tile=tile).to_host()
    ref = pack_quantized(IntGroup(bits=bits).quantize(x), tile=tile)
    assert np.array_equal(got.planes, ref.planes)
    assert np.array_equal(got.scales, ref.scales)


def _layer(cp, rng, n, k, singles="k128"):
    from mactile.gpu.flexq.kernels import FlexQLinear
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16)
    qw = IntGroup(bits=6).quantize(w)
    return FlexQLinear(qw, singles=singles), qw


from mactile.gpu.flexq.kernels import SMALL_M_CONFIG, SMALL_M_NARROW_CONFIG, TEST_CONFIGS

# None: choose_config (on these small layers the narrow M <= 8 shape); both M <= 8 defaults
# named, so each is tested whatever the rule picks
_SMALL = [(c.mt, c.rt, c.wr, c.wk, c.u) for c in (SMALL_M_CONFIG, SMALL_M_NARROW_CONFIG)]
CONFIGS = [None, *_SMALL, *TEST_CONFIGS]


@pytest.mark.parametrize("ba", [6, 8])
@pytest.mark.parametrize("singles", ["k128", "k256"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_integer_products_bit_exact(cp, rng, ba, singles, cfg):
    """Per-group integer GEMM before scaling == golden bitplane_matmul (atol 0)."""
    from mactile.gpu.flexq.kernels import GemmConfig
    m, n, k = 37, 72, 640
    layer, qw = _layer(cp, rng, n, k, singles)
    x = _acts(rng, m, k)
    config = None if cfg is None else GemmConfig(*cfg)
    xp = layer.quantize_activations(cp.asarray(x), act_bits=ba, config=config)
    y = cp.full((m, n, k // 128), -12345, dtype=cp.int32)  # poisoned
    layer.matmul_planes(xp, out="int", config=config, y=y)
    got = y.get()
    iw = IntGroup(bits=6).integers(qw).reshape(n, k)
    ix = IntGroup(bits=ba).integers(IntGroup(bits=ba).quantize(x)).reshape(m, k)
    for g in range(k // 128):
        sl = slice(128 * g, 128 * g + 128)
        assert np.array_equal(got[:, :, g], bitplane_matmul(ix[:, sl], iw[:, sl], ba, 6)), g


def _golden_gemm(x, qw, ba):
    """Float64 sum_g sx sw Int_g, and sum_g |sx sw Int_g| for the bound."""
    fx = IntGroup(bits=ba)
    qx = fx.quantize(x)
    m, k = x.shape
    n = qw.shape[0]
    ix = fx.integers(qx).reshape(m, k).astype(np.float64)
    iw = IntGroup(bits=6).integers(qw).reshape(n, k).astype(np.float64)
    sx = qx.scales.view(np.float16).astype(np.float64)
    sw = qw.scales.view(np.float16).astype(np.float64)
    ref = np.zeros((m, n))
    mag = np.zeros((m, n))
    for g in range(k // 128):
        sl = slice(128 * g, 128 * g + 128)
        t = (ix[:, sl] @ iw[:, sl].T) * sx[:, g:g + 1] * sw[:, g][None, :]
        ref += t
        mag += np.abs(t)
    return ref, mag


@pytest.mark.parametrize("m", [1, 2, 5, 8, 16, 33, 64, 100])
@pytest.mark.parametrize("ba", [6, 8])
def test_scaled_output_within_bound(cp, rng, m, ba):
    """FP32 output: |y - ref| <= (G + 8) * 2^-24 * sum_g |s_x s_w Int_g| (one FMA rounding
    per group plus the split-K additions); FP16 output adds its own rounding, 2^-11 |y|."""
    n, k = 136, 1024
    layer, qw = _layer(cp, rng, n, k)
    x = _acts(rng, m, k)
    ref, mag = _golden_gemm(x, qw, ba)
    bound32 = (k // 128 + 8) * 2.0**-24 * mag
    y32 = cp.full((m, n), np.nan, dtype=cp.float32)
    layer(cp.asarray(x), act_bits=ba, out="float32", y=y32)
    y32 = y32.get().astype(np.float64)
    assert np.isfinite(y32).all()
    assert (np.abs(y32 - ref) <= bound32).all(), np.max(np.abs(y32 - ref) / np.maximum(bound32, 1e-30))
    y16 = cp.full((m, n), np.nan, dtype=cp.float16)
    layer(cp.asarray(x), act_bits=ba, y=y16)
    y16 = y16.get().astype(np.float64)
    assert (np.abs(y16 - ref) <= bound32 * (1 + 2.0**-11) + 2.0**-11 * np.abs(ref) + 2.0**-25).all()


def test_gpu_packed_weights_equal_offline(cp, rng):
    from mactile.gpu.flexq.kernels import FlexQLinear
    w = (rng.standard_normal((50, 256)) * 0.05).astype(np.float16)
    a = FlexQLinear(cp.asarray(w))
    ref = pack_quantized(IntGroup(bits=6).quantize(w), tile=16)
    assert np.array_equal(a.w.to_host().planes, ref.planes)
    x = cp.asarray(_acts(rng, 9, 256))
    b = FlexQLinear(IntGroup(bits=6).quantize(w))
    assert cp.array_equal(a(x), b(x))


def test_errors(cp, rng):
    from mactile.gpu.flexq.kernels import FlexQLinear
    layer, _ = _layer(cp, rng, 32, 256)
    with pytest.raises(InputError, match="not a positive multiple of the group size 128"):
        layer(cp.zeros((2, 200), dtype=cp.float16))
    with pytest.raises(InputError, match="activations have K = 384"):
        layer(cp.zeros((2, 384), dtype=cp.float16))
    with pytest.raises(InputError, match="2-d float16"):
        layer(cp.zeros((2, 256), dtype=cp.float32))
    bad = cp.ones((3, 256), dtype=cp.float16)
    bad[1, 7] = cp.nan
    with pytest.raises(InputError, match="NaN or Inf"):
        layer(bad, check_finite=True)
    with pytest.raises(ValueError, match="act_bits must be one of"):
        layer(cp.ones((3, 256), dtype=cp.float16), act_bits=4)
    with pytest.raises(InputError, match="weights must be 6-bit"):
        FlexQLinear(IntGroup(bits=8).quantize(np.ones((16, 128), np.float32)))


# ---- fused one-launch kernel (M <= 16): quantize + pack in the block prologue
from mactile.gpu.flexq.kernels import FUSED_TEST


def _fcfg(t, gps):
    from mactile.gpu.flexq.kernels import FusedConfig
    return FusedConfig(*t, gps=gps)


@pytest.mark.parametrize("ba", [6, 8])
@pytest.mark.parametrize("gps", [None, 2])
@pytest.mark.parametrize("t", FUSED_TEST, ids=str)
def test_fused_integer_products_bit_exact(cp, rng, ba, gps, t):
    """Fused kernel, per-group integers == golden bitplane_matmul (atol 0): checks the
    in-kernel quantizer bit for bit as well (its codes feed the integers)."""
    n, k = 72, 640
    layer, qw = _layer(cp, rng, n, k)
    cfg = _fcfg(t, gps)
    iw = IntGroup(bits=6).integers(qw).reshape(n, k)
    for m in sorted({1, 3, cfg.block_tokens}):
        x = _acts(rng, m, k)
        y = cp.full((m, n, k // 128), -12345, dtype=cp.int32)  # poisoned
        layer(cp.asarray(x), act_bits=ba, out="int", config=cfg, y=y)
        got = y.get()
        ix = IntGroup(bits=ba).integers(IntGroup(bits=ba).quantize(x)).reshape(m, k)
        for g in range(k // 128):
            sl = slice(128 * g, 128 * g + 128)
            assert np.array_equal(got[:, :, g], bitplane_matmul(ix[:, sl], iw[:, sl], ba, 6)), (m, g)


def test_fused_k256_singles(cp, rng):
    layer, qw = _layer(cp, rng, 40, 384, singles="k256")
    x = _acts(rng, 5, 384)
    y = layer(cp.asarray(x), act_bits=6, out="int", config=_fcfg(FUSED_TEST[0], None)).get()
    iw = IntGroup(bits=6).integers(qw).reshape(40, 384)
    ix = IntGroup(bits=6).integers(IntGroup(bits=6).quantize(x)).reshape(5, 384)
    for g in range(3):
        sl = slice(128 * g, 128 * g + 128)
        assert np.array_equal(y[:, :, g], bitplane_matmul(ix[:, sl], iw[:, sl], 6, 6))


@pytest.mark.parametrize("ba", [6, 8])
@pytest.mark.parametrize("gps", [None, 3])
@pytest.mark.parametrize("t", FUSED_TEST, ids=str)
def test_fused_scaled_output_within_bound(cp, rng, ba, gps, t):
    """Fused kernel with and without the K split (FP32 workspace): the bounds above."""
    n, k = 136, 1024
    layer, qw = _layer(cp, rng, n, k)
    cfg = _fcfg(t, gps)
    for m in sorted({1, cfg.block_tokens}):
        x = _acts(rng, m, k)
        ref, mag = _golden_gemm(x, qw, ba)
        bound32 = (k // 128 + 8) * 2.0**-24 * mag
        for rep in range(2):  # the second call checks that the workspace was cleared
            y32 = cp.full((m, n), np.nan, dtype=cp.float32)
            layer(cp.asarray(x), act_bits=ba, out="float32", config=cfg, y=y32)
            y32 = y32.get().astype(np.float64)
            assert np.isfinite(y32).all()
            assert (np.abs(y32 - ref) <= bound32).all(), (rep, np.max(np.abs(y32 - ref) / np.maximum(bound32, 1e-30)))
        y16 = cp.full((m, n), np.nan, dtype=cp.float16)
        layer(cp.asarray(x), act_bits=ba, config=cfg, y=y16)
        y16 = y16.get().astype(np.float64)
        assert (np.abs(y16 - ref) <= bound32 * (1 + 2.0**-11) + 2.0**-11 * np.abs(ref) + 2.0**-25).all()


def test_fused_errors(cp, rng):
    from mactile.gpu.flexq.kernels import FusedConfig
    layer, _ = _layer(cp, rng, 32, 256)
    with pytest.raises(InputError, match="M <= 8"):
        layer(cp.ones((9, 256), dtype=cp.float16), config=FusedConfig(mt=1))
    with pytest.raises(ValueError, match="cluster size"):
        FusedConfig(c=3)


@pytest.mark.parametrize("m", [1, 8, 40])
def test_pdl_chain_reads_previous_layer(cp, rng, m, monkeypatch):
    """A chain of layers, each quantizing the previous layer's output, with the GEMM and (up to
    QUANT_PDL_MAX_M tokens) the quantizer launched programmatically (each waits for the
    kernel before it): eager and from a CUDA graph, bit for bit the serial chain's."""
    from mactile.gpu import pdl
    from mactile.gpu.flexq import kernels as fk
    from mactile.gpu.flexq.kernels import FlexQLinear
    if not pdl.available():
        pytest.skip("the CUDA driver library does not load: no PDL launches")
    from fp4_gpu_util import replay_in_graph
    monkeypatch.setattr(fk, "_sm_count", lambda: 1)  # small grids: the GEMM takes the PDL path too
    K = 512
    ws = [IntGroup(bits=6).quantize((rng.standard_normal((K, K)) / np.sqrt(K)).astype(np.float16))
          for _ in range(3)]
    x0 = cp.asarray(_acts(rng, m, K))

    def chain(layers, ys):
        x = x0
        for layer, y in zip(layers, ys):
            layer(x, y=y)
            x = y
        return ys

    ref = [y.get() for y in chain([FlexQLinear(w, pdl_launch=False) for w in ws],
                                  [cp.empty((m, K), cp.float16) for _ in ws])]
    assert np.isfinite(ref[-1]).all() and np.abs(ref[-1]).max() > 0
    fast = [FlexQLinear(w, pdl_launch=True) for w in ws]
    got = chain(fast, [cp.full((m, K), np.nan, cp.float16) for _ in ws])
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(r, g.get())
    ys = [cp.empty((m, K), cp.float16) for _ in ws]
    replay_in_graph(lambda: chain(fast, ys), ys)
    np.testing.assert_array_equal(ref[-1], ys[-1].get())


@pytest.mark.parametrize("cfg", [None, (1, 2, 1, 16, 1), (2, 2, 2, 3, 2)], ids=str)
def test_pdl_launch_identical(cp, rng, cfg, monkeypatch):
    """The GEMM launched programmatically after the quantize kernel gives the same bits."""
    from mactile.gpu import pdl
    from mactile.gpu.flexq.kernels import FlexQLinear, GemmConfig
    if not pdl.available():
        pytest.skip("the CUDA driver library does not load: no PDL launches")
    w = (rng.standard_normal((200, 640)) * 0.05).astype(np.float16)
    qw = IntGroup(bits=6).quantize(w)
    from mactile.gpu.flexq import kernels as fk
    monkeypatch.setattr(fk, "_sm_count", lambda: 1)  # this small grid must take the PDL path
    a = FlexQLinear(qw, pdl_launch=True)
    b = FlexQLinear(qw, pdl_launch=False)
    config = None if cfg is None else GemmConfig(*cfg)
    for m in (1, 8, 13):
        if config is not None and m > config.block_tokens:
            continue
        x = cp.asarray(_acts(rng, m, 640))
        for out in ("float16", "int"):
            ya = a(x, out=out, config=config)
            yb = b(x, out=out, config=config)
            assert cp.array_equal(ya, yb), (m, out)
        for _ in range(3):  # back-to-back calls: the next quantize must not overtake the GEMM
            ya = a(x, config=config)
        assert cp.array_equal(ya, b(x, config=config))
