"""RaZeR/NVFP4 decoders, FP32 adder and tensor cores in Verilator against the golden model
(mactile.sim harness; every output of every checked cycle compared exactly).

Split (Verilator build time grows with the array; simulation itself is cheap):

* decoders: exhaustive (every code x every register value x every scale byte);
* ``fp32-adder``: 2**16 random/cancellation/tie vectors;
* the default **16 x 16** ``nvfp4-tc`` and ``razer-tc`` (one build each) run every
  suite: ``full`` (corners + ties + long + random in one run) and the end-to-end
  64 x 256 GEMV;
* small variants for the other generator paths: fixed accumulator with every pipeline
  cut and ``cols < block_size`` (RaZeR 2 x 4, also the end-to-end GEMV), FP4 elements
  with E3M3 weight scales, fixed, no cuts (NVFP4 3 x 8);
* two deliberately broken designs (ties-away accumulator rounding, inverted special-value
  sign) must fail;
* the output-stationary cores (``*-tc-os``) on small arrays: ``full`` for NVFP4 2 x 4,
  RaZeR 4 x 4 and MXFP4 2 x 2, NVFP4 2 x 4 with ``drain="row"``, RaZeR fixed with every
  cut and 4 elements per unit per cycle (2 x 2 per-unit drain, 2 x 4 row drain), the
  end-to-end ``gemm`` on 2 x 4, and a ties-away adder (either drain) that must fail.

``slow``: longer random and long-accumulation runs of the 16 x 16 cores; the 16 x 16
output-stationary cores end to end.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth")
pytest.importorskip("cocotb")

from mactile.golden.tensorcore import epilogue, golden_format, tensor_core_spec  # noqa: E402
from mactile.rtl.fp4tc.decoders import DecoderUnit, ElementDecoder  # noqa: E402
from mactile.rtl.fp4tc.fp32add import FP32Adder  # noqa: E402
from mactile.rtl.fp4tc.outer import OuterCore  # noqa: E402
from mactile.rtl.fp4tc.tensorcore import TensorCore  # noqa: E402
from mactile.rtl.registry import DESIGNS  # noqa: E402
from mactile.sim import SimulatorUnavailable, default_build_root, run  # noqa: E402
from mactile.sim.benches.fp4tc import gemv_operands  # noqa: E402

pytestmark = [pytest.mark.sim,
              pytest.mark.filterwarnings("ignore:.*created but never used")]


@pytest.fixture
def sim_run(tmp_path):
    """``run`` with a shared build cache and this test's own run folder (runs of one
    design with different parameters must not share a folder under xdist)."""
    def go(design, **kw):
        return _run(design, test_dir=tmp_path / "run", **kw)
    return go


def _run(design, **kw):
    try:
        return run(design, build_root=default_build_root(), **kw)
    except SimulatorUnavailable as e:
        pytest.skip(str(e))


def _ok(r):
    assert r.vectors > 0
    assert r.ok, "\n".join([r.summary()] + [m.text for m in r.mismatches])
    return r


# ------------------------------------------------------------------------------- decoders
@pytest.mark.parametrize("name, settings", [("nvfp4-decoder", 1), ("razer-act-decoder", 16),
                                            ("razer-weight-decoder", 256), ("mxfp4-decoder", 1)])
def test_decoder_exhaustive(name, settings, sim_run):
    r = _ok(sim_run(name, suite="exhaustive"))
    assert r.notes["register_settings"] == settings
    assert r.vectors == settings * 256  # each vector: all 16 codes at once


@pytest.mark.parametrize("name", ["nvfp4-decoder", "razer-weight-decoder"])
def test_decoder_random(name, sim_run):
    # Random codes and scale bytes every cycle (the stimulus the power analysis replays).
    r = _ok(sim_run(name, suite="random", vectors=3000))
    assert r.vectors == 3000 and r.notes["register_settings"] == 1


def test_fp32_adder_random(sim_run):
    _ok(sim_run("fp32-adder", suite="random", vectors=1 << 16))


# ------------------------------------------------------------------------------- 16 x 16
CORES = ["nvfp4-tc", "razer-tc", "mxfp4-tc"]


@pytest.mark.parametrize("name", CORES)
def test_tensor_core_gemv_end_to_end(name, sim_run):
    """64 x 256 GEMV quantized by the golden quantizers, every block through the 16 x 16
    core; every accumulator of every cycle and the final ones match the golden GEMV."""
    seed = 7
    r = _ok(sim_run(name, suite="gemv", lanes=1, seed=seed))
    spec = tensor_core_spec(**{k: v for k, v in DESIGNS[name].params.items()})
    wf, af = golden_format(spec.weight), golden_format(spec.act)
    qw, qx = gemv_operands(wf, af, np.random.default_rng(seed))
    golden = spec.gemv(qw, qx)
    assert r.notes["final_acc"] == [int(v) for v in golden["acc"]]
    beats = spec.beats  # every cycle of every tile checked from its first block's last beat
    assert r.vectors == 64 // 16 * (256 // spec.block_size * beats - (beats - 1))
    # and the whole chain (tensor scales applied outside the core) is the quantized GEMV
    y = epilogue(golden["acc"], qw.tensor_scale, qx.tensor_scale)
    ref = qw.dequantize() @ qx.dequantize()
    assert np.allclose(y, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("name", CORES)
def test_tensor_core_full(name, sim_run):
    """corners + ties + long + random in one run (one simulator start)."""
    r = _ok(sim_run(name, suite="full", lanes=1))
    parts = {k: v["fp32_roundings"] for k, v in r.notes["parts"].items()}
    assert parts["ties"]["tie"] >= 1000 and parts["ties"]["inexact"] > 0
    for p in ("random", "long"):
        assert parts[p]["tie"] > 0 and parts[p]["inexact"] > 0
    assert parts["corners"]["special"] > 0  # NaN scales reached the accumulators


@pytest.mark.slow
@pytest.mark.parametrize("name", CORES)
@pytest.mark.parametrize("suite, n", [("random", 40000), ("long", 40000), ("ties", 10000)])
def test_tensor_core_long_runs(name, suite, n, sim_run):
    _ok(sim_run(name, suite=suite, lanes=1, vectors=n, seed=11))


# ------------------------------------------------------------------------------- variants
VARIANTS = {
    "razer-fixed-2x4-all-cuts": ("razer-tc", {"rows": 2, "cols": 4, "acc": "fixed",
                                              "pipeline": ["input", "dot", "product", "scaled"]}),
    "nvfp4-e3m3-fixed-3x8-no-cuts": ("nvfp4-tc", {"rows": 3, "cols": 8, "acc": "fixed",
                                                  "weight_scale": "e3m3", "pipeline": []}),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tensor_core_variants(variant, sim_run):
    name, params = VARIANTS[variant]
    _ok(sim_run(name, suite="full", lanes=1, params=params))


def test_fixed_variant_gemv(sim_run):
    """The fixed accumulator over the end-to-end GEMV equals the exact sum (golden test)
    and the RTL matches it every cycle, with blocks streamed over 4 beats."""
    _ok(sim_run("razer-tc", suite="gemv", lanes=1, params=VARIANTS["razer-fixed-2x4-all-cuts"][1]))


# ------------------------------------------------------------------------------- mutants
class _TiesAwayAdder(FP32Adder):
    round_up = staticmethod(lambda lsb, guard, rest: guard)  # ties away from zero


class _TiesAwayCore(TensorCore):
    adder_cls = _TiesAwayAdder


class _SignFlipDecoder(ElementDecoder):
    special_negative = staticmethod(lambda sign_bit: ~sign_bit)


class _SignFlipUnit(DecoderUnit):
    decoder_cls = _SignFlipDecoder


def test_broken_accumulator_rounding_is_caught(sim_run):
    r = sim_run("nvfp4-tc", suite="ties", lanes=1, params={"rows": 1},
                component=_TiesAwayCore(rows=1))
    assert r.vectors > 0 and r.mismatched > 0


class _TruncatingProductCore(TensorCore):
    product_round_up = staticmethod(lambda lsb, guard, sticky: 0)  # MXFP4 products truncated


def test_broken_product_rounding_is_caught(sim_run):
    """The E8M0 corners (scales 2**-127 x 2**-127 and the like) round products into FP32's
    subnormal range: a core that truncates them fails."""
    params = {**DESIGNS["mxfp4-tc"].params, "rows": 1}
    params.pop("w_specials"), params.pop("a_specials")
    r = sim_run("mxfp4-tc", suite="corners", lanes=1, params={"rows": 1},
                component=_TruncatingProductCore(**params))
    assert r.vectors > 0 and r.mismatched > 0


def test_broken_special_sign_is_caught(sim_run):
    r = sim_run("razer-act-decoder", suite="exhaustive",
             component=_SignFlipUnit(operand="razer-act"))
    assert r.vectors > 0 and r.mismatched > 0


# ------------------------------------------------------------------------------- output-stationary
# Small arrays (the 16 x 16 default has 256 FP32 back ends: minutes of Verilator build).
OS_SMALL = {
    "nvfp4-2x4": ("nvfp4-tc-os", {"rows": 2, "cols": 4}),
    "razer-4x4": ("razer-tc-os", {"rows": 4, "cols": 4}),
    "mxfp4-2x2": ("mxfp4-tc-os", {"rows": 2, "cols": 2}),
    # one back end per row draining its units one per cycle: column j lands j cycles later
    "nvfp4-2x4-row": ("nvfp4-tc-os", {"rows": 2, "cols": 4, "drain": "row"}),
}


@pytest.mark.parametrize("variant", list(OS_SMALL))
def test_outer_core_full(variant, sim_run):
    """corners + ties + long + random, lifted to the array (row 0 replays the row core's
    sequences, the other rows other activation blocks), every accumulator every cycle."""
    name, params = OS_SMALL[variant]
    r = _ok(sim_run(name, suite="full", lanes=1, params=params))
    parts = {k: v["fp32_roundings"] for k, v in r.notes["parts"].items()}
    # counted per unit and block: a 16-beat block step is 1 cycle in 16 here
    assert parts["ties"]["tie"] >= 100 and parts["ties"]["inexact"] > 0
    for p in ("random", "long"):
        assert parts[p]["tie"] > 0 and parts[p]["inexact"] > 0
    assert parts["corners"]["special"] > 0  # NaN scales reached the accumulators


def test_outer_core_gemm_end_to_end(sim_run):
    """64 x 256 weights against 4 activation vectors through a 2 x 4 array, tile by tile:
    every accumulator every cycle, and the last ones equal OuterProductSpec.gemm."""
    from mactile.golden.tensorcore import outer_product_spec

    name, params = OS_SMALL["nvfp4-2x4"]
    seed = 5
    r = _ok(sim_run(name, suite="gemm", lanes=1, params=params, seed=seed))
    full = {k: v for k, v in {**DESIGNS[name].params, **params}.items()
            if k not in ("w_specials", "a_specials")}
    spec = outer_product_spec(**full)
    wf, af = golden_format(spec.weight), golden_format(spec.act)
    rng = np.random.default_rng(seed)
    qw, qx0 = gemv_operands(wf, af, rng)
    qxs = [qx0] + [gemv_operands(wf, af, rng)[1] for _ in range(2 * spec.rows - 1)]
    golden = spec.gemm(qw, qxs)
    assert r.notes["final_acc"] == [[int(v) for v in row] for row in golden["acc"]]
    # the epilogue of row 0 is the quantized GEMV
    y = epilogue(golden["acc"][0], qw.tensor_scale, qxs[0].tensor_scale)
    ref = qw.dequantize() @ qxs[0].dequantize()
    assert np.allclose(y, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("drain, cols", [("unit", 2), ("row", 4)])
def test_outer_core_fixed_all_cuts_k4(drain, cols, sim_run):
    """The other generator paths: fixed accumulator, every pipeline cut, 4 element pairs
    per unit per cycle (4 beats a block), RaZeR decoders; the row drain with as many
    columns as beats (a row's back end busy every cycle)."""
    _ok(sim_run("razer-tc-os", suite="full", lanes=1,
                params={"rows": 2, "cols": cols, "k_per_cycle": 4, "acc": "fixed",
                        "drain": drain, "pipeline": ["input", "dot", "product", "scaled"]}))


class _TiesAwayOuter(OuterCore):
    adder_cls = _TiesAwayAdder


@pytest.mark.parametrize("drain", ["unit", "row"])
def test_broken_outer_accumulator_rounding_is_caught(drain, sim_run):
    r = sim_run("nvfp4-tc-os", suite="ties", lanes=1,
                params={"rows": 1, "cols": 2, "drain": drain},
                component=_TiesAwayOuter(rows=1, cols=2, drain=drain))
    assert r.vectors > 0 and r.mismatched > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nvfp4-tc-os", "razer-tc-os"])
def test_outer_core_16x16_gemm(name, sim_run):
    """The registered 16 x 16 arrays end to end (long Verilator build)."""
    _ok(sim_run(name, suite="gemm", lanes=1))
