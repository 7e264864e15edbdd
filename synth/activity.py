"""Switching activity for the power analysis: measured from a design's stimulus.

OpenSTA needs to know how often each net toggles. Four methods, each named in every
record the flow writes (``activity_method``):

``sim`` (default with Debian's OpenSTA)
    The synthesized netlist is simulated under the design's stimulus
    (:mod:`.gatesim`, zero delay) and every net's toggle rate is counted; the power is
    OpenSTA's per-pin power at those rates (:mod:`.pinpower`).
``ports``
    Each input port bit's toggle rate (transitions per clock cycle) and duty cycle (the
    fraction of cycles it is 1) are measured from the design's stimulus and given to
    OpenSTA with ``set_power_activity -input_ports``; OpenSTA propagates them through the
    logic with its probabilistic model. The reset is held low (activity 0, duty 0). The
    model treats every gate input as independent and adds up rates along XOR and carry
    chains, so arithmetic designs get rates far above one transition per cycle
    (docs/synthesis.md compares it with ``sim``).
``vcd`` (default where a newer OpenSTA/OpenROAD has ``read_vcd``)
    The RTL is simulated under the same stimulus with Amaranth's simulator and the dump
    read with ``read_vcd``: the ports and registers get their simulated activity, OpenSTA
    propagates the rest.
``global``
    Vectorless: every net toggles ``activity`` times per cycle with duty ``duty``
    (``set_power_activity -global``), for comparison with tools' default estimates.

The stimulus comes from the design's own testbench stimulus where the simulation harness
provides one (:func:`stimulus_for`), else uniform random words on every data input
(each bit toggles with probability 1/2 per cycle). With a *workload*
(:mod:`mactile.sim.workloads`: ``minilm``, real all-MiniLM-L6-v2 layer data, or
``synthetic``) the benches that can drive one build their stimulus from that layer's
operands instead (``workload_vectors``); the others keep their suite. The source is
recorded too, naming the workload.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .rtl import Rtl

__all__ = ["ActivityOptions", "PortActivity", "measure_port_activity", "stimulus_for",
           "uniform_stimulus", "harness_stimulus", "write_vcd"]

#: Default number of stimulus cycles measured (enough for a toggle rate within about
#: +-0.02 of its true value at 95% confidence: 2 sqrt(0.25 / 2000)).
DEFAULT_CYCLES = 2000
DEFAULT_SEED = 20261122
METHODS = ("auto", "sim", "ports", "vcd", "global")


@dataclass(frozen=True)
class ActivityOptions:
    """How switching activity is obtained.

    Parameters
    ----------
    method : {"auto", "sim", "ports", "vcd", "global"}
        ``auto``: ``vcd`` where the timing tool reads VCD, else ``sim``.
    global_activity : float
        Transitions per clock cycle of every net for ``global`` (OpenSTA's unit: a clock
        is 2.0).
    global_duty : float
        Duty cycle for ``global``.
    cycles : int
        Stimulus cycles measured or simulated.
    seed : int
        Seed of the stimulus.
    workload : {"bench", "minilm", "synthetic"}
        ``bench``: each design's test suite; else a layer's operands
        (:mod:`mactile.sim.workloads`) where the bench can drive them.
    reuse : int
        Quantizers under a workload: cycles per activation block (0: the layer's output
        width, one block per pass over the weight rows).
    """

    method: str = "auto"
    global_activity: float = 0.1
    global_duty: float = 0.5
    cycles: int = DEFAULT_CYCLES
    seed: int = DEFAULT_SEED
    workload: str = "bench"
    reuse: int = 0

    def __post_init__(self):
        from mactile.sim.workloads import WORKLOADS
        if self.workload not in WORKLOADS:
            raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, "
                             f"got {self.workload!r}")
        if not isinstance(self.reuse, int) or self.reuse < 0:
            raise ValueError(f"reuse must be a non-negative integer (0: the layer's output "
                             f"width), got {self.reuse!r}")
        if self.method not in METHODS:
            raise ValueError(f"activity method must be one of {', '.join(METHODS)}, "
                             f"got {self.method!r}")
        if not 0.0 <= self.global_activity <= 2.0:
            raise ValueError(f"global activity must be in [0, 2] transitions per cycle, "
                             f"got {self.global_activity}")
        if not 0.0 <= self.global_duty <= 1.0:
            raise ValueError(f"global duty must be in [0, 1], got {self.global_duty}")
        if self.cycles < 2:
            raise ValueError(f"stimulus cycles must be at least 2, got {self.cycles}")

    def key(self) -> dict:
        key = {"method": self.method, "global_activity": self.global_activity,
               "global_duty": self.global_duty, "cycles": self.cycles, "seed": self.seed}
        if self.workload != "bench":  # absent from the default key: old cache entries stay valid
            key.update(workload=self.workload, reuse=self.reuse)
        return key


@dataclass(frozen=True)
class PortActivity:
    """Measured activity of every input port bit.

    Attributes
    ----------
    source : str
        Where the stimulus came from (``"uniform-random"`` or the harness's name for it).
    cycles : int
    bits : tuple of (name, activity, duty)
        OpenSTA bit name, transitions per cycle, fraction of cycles high.
    """

    source: str
    cycles: int
    bits: tuple[tuple[str, float, float], ...]

    def tcl(self) -> str:
        """``set_power_activity`` commands for OpenSTA."""
        lines = [f"# input-port activity measured over {self.cycles} cycles of "
                 f"{self.source} stimulus"]
        for name, act, duty in self.bits:
            lines.append(f"set_power_activity -input_ports [get_ports {{{name}}}] "
                         f"-activity {act:.6f} -duty {duty:.6f}")
        return "\n".join(lines) + "\n"

    def mean(self) -> float:
        return float(np.mean([a for _, a, _ in self.bits])) if self.bits else 0.0


def _bit_matrix(values: Sequence[int], width: int) -> np.ndarray:
    """(cycles, width) array of 0/1, bit i of each value in column i."""
    nbytes = max(1, (width + 7) // 8)
    mask = (1 << width) - 1
    raw = b"".join((int(v) & mask).to_bytes(nbytes, "little") for v in values)
    bits = np.unpackbits(np.frombuffer(raw, np.uint8).reshape(len(values), nbytes),
                         axis=1, bitorder="little")
    return bits[:, :width]


def measure_port_activity(rtl: Rtl, stimulus: Mapping[str, Sequence[int]], *,
                          source: str) -> PortActivity:
    """Toggle rate and duty of every input bit under ``stimulus``.

    Parameters
    ----------
    rtl : Rtl
    stimulus : mapping of port name -> per-cycle values (unsigned encodings)
        Must cover every data input; all sequences of one length.
    source : str
        Recorded as :attr:`PortActivity.source`.
    """
    missing = [p.name for p in rtl.data_inputs if p.name not in stimulus]
    if missing:
        raise ValueError(f"{rtl.design}: stimulus has no values for input(s) {missing}")
    lengths = {len(v) for v in stimulus.values()}
    if len(lengths) != 1 or min(lengths) < 2:
        raise ValueError(f"{rtl.design}: stimulus sequences must share one length >= 2, "
                         f"got {sorted(lengths)}")
    cycles = lengths.pop()
    bits = []
    for port in rtl.inputs:
        if port.name == rtl.clock:
            continue  # the clock's activity comes from create_clock
        if port.name == rtl.reset or port.name not in stimulus:
            bits += [(b, 0.0, 0.0) for b in port.bits()]
            continue
        m = _bit_matrix(stimulus[port.name], port.width)
        act = np.count_nonzero(m[1:] != m[:-1], axis=0) / (cycles - 1)
        duty = m.mean(axis=0)
        bits += [(b, float(a), float(d)) for b, a, d in zip(port.bits(), act, duty)]
    return PortActivity(source=source, cycles=cycles, bits=tuple(bits))


def uniform_stimulus(rtl: Rtl, cycles: int, seed: int) -> dict[str, list[int]]:
    """Independent uniform random words on every data input, every cycle."""
    rng = np.random.default_rng(seed)
    out = {}
    for port in rtl.data_inputs:
        nbytes = (port.width + 7) // 8
        raw = rng.integers(0, 256, size=(cycles, nbytes), dtype=np.uint8)
        mask = (1 << port.width) - 1
        out[port.name] = [int.from_bytes(r.tobytes(), "little") & mask for r in raw]
    return out


def harness_stimulus(rtl: Rtl, cycles: int, seed: int, workload: str = "bench",
                     reuse: int = 0) -> tuple[dict[str, list[int]], str] | None:
    """The design's own testbench stimulus from the simulation harness, or None.

    The registry design's bench (:data:`mactile.sim.benches.BENCHES`) builds its
    ``activity_suite`` (default its first suite: ``random`` for the MACs, the corner
    streams, then golden-quantized and uniform operand codes) on one lane for ``cycles``
    vectors; its inputs are the stimulus.
    """
    try:
        from mactile.rtl.registry import get_design
        design = get_design(rtl.design)
    except (ImportError, ValueError):
        return None
    from mactile.sim.benches import bench_path, load_bench  # synth sits above sim

    if not bench_path(design):
        return None
    bench = load_bench(design)(**rtl.params)
    if workload != "bench" and hasattr(bench, "workload_vectors"):
        from mactile.sim.workloads import load_workload
        wl = load_workload(workload)
        vec = bench.workload_vectors(wl, cycles, np.random.default_rng(seed), reuse=reuse)
        stim = {name: [int(v) for v in np.asarray(arr)] for name, arr in vec.items()}
        n = len(next(iter(stim.values())))
        for port in rtl.data_inputs:
            stim.setdefault(port.name, [0] * n)
        extra = ""
        if "valid" in vec and np.asarray(vec["valid"]).mean() < 1:
            extra = f", one input block per {round(1 / max(np.asarray(vec['valid']).mean(), 1e-9))} cycles"
        return stim, f"workload {wl.name}{extra}"
    suite = bench.activity_suite or bench.suites[0]
    vec = bench.vectors(suite, lanes=1, count=cycles, rng=np.random.default_rng(seed))
    stim = {name: [int(v) for v in np.asarray(arr)[:, 0]] for name, arr in vec.inputs.items()}
    # Ports the bench leaves out are driven 0 by the harness: the same here.
    n = vec.cycles
    for port in rtl.data_inputs:
        stim.setdefault(port.name, [0] * n)
    note = (f" (workload {workload} not supported by this bench)"
            if workload != "bench" else "")
    return stim, f"{bench_path(design).rpartition(':')[2]} '{suite}' suite (golden-derived){note}"


def stimulus_for(rtl: Rtl, cycles: int = DEFAULT_CYCLES, seed: int = DEFAULT_SEED,
                 workload: str = "bench", reuse: int = 0
                 ) -> tuple[dict[str, list[int]], str]:
    """The design's stimulus: its testbench's (:func:`harness_stimulus`, under
    ``workload`` where the bench can drive it) where it has one, else uniform random
    words (:func:`uniform_stimulus`)."""
    got = harness_stimulus(rtl, cycles, seed, workload, reuse)
    if got is not None:
        return got
    return uniform_stimulus(rtl, cycles, seed), "uniform-random"


def write_vcd(rtl: Rtl, component, stimulus: Mapping[str, Sequence[int]], path,
              *, clock_ns: float) -> None:
    """Simulate ``component`` (the design ``rtl`` was made from) under ``stimulus`` with
    Amaranth's simulator and write every signal to the VCD file ``path`` (top scope
    ``rtl.top``), for ``read_vcd`` in a newer OpenSTA."""
    from amaranth.sim import Simulator

    signals = {}
    for p, _member, value in component.signature.flatten(component):
        signals["__".join(str(x) for x in p)] = value
    cycles = len(next(iter(stimulus.values())))
    sim = Simulator(component)
    if rtl.clock:
        sim.add_clock(clock_ns * 1e-9)

    async def bench(ctx):
        for t in range(cycles):
            for name, vals in stimulus.items():
                if name in signals:
                    ctx.set(signals[name], vals[t])
            if rtl.clock:
                await ctx.tick()
            else:
                await ctx.delay(clock_ns * 1e-9)

    sim.add_testbench(bench)
    with sim.write_vcd(str(path), traces=list(signals.values())):
        sim.run()
