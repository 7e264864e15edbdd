"""The harness on designs other than the MACs: the combinational toy adder of docs/sim.md
(latency 0, no clock ports) and a two-stage pipeline (latency 2), on both simulators."""
import numpy as np
import pytest

from mactile.rtl.registry import Design
from mactile.sim import Bench, Vectors
from mactile.sim.testing import SIM_PARAMS, run_or_skip

pytest.importorskip("amaranth")

from amaranth.hdl import Module, Signal  # noqa: E402
from amaranth.lib import wiring  # noqa: E402
from amaranth.lib.wiring import In, Out  # noqa: E402

pytestmark = pytest.mark.sim


class Adder(wiring.Component):
    """Combinational ``sum = a + b``; with ``stages`` > 0, that many registers after it."""

    def __init__(self, *, bits=4, stages=0):
        self.bits, self.stages = bits, stages
        super().__init__({"a": In(bits), "b": In(bits), "sum": Out(bits + 1)})

    latency = property(lambda self: self.stages)
    module_name = property(lambda self: f"adder{self.bits}_s{self.stages}")

    def elaborate(self, platform):
        m = Module()
        x = self.a + self.b
        for k in range(self.stages):
            r = Signal(self.bits + 1, name=f"stage{k}")
            m.d.sync += r.eq(x)
            x = r
        m.d.comb += self.sum.eq(x)
        return m


class AdderBench(Bench):  # as in docs/sim.md
    suites = ("exhaustive",)

    def __init__(self, *, bits=4, stages=0):
        self.bits = bits

    def vectors(self, suite, *, lanes, count, rng):
        self.check_suite(suite)
        n = 1 << self.bits
        a, b = (x.reshape(-1) for x in np.indices((n, n)))
        pad = -len(a) % lanes
        a, b = (np.pad(x, (0, pad)).reshape(-1, lanes) for x in (a, b))
        mask = (np.arange(a.size) < n * n).reshape(a.shape)
        return Vectors({"a": a, "b": b}, {"sum": a + b}, mask=mask)


def design(stages):
    return Design(f"adder-s{stages}", "toy adder", builder=f"{__name__}:Adder",
                  params={"bits": 4, "stages": stages}, bench=f"{__name__}:AdderBench")


@pytest.mark.parametrize("stages", [0, 2], ids=["comb", "pipelined"])
@pytest.mark.parametrize("sim", SIM_PARAMS)
def test_latency_zero_and_two(sim, stages, tmp_path):
    r = run_or_skip(design(stages), sim=sim, lanes=3, depth=16, test_dir=tmp_path)
    assert r.ok and r.vectors == 256 and r.latency == stages, r.summary()


@pytest.mark.parametrize("sim", SIM_PARAMS)
def test_a_wrong_latency_claim_is_caught(sim, tmp_path):
    class Liar(Adder):
        latency = property(lambda self: 1)

    r = run_or_skip(design(2), sim=sim, component=Liar(bits=4, stages=2), lanes=2, depth=8,
                    test_dir=tmp_path)
    assert not r.ok and r.mismatched > 200
    assert r.mismatches[0].text == "cycle 0 lane 1: a=0, b=1 -> sum: expected 1 got 0"
