"""The RTL benches implement the default quantization convention only: others are refused
with a message naming the options (no simulator needed)."""
import numpy as np
import pytest

pytest.importorskip("amaranth")

from mactile.golden import NVFP4, get_format  # noqa: E402
from mactile.golden.tensorcore import tensor_core_spec  # noqa: E402
from mactile.sim.benches.fp4tc import gemv_operands  # noqa: E402


def test_gemv_bench_refuses_a_non_default_convention():
    with pytest.raises(ValueError) as e:
        gemv_operands(NVFP4(), get_format("nvfp4", convention="torchao", tensor_scale=False),
                      np.random.default_rng(0))
    assert str(e.value).startswith("the tensor-core GEMV bench implements nvfp4 with the "
                                   "default (ocp) convention only; this nvfp4 uses convention "
                                   "'torchao+tensor_scale=False' (tensor_scale=False, ")


def test_golden_tensor_core_refuses_it_too():
    x = np.random.default_rng(1).standard_normal((16, 32)).astype(np.float32)
    qw = get_format("nvfp4", element_ties="away").quantize(x)
    qx = NVFP4().quantize(x[0])
    with pytest.raises(ValueError, match="tensor core implements nvfp4 with the default"):
        tensor_core_spec().gemv(qw, qx)
    tensor_core_spec().gemv(NVFP4().quantize(x), qx)  # the default is accepted
