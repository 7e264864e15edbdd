"""DialectFP4 activation path in simulation (cocotb + Verilator; Icarus once), against the
golden models, through the project harness (mactile.sim.run). docs/rtl-dialect.md."""
from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
import pytest

from mactile.golden.dialect import N_DIALECTS, FORMATBOOK

pytest.importorskip("amaranth", reason="needs the [sim] extra (Amaranth)")
from mactile.sim import SimulatorUnavailable, run  # noqa: E402

pytestmark = pytest.mark.sim

QUANTIZER_CORNERS = {"zero", "subnormal", "subnormal+min-normal", "max-rounding", "max-7.75",
                     "count-tie", "count-tie+-1", "outlier", "fp16-max", "every-code",
                     *(f"dialect-{d}" for d in range(N_DIALECTS))}


@pytest.fixture(scope="module")
def build_root(tmp_path_factory):
    """One build cache for the module (shared by xdist workers; the harness locks builds)."""
    env = os.environ.get("MACTILE_SIM_BUILD")
    return env or str(tmp_path_factory.getbasetemp().parent / "sim_build")


def _run(design, build_root, tmp_path, **kw):
    # One lane: these units are wide (up to 64 x 16 input bits), a lane moves a whole block
    # per cycle, and every extra lane is another copy of the netlist for Verilator to compile.
    kw.setdefault("lanes", 1)
    try:
        return run(design, build_root=build_root, test_dir=tmp_path, **kw)
    except SimulatorUnavailable as e:
        pytest.skip(str(e))


def _assert_ok(r):
    assert r.vectors > 0
    assert r.ok, "\n".join(m.text for m in r.mismatches)


# ------------------------------------------------------------------ quantizer
def test_quantizer_default(build_root, tmp_path):
    """Block 32, the paper's 5-cycle split: every corner stream and 8192 blocks in all."""
    r = _run("dialect-quantizer", build_root, tmp_path, suite="random", vectors=8192, seed=1)
    _assert_ok(r)
    assert r.latency == 5 and r.vectors >= 8192
    assert QUANTIZER_CORNERS <= set(r.notes["streams"])
    assert all(n > 0 for n in r.notes["dialects_hit"])


def test_quantizer_block16_odd_ties_three_stages(build_root, tmp_path):
    r = _run("dialect-quantizer", build_root, tmp_path, suite="random", vectors=4096, seed=2,
             params={"block_size": 16, "count_tie": "odd", "registers": "align,count"})
    _assert_ok(r)
    assert r.latency == 2


def test_a_broken_quantizer_is_caught(build_root, tmp_path):
    """The odd-tie unit checked against the even-tie golden model must fail on exactly
    the blocks whose counts tie (the count-tie streams, and zero/subnormal blocks whose
    counts are 0-0)."""
    from mactile.golden.dialect import CountTie
    from mactile.rtl.dialect.quantizer import DialectQuantizer
    from mactile.sim.benches.dialect import QuantizerBench, golden_two_stage

    params = {"block_size": 16, "count_tie": "even", "registers": "align,count"}
    comp = DialectQuantizer(block_size=16, count_tie="odd", registers="align,count")
    r = _run("dialect-quantizer", build_root, tmp_path, suite="corners", seed=2,
             params=params, component=comp)
    vec = QuantizerBench(**params).vectors("corners", lanes=1, count=None,
                                           rng=np.random.default_rng(2))
    x = np.stack([vec.inputs[f"x__{j}"][vec.mask] for j in range(16)], -1)
    x16 = x.astype(np.uint16).view(np.float16)
    ties = golden_two_stage(x16, CountTie.ODD)[1] != golden_two_stage(x16, CountTie.EVEN)[1]
    assert ties.sum() >= 32 and r.mismatched == ties.sum()


