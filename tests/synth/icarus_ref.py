"""Reference toggle counts of a netlist from Icarus Verilog, for the gate-simulation tests.

The netlist is simulated with the cell models Yosys writes from the liberty file, under
the schedule of :mod:`mactile.synth.gatesim` (flip-flops start at 0, one reset cycle, then
one stimulus vector per clock period), and every net is sampled just before each rising
edge; a pin's count is the number of changes of its net between consecutive samples.
"""
from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

from mactile.synth.tools import run_yosys

PERIOD = 10  # ns; inputs change at 10t, rising edge at 10t + 5, sample at 10t + 4


def cell_models(work: Path, liberty: str) -> Path:
    """Verilog models of the library's cells, every internal register starting at 0."""
    run_yosys(f"read_liberty -ignore_miss_func {liberty}\nwrite_verilog -noattr ref_cells.v\n",
              work, "ref_cells.log")
    text = (work / "ref_cells.v").read_text()
    text = re.sub(r"^(\s*reg\s+[\w\\$.]+)\s*;", r"\1 = 1'b0;", text, flags=re.M)
    out = work / "ref_cells0.v"
    out.write_text(text)
    return out


def testbench(rtl, stimulus: dict, cycles: int, work: Path) -> Path:
    data = [p for p in rtl.inputs if p.name not in (rtl.clock, rtl.reset)]
    lines = ["`timescale 1ns/1ps", "module tb;"]
    conns = []
    if rtl.clock:
        lines.append("reg clk = 0;")
        conns.append(f".{rtl.clock}(clk)")
    for p in rtl.ports:
        if p.name == rtl.clock:
            continue
        if p.is_input:
            lines.append(f"reg [{p.width - 1}:0] {p.name} = 0;")
            if p.name != rtl.reset:
                lines.append(f"reg [{p.width - 1}:0] m_{p.name} [0:{cycles - 1}];")
                (work / f"ref_{p.name}.hex").write_text(
                    "".join(f"{v:x}\n" for v in stimulus[p.name]))
        else:
            lines.append(f"wire [{p.width - 1}:0] {p.name};")
        conns.append(f".{p.name}({p.name})")
    edge = "#5 clk = 1; #5 clk = 0;" if rtl.clock else f"#{PERIOD};"
    lines += [f"{rtl.top} dut({', '.join(conns)});", "integer t;", "initial begin"]
    lines += [f'  $readmemh("ref_{p.name}.hex", m_{p.name});' for p in data]
    lines.append('  $dumpfile("ref.vcd"); $dumpvars(1, dut);')
    if rtl.reset and rtl.clock:
        lines.append(f"  {rtl.reset} = 1; {edge} {rtl.reset} = 0;")
    lines.append(f"  for (t = 0; t < {cycles}; t = t + 1) begin")
    lines += [f"    {p.name} = m_{p.name}[t];" for p in data]
    lines += [f"    {edge}", "  end", "  $finish;", "end", "endmodule"]
    tb = work / "ref_tb.v"
    tb.write_text("\n".join(lines) + "\n")
    return tb


def _samples(vcd: Path, times: list[int]) -> dict[str, list[str]]:
    """Every scalar net (bus bits as ``name[i]``) at each of ``times`` (ps)."""
    names, width = defaultdict(list), {}
    changes = defaultdict(list)
    now, body = 0, False
    for line in vcd.read_text().splitlines():
        line = line.strip()
        if not body:
            if line.startswith("$var"):
                f = line.split()
                names[f[3]].append(f[4])
                width[f[3]] = int(f[2])
            body = line.startswith("$enddefinitions")
            continue
        if line.startswith("#"):
            now = int(line[1:])
        elif line[:1] in ("0", "1", "x", "z"):
            changes[line[1:]].append((now, line[0]))
        elif line[:1] == "b":
            value, code = line[1:].split()
            changes[code].append((now, value))
    out = {}
    for code, seq in changes.items():
        w = width[code]
        vals, j, cur = [], 0, None
        for t in times:
            while j < len(seq) and seq[j][0] <= t:
                cur = seq[j][1]
                j += 1
            vals.append(cur.rjust(w, "0") if cur else "x" * w)
        for name in names[code]:
            for bit in range(w):
                key = name if w == 1 else f"{name}[{bit}]"
                out[key] = [v[w - 1 - bit] for v in vals]
    return out


def pin_nets(netlist: str) -> dict[str, str]:
    """``instance/PIN`` -> net, from a Yosys-written netlist."""
    out = {}
    for m in re.finditer(r"^\s*(\S+)\s+(\S+)\s*\((.*?)\);", netlist, re.M | re.S):
        for pm in re.finditer(r"\.(\w+)\(([^()]*)\)", m.group(3)):
            out[f"{m.group(2)}/{pm.group(1)}"] = pm.group(2).replace(" ", "")
    return out


def icarus_pin_toggles(work: Path, netlist: str, liberty: str, rtl, stimulus: dict
                       ) -> dict[str, int]:
    """Toggle count of the net on every cell pin whose net Icarus dumps."""
    cycles = len(next(iter(stimulus.values())))
    models = cell_models(work, liberty)
    tb = testbench(rtl, stimulus, cycles, work)
    subprocess.run(["iverilog", "-g2012", "-o", "ref.vvp", "-s", "tb", tb.name, netlist,
                    models.name], cwd=work, check=True, capture_output=True)
    subprocess.run(["vvp", "-n", "ref.vvp"], cwd=work, check=True, capture_output=True)
    offset = PERIOD if (rtl.reset and rtl.clock) else 0
    times = [(offset + PERIOD * t + 4) * 1000 for t in range(cycles)]
    samples = _samples(work / "ref.vcd", times)
    counts = {}
    for pin, net in pin_nets((work / netlist).read_text()).items():
        if net in samples:
            s = samples[net]
            counts[pin] = sum(a != b for a, b in zip(s, s[1:]))
    return counts
