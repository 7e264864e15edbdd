"""ReSET W4A4's choice of kernel and its input errors (CPU: nothing is launched)."""
import numpy as np
import pytest

from mactile.gpu.formats import golden_proto, kernel_format
from mactile.gpu.packing import PackedW4A16
from mactile.gpu.w4a4 import linear_w4a4, rows_launch, w4a4_kernel


def _pw(N, layouts, fmt="nvfp4"):
    return PackedW4A16(kernel_format(golden_proto(fmt)), N, 4096, 1.0, {k: {"K_pad": 4096} for k in layouts})


BOTH = ("frag", "rowmajor")


def test_default_kernel_follows_layouts_then_the_measured_rule():
    assert w4a4_kernel(1, _pw(4096, ("rowmajor",))) == "gemv"
    assert w4a4_kernel(8, _pw(4096, ("frag",))) == "engine"
    assert w4a4_kernel(2, _pw(28672, BOTH)) == "engine"
    assert w4a4_kernel(64, _pw(28672, BOTH)) == "engine"  # beyond the GEMV's M <= 8
    # M = 1: the row-streaming GEMV on every layer (faster than the engine path on all nine
    # benchmark layers)
    for N in (28672, 8448, 8192, 6144, 5120, 4096, 64):
        assert w4a4_kernel(1, _pw(N, BOTH)) == "gemv"
    with pytest.raises(ValueError, match="neither the rowmajor nor the frag"):
        w4a4_kernel(1, _pw(64, ()))


def test_rows_launch_one_wave_of_whole_row_groups():
    """One CTA per SM (16 warps) or two (8 warps), never more CTAs than row groups."""
    assert rows_launch(1024, 132) == 132
    assert rows_launch(1024, 132, nw=8) == 264
    assert rows_launch(19, 132) == 19
    assert rows_launch(1, 132, nw=8) == 1
    for n_rg in (1, 7, 132, 133, 3584):
        C = rows_launch(n_rg, 132)
        sizes = [(c + 1) * n_rg // C - c * n_rg // C for c in range(C)]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1  # whole row groups, balanced


def test_errors_before_any_launch():
    x = np.zeros((1, 4096), np.float16)  # not even a GPU array: refused before it is read
    with pytest.raises(ValueError, match="nvfp4 weights, got razer"):
        linear_w4a4(x, _pw(64, BOTH, fmt="razer"))
    with pytest.raises(ValueError, match="unknown W4A4 kernel 'tc'"):
        linear_w4a4(x, _pw(64, BOTH), kernel="tc")
