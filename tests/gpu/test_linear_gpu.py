"""linear(): dispatch by the measured tuning table, results identical to the kernel it names,
one call for every packed weight; the NVRTC path (no prebuilt cubin) agrees with it."""
import numpy as np
import pytest

from fp4_gpu_util import GPU, cupy
from mactile.golden import NVFP4, RaZeR
from mactile.gpu.packing import pack_w4a16

pytestmark = GPU

TABLE = {"crossover": [{"format": "razer", "N": 4096, "K": 4096, "crossover_m": 2},
                       {"format": "razer", "N": 256, "K": 512, "crossover_m": 0}],
         "engine": [{"format": "razer", "N": 1024, "K": 2048, "M": 16, "config": [16, 6, 2, 0, 1]},
                    {"format": "razer", "N": 1024, "K": 2048, "M": 40, "config": [128, 4, 2, 3, 0]}]}


def test_dispatch_and_linear(rng):
    cp = cupy()
    from mactile.gpu import EngineConfig, dispatch, gemm_tc, gemv_cc, linear
    q = RaZeR().quantize(rng.standard_normal((1000, 3000 // 16 * 16)).astype(np.float32))
    pw = pack_w4a16(q).to(cp)
    assert dispatch(pw, 1, table=TABLE).kernel == "cc"
    assert dispatch(pw, 3, table=TABLE).kernel == "engine"
    assert dispatch(pw, 3, table=TABLE).config is None  # no M measured in its token tile: the default
    assert dispatch(pw, 12, table=TABLE).config == EngineConfig(16, 6, 2, 0, 1)  # nearest M >= 12
    assert dispatch(pw, 33, table=TABLE).config == EngineConfig(128, 4, 2, 3, 0)
    assert dispatch(pw, 41, table=TABLE).config is None
    assert dispatch(pw, 1, table=None).kernel == "engine"
    for M, fn, kw in ((1, gemv_cc, {}), (4, gemm_tc, {}), (12, gemm_tc, {"cfg": EngineConfig(16, 6, 2, 0, 1)}),
                      (40, gemm_tc, {"cfg": EngineConfig(128, 4, 2, 3, 0)})):
        x = cp.asarray(rng.standard_normal((M, pw.K)).astype(np.float16))
        a = linear(x, pw, table=TABLE, out_dtype=np.float32).get()
        b = fn(x, pw, out_dtype=np.float32, **kw).get()
        np.testing.assert_array_equal(a, b)
    only_cc = pack_w4a16(q, layouts=("rowmajor",)).to(cp)
    with pytest.raises(ValueError, match="frag"):
        dispatch(only_cc, 9)
    with pytest.raises(ValueError, match="NestedFP layers only"):
        linear(cp.asarray(rng.standard_normal((2, pw.K)).astype(np.float16)), pw, mode="fp8")
    with pytest.raises(TypeError, match="no GPU kernel"):
        linear(cp.asarray(rng.standard_normal((2, pw.K)).astype(np.float16)), object())


def test_linear_runs_nestedfp_and_flexq(rng):
    """One call for every packed weight: NestedFP in both modes and FlexQ give what their
    own layers give."""
    cp = cupy()
    from mactile.gpu import linear
    from mactile.gpu.flexq.kernels import FlexQLinear
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    w = (rng.standard_normal((256, 512)) * 0.3).astype(np.float16)
    x = cp.asarray(rng.standard_normal((24, 512)).astype(np.float16))
    nl = NestedFPLinear(cp.asarray(w))
    for mode in ("fp16", "fp8"):
        np.testing.assert_array_equal(linear(x, nl, mode=mode).get(), nl(x, mode=mode).get())
    fl = FlexQLinear(cp.asarray(w))
    np.testing.assert_array_equal(linear(x[:4], fl).get(), fl(x[:4]).get())


def test_nvrtc_path_agrees(rng, monkeypatch):
    cp = cupy()
    import mactile.gpu.build as build
    from mactile.gpu import gemm_tc, quantize_activation
    q = NVFP4().quantize(rng.standard_normal((130, 512)).astype(np.float32))
    pw = pack_w4a16(q).to(cp)
    x = cp.asarray(rng.standard_normal((3, 512)).astype(np.float16))
    a = gemm_tc(x, pw, out_dtype=np.float32).get()
    qa = quantize_activation(x)
    ca, sa = qa.codes.get(), qa.scales.get()
    monkeypatch.delenv("MACTILE_CUBIN_DIR", raising=False)
    monkeypatch.setattr(build, "_KERNELS", {})
    import mactile.gpu.prebuilt as prebuilt
    monkeypatch.setattr(prebuilt, "_LOADED", {})
    b = gemm_tc(x, pw, out_dtype=np.float32).get()
    qb = quantize_activation(x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ca, qb.codes.get())
    np.testing.assert_array_equal(sa, qb.scales.get())
