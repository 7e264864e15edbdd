"""GPU test helpers: a skip with the reason when CuPy or a Hopper GPU is missing."""
import pytest


@pytest.fixture
def cp():
    from mactile.gpu import _cuda
    ok, why = _cuda.available()
    if not ok:
        pytest.skip(f"GPU kernels not runnable here: {why}")
    return _cuda.require()