def test_quantizer_clock_gated(build_root, tmp_path):
    """clock_gating on: the same suite (corners, random blocks with a bubble in 17)
    passes, the bubbles' outputs now the last valid block's; checked against the
    ungated expectation the same unit fails on the bubbles, so the hold is what is
    tested."""
    from mactile.rtl.dialect.quantizer import DialectQuantizer

    r = _run("dialect-quantizer", build_root, tmp_path, suite="random", vectors=4096, seed=5,
             params={"block_size": 16, "clock_gating": True})
    _assert_ok(r)
    assert r.latency == 5
    wrong = _run("dialect-quantizer", build_root, tmp_path, suite="random", vectors=4096,
                 seed=5, params={"block_size": 16},
                 component=DialectQuantizer(block_size=16, clock_gating=True))
    assert wrong.mismatched > 0


@pytest.mark.slow
@pytest.mark.parametrize("params", [
    {"block_size": 64},
    {"block_size": 32, "registers": "none"},
    {"block_size": 32, "count_tie": "odd", "registers": "exp_max,pair,count"},
], ids=["b64", "b32-comb", "b32-odd-3stage"])
def test_quantizer_variants(build_root, tmp_path, params):
    r = _run("dialect-quantizer", build_root, tmp_path, suite="random", vectors=20000,
             seed=3, params=params)
    _assert_ok(r)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [10, 11, 12, 13])
def test_quantizer_long_random_sweep(build_root, tmp_path, seed):
    r = _run("dialect-quantizer", build_root, tmp_path, suite="random", vectors=200_000,
             seed=seed)
    _assert_ok(r)


@pytest.mark.slow
def test_quantizer_on_icarus(build_root, tmp_path):
    r = _run("dialect-quantizer", build_root, tmp_path, suite="corners", sim="icarus",
             params={"block_size": 16})
    _assert_ok(r)


# ------------------------------------------------------------------ dequantizer
def test_dequantizer_exhaustive(build_root, tmp_path):
    """Every code in every position under every dialect, as valid cycles and bubbles."""
    r = _run("dialect-dequantizer", build_root, tmp_path, suite="exhaustive")
    _assert_ok(r)
    assert r.latency == 1 and r.vectors == 2 * N_DIALECTS * 16


def test_dequantizer_clock_gated_exhaustive(build_root, tmp_path):
    """clock_gating on: valid cycles exact, every bubble holds the last valid block."""
    r = _run("dialect-dequantizer", build_root, tmp_path, suite="exhaustive",
             params={"block_size": 16, "clock_gating": True})
    _assert_ok(r)
    assert r.vectors == 2 * N_DIALECTS * 16


def test_dequantizer_on_icarus(build_root, tmp_path):
    r = _run("dialect-dequantizer", build_root, tmp_path, suite="exhaustive", sim="icarus",
             params={"block_size": 16})
    _assert_ok(r)


def test_a_broken_dequantizer_is_caught(build_root, tmp_path, monkeypatch):
    """A table with dialect 15's index 5 read as 3.0 (the common value) must fail."""
    from mactile.rtl.dialect import dequantizer as dq

    book = FORMATBOOK.copy()
    book[15, 5] = book[0, 5]
    monkeypatch.setattr(dq, "FORMATBOOK", book)
    comp = dq.DialectDequantizer(block_size=16)
    r = _run("dialect-dequantizer", build_root, tmp_path, suite="exhaustive",
             params={"block_size": 16}, component=comp)
    # Dialect 15's 16 blocks, each holding every code, as valid cycles and as bubbles.
    assert r.mismatched == 32


# ------------------------------------------------------------------ MSE selector
def test_mse_selector_block16(build_root, tmp_path):
    r = _run("dialect-mse-selector", build_root, tmp_path, suite="random", vectors=4096,
             seed=4, params={"block_size": 16, "dialects_per_cycle": 16})
    _assert_ok(r)
    assert r.latency == 8
    assert {f"mse-dialect-{d}" for d in range(N_DIALECTS)} | {"mse-tie"} <= set(r.notes["streams"])
    assert all(n > 0 for n in r.notes["dialects_hit"])


