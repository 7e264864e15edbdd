"""GPU test helpers: a skip with the reason when CuPy or a Hopper GPU is missing."""
import pytest


@pytest.fixture
def cp():
    from mactile.gpu import runtime
    why = runtime.gpu_skip_reason()
    if why:
        pytest.skip(f"GPU kernels not runnable here: {why}")
    cp = runtime.require_cupy()
    cc = cp.cuda.Device().compute_capability
    if int(cc) < 90:
        pytest.skip(f"these kernels need a Hopper GPU (sm_90a); this device is sm_{cc}")
    return cp
