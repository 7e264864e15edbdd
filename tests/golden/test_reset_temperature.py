"""Golden ReSET step-aware temperature policy: the defined FP32 functions, the estimator's
regimes, the threshold rule, step boundaries, and the sampler's distribution."""
import numpy as np
import pytest

from mactile.golden import ReductionLayout, StepAwareTemperature
from mactile.golden.reset_temperature import exp_f32, log_f32, scan_prefixes, uniform

SMALL = ReductionLayout(cluster=2, threads=64)


def test_exp_log_accuracy():
    x = -np.linspace(0, 86, 20001).astype(np.float32)
    e = exp_f32(x)
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(e / ref - 1)) < 1e-5
    assert exp_f32(np.float32(-200.0)) == 0 and exp_f32(np.float32(0.0)) == 1.0
    s = np.geomspace(1, 1e30, 5001).astype(np.float32)
    assert np.max(np.abs(log_f32(s) - np.log(s.astype(np.float64)))) < 2e-5


def test_scan_total_and_prefix_order(rng):
    v = rng.uniform(0, 1, 1000).astype(np.float32)
    tot, G, order = scan_prefixes(v, SMALL)
    assert abs(float(tot) - v.astype(np.float64).sum()) < 1e-3
    # G is the inclusive prefix in scan order (up to FP32 rounding)
    o = np.argsort(order)
    np.testing.assert_allclose(G[o], np.cumsum(v[o].astype(np.float64)), rtol=1e-5)
    assert sorted(order.tolist()) == sorted(set(order.tolist()))


def test_uniform_is_deterministic_and_uniform():
    u = np.array([uniform(7, s, t) for s in range(4) for t in range(2000)])
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    assert uniform(7, 1, 5) == uniform(7, 1, 5) != uniform(7, 2, 5)


def _logits(rng, B, V, spread):
    return (rng.standard_normal((B, V)) * spread).astype(np.float32)


def test_entropy_matches_float64(rng):
    z = _logits(rng, 3, 3000, np.array([[0.3], [3.0], [8.0]]))
    r = StepAwareTemperature(layout=SMALL).step(z, np.zeros(3000, bool))
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    H = -(p * np.log(np.maximum(p, 1e-300))).sum(1)
    np.testing.assert_allclose(r.entropy, H, rtol=2e-5, atol=2e-6)


def test_estimator_regimes_and_threshold(rng):
    """Window mean while t - t0 < w, within-step mean after; tau switches on Hstep > Hbar."""
    V, w = 500, 4
    sam = StepAwareTemperature(tau0=0.5, t_low=0.2, t_high=1.0, window=w, layout=SMALL, seed=3)
    mask = np.zeros(V, bool)
    Hs, hsteps, hbars, taus, temps = [], [], [], [], []
    for t in range(12):
        spread = 0.2 if t < 6 else 5.0  # high then low entropy
        r = sam.step(_logits(rng, 1, V, spread), mask)
        Hs.append(float(r.entropy[0]))
        hsteps.append(r.h_step[0]), hbars.append(r.h_bar[0]), taus.append(r.tau[0]), temps.append(r.temperature[0])
    for t in range(12):
        hbar = np.mean(Hs[: t + 1])
        assert hbars[t] == pytest.approx(hbar, rel=1e-12)
        if t < w:  # one step since t0 = 0: window of min(w, t+1)
            exp_step = np.mean(Hs[max(0, t - w + 1): t + 1])
        else:
            exp_step = np.mean(Hs[: t + 1])  # within-step mean (no boundary yet)
        assert hsteps[t] == pytest.approx(exp_step, rel=1e-12)
        tau = 0.5 if hsteps[t] <= hbars[t] else hsteps[t]
        assert taus[t] == tau
        assert temps[t] == np.float32(0.2 if Hs[t] < tau else 1.0)


def test_step_boundary_restarts_the_step(rng):
    V, w = 300, 3
    mask = np.ones(V, bool)  # every token ends a step: each position opens a new step
    sam = StepAwareTemperature(window=w, layout=SMALL)
    Hs = []
    for t in range(8):
        r = sam.step(_logits(rng, 1, V, 1.0), mask)
        Hs.append(float(r.entropy[0]))
        # t - t0 is 0 from t = 1 on: always the window regime over the last min(w, t+1)
        assert r.h_step[0] == pytest.approx(np.mean(Hs[max(0, t - w + 1):]), rel=1e-12)
    st = sam.state[0]
    assert st["t0"] == 7 and st["step_n"] == 1


def test_sampling_distribution(rng):
    V = 64
    z = _logits(rng, 1, V, 1.5)
    sam = StepAwareTemperature(tau0=1e9, t_low=0.7, t_high=0.7, layout=SMALL, seed=11)
    counts = np.zeros(V)
    n = 2000
    for _ in range(n):
        counts[sam.step(z, np.zeros(V, bool)).tokens[0]] += 1
    p = np.exp((z[0] - z[0].max()) / 0.7)
    p /= p.sum()
    exp_ = n * p
    keep = exp_ > 5
    chi2 = float((((counts - exp_) ** 2) / exp_)[keep].sum())
    assert chi2 < 2.0 * keep.sum() + 30  # loose: catches a wrong temperature or offset


def test_batch_independence_and_errors(rng):
    z = _logits(rng, 2, 200, 1.0)
    a = StepAwareTemperature(layout=SMALL, seed=5).step(z, np.zeros(200, bool))
    b = StepAwareTemperature(layout=SMALL, seed=5).step(z[1:], np.zeros(200, bool), seq_ids=[1])
    assert a.tokens[1] == b.tokens[0] and a.entropy[1] == b.entropy[0]
    s = StepAwareTemperature(layout=SMALL)
    with pytest.raises(ValueError, match="NaN"):
        s.step(np.full((1, 10), np.nan, np.float32), np.zeros(10, bool))
    with pytest.raises(ValueError, match="step_end_mask"):
        s.step(z, np.zeros(5, bool))
    with pytest.raises(ValueError, match="float16 or float32"):
        s.step(z.astype(np.float64), np.zeros(200, bool))
    with pytest.raises(ValueError, match=r"t_low \(a temperature\) must be > 0, got 0.0"):
        StepAwareTemperature(t_low=0)