@pytest.mark.parametrize("dpc", [8, pytest.param(4, marks=pytest.mark.slow)])
def test_mse_selector_in_rounds(build_root, tmp_path, dpc):
    """Dialects over 16 / dpc rounds on a held block: bit-exact with the golden MSE
    selection (ties to the lower dialect across rounds), outputs held between blocks."""
    r = _run("dialect-mse-selector", build_root, tmp_path, suite="random", vectors=2048,
             seed=4, params={"block_size": 16, "dialects_per_cycle": dpc})
    _assert_ok(r)
    assert r.latency == 16 // dpc + 6
    assert {"mse-tie"} <= set(r.notes["streams"])
    assert all(n > 0 for n in r.notes["dialects_hit"])


def test_a_round_argmin_that_prefers_later_ties_is_caught(build_root, tmp_path):
    """Replacing the running best on equal error (<= for <) picks the later of two tied
    dialects in different rounds: the tie corner blocks catch it."""
    from mactile.rtl.dialect.mse import DialectMseSelector

    class LaterTies(DialectMseSelector):
        def _take(self, first, r_err, best_err):
            return first | (r_err <= best_err)

    comp = LaterTies(block_size=16, dialects_per_cycle=8)
    r = _run("dialect-mse-selector", build_root, tmp_path, suite="corners",
             params={"block_size": 16, "dialects_per_cycle": 8}, component=comp)
    assert not r.ok and r.mismatched > 0
    assert "dialect: expected" in r.mismatches[0].text, r.mismatches[0].text


@pytest.mark.slow
@pytest.mark.parametrize("params", [
    {"block_size": 32},
    {"block_size": 32, "dialects_per_cycle": 16},
    {"block_size": 32, "frac_bits": 4, "err_frac_bits": 3, "registers": "error,sum_b,quantize",
     "dialects_per_cycle": 16},
    {"block_size": 64, "frac_bits": 8, "err_frac_bits": 16},
], ids=["b32-default", "b32-parallel", "b32-f4g3-3stage-parallel", "b64-exact-squares"])
def test_mse_selector_variants(build_root, tmp_path, params):
    r = _run("dialect-mse-selector", build_root, tmp_path, suite="random", vectors=20000,
             seed=5, params=params)
    _assert_ok(r)


# ------------------------------------------------------------------ chain
def test_chain_reproduces_the_golden_dot_product(build_root, tmp_path):
    """quantizer -> dequantizer -> mac-dialectfp4, every cycle against the golden model;
    then the per-block results sum to the exact dot product of the golden-quantized
    vectors (DialectFP4 two-stage activations, MSE-quantized weights)."""
    from mactile.golden.dialect import DialectFP4, DialectSelect

    r = _run("dialect-chain", build_root, tmp_path, suite="random", vectors=384, seed=6)
    _assert_ok(r)
    assert r.latency == 5 + 1 + 1 + 32

    # A whole dot product, block by block through the bench's golden chain model, must
    # equal the format-level golden dequantized dot product exactly.
    rng = np.random.default_rng(7)
    a = rng.standard_normal(32 * 24) * 3
    w = rng.standard_normal(32 * 24)
    qa = DialectFP4().quantize(a)
    qw = DialectFP4(select=DialectSelect.MSE).quantize(w)
    from mactile.golden.mac import MacDatapath
    dp = MacDatapath(a_format="dialectfp4", w_format="dialectfp4")
    acc, exp = dp.dot(qa.codes.reshape(-1, 32), qw.codes.reshape(-1, 32),
                      a_dialect=qa.meta.reshape(-1), w_dialect=qw.meta.reshape(-1),
                      a_se=qa.scales.reshape(-1), w_se=qw.scales.reshape(-1))
    total = sum(Fraction(int(c)) * Fraction(2) ** int(e) for c, e in zip(acc, exp))
    exact = sum(Fraction(float(x)) * Fraction(float(y))
                for x, y in zip(qa.dequantize().reshape(-1), qw.dequantize().reshape(-1)))
    assert total == exact
