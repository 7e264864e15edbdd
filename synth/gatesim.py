"""Zero-delay, cycle-by-cycle simulation of a synthesized netlist: per-net toggle rates.

OpenSTA's power report needs to know how often every net toggles. Debian's OpenSTA can
only take the input ports' rates and propagate them through the logic with its
probabilistic model, which has no notion of correlation and grows along arithmetic
chains (measured: the BlockDialect quantizer at 5.9 W on osu018). Here the netlist itself
is simulated under the design's stimulus and every net's toggles are counted, what a
newer OpenSTA would read from a gate-level VCD with ``read_vcd``.

How: ``scripts/gatesim_prep.ys`` writes the netlist with its library cells kept as
instances plus the model Yosys builds of each cell from its liberty ``function`` and
``ff`` groups. Every cell type becomes truth tables (:func:`cell_tables`): one per output
pin and one per internal flip-flop's next state, over its input pins and its flip-flops.
The instances are levelized and evaluated one level at a time with NumPy, one cycle
after another (:class:`GateSim`).

Conventions (named because they are choices):

- Zero delay: each net is counted at most once per cycle; glitches are not modelled (as
  with a VCD from an RTL or zero-delay gate-level simulation).
- Cycle ``t``: the stimulus's values for ``t`` are applied, the logic settles, the
  toggles against the settled values of ``t - 1`` are counted, then the clock edge loads
  every flip-flop. A combinational design has no edge: one vector per cycle.
- Start: every flip-flop 0, then one cycle with the reset asserted (where the design has
  one) and its data inputs 0, then the stimulus with the reset low. Registers with a
  reset thus start at their RTL start values, as after a hardware reset; the reset cycle
  is not counted.
- Undefined constants (``x``/``z``) in the netlist are taken as 0.
- Integrated clock-gate cells (``clock_gates``; the designs' ``clock_gating`` option):
  a flip-flop clocked by a gate's output loads at an edge only when the gate's enable
  (ORed with its test pin) was 1 in that cycle, as the cell's latch holds it. The gated
  clock net makes two transitions in each such cycle and none otherwise: its pins'
  rate is twice the fraction of enabled cycles (the clock's own is 2).
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .tools import ToolError, render_script, run_yosys

__all__ = ["CellTables", "cell_tables", "GateSim", "NetToggles", "simulate_netlist"]

#: Yosys single-bit gates after ``techmap``: input pins and function.
_GATES = {
    "$_BUF_": (("A",), lambda a: a),
    "$_NOT_": (("A",), lambda a: 1 - a),
    "$_AND_": (("A", "B"), lambda a, b: a & b),
    "$_NAND_": (("A", "B"), lambda a, b: 1 - (a & b)),
    "$_OR_": (("A", "B"), lambda a, b: a | b),
    "$_NOR_": (("A", "B"), lambda a, b: 1 - (a | b)),
    "$_XOR_": (("A", "B"), lambda a, b: a ^ b),
    "$_XNOR_": (("A", "B"), lambda a, b: 1 - (a ^ b)),
    "$_ANDNOT_": (("A", "B"), lambda a, b: a & (1 - b)),
    "$_ORNOT_": (("A", "B"), lambda a, b: a | (1 - b)),
    "$_MUX_": (("A", "B", "S"), lambda a, b, s: np.where(s == 1, b, a)),
    "$_NMUX_": (("A", "B", "S"), lambda a, b, s: 1 - np.where(s == 1, b, a)),
    "$_AOI3_": (("A", "B", "C"), lambda a, b, c: 1 - ((a & b) | c)),
    "$_OAI3_": (("A", "B", "C"), lambda a, b, c: 1 - ((a | b) & c)),
    "$_AOI4_": (("A", "B", "C", "D"), lambda a, b, c, d: 1 - ((a & b) | (c & d))),
    "$_OAI4_": (("A", "B", "C", "D"), lambda a, b, c, d: 1 - ((a | b) & (c | d))),
}
_FLOPS = {"$_DFF_P_": "posedge", "$_DFF_N_": "negedge"}
#: Most inputs (pins plus flip-flops) of one cell's tables: 2**8 rows.
MAX_TABLE_INPUTS = 8


def _const(bit) -> int | None:
    """The value of a constant connection (``"0"``, ``"1"``; ``"x"``/``"z"`` as 0)."""
    if isinstance(bit, int):
        return None
    return 1 if bit == "1" else 0


@dataclass(frozen=True)
class CellTables:
    """One library cell as truth tables.

    Attributes
    ----------
    name : str
    inputs : tuple of str
        The data input pins, the tables' first variables (bit ``i`` of a row index is
        ``inputs[i]``).
    clock : str or None
        The pin clocking the cell's flip-flops (not a table variable).
    edge : str or None
        ``"posedge"`` or ``"negedge"``.
    n_state : int
        Internal flip-flops, the tables' last variables.
    outputs : dict of str -> (tuple of int, ndarray)
        Per output pin: the variables it depends on (indices into ``inputs`` followed by
        the flip-flops) and its value for every combination of them (bit ``i`` of a row
        index is the ``i``-th of those variables). A flip-flop's output thus does not
        depend on its D pin, and no false combinational path runs through it.
    next_state : tuple of (tuple of int, ndarray)
        Per flip-flop, its next state in the same form.
    """

    name: str
    inputs: tuple[str, ...]
    clock: str | None
    edge: str | None
    n_state: int
    outputs: dict
    next_state: tuple


def cell_tables(name: str, module: dict) -> CellTables:
    """Truth tables of a cell model (a module of Yosys JSON made of single-bit gates).

    Raises
    ------
    ToolError
        A latch or other storage, more than one clock, or too many inputs.
    """
    ports = module["ports"]
    port_bit = {p: info["bits"][0] for p, info in ports.items() if len(info["bits"]) == 1}
    flops, gates = [], []
    for cname, cell in module["cells"].items():
        t = cell["type"]
        if t in _FLOPS:
            flops.append(cell)
        elif t in _GATES:
            gates.append(cell)
        else:
            raise ToolError(f"gate-level simulation: cell {name} contains {t} "
                            f"({cname}); only gates and plain flip-flops are supported")
    clocks = {f["connections"]["C"][0] for f in flops}
    edges = {_FLOPS[f["type"]] for f in flops}
    if len(clocks) > 1 or len(edges) > 1:
        raise ToolError(f"gate-level simulation: cell {name} has flip-flops on more than "
                        "one clock or edge")
    clock_pin = None
    if clocks:
        (cbit,) = clocks
        clock_pin = next((p for p, b in port_bit.items() if b == cbit), None)
        if clock_pin is None:
            raise ToolError(f"gate-level simulation: cell {name}: flip-flop clock is not a pin")
    inputs = tuple(p for p, info in ports.items()
                   if info["direction"] == "input" and p != clock_pin)
    outputs = [p for p, info in ports.items() if info["direction"] == "output"]
    k = len(inputs) + len(flops)
    if k > MAX_TABLE_INPUTS:
        raise ToolError(f"gate-level simulation: cell {name} has {k} inputs and flip-flops "
                        f"(at most {MAX_TABLE_INPUTS})")
    rows = np.arange(1 << k, dtype=np.int64)
    value: dict[int, np.ndarray] = {}
    for i, p in enumerate(inputs):
        value[ports[p]["bits"][0]] = (rows >> i) & 1
    for j, f in enumerate(flops):
        value[f["connections"]["Q"][0]] = (rows >> (len(inputs) + j)) & 1

    def val(bit):
        c = _const(bit)
        if c is not None:
            return np.full(len(rows), c, dtype=np.int64)
        return value[bit]

    pending = list(gates)
    while pending:  # the gates in any order: evaluate those whose inputs are known
        rest = []
        for g in pending:
            pins, fn = _GATES[g["type"]]
            ins = [g["connections"][p][0] for p in pins]
            if all(_const(b) is not None or b in value for b in ins):
                value[g["connections"]["Y"][0]] = fn(*(val(b) for b in ins)).astype(np.int64)
            else:
                rest.append(g)
        if len(rest) == len(pending):
            raise ToolError(f"gate-level simulation: cell {name} has a combinational loop "
                            "or an undriven net")
        pending = rest
    try:
        outs = {p: _support(val(ports[p]["bits"][0]), k) for p in outputs}
        nexts = tuple(_support(val(f["connections"]["D"][0]), k) for f in flops)
    except KeyError:
        raise ToolError(f"gate-level simulation: cell {name} has an undriven output") from None
    return CellTables(name, inputs, clock_pin, edges.pop() if edges else None, len(flops),
                      outs, nexts)


def _support(table: np.ndarray, k: int) -> tuple[tuple[int, ...], np.ndarray]:
    """The variables a ``k``-variable truth table depends on, and the table over them."""
    rows = np.arange(1 << k)
    support = tuple(i for i in range(k)
                    if np.any(table[rows] != table[rows ^ (1 << i)]))
    sub = np.arange(1 << len(support))
    full = np.zeros_like(sub)
    for j, i in enumerate(support):
        full |= ((sub >> j) & 1) << i
    return support, table[full].astype(np.uint8)


@dataclass(frozen=True)
class NetToggles:
    """Toggle counts of every net of a netlist over one simulation.

    Attributes
    ----------
    cycles : int
        Settled cycles compared (stimulus length; rates are toggles / (cycles - 1)).
    pins : dict of str -> float
        Toggle rate (transitions per cycle) of the net on every cell pin, by OpenSTA's
        pin name ``instance/PIN``; pins on a constant are 0.
    clock_pins : frozenset of str
        Pins on the clock net (their activity is the clock's, not simulated).
    gated_pins : frozenset of str
        Pins on a gated clock net (an integrated clock-gate cell's output and the clock
        pins it drives); their rate in ``pins`` is the gated clock's.
    """

    cycles: int
    pins: dict
    clock_pins: frozenset
    gated_pins: frozenset = frozenset()

    def mean_rate(self) -> float:
        vals = [v for p, v in self.pins.items()
                if p not in self.clock_pins and p not in self.gated_pins]
        return float(np.mean(vals)) if vals else 0.0


class GateSim:
    """A netlist of library cells (Yosys JSON from ``scripts/gatesim_prep.ys``), ready
    to simulate.

    Parameters
    ----------
    doc : dict
        The JSON document (top module and the cell models).
    top : str
    clock, reset : str or None
        The design's clock and reset ports.
    clock_gates : dict of str -> ClockGateCell, optional
        The library's integrated clock-gate cells
        (:func:`mactile.synth.libraries.clock_gate_cells`), simulated as the module doc says.
    """

    def __init__(self, doc: dict, top: str, *, clock: str | None, reset: str | None,
                 clock_gates: Mapping | None = None):
        mods = doc["modules"]
        if top not in mods:
            raise ToolError(f"gate-level simulation: module {top} missing from the netlist JSON")
        self.top = top
        self.module = mods[top]
        self.clock, self.reset = clock, reset
        ports = self.module["ports"]
        self.clock_bit = ports[clock]["bits"][0] if clock else None
        tables = {}
        # Dense net indices: 0 and 1 are the constants.
        ids: dict[int, int] = {}

        def idx(bit) -> int:
            c = _const(bit)
            if c is not None:
                return c
            if bit not in ids:
                ids[bit] = len(ids) + 2
            return ids[bit]

        self.input_bits = {p: [idx(b) for b in info["bits"]] for p, info in ports.items()
                           if info["direction"] == "input" and p != clock}
        nodes = []      # (output net, variables, table) of every output pin
        states = []     # (variables, next-state table) of every flip-flop
        self.pin_net: dict[str, int] = {}
        self.clock_pins: set[str] = set()
        self.gated_pins: set[str] = set()
        clock_gates = dict(clock_gates or {})
        gate_of_net: dict[int, int] = {}   # gated clock net -> gate number
        self._gate_enables: list[list[int]] = []
        for inst, cell in self.module["cells"].items():
            icg = clock_gates.get(cell["type"])
            if icg is None:
                continue
            conn = cell["connections"]
            if self.clock_bit is None or conn.get(icg.clock, [None])[0] != self.clock_bit:
                raise ToolError(f"gate-level simulation: clock gate {inst} ({cell['type']}) "
                                f"is not clocked by the design's clock {clock!r}")
            for pin, bits in conn.items():
                self.pin_net[f"{inst}/{pin}"] = idx(bits[0])
            self.clock_pins.add(f"{inst}/{icg.clock}")
            self.gated_pins.add(f"{inst}/{icg.out}")
            gate_of_net[idx(conn[icg.out][0])] = len(self._gate_enables)
            self._gate_enables.append([idx(conn[p][0]) for p in (icg.enable, icg.test)
                                       if p and p in conn])
        state_gate = []  # per flip-flop state bit: its clock gate, or -1
        for inst, cell in self.module["cells"].items():
            t = cell["type"]
            if t in clock_gates:
                continue
            if t not in tables:
                if t not in mods:
                    raise ToolError(f"gate-level simulation: no model of cell {t} "
                                    f"(instance {inst})")
                tables[t] = cell_tables(t, mods[t])
            tab = tables[t]
            conn = cell["connections"]
            for pin, bits in conn.items():
                if bits[0] == self.clock_bit and self.clock_bit is not None:
                    self.clock_pins.add(f"{inst}/{pin}")
                elif _const(bits[0]) is None and idx(bits[0]) in gate_of_net:
                    self.gated_pins.add(f"{inst}/{pin}")
                self.pin_net[f"{inst}/{pin}"] = idx(bits[0])
            gate = -1
            if tab.n_state and tab.clock is not None and _const(conn.get(tab.clock, ["0"])[0]) \
                    is None and idx(conn[tab.clock][0]) in gate_of_net:
                gate = gate_of_net[idx(conn[tab.clock][0])]
            elif tab.n_state:
                if tab.clock is None or conn.get(tab.clock, [None])[0] != self.clock_bit:
                    raise ToolError(f"gate-level simulation: flip-flop {inst} ({t}) is not "
                                    f"clocked by the design's clock {clock!r}")
                if tab.edge != "posedge":
                    raise ToolError(f"gate-level simulation: flip-flop {inst} ({t}) is "
                                    "clocked on the falling edge")
            # A table's variables: the input pins' nets, then the cell's state bits (as
            # ("state", k), placed after the nets once their number is known).
            first = len(states)
            variables = [idx(conn[p][0]) if p in conn else 0 for p in tab.inputs] + \
                [("state", first + j) for j in range(tab.n_state)]
            for support, table in tab.next_state:
                states.append(([variables[i] for i in support], table))
                state_gate.append(gate)
            for pin, (support, table) in tab.outputs.items():
                if pin in conn:
                    nodes.append((idx(conn[pin][0]), [variables[i] for i in support], table))
        self.n_nets = len(ids) + 2
        self.n_state = len(states)
        # State bits live after the nets in the value vector.
        base = self.n_nets

        def place(variables):
            return [base + v[1] if isinstance(v, tuple) else v for v in variables]

        self._levels = self._levelize([(out, place(ins), tab) for out, ins, tab in nodes])
        self._next = self._group([(base + i, place(ins), tab)
                                  for i, (ins, tab) in enumerate(states)])
        self._state_gate = np.array(state_gate, dtype=np.int64)
        self._gate_of_net = gate_of_net

    # ---- construction helpers --------------------------------------------------------
    def _levelize(self, nodes):
        """Group table nodes into levels: a node's inputs are all driven by earlier levels
        (or are inputs, constants or flip-flops)."""
        driver = {}
        for k, (out, _ins, _tab) in enumerate(nodes):
            if out in driver:
                raise ToolError(f"gate-level simulation: net {out} has several drivers")
            driver[out] = k
        level = [-1] * len(nodes)
        fanout = defaultdict(list)
        indeg = [0] * len(nodes)
        for k, (_out, ins, _tab) in enumerate(nodes):
            srcs = {driver[i] for i in ins if i in driver}
            indeg[k] = len(srcs)
            for s in srcs:
                fanout[s].append(k)
        ready = [k for k in range(len(nodes)) if indeg[k] == 0]
        for k in ready:
            level[k] = 0
        i = 0
        while i < len(ready):
            k = ready[i]
            i += 1
            for f in fanout[k]:
                level[f] = max(level[f], level[k] + 1)
                indeg[f] -= 1
                if indeg[f] == 0:
                    ready.append(f)
        if len(ready) != len(nodes):
            raise ToolError("gate-level simulation: the netlist has a combinational loop")
        by_level = defaultdict(list)
        for k, lv in enumerate(level):
            by_level[lv].append(nodes[k])
        return [self._group(by_level[lv]) for lv in sorted(by_level)]

    @staticmethod
    def _group(nodes):
        """One vectorized step: outputs, an input-index matrix and the tables, padded to
        the widest table of the group (extra inputs read constant 0, tables repeat)."""
        if not nodes:
            return None
        width = max(1, max(len(ins) for _o, ins, _t in nodes))
        out = np.array([o for o, _i, _t in nodes], dtype=np.int64)
        ins = np.zeros((width, len(nodes)), dtype=np.int64)
        tabs = np.zeros((len(nodes), 1 << width), dtype=np.uint8)
        for k, (_o, i, t) in enumerate(nodes):
            ins[:len(i), k] = i
            tabs[k] = np.resize(t, 1 << width)  # rows with the padding bits 0 come first
        return out, ins, tabs, np.arange(len(nodes))

    # ---- simulation -----------------------------------------------------------------------
    def run(self, stimulus: Mapping[str, Sequence[int]]) -> NetToggles:
        """Simulate ``stimulus`` (port name -> per-cycle values) and count toggles.

        Raises
        ------
        ValueError
            A data input without values, or sequences of different lengths.
        """
        from .activity import _bit_matrix

        data = [p for p in self.input_bits if p != self.reset]
        missing = [p for p in data if p not in stimulus]
        if missing:
            raise ValueError(f"gate-level simulation: no stimulus for input(s) {missing}")
        lengths = {len(stimulus[p]) for p in data} or {0}
        if len(lengths) != 1 or min(lengths) < 2:
            raise ValueError(f"gate-level simulation: stimulus sequences must share one "
                             f"length >= 2, got {sorted(lengths)}")
        cycles = lengths.pop()
        in_idx = np.array([i for p in data for i in self.input_bits[p]], dtype=np.int64)
        in_vals = np.concatenate([_bit_matrix(stimulus[p], len(self.input_bits[p]))
                                  for p in data], axis=1).astype(np.uint8) if data else \
            np.zeros((cycles, 0), np.uint8)
        v = np.zeros(self.n_nets + self.n_state, dtype=np.uint8)
        v[1] = 1
        toggles = np.zeros(self.n_nets, dtype=np.int64)
        prev = None
        reset_idx = np.array(self.input_bits.get(self.reset, []), dtype=np.int64)
        # The reset cycle (not counted), then the stimulus.
        schedule = ([None] if len(reset_idx) and self.n_state else []) + list(range(cycles))
        gated = (self._state_gate >= 0).any() if self.n_state else False
        enabled = np.zeros(len(self._gate_enables), dtype=np.int64)  # counted cycles
        for t in schedule:
            if t is None:
                v[in_idx] = 0
                v[reset_idx] = 1
            else:
                v[in_idx] = in_vals[t]
                if len(reset_idx):
                    v[reset_idx] = 0
            self._settle(v)
            if t is not None:
                if prev is not None:
                    toggles += v[:self.n_nets] != prev
                prev = v[:self.n_nets].copy()
            if self._next is not None:
                out, ins, tabs, rows = self._next
                new = tabs[rows, self._row_index(v, ins)]
                if gated:  # a gated flip-flop loads only when its gate's enable is 1
                    en = np.array([max((int(v[n]) for n in nets), default=0)
                                   for nets in self._gate_enables], dtype=np.uint8)
                    if t is not None:
                        enabled += en
                    load = np.where(self._state_gate >= 0,
                                    en[np.maximum(self._state_gate, 0)], 1).astype(bool)
                    new = np.where(load, new, v[out])
                v[out] = new
        rate = toggles / max(1, cycles - 1)
        pins = {pin: float(rate[n]) for pin, n in self.pin_net.items()}
        if self._gate_enables:
            gate_rate = {n: 2.0 * enabled[g] / cycles for n, g in self._gate_of_net.items()}
            for pin in self.gated_pins:
                pins[pin] = gate_rate[self.pin_net[pin]]
        return NetToggles(cycles=cycles, pins=pins, clock_pins=frozenset(self.clock_pins),
                          gated_pins=frozenset(self.gated_pins))

    @staticmethod
    def _row_index(v, ins):
        r = v[ins[0]].astype(np.int64)
        for b in range(1, ins.shape[0]):
            r |= v[ins[b]].astype(np.int64) << b
        return r

    def _settle(self, v):
        for out, ins, tabs, rows in self._levels:
            v[out] = tabs[rows, self._row_index(v, ins)]


def simulate_netlist(work: Path, netlist: str, liberty: str, top: str,
                     stimulus: Mapping[str, Sequence[int]], *, clock: str | None,
                     reset: str | None, timeout: float | None = None,
                     clock_gates: Mapping | None = None) -> NetToggles:
    """Prepare (Yosys) and simulate a netlist in the run folder ``work``.

    ``netlist`` and ``liberty`` are paths relative to ``work`` (Yosys' private ``/tmp``).
    """
    json_name = "gatesim.json"
    run_yosys(render_script("gatesim_prep.ys", liberty=liberty, netlist=netlist, top=top,
                            json=json_name), work, "gatesim-prep.log", timeout=timeout)
    try:
        doc = json.loads((work / json_name).read_text())
    finally:
        (work / json_name).unlink(missing_ok=True)
    return GateSim(doc, top, clock=clock, reset=reset, clock_gates=clock_gates).run(stimulus)
