"""pytest helpers for designs verified with :func:`mactile.sim.run`.

>>> import pytest                                                # doctest: +SKIP
>>> from mactile.sim.testing import SIM_PARAMS, run_or_skip      # doctest: +SKIP
>>> @pytest.mark.parametrize("sim", SIM_PARAMS)                  # doctest: +SKIP
... def test_my_design(sim, tmp_path):
...     r = run_or_skip("my-design", sim=sim, test_dir=tmp_path)
...     assert r.ok, r.summary()
"""
from __future__ import annotations

import pytest

from .harness import run
from .simulators import SIMULATORS, SimulatorUnavailable, simulator_status

__all__ = ["SIM_PARAMS", "run_or_skip", "first_available"]

#: ``pytest.param`` per simulator, marked ``sim``, with readable ids.
SIM_PARAMS = [pytest.param(s, id=s, marks=pytest.mark.sim) for s in SIMULATORS]


def run_or_skip(design, **kwargs):
    """:func:`mactile.sim.run`, turning a missing simulator into a pytest skip that says
    what to install."""
    try:
        return run(design, **kwargs)
    except SimulatorUnavailable as e:
        pytest.skip(str(e))


def first_available() -> str:
    """The first simulator present (Verilator before Icarus), or a pytest skip."""
    reasons = []
    for s in SIMULATORS:
        ok, why = simulator_status(s)
        if ok:
            return s
        reasons.append(why)
    pytest.skip("no simulator: " + "; ".join(reasons))
