"""Designs to Verilog: one registry design (or any Amaranth component) as synthesizable RTL.

The Verilog comes from the one emitter (:func:`mactile.rtl.verilog.generate`), so the
synthesized module has the name ``mactile generate`` and the simulations give it: the
component's ``module_name``. It is written without source-location attributes, so its hash
(the cache key) depends on the design and its parameters only.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from mactile.rtl.verilog import Port, generate

__all__ = ["Port", "Rtl", "design_rtl", "component_rtl", "verilog_ports"]


@dataclass(frozen=True)
class Rtl:
    """Generated RTL of one design.

    Attributes
    ----------
    design : str
        Registry name (or the name given to :func:`component_rtl`).
    top : str
        Verilog module name.
    verilog : str
    ports : tuple of Port
    clock : str or None
        The clock port (Amaranth's ``sync`` domain: ``clk``), None for a combinational design.
    reset : str or None
        The synchronous reset port (``rst``), held low in every stimulus.
    params : dict
        The parameters the design was built with.
    """

    design: str
    top: str
    verilog: str
    ports: tuple[Port, ...]
    clock: str | None
    reset: str | None
    params: dict = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.verilog.encode()).hexdigest()

    @property
    def inputs(self) -> tuple[Port, ...]:
        return tuple(p for p in self.ports if p.is_input)

    @property
    def data_inputs(self) -> tuple[Port, ...]:
        """Inputs other than the clock and reset."""
        return tuple(p for p in self.inputs if p.name not in (self.clock, self.reset))


_PORT_RE = re.compile(r"^\s*(input|output)\s+(?:(?:wire|reg|signed)\s+)*(?:\[(\d+):(\d+)\]\s*)?"
                      r"\\?([\w$]+)\s*;", re.M)


def verilog_ports(verilog: str, top: str) -> tuple[Port, ...]:
    """The ports of module ``top`` in Amaranth-generated Verilog."""
    m = re.search(rf"^module\s+\\?{re.escape(top)}\s*\(.*?^endmodule", verilog, re.M | re.S)
    if not m:
        raise ValueError(f"module {top!r} not found in the generated Verilog")
    ports = []
    for d, hi, lo, name in _PORT_RE.findall(m.group(0)):
        width = abs(int(hi) - int(lo)) + 1 if hi else 1
        ports.append(Port(name, d, width))
    return tuple(ports)


def component_rtl(component, name: str, *, params: dict | None = None) -> Rtl:
    """Verilog of an Amaranth ``wiring.Component`` from the one emitter; ``name`` is the
    design's registry name (the module is named by the component)."""
    gen = generate(component)
    top = gen.module
    ports = verilog_ports(gen.verilog, top)  # header order, with clk/rst
    signed = {p.name: p.signed for p in gen.ports}
    ports = tuple(Port(p.name, p.direction, p.width, signed.get(p.name, False)) for p in ports)
    names = {p.name for p in ports if p.is_input}
    sig_names = {p.name for p in gen.ports}
    clock = "clk" if "clk" in names and "clk" not in sig_names else None
    reset = "rst" if "rst" in names and "rst" not in sig_names else None
    return Rtl(design=name, top=top, verilog=gen.verilog, ports=ports, clock=clock, reset=reset,
               params=dict(params or {}))


def design_rtl(name: str, **overrides) -> Rtl:
    """Build registry design ``name`` (default parameters plus ``overrides``) to Verilog.

    Raises
    ------
    ValueError
        Unknown design or parameter.
    """
    from mactile.rtl.registry import get_design

    design = get_design(name)
    params = {**design.params, **overrides}
    component = design.build(**overrides)
    return component_rtl(component, name, params=params)
