"""Equivalence of a gate netlist with its RTL: registers paired by name, then one
combinational proof.

This is the method of commercial equivalence checkers ("key-point mapping"), built from
Yosys passes:

1. ``scripts/equiv_gold.ys`` and ``scripts/equiv_gate.ys`` bring both sides to bit-level
   gates and plain D flip-flops and write them as Yosys JSON: the reference ("gold") from
   the RTL, the netlist ("gate") with every library cell replaced by the function its
   liberty file gives.
2. :func:`pair_registers` pairs each gold flip-flop with the gate flip-flop whose output
   net carries one of its names (a register keeps its RTL name through synthesis; a
   net may carry several names, any one shared is enough).
3. :func:`cut_registers` turns every flip-flop into a pair of ports, its output an input
   and its next state (D) an output, with one name per pair on both sides. Both sides are
   then combinational.
4. ``scripts/equiv_prove.ys`` reads both (written as RTLIL by :func:`rtlil_module`),
   builds the miter of the two and proves it never fires:
   ABC's SAT sweeping (``fraig``) merges the logic both sides compute alike, then Yosys'
   SAT solver proves the rest.

The proof covers every state, not only the reachable ones: each output and each
register's next state is the same function of the inputs and the current register
values. That implies sequential equivalence from corresponding states. It is stronger
than needed, so a netlist that relies on unreachable states (retiming, state
re-encoding) would be reported as not proven rather than wrongly accepted.

Registers without a partner do not weaken the proof: their outputs become free inputs
(every value is tried) and their next states are not compared, so a proof that succeeds
does not depend on them. Flip-flops that synthesis merged (one gate register for several
RTL registers with the same next state and start value) share one input.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .tools import ToolError, render_script, run_yosys

__all__ = ["GOLD_PREP", "FlipFlop", "Correspondence", "flip_flops",
           "pair_registers", "cut_registers", "rtlil_module", "check_equivalence"]

#: How the reference is read from the RTL before it is taken to bit level:
#:   rtl    - ``prep``: the RTL as written (word-level operators);
#:   coarse - ``synth -run begin:fine``: the RTL after Yosys' coarse-grain passes
#:            (arithmetic grouped into $alu/$macc), so that both sides build their adders
#:            and multipliers alike; used where the rtl-level proof does not finish in its
#:            time budget (multipliers built differently are hard for SAT). It is made
#:            here from the RTL, not taken from synthesis: the same design written out by
#:            synthesis and read back made ABC's SAT sweeping run for over 12 min on the
#:            MSE selector, against 60 s when made here.
GOLD_PREP = {
    "rtl": "read_verilog -sv {rtl}\nprep -flatten -top {top}",
    "coarse": "read_verilog -sv {rtl}\nsynth -flatten -top {top} -run begin:fine",
}

#: Flip-flop cell types left after ``async2sync; dffunmap; techmap`` (scripts/equiv_gold.ys
#: and equiv_gate.ys).
_FF_TYPES = {"$_DFF_P_": "posedge", "$_DFF_N_": "negedge"}


@dataclass(frozen=True)
class FlipFlop:
    """One bit of state in a Yosys JSON module.

    Attributes
    ----------
    cell : str
        The cell's name.
    edge : str
        ``"posedge"`` or ``"negedge"``.
    d, q : int or str
        Net ids of the next-state input and the output (``d`` may be a constant
        ``"0"``/``"1"``).
    names : frozenset of str
        The public names of the output net, ``wire[bit]``.
    init : str
        The start value from the RTL's ``init`` attribute, ``"x"`` where none.
    """

    cell: str
    edge: str
    d: int | str
    q: int
    names: frozenset
    init: str = "x"

    @property
    def label(self) -> str:
        """The name shown in messages: the shortest public name, else the cell's."""
        return min(self.names, key=lambda n: (len(n), n)) if self.names else self.cell


def _bit_names(module: dict) -> tuple[dict[int, set[str]], dict[int, str]]:
    """For every net id: its public names ``wire[i]``, and its init value where given."""
    names: dict[int, set[str]] = defaultdict(set)
    init: dict[int, str] = {}
    for wire, info in module["netnames"].items():
        bits = info["bits"]
        offset = int(info.get("offset", 0))
        upto = bool(info.get("upto", 0))
        value = info.get("attributes", {}).get("init")
        if value is not None and not re.fullmatch(r"[01xz]+", str(value)):
            # Yosys writes a fully defined init as a binary string; anything else: unknown.
            value = None
        for i, bit in enumerate(bits):
            if not isinstance(bit, int):
                continue
            if not info.get("hide_name", 0):
                index = offset + (len(bits) - 1 - i if upto else i)
                names[bit].add(f"{wire}[{index}]" if len(bits) > 1 or offset else wire)
            if value is not None and len(value) == len(bits):
                init.setdefault(bit, value[len(bits) - 1 - i])
    return names, init


