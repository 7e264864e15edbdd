"""linear(): dispatch by the measured crossover table, results identical to the kernel it
names; the NVRTC path (no prebuilt cubin) compiles and agrees with it."""
import numpy as np
import pytest

from fp4_gpu_util import GPU, cupy
from mactile.golden import NVFP4, RaZeR
from mactile.gpu.packing import pack_w4a16

pytestmark = GPU

TABLE = {"entries": [{"format": "razer", "N": 4096, "K": 4096, "crossover_m": 2},
                     {"format": "razer", "N": 256, "K": 512, "crossover_m": 0}]}


def test_dispatch_and_linear(rng):
    cp = cupy()
    from mactile.gpu import dispatch, gemm_tc, gemv_cc, linear
    q = RaZeR().quantize(rng.standard_normal((1000, 3000 // 16 * 16)).astype(np.float32))
    pw = pack_w4a16(q).to(cp)
    assert dispatch(pw, 1, table=TABLE).kernel == "cc"
    assert dispatch(pw, 3, table=TABLE).kernel == "tc"
    assert dispatch(pw, 20, table=TABLE).kernel == "tc"
    assert dispatch(pw, 1, table=None).kernel == "tc"
    for M, fn in ((1, gemv_cc), (4, gemm_tc)):
        x = cp.asarray(rng.standard_normal((M, pw.K)).astype(np.float16))
        a = linear(x, pw, table=TABLE, out_dtype=np.float32).get()
        b = fn(x, pw, out_dtype=np.float32).get()
        np.testing.assert_array_equal(a, b)
    only_cc = pack_w4a16(q, layouts=("rowmajor",)).to(cp)
    with pytest.raises(ValueError, match="frag"):
        dispatch(only_cc, 9)


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
    b = gemm_tc(x, pw, out_dtype=np.float32).get()
    qb = quantize_activation(x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ca, qb.codes.get())
    np.testing.assert_array_equal(sa, qb.scales.get())
