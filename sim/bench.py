"""The design-facing half of the harness: what a design's testbench provides.

A :class:`Bench` turns a suite name into :class:`Vectors`: per-lane input streams and the
golden model's expected outputs, aligned to the input cycle. The harness drives them
through the lane wrapper and hands the responses to a :class:`Scoreboard`, which shifts
them by the design's latency and compares them in order, exactly.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

__all__ = ["Bench", "Vectors", "Stream", "pack_streams", "Scoreboard", "Mismatch"]


@dataclass
class Vectors:
    """Stimulus and expectations for one run, time along axis 0, lanes along axis 1.

    Parameters
    ----------
    inputs : dict of str to (cycles, lanes) int arrays
        Values driven on each input port (ports left out are driven 0).
    expected : dict of str to (cycles, lanes) int arrays
        Expected output of each checked port *for the inputs of that cycle*: the value
        the port shows ``latency`` cycles later. The scoreboard does the shifting.
    mask : (cycles, lanes) bool array, optional
        Which (cycle, lane) entries are checked (all by default; padding is not).
    count : int, optional
        Checked vectors, for vectors/s (default: ``mask.sum()``).
    labels : (cycles, lanes) int array and ``label_names``, optional
        Which named stream each entry belongs to (for mismatch reports).
    notes : dict
        Anything a bench wants in the result (e.g. the corner cases covered).
    """

    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    mask: np.ndarray | None = None
    count: int | None = None
    labels: np.ndarray | None = None
    label_names: list[str] = field(default_factory=list)
    notes: dict = field(default_factory=dict)

    def __post_init__(self):
        shapes = {np.shape(v) for v in (*self.inputs.values(), *self.expected.values())}
        if len(shapes) != 1:
            raise ValueError(f"all stimulus/expected arrays must share one (cycles, lanes) "
                             f"shape, got {sorted(shapes)}")
        (shape,) = shapes
        if len(shape) != 2:
            raise ValueError(f"stimulus arrays must be 2-D (cycles, lanes), got shape {shape}")
        if self.mask is None:
            self.mask = np.ones(shape, bool)
        self.mask = np.asarray(self.mask, bool)
        if self.mask.shape != shape:
            raise ValueError(f"mask shape {self.mask.shape} != stimulus shape {shape}")
        if self.count is None:
            self.count = int(self.mask.sum())

    @property
    def cycles(self) -> int:
        return self.mask.shape[0]

    @property
    def lanes(self) -> int:
        return self.mask.shape[1]

    def label(self, cycle: int, lane: int) -> str:
        if self.labels is None:
            return ""
        i = int(self.labels[cycle, lane])
        return self.label_names[i] if 0 <= i < len(self.label_names) else ""


@dataclass
class Stream:
    """One named sequence of cycles for one lane: ``{port: (T,) ints}``.

    ``check`` marks the cycles that count as vectors (default: all).
    """

    name: str
    inputs: dict[str, np.ndarray]
    check: np.ndarray | None = None

    def __len__(self):
        return len(next(iter(self.inputs.values())))


def pack_streams(streams: list[Stream], lanes: int, *, idle: dict[str, int] | None = None):
    """Lay streams out on ``lanes`` lanes, back to back, longest first onto the least
    loaded lane. Returns ``(inputs, mask, labels, label_names, where)``: padding cycles
    carry the ``idle`` values (default 0) and are unchecked; ``where[k] = (lane, start)``
    of stream ``k``."""
    if not streams:
        raise ValueError("no streams to pack")
    ports = sorted({p for s in streams for p in s.inputs})
    load = np.zeros(lanes, dtype=np.int64)
    where = [None] * len(streams)
    for k in sorted(range(len(streams)), key=lambda k: -len(streams[k])):
        lane = int(np.argmin(load))
        where[k] = (lane, int(load[lane]))
        load[lane] += len(streams[k])
    cycles = int(load.max())
    idle = idle or {}
    inputs = {p: np.full((cycles, lanes), idle.get(p, 0), dtype=np.int64) for p in ports}
    mask = np.zeros((cycles, lanes), bool)
    labels = np.full((cycles, lanes), -1, dtype=np.int64)
    names: list[str] = []
    for k, s in enumerate(streams):
        lane, start = where[k]
        n = len(s)
        for p in ports:
            v = s.inputs.get(p)
            inputs[p][start:start + n, lane] = idle.get(p, 0) if v is None else v
        mask[start:start + n, lane] = True if s.check is None else s.check
        if s.name not in names:
            names.append(s.name)
        labels[start:start + n, lane] = names.index(s.name)
    return inputs, mask, labels, names, where


@dataclass(frozen=True)
class Mismatch:
    """One output that differs from the golden model."""

    cycle: int  # input cycle (0-based, after reset) whose result differs
    lane: int
    port: str
    expected: int
    got: int
    text: str = ""  # the bench's decoded description


class Scoreboard:
    """In-order checker for a fixed-latency pipelined design.

    Responses are the design's outputs cycle by cycle, from the cycle the first inputs
    are applied; the result of the inputs of cycle ``k`` is response ``k + latency``
    (``latency`` 0: combinational).
    """

    def __init__(self, latency: int):
        if not isinstance(latency, int) or isinstance(latency, bool) or latency < 0:
            raise ValueError(f"latency must be a non-negative integer, got {latency!r}")
        self.latency = latency

    @property
    def offset(self) -> int:
        return self.latency

    def align(self, responses: dict[str, np.ndarray], cycles: int) -> dict[str, np.ndarray]:
        """Responses of the inputs of cycles ``0 .. cycles-1``."""
        out = {}
        for port, r in responses.items():
            if len(r) < cycles + self.offset:
                raise ValueError(f"{port}: {len(r)} responses recorded, need "
                                 f"{cycles + self.offset} (latency {self.latency})")
            out[port] = r[self.offset:self.offset + cycles]
        return out

    def compare(self, vectors: Vectors, responses: dict[str, np.ndarray]):
        """Returns ``(n_mismatched_vectors, mismatches sorted by cycle, lane)``; every
        differing port of every checked entry is listed."""
        got = self.align(responses, vectors.cycles)
        bad_any = np.zeros(vectors.mask.shape, bool)
        found = []
        for port, exp in vectors.expected.items():
            if port not in got:
                raise ValueError(f"expected values for {port!r}, which is not an output; "
                                 f"outputs: {sorted(got)}")
            bad = (got[port] != exp) & vectors.mask
            bad_any |= bad
            for c, l in zip(*np.nonzero(bad)):
                found.append(Mismatch(int(c), int(l), port, int(exp[c, l]), int(got[port][c, l])))
        found.sort(key=lambda m: (m.cycle, m.lane, m.port))
        return int(bad_any.sum()), found, got


class Bench(abc.ABC):
    """How to verify one design family. Subclass it, map it in ``mactile.sim.benches.BENCHES``.

    ``__init__`` takes the design's parameters (keyword arguments, the same the builder
    takes); :meth:`vectors` builds a suite's stimulus with golden expectations;
    :meth:`describe` decodes one failing entry for people.
    """

    #: Suite names :meth:`vectors` accepts; the first is the default of ``mactile sim``.
    suites: ClassVar[tuple[str, ...]] = ("random",)
    #: Suites whose size is fixed (``vectors`` is ignored).
    fixed_suites: ClassVar[tuple[str, ...]] = ()
    #: The suite whose stimulus the power analysis replays (:mod:`mactile.synth.activity`);
    #: None: the first of ``suites``. A suite built to reach every case (an exhaustive
    #: sweep holding most inputs still) is a poor picture of a design's switching.
    activity_suite: ClassVar[str | None] = None

    @abc.abstractmethod
    def vectors(self, suite: str, *, lanes: int, count: int | None,
                rng: np.random.Generator) -> Vectors:
        """Stimulus and expectations of ``suite`` laid out on ``lanes`` lanes;
        ``count`` is the number of vectors wanted where the suite is sized."""

    def describe(self, vectors: Vectors, mismatch: Mismatch, got: dict[str, np.ndarray]) -> str:
        """One failing entry in words (default: the raw port values)."""
        c, l = mismatch.cycle, mismatch.lane
        ins = ", ".join(f"{p}={int(v[c, l])}" for p, v in vectors.inputs.items())
        outs = ", ".join(f"{p}: expected {int(vectors.expected[p][c, l])} got {int(got[p][c, l])}"
                         for p in vectors.expected)
        lab = vectors.label(c, l)
        return f"cycle {c} lane {l}{' [' + lab + ']' if lab else ''}: {ins} -> {outs}"

    def check_suite(self, suite: str) -> None:
        if suite not in self.suites:
            raise ValueError(f"{type(self).__name__}: unknown suite {suite!r}; "
                             f"known: {', '.join(self.suites)}")