def flip_flops(module: dict) -> list[FlipFlop]:
    """The flip-flops of a JSON module (after ``scripts/equiv_gold.ys`` or ``equiv_gate.ys``).

    Raises
    ------
    ToolError
        A storage element other than a plain D flip-flop is left (a latch, say).
    """
    names, init = _bit_names(module)
    ffs = []
    for cell, info in module["cells"].items():
        kind = info["type"]
        if kind in _FF_TYPES:
            conn = info["connections"]
            q = conn["Q"][0]
            ffs.append(FlipFlop(cell, _FF_TYPES[kind], conn["D"][0], q,
                                frozenset(names.get(q, ())), init.get(q, "x")))
        elif re.search(r"DFF|DLATCH|SR_|\$ff$|\$dff|\$latch|\$mem", kind):
            raise ToolError(f"equivalence: storage cell {cell} of type {kind} is not supported "
                            "(only D flip-flops, after async2sync and dffunmap)")
    return ffs


@dataclass
class Correspondence:
    """Registers of the two sides grouped into classes of equal state.

    Attributes
    ----------
    classes : list of (list of FlipFlop, list of FlipFlop)
        Gold and gate flip-flops that share a name, directly or through others; each
        class becomes one input of the miter. Almost always one of each.
    gold_only, gate_only : list of FlipFlop
        Registers without a partner: free inputs, next state not compared.
    """

    classes: list = field(default_factory=list)
    gold_only: list = field(default_factory=list)
    gate_only: list = field(default_factory=list)

    def summary(self) -> str:
        merged = sum(1 for g, n in self.classes if len(g) + len(n) > 2)
        if not (self.classes or self.gold_only or self.gate_only):
            return "combinational"
        text = f"{len(self.classes)} register bits paired by name"
        if merged:
            text += f" ({merged} shared by merged registers)"
        for side, ffs in (("RTL", self.gold_only), ("netlist", self.gate_only)):
            if ffs:
                shown = ", ".join(sorted(f.label for f in ffs)[:5])
                text += (f"; {len(ffs)} {side} register bit(s) without a partner ({shown}"
                         f"{', ...' if len(ffs) > 5 else ''})")
        return text


