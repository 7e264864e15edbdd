"""The NVRTC build (what a user without prebuilt cubins runs) is the same program as the nvcc
cubins: IEEE FP32 denormals kept (CuPy's own NVRTC path adds options that flushed them on the
H100, so the E4M3-subnormal scale decode returned 0), and the ReSET quantizer bit-exact from
an NVRTC build. Run with CuPy's options (``cupy.RawModule(code=...)``) both tests fail: the
first kernel returns zeros, the quantizer writes 8584 wrong codes (seen on the H100)."""
import numpy as np

from fp4_gpu_util import GPU, cupy
from mactile.golden import NVFP4
from mactile.gpu import build, runtime
from mactile.gpu.packing import unpack_activation

pytestmark = GPU

_SRC = r"""
extern "C" __global__ void place_and_scale(const unsigned* bits, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // the scale decode of gpu/kernels/fp4_common.cuh: bits of an FP32 denormal times 2^120
    if (i < n) out[i] = __uint_as_float(bits[i]) * 0x1p+120f;
}
"""


def test_nvrtc_keeps_fp32_denormals(tmp_path, monkeypatch):
    cp = cupy()
    monkeypatch.setenv("MACTILE_NVRTC_CACHE", str(tmp_path))
    fn = runtime.get_function(runtime.compile_module(_SRC, name_expressions=("place_and_scale",)),
                              "place_and_scale")
    codes = np.arange(1, 8, dtype=np.uint32) << 20  # E4M3 subnormal payloads placed as in scale_f32
    out = cp.zeros(codes.size, cp.float32)
    fn((1,), (32,), (cp.asarray(codes), out, np.int32(codes.size)))
    want = codes.view(np.float32) * np.float32(2.0 ** 120)
    assert (want > 0).all()
    np.testing.assert_array_equal(out.get(), want)
    assert list(tmp_path.glob("*.cubin")), "the cubin was not cached"


def test_quantizer_nvrtc_build_bit_exact(tmp_path, monkeypatch, rng):
    """Wide-range activations (E4M3-subnormal block scales) through an NVRTC build, compiled
    once and then loaded from the disk cache in a fresh process cache."""
    cp = cupy()
    from mactile.gpu import quantize_activation

    from test_w4a4_gpu import _wide_range
    monkeypatch.delenv("MACTILE_CUBIN_DIR", raising=False)
    monkeypatch.setenv("MACTILE_NVRTC_CACHE", str(tmp_path))
    x = _wide_range(rng, 8, 5120)
    want = NVFP4().quantize(x)
    assert (want.scales[want.scales > 0] < 8).any(), "no E4M3-subnormal block scale in the data"
    for _ in range(2):  # compile, then from the disk cache
        monkeypatch.setattr(build, "_KERNELS", {})
        monkeypatch.setattr(runtime, "_MODULES", {})
        got = unpack_activation(quantize_activation(cp.asarray(x), sync=True))
        assert got.tensor_scale == want.tensor_scale
        np.testing.assert_array_equal(got.scales, want.scales)
        np.testing.assert_array_equal(got.codes, want.codes)
    assert len(list(tmp_path.glob("*.cubin"))) == 1
