"""Per-submodule area of a design, from a synthesis that keeps the hierarchy.

The flow (:mod:`.flow`) flattens, so its area is one number. Table 5 of BlockDialect
splits each MAC into multiplier and accumulator; to compare with it, the MACs are built
with ``keep_hierarchy`` (submodules ``multiplier`` and ``accumulator``) and synthesized
here without flattening: Yosys ``synth`` + ``dfflibmap`` + ``abc`` per module, then
``stat -liberty`` per module. The hierarchical netlist is not the flow's (ABC cannot
optimize across the boundary; measured: the totals differ by up to 10%), so the parts are
reported as shares of their own total besides the absolute figures.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .libraries import Library, cache_dir
from .rtl import design_rtl
from .tools import ToolError, run_yosys

__all__ = ["area_breakdown"]

_SCRIPT = """read_verilog -sv design.v
hierarchy -check -top {top}
synth -top {top}
dfflibmap -liberty {lib} {dont_use}
abc -liberty {lib} -D {clock_ps} {dont_use}
opt_clean -purge
tee -q -o stat.json stat -json -liberty {lib}
"""


def area_breakdown(design: str, lib: Library, clock_ns: float, **overrides) -> dict:
    """``{"total": um^2, "parts": {submodule: um^2}, "top_only": um^2}`` of registry
    design ``design`` built with ``keep_hierarchy=True`` where it has that parameter (the
    MACs; the tensor cores' decoders, MAC units and adders are always submodules), plus
    ``overrides``.

    ``parts`` are the top's direct submodules (each with everything under it);
    ``top_only`` is the glue left in the top module (for a MAC: nothing but wiring).
    """
    from mactile.rtl.registry import get_design

    if "keep_hierarchy" in get_design(design).params:
        overrides = {"keep_hierarchy": True, **overrides}
    rtl = design_rtl(design, **overrides)
    dont_use = lib.dont_use_args()
    root = cache_dir() / "breakdown"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        work = Path(tmp)
        (work / "design.v").write_text(rtl.verilog)
        # Relative: Yosys in WebAssembly sees only part of the file system (not /tmp).
        liberty = os.path.relpath(lib.path, work)
        try:
            run_yosys(_SCRIPT.format(top=rtl.top, lib=liberty, dont_use=dont_use,
                                     clock_ps=int(clock_ns * 1000)), work, "breakdown.log")
        except ToolError as e:
            # The scratch folder goes away: keep its log where the message can name it.
            kept = root / f"{rtl.top}-{lib.name}.failed.log"
            if (work / "breakdown.log").exists():
                shutil.copyfile(work / "breakdown.log", kept)
            raise ToolError(str(e).replace(str(work / "breakdown.log"), str(kept))
                            .replace(str(work), str(root))) from None
        mods = json.loads((work / "stat.json").read_text())["modules"]
    areas = {name.lstrip("\\"): float(m.get("area", 0.0)) for name, m in mods.items()}
    top = rtl.top
    parts = {name[len(top) + 1:]: a for name, a in areas.items()
             if name.startswith(top + ".") and "." not in name[len(top) + 1:]}
    total = areas.get(top, 0.0)  # stat's figure for the top includes its submodules
    return {"design": design, "total": total, "parts": parts,
            "top_only": total - sum(parts.values())}