def pair_registers(gold: list[FlipFlop], gate: list[FlipFlop]) -> Correspondence:
    """Group flip-flops of the two sides that share a name (connected components).

    A class with several flip-flops on one side (registers synthesis merged) is kept only
    where their clock edges agree and their RTL start values agree; otherwise its members
    are left without a partner.
    """
    by_name: dict[str, list[int]] = defaultdict(list)
    nodes = [("gold", f) for f in gold] + [("gate", f) for f in gate]
    for i, (_, ff) in enumerate(nodes):
        for n in ff.names:
            by_name[n].append(i)
    parent = list(range(len(nodes)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for members in by_name.values():
        for other in members[1:]:
            parent[find(other)] = find(members[0])
    groups: dict[int, list[int]] = defaultdict(list)
    for i in range(len(nodes)):
        groups[find(i)].append(i)

    corr = Correspondence()
    for members in groups.values():
        g = [nodes[i][1] for i in members if nodes[i][0] == "gold"]
        n = [nodes[i][1] for i in members if nodes[i][0] == "gate"]
        edges = {f.edge for f in g + n}
        inits = {f.init for f in g} - {"x"}
        if g and n and len(edges) == 1 and (len(g) == 1 or len(inits) <= 1):
            corr.classes.append((g, n))
        else:
            corr.gold_only += g
            corr.gate_only += n
    corr.classes.sort(key=lambda c: c[0][0].label)
    return corr


def _substitute(module: dict, mapping: dict[int, int]) -> None:
    """Replace net ids everywhere in a JSON module (cells, ports, names)."""
    if not mapping:
        return
    for info in module["cells"].values():
        for pin, bits in info["connections"].items():
            info["connections"][pin] = [mapping.get(b, b) if isinstance(b, int) else b
                                        for b in bits]
    for group in ("ports", "netnames"):
        for info in module[group].values():
            info["bits"] = [mapping.get(b, b) if isinstance(b, int) else b for b in info["bits"]]


def cut_registers(module: dict, side: str, corr: Correspondence) -> tuple[dict, dict]:
    """Make a JSON module combinational: every flip-flop becomes ports.

    Class ``k`` gives the input ``r<k>_q`` (the register's value, shared by the class's
    flip-flops on this side) and outputs ``r<k>_d<j>`` (their next states, lined up with
    the other side's, see the code). Registers without a partner give inputs ``u<k>_q``
    on both sides, driving nothing on the side that lacks them.

    Parameters
    ----------
    module : dict
        A module of ``write_json`` (it is modified).
    side : str
        ``"gold"`` or ``"gate"``.

    Returns
    -------
    module, port_names : dict, dict
        The cut module, and for every new output port the register it compares.
    """
    mine = 0 if side == "gold" else 1
    cells = module["cells"]
    ports = module["ports"]
    next_id = 1 + max((b for group in ("ports", "netnames") for info in module[group].values()
                       for b in info["bits"] if isinstance(b, int)), default=1)
    for info in cells.values():
        for bits in info["connections"].values():
            next_id = max(next_id, 1 + max((b for b in bits if isinstance(b, int)), default=0))
    mapping: dict[int, int] = {}
    labels: dict[str, str] = {}

    def add_input(name: str, ff_list):
        nonlocal next_id
        if ff_list:
            q = ff_list[0].q
            for ff in ff_list[1:]:
                mapping[ff.q] = q
        else:
            q, next_id = next_id, next_id + 1
        ports[name] = {"direction": "input", "bits": [q]}

    for k, pair in enumerate(corr.classes):
        own, other = pair[mine], pair[1 - mine]
        for ff in own:
            del cells[ff.cell]
        add_input(f"r{k}_q", own)
        # Every flip-flop on each side is compared against the first of the other side.
        gold, gate = pair
        compared = [(i, 0) for i in range(len(gold))] + [(0, j) for j in range(1, len(gate))]
        for m, (i, j) in enumerate(compared):
            ff = own[i if side == "gold" else j]
            ports[f"r{k}_d{m}"] = {"direction": "output", "bits": [ff.d]}
            labels[f"r{k}_d{m}"] = gold[i].label if side == "gold" else gate[j].label
    for prefix, ffs, owner in (("g", corr.gold_only, "gold"), ("n", corr.gate_only, "gate")):
        for k, ff in enumerate(ffs):
            if owner == side:
                del cells[ff.cell]
            add_input(f"u{prefix}{k}_q", [ff] if owner == side else [])
    _substitute(module, mapping)
    return module, labels


def _sig(bits: list) -> str:
    """An RTLIL signal of JSON bits (net ids as wires ``\\n<id>``, constants as 1-bit
    constants), most significant bit first."""
    parts = [f"\\n{b}" if isinstance(b, int) else f"1'{b}" for b in reversed(bits)]
    return parts[0] if len(parts) == 1 else "{ " + " ".join(parts) + " }"


def rtlil_module(name: str, module: dict) -> str:
    """A module of Yosys JSON (bit-level cells) as RTLIL text, which Yosys reads in less
    than half the time of the same JSON (4.0 against 10.3 s on the NVFP4 tensor core).

    Every net becomes a one-bit wire ``\\n<id>``; each port a wire of its width joined to
    its nets; cells keep their types and binary-string parameters.
    """
    nets = set()
    for info in module["cells"].values():
        for bits in info["connections"].values():
            nets.update(b for b in bits if isinstance(b, int))
    for info in module["ports"].values():
        nets.update(b for b in info["bits"] if isinstance(b, int))
    out = [f"module \\{name}"]
    out += [f"  wire \\n{n}" for n in sorted(nets)]
    connects = []
    for k, (port, info) in enumerate(module["ports"].items(), start=1):
        bits, direction = info["bits"], info["direction"]
        out.append(f"  wire width {len(bits)} {direction} {k} \\{port}")
        for i, b in enumerate(bits):
            lhs, rhs = f"\\{port} [{i}]", _sig([b])
            connects.append(f"  connect {rhs} {lhs}" if direction == "input" and
                            isinstance(b, int) else f"  connect {lhs} {rhs}")
    for k, info in enumerate(module["cells"].values()):
        out.append(f"  cell {info['type']} $c{k}")
        for param, value in info.get("parameters", {}).items():
            if not re.fullmatch(r"[01xz]+", str(value)):
                raise ToolError(f"equivalence: cannot write parameter {param}={value!r}")
            out.append(f"    parameter \\{param} {len(value)}'{value}")
        for pin, bits in info["connections"].items():
            out.append(f"    connect \\{pin} {_sig(bits)}")
        out.append("  end")
    out += connects
    out.append("end")
    return "\n".join(out) + "\n"


def _module(doc: dict, top: str) -> dict:
    mods = doc["modules"]
    if top not in mods:
        raise ToolError(f"equivalence: module {top} missing from the Yosys JSON")
    return mods[top]


def check_equivalence(work: Path, rtl_file: str, netlist_file: str, top: str, liberty: str, *,
                      rtl_budget_s: float = 30.0, timeout_s: float | None = None) -> str:
    """Prove the netlist equivalent to the RTL (see the module docstring).

    The netlist side is made once (``scripts/equiv_gate.ys``); the reference is first the
    RTL as written, within ``rtl_budget_s`` (0: not tried), and where that does not finish
    or fails, the RTL after Yosys' coarse-grain passes. ``timeout_s`` bounds the whole
    check.

    Parameters
    ----------
    work : Path
        The run folder (Yosys' working folder; logs ``equiv-*.log`` stay there).
    rtl_file, netlist_file, liberty : str
        Paths relative to ``work``.

    Returns
    -------
    str
        ``"proven (<level>: <pairing summary>)"`` or ``"failed: <reason per level>"``.
    """
    import time
    t_end = None if timeout_s is None else time.monotonic() + timeout_s

    def left(cap=None):
        rest = None if t_end is None else max(1.0, t_end - time.monotonic())
        return cap if rest is None else (rest if cap is None else min(cap, rest))

    gate_json = work / "equiv-gate.json"
    try:
        run_yosys(render_script("equiv_gate.ys", netlist=netlist_file, top=top,
                                liberty=liberty, gate_json=gate_json.name),
                  work, "equiv-gate.log", timeout=left())
        gate_text = gate_json.read_text()
    except ToolError as e:
        return f"failed: netlist: {e} (logs: {work}/equiv-*.log)"
    finally:
        gate_json.unlink(missing_ok=True)
    reasons = []
    for level, cap in (("rtl", rtl_budget_s), ("coarse", None)):
        if cap is not None and cap <= 0:
            continue
        read = GOLD_PREP[level].format(rtl=rtl_file, top=top)
        try:
            outcome = _check_level(work, level, read, gate_text, top, left(cap))
        except ToolError as e:
            reasons.append(f"{level}: {e}")
            continue
        if outcome.startswith("proven"):
            return f"proven ({level}: {outcome.removeprefix('proven: ')})"
        reasons.append(f"{level}: {outcome}")
    return f"failed: {'; '.join(reasons)} (logs: {work}/equiv-*.log)"


def _check_level(work: Path, level: str, gold_read: str, gate_text: str, top: str,
                 limit: float | None) -> str:
    import time
    t_end = None if limit is None else time.monotonic() + limit

    def left():
        return None if t_end is None else max(1.0, t_end - time.monotonic())

    gold_json = f"equiv-{level}-gold.json"
    run_yosys(render_script("equiv_gold.ys", gold_read=gold_read, gold_json=gold_json),
              work, f"equiv-{level}-gold.log", timeout=left())
    gold_doc = json.loads((work / gold_json).read_text())
    (work / gold_json).unlink()
    # Parsed afresh for each level: cutting the registers modifies the module.
    gold, gate = _module(gold_doc, top), _module(json.loads(gate_text), top)
    corr = pair_registers(flip_flops(gold), flip_flops(gate))
    cut_gold, labels = cut_registers(gold, "gold", corr)
    cut_gate, _ = cut_registers(gate, "gate", corr)
    for name, mod in (("gold", cut_gold), ("gate", cut_gate)):
        (work / f"equiv-{level}-{name}-cut.il").write_text(rtlil_module(name, mod))
    del gold_doc, gold, gate, cut_gold, cut_gate
    cex = work / f"equiv-{level}-cex.json"
    try:
        run_yosys(render_script("equiv_prove.ys", gold=f"equiv-{level}-gold-cut.il",
                                gate=f"equiv-{level}-gate-cut.il", cex=cex.name),
                  work, f"equiv-{level}.log", timeout=left())
    except ToolError:
        if not cex.exists():
            raise
        return f"differs: {_differences(cex, labels)}; {corr.summary()}"
    finally:
        for name in ("gold", "gate"):
            (work / f"equiv-{level}-{name}-cut.il").unlink(missing_ok=True)
    return f"proven: {corr.summary()}"


def _differences(cex: Path, labels: dict[str, str]) -> str:
    """The outputs and registers that differ in the SAT model dumped by ``sat -dump_json``."""
    try:
        signals = json.loads(cex.read_text())["signal"]
    except (OSError, ValueError, KeyError):
        return "a counterexample was found (see the log)"
    values = {s["name"].lstrip("\\"): s.get("data", [""])[0] if s.get("data") else s.get("wave")
              for s in signals}
    bad = []
    for name, v in values.items():
        if name.startswith("gold_"):
            port = name[len("gold_"):]
            if values.get("gate_" + port) != v:
                bad.append(labels.get(port, port))
    if not bad:
        return "a counterexample was found (see the log)"
    shown = ", ".join(sorted(bad)[:8])
    return f"{len(bad)} output/register bit(s) differ, e.g. {shown}"
