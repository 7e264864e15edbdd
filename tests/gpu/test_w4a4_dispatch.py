"""ReSET W4A4's choice of kernel and its input errors (CPU: nothing is launched)."""
import numpy as np
import pytest

from mactile.gpu.formats import golden_proto, kernel_format
from mactile.gpu.packing import PackedW4A16
from mactile.gpu.w4a4 import linear_w4a4, w4a4_kernel


def _pw(N, layouts, fmt="nvfp4"):
    return PackedW4A16(kernel_format(golden_proto(fmt)), N, 4096, 1.0, {k: {"K_pad": 4096} for k in layouts})


BOTH = ("frag", "rowmajor")


def test_default_kernel_follows_layouts_then_the_measured_rule():
    assert w4a4_kernel(1, _pw(4096, ("rowmajor",)), sms=132) == "gemv"
    assert w4a4_kernel(8, _pw(4096, ("frag",)), sms=132) == "engine"
    assert w4a4_kernel(2, _pw(28672, BOTH), sms=132) == "engine"
    assert w4a4_kernel(64, _pw(28672, BOTH), sms=132) == "engine"  # beyond the GEMV's M <= 8
    # M = 1: the GEMV unless its tile-aligned CTAs leave more than 5% of 2 x 132 slots idle
    assert w4a4_kernel(1, _pw(28672, BOTH), sms=132) == "gemv"    # 448 row tiles >= 132 SMs
    assert w4a4_kernel(1, _pw(8448, BOTH), sms=132) == "gemv"     # one row tile per SM
    assert w4a4_kernel(1, _pw(8192, BOTH), sms=132) == "gemv"     # 128 tiles x 2 = 256 of 264
    assert w4a4_kernel(1, _pw(4096, BOTH), sms=132) == "gemv"     # 64 x 4 = 256
    assert w4a4_kernel(1, _pw(5120, BOTH), sms=132) == "engine"   # 80 x 3 = 240 (91%)
    assert w4a4_kernel(1, _pw(6144, BOTH), sms=132) == "engine"   # 96 x 2 = 192 (73%)
    with pytest.raises(ValueError, match="neither the rowmajor nor the frag"):
        w4a4_kernel(1, _pw(64, ()), sms=132)


def test_errors_before_any_launch():
    x = np.zeros((1, 4096), np.float16)  # not even a GPU array: refused before it is read
    with pytest.raises(ValueError, match="nvfp4 weights, got razer"):
        linear_w4a4(x, _pw(64, BOTH, fmt="razer"))
    with pytest.raises(ValueError, match="unknown W4A4 kernel 'tc'"):
        linear_w4a4(x, _pw(64, BOTH), kernel="tc")
