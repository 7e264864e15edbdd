"""The one Verilog emitter: an Amaranth component to Verilog, its ports, its module name
and its Verilator lint waivers. ``mactile generate``, the simulation harness
(:mod:`mactile.sim.hdl`) and synthesis (:mod:`mactile.synth.rtl`) all call
:func:`generate`, so one design has one module name everywhere: the component's
``module_name`` (which carries its parameters), else its class name.

The Verilog is written without source locations, so its text (the synthesis cache key)
depends on the design and its parameters only.
"""
from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mactile.golden.fileio import atomic_write

__all__ = ["Port", "component_ports", "module_name", "to_verilog", "module_ports",
           "lint_waivers", "GeneratedDesign", "generate", "write_design", "AMARANTH_WAIVERS"]

#: Lint rules waived for every Amaranth-generated module, with the reason (docs/sim.md).
AMARANTH_WAIVERS = (
    ("PROCASSINIT", None,
     "Amaranth writes each register's reset value as its declaration initialiser "
     "(the power-on value) and also assigns it under reset"),
    ("WIDTHEXPAND", "*Operator * expects * bits on the RHS, but RHS's SIGNED generates *",
     "Yosys's Verilog backend adds $signed(a) + $signed(b) with operands narrower than the "
     "sum and relies on Verilog's sign extension in context"),
    ("WIDTHEXPAND", "*Operator SHIFTL expects * bits on the LHS, but LHS's VARREF '$*",
     "Yosys's Verilog backend shifts a narrow temporary left into a wider result "
     "(a << s in the width of the result, as Amaranth defines <<)"),
    ("UNUSEDSIGNAL", "*'$*",
     "Yosys temporaries ($N): result bits above the destination width, e.g. the carry out "
     "of an adder whose sum the golden model proves never needs it"),
)


@dataclass(frozen=True)
class Port:
    """One Verilog port of a design (the one port class of generate, sim and synth)."""

    name: str
    direction: str  # "in" or "out" ("input"/"output" are accepted and normalised)
    width: int
    signed: bool = False

    def __post_init__(self):
        d = {"input": "in", "output": "out"}.get(self.direction, self.direction)
        if d not in ("in", "out"):
            raise ValueError(f"port {self.name}: direction must be 'in' or 'out', got "
                             f"{self.direction!r}")
        object.__setattr__(self, "direction", d)

    @property
    def is_input(self) -> bool:
        return self.direction == "in"

    def bits(self) -> list[str]:
        """The port's bit names as OpenSTA's ``get_ports`` spells them."""
        if self.width == 1:
            return [self.name]
        return [f"{self.name}[{i}]" for i in range(self.width)]

    def to_int(self, bits: np.ndarray) -> np.ndarray:
        """Interpret unsigned field values as this port's integers."""
        v = np.asarray(bits, dtype=np.int64)
        if self.signed:
            v = np.where(v >= (1 << (self.width - 1)), v - (1 << self.width), v)
        return v


def component_ports(component) -> list[Port]:
    """The ports of an Amaranth ``wiring.Component`` in signature order, named as
    Amaranth's Verilog backend names them (path parts joined by ``__``)."""
    from amaranth.hdl import Shape
    from amaranth.lib.wiring import In

    ports = []
    for path, member in component.signature.members.flatten():
        if not member.is_port:
            continue
        shape = Shape.cast(member.shape)
        direction = "in" if member.flow is In else "out"
        for idx in itertools.product(*(range(d) for d in member.dimensions)):
            name = "__".join(str(p) for p in (*path, *idx))
            ports.append(Port(name, direction, shape.width, shape.signed))
    return ports


def module_name(component) -> str:
    """A component's Verilog module name: its ``module_name`` attribute, else its class."""
    name = getattr(component, "module_name", None) or type(component).__name__.lower()
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"module name {name!r} is not a Verilog identifier")
    return name


def to_verilog(component, *, name: str | None = None) -> str:
    """Verilog of a component (no source locations, so it is reproducible)."""
    from amaranth.back import verilog

    return verilog.convert(component, name=name or module_name(component), emit_src=False)


def module_ports(verilog_text: str, name: str) -> list[str]:
    """Port names in the header of module ``name``."""
    m = re.search(rf"\bmodule\s+{re.escape(name)}\s*\(([^)]*)\)\s*;", verilog_text)
    if m is None:
        raise ValueError(f"module {name!r} not found in the Verilog")
    return [p.strip() for p in m.group(1).split(",") if p.strip()]


def lint_waivers(component, *, name: str | None = None) -> str:
    """Verilator configuration (``.vlt``) waiving the documented Amaranth idioms for one
    module file, the component's own documented ``lint_waivers`` (``(rule, match,
    reason)`` triples), plus ``UNUSEDSIGNAL`` for the named stage signals the component
    keeps for waveforms (its ``waveform_signals``; Amaranth reads the expressions they
    alias)."""
    name = name or module_name(component)
    lines = ["`verilator_config",
             f"// Waivers for {name}.v (mactile; reasons in docs/sim.md)."]
    for rule, match, reason in AMARANTH_WAIVERS:
        lines.append(f"// {rule}: {reason}")
        extra = f' -match "{match}"' if match else ""
        lines.append(f'lint_off -rule {rule} -file "*{name}.v"{extra}')
    for rule, match, reason in getattr(component, "lint_waivers", ()):
        # design-specific idioms, each with its reason (e.g. rtl/fp4tc)
        lines.append(f"// {rule}: {reason}")
        extra = f' -match "{match}"' if match else ""
        lines.append(f'lint_off -rule {rule} -file "*{name}.v"{extra}')
    stage = tuple(getattr(component, "waveform_signals", ()))
    if stage:
        lines.append("// UNUSEDSIGNAL: named stage signals kept for waveforms (aliases of "
                     "expressions the backend inlines)")
        for sig in stage:
            lines.append(f'lint_off -rule UNUSEDSIGNAL -file "*{name}.v" -match "*\'{sig}\'*"')
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class GeneratedDesign:
    """A component's Verilog and lint waivers, in memory."""

    module: str
    verilog: str
    waivers: str
    ports: list[Port]
    clocked: bool  # has clk/rst ports (a sync domain)

    def write(self, out_dir: os.PathLike) -> tuple[Path, Path]:
        """Write ``<module>.v`` and ``<module>.vlt`` into ``out_dir`` (each atomically;
        an unchanged file is left alone so its timestamp stays)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for suffix, content in ((".v", self.verilog), (".vlt", self.waivers)):
            p = out / f"{self.module}{suffix}"
            if not (p.exists() and p.read_text() == content):
                atomic_write(p, content)
            paths.append(p)
        return paths[0], paths[1]


def generate(component, *, name: str | None = None) -> GeneratedDesign:
    """Verilog, waivers and port list of a component."""
    name = name or module_name(component)
    text = to_verilog(component, name=name)
    hdr = module_ports(text, name)
    ports = component_ports(component)
    missing = [p.name for p in ports if p.name not in hdr]
    if missing:
        raise ValueError(f"{name}: ports {missing} of the signature are not in the Verilog "
                         f"header {hdr}")
    return GeneratedDesign(name, text, lint_waivers(component, name=name), ports,
                           clocked="clk" in hdr)


def write_design(component, out_dir: os.PathLike, *, name: str | None = None):
    """Generate a component and write ``<module>.v`` and ``<module>.vlt`` into ``out_dir``.
    Returns ``(GeneratedDesign, verilog path, waiver path)``."""
    gen = generate(component, name=name)
    v, w = gen.write(out_dir)
    return gen, v, w
