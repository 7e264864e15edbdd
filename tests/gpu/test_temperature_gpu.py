"""ReSET temperature kernel on the GPU: every decision, entropy and sampled token equal to
the golden model's (same reduction layout), across steps, step boundaries and both branches."""
import numpy as np
import pytest

from fp4_gpu_util import GPU, cupy
from mactile.golden import StepAwareTemperature

pytestmark = GPU


def _run(rng, B, V, steps, dtype, *, window=8, tau0=0.8, seed=17, cluster=8):
    cp = cupy()
    from mactile.gpu import StepAwareTemperatureGPU
    from mactile.gpu.temperature import layout_for
    gold = StepAwareTemperature(tau0=tau0, t_low=0.1, t_high=1.0, window=window, seed=seed,
                                layout=layout_for(cluster))
    dev = StepAwareTemperatureGPU(B, tau0=tau0, t_low=0.1, t_high=1.0, window=window, seed=seed, cluster=cluster)
    assert dev.layout == layout_for(cluster)
    # ~20% of the vocabulary ends a step, so boundaries happen often
    mask = rng.random(V) < 0.2
    mask_d = cp.asarray(mask.astype(np.uint8))
    seen_low = seen_high = seen_step_rel = 0
    for t in range(steps):
        spread = rng.uniform(0.2, 6.0, (B, 1))
        z = (rng.standard_normal((B, V)) * spread).astype(dtype)
        g = gold.step(z, mask)
        d = StepAwareTemperatureGPU.to_result(dev.step(cp.asarray(z), mask_d, sync=True))
        np.testing.assert_array_equal(d.entropy, g.entropy, err_msg=f"entropy, step {t}")
        np.testing.assert_array_equal(d.h_bar, g.h_bar, err_msg=f"h_bar, step {t}")
        np.testing.assert_array_equal(d.h_step, g.h_step, err_msg=f"h_step, step {t}")
        np.testing.assert_array_equal(d.tau, g.tau, err_msg=f"tau, step {t}")
        np.testing.assert_array_equal(d.temperature, g.temperature, err_msg=f"T, step {t}")
        np.testing.assert_array_equal(d.tokens, g.tokens, err_msg=f"token, step {t}")
        seen_low += int((g.temperature < 0.5).sum())
        seen_high += int((g.temperature > 0.5).sum())
        seen_step_rel += int((g.tau != tau0).sum())
    return seen_low, seen_high, seen_step_rel


@pytest.mark.parametrize("cluster", [16, 8])
def test_matches_golden_over_steps(rng, cluster):
    lo, hi, rel = _run(rng, B=3, V=5003, steps=24, dtype=np.float32, cluster=cluster)
    assert lo and hi and rel  # both temperatures and the step-relative threshold occurred


@pytest.mark.parametrize("cluster", [16, 8])
def test_matches_golden_fp16_qwen_vocab(rng, cluster):
    _run(rng, B=2, V=151936, steps=3, dtype=np.float16, window=32, cluster=cluster)


def test_window_longer_than_a_step(rng):
    """Steps longer than the window (the running-mean branch) and a window of 1."""
    _run(rng, B=2, V=3001, steps=12, dtype=np.float32, window=1)


def test_errors():
    cp = cupy()
    from mactile.gpu import StepAwareTemperatureGPU
    s = StepAwareTemperatureGPU(2)
    with pytest.raises(ValueError, match=r"\[2, V\]"):
        s.step(cp.zeros((3, 10), cp.float32), cp.zeros(10, cp.uint8))
    with pytest.raises(ValueError, match="step_end_mask"):
        s.step(cp.zeros((2, 10), cp.float32), cp.zeros(9, cp.uint8))
    with pytest.raises(ValueError, match="exceeds"):
        s.step(cp.zeros((2, 8 * 1024 * 32 + 1), cp.float32), cp.zeros(8 * 1024 * 32 + 1, cp.uint8))
    s16 = StepAwareTemperatureGPU(2, cluster=16)
    with pytest.raises(ValueError, match="exceeds"):
        s16.step(cp.zeros((2, 16 * 1024 * 32 + 1), cp.float32), cp.zeros(16 * 1024 * 32 + 1, cp.uint8))
    with pytest.raises(ValueError, match="cluster"):
        StepAwareTemperatureGPU(2, cluster=4)
