"""Area and power of small output-stationary tensor cores (NVFP4 vs RaZeR), split into
MAC units and edge decoders, and the 16 x 16 figure extrapolated from them.

The 16 x 16 output-stationary cores (``nvfp4-tc-os``, ``razer-tc-os``: 256 MAC units, each
with its own scale product, FP32 pack and FP32 adder) take hours in Yosys; this script
synthesizes a small array of both (default 4 x 4) on NanGate45 at 2 ns (Table 9's library
and clock in ``synth/paper_tables.yaml``):

* the flow (``mactile synth``: flattened, equivalence proved, power from the bench's
  stimulus) for the totals and the RaZeR/NVFP4 ratios;
* a hierarchical synthesis (:func:`mactile.synth.breakdown.area_breakdown`) for the area
  of each MAC unit (``u{i}_{j}``), each element decoder (``a_dec{i}``, ``w_dec{j}``) and
  the glue (offset registers, scale decoders, the edge's pipeline registers, control).

The 16 x 16 area is then **extrapolated** (not measured): 256 units + 16 + 16 decoders +
the glue scaled by (16 + 16) / (rows + cols) (``drain="row"``: + 16 row adders, the glue
from a two-width fit, below); the power by 256 / (rows x cols). Writes
``os_<R>x<C>.json`` and ``.md`` into the output folder (default
``docs/results/synth/nangate45-2ns-os``).

With ``--drain row`` the units keep only their block dots; the row back ends, the
accumulator registers and the drain multiplexers are in the glue. Its 16 x 16 figure
comes from a fit over two widths (run ``--cols C`` and ``--cols C2`` with the same
``--rows``; the second run reads the first's JSON), else from the scaling above, which
undercounts the accumulators. Written as ``os_<R>x<C>_row.*``.

Usage: python benchmarks/synth_os_small.py [--rows 4] [--cols 4] [--drain unit|row] [-o DIR]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from mactile.golden.fileio import atomic_outputs
from mactile.synth.breakdown import area_breakdown
from mactile.synth.libraries import resolve_library
from mactile.synth.paper import load_tables

DESIGNS = ("nvfp4-tc-os", "razer-tc-os")
ROW_CORES = {"nvfp4-tc-os": "nvfp4-tc", "razer-tc-os": "razer-tc"}
FULL = 16


def _flow(design: str, pdk: str, clock_ns: float, rows: int, cols: int, drain: str) -> dict:
    """``mactile synth`` (cached) as a record."""
    cmd = [sys.executable, "-m", "mactile.cli.main", "synth", design, "--pdk", pdk,
           "--clock-ns", f"{clock_ns:g}", "--param", f"rows={rows}", "--param",
           f"cols={cols}", "--param", f"drain={drain}", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 2) or not out.stdout.strip().startswith("{"):
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout[:out.stdout.rindex("}") + 1])


def _split(b: dict) -> dict:
    p = b["parts"]
    units = [v for k, v in p.items() if k.startswith("u")]
    a_dec = [v for k, v in p.items() if k.startswith("a_dec")]
    w_dec = [v for k, v in p.items() if k.startswith("w_dec")]
    adders = [v for k, v in p.items() if k.startswith("acc_add")]  # drain="row": per row
    return {"total": b["total"], "units": sum(units), "unit_mean": sum(units) / len(units),
            "unit_count": len(units), "decoders": sum(a_dec) + sum(w_dec),
            "act_decoder": sum(a_dec) / len(a_dec), "weight_decoder": sum(w_dec) / len(w_dec),
            "row_adders": sum(adders), "row_adder_mean": sum(adders) / len(adders) if adders
            else 0.0, "glue": b["top_only"]}


def _row_glue_fit(out: Path, design: str, R: int, C: int, glue: float) -> dict | None:
    """With ``drain="row"`` the glue holds the row back ends (one per row) and every
    unit's accumulator register and drain-multiplexer input (one per unit): from this
    run and an earlier one of another width ``C2`` (same ``R``, its JSON in ``out``),
    ``glue = per_row * R + per_unit * R * C`` (the edge folded into per_row). None
    without the other width (then the glue is scaled by (16 + 16) / (R + C), which
    undercounts the accumulators)."""
    for f in sorted(out.glob(f"os_{R}x*_row.json")):
        other = json.loads(f.read_text())["designs"].get(design)
        if other is None or other["cols"] == C or other["rows"] != R:
            continue
        C2, g2 = other["cols"], other["hierarchical"]["glue"]
        per_unit = (g2 - glue) / (R * (C2 - C))
        return {"widths": sorted((C, C2)), "per_unit_um2": per_unit,
                "per_row_um2": (glue - per_unit * R * C) / R}
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--cols", type=int, default=4)
    ap.add_argument("--drain", default="unit", choices=("unit", "row"),
                    help="the cores' drain option (row: one back end per row, in the glue)")
    ap.add_argument("-o", "--output", default="docs/results/synth/nangate45-2ns-os")
    args = ap.parse_args()
    R, C = args.rows, args.cols
    t9 = next(t for t in load_tables() if t["id"] == "razer-table9")
    pdk, clock = t9["pdk"], float(t9["clock_ns"])
    lib = resolve_library(pdk)
    measured = Path(f"docs/results/synth/{pdk}-{clock:g}ns/area_power.json")
    row_cores = {r["design"]: r for r in json.loads(measured.read_text())} \
        if measured.exists() else {}
    res = {}
    for d in DESIGNS:
        b = area_breakdown(d, lib, clock, rows=R, cols=C, drain=args.drain)
        f = _flow(d, pdk, clock, R, C, args.drain)
        s = _split(b)
        units16, dec16 = FULL * FULL * s["unit_mean"], FULL * (s["act_decoder"] +
                                                                s["weight_decoder"])
        glue16 = s["glue"] * (2 * FULL) / (R + C)
        fit = _row_glue_fit(Path(args.output), d, R, C, s["glue"]) \
            if args.drain == "row" else None
        if fit is not None:  # per-row and per-unit parts of the glue from two widths
            glue16 = fit["per_row_um2"] * FULL + fit["per_unit_um2"] * FULL * FULL
        adders16 = s["row_adder_mean"] * FULL  # drain="row": one FP32 adder per row
        rc = row_cores.get(ROW_CORES[d], {})
        res[d] = {
            "rows": R, "cols": C, "drain": args.drain, "pdk": pdk, "clock_ns": clock,
            "flow": {k: f.get(k) for k in ("area_um2", "slack_ns", "meets_timing", "power_mw",
                                           "equivalence", "activity_method", "rtl_sha256",
                                           "sequential_area_um2", "cell_count")},
            "hierarchical": s,
            "row_glue_fit": fit,
            "extrapolated_16x16": {"units_um2": units16, "decoders_um2": dec16,
                                   "glue_um2": glue16, "row_adders_um2": adders16,
                                   "area_um2": units16 + dec16 + glue16 + adders16,
                                   "power_mw": f["power_mw"]["total"] * FULL * FULL / (R * C)},
            "measured_16x16_row_core": {"design": ROW_CORES[d],
                                        "area_um2": rc.get("area_um2"),
                                        "power_mw": (rc.get("power_mw") or {}).get("total")},
        }
        print(f"{d} {R}x{C}: flow area {f['area_um2']:.0f} um^2, power "
              f"{f['power_mw']['total']:.2f} mW, slack {f['slack_ns']:.3f} ns; unit "
              f"{s['unit_mean']:.1f} um^2, decoders {s['act_decoder']:.1f}/"
              f"{s['weight_decoder']:.1f} um^2, glue {s['glue']:.1f} um^2", flush=True)
    nv, rz = res["nvfp4-tc-os"], res["razer-tc-os"]
    ratios = {
        "area_flow": rz["flow"]["area_um2"] / nv["flow"]["area_um2"],
        "power_flow": rz["flow"]["power_mw"]["total"] / nv["flow"]["power_mw"]["total"],
        "unit_area": rz["hierarchical"]["unit_mean"] / nv["hierarchical"]["unit_mean"],
        "decoder_area": rz["hierarchical"]["decoders"] / nv["hierarchical"]["decoders"],
        "area_16x16_extrapolated": (rz["extrapolated_16x16"]["area_um2"]
                                    / nv["extrapolated_16x16"]["area_um2"]),
    }
    paper = {r["name"]: r for r in t9["rows"]}
    ratios_paper = {"area": paper["RaZeR"]["area"] / paper["NVFP4"]["area"],
                    "power": paper["RaZeR"]["power"] / paper["NVFP4"]["power"],
                    "array_area": paper["RaZeR"]["array_area"] / paper["NVFP4"]["array_area"],
                    "decoder_area": paper["RaZeR"]["decoder_area"] / paper["NVFP4"]["decoder_area"]}
    out = {"designs": res, "ratios_razer_over_nvfp4": ratios, "paper_table9_ratios": ratios_paper,
           "note": "16x16 figures are extrapolated from the small array, not measured"}
    L = [f"# Output-stationary tensor cores, {R} x {C}, drain={args.drain}, {pdk} at "
         f"{clock:g} ns", "",
         "Generated by `benchmarks/synth_os_small.py`. Flow: `mactile synth` (flattened, "
         "netlist proved equivalent, power from each core's own bench stimulus). Split: "
         "the same RTL synthesized per module (`synth/breakdown.py`; its total differs "
         "from the flow's because ABC cannot optimize across module boundaries).", "",
         "| design | flow area um^2 | power mW | slack ns | MAC unit um^2 | act decoder um^2 "
         "| weight decoder um^2 | decoders um^2 | row adders um^2 | glue um^2 | "
         "hierarchical total um^2 |",
         "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for d, r in res.items():
        f, s = r["flow"], r["hierarchical"]
        L.append(f"| {d} | {f['area_um2']:.0f} | {f['power_mw']['total']:.2f} | "
                 f"{f['slack_ns']:.3f} | {s['unit_mean']:.1f} | {s['act_decoder']:.1f} | "
                 f"{s['weight_decoder']:.1f} | {s['decoders']:.1f} | {s['row_adders']:.0f} | "
                 f"{s['glue']:.1f} | {s['total']:.0f} |")
    L += ["", "RaZeR / NVFP4 (measured on the small array) beside the paper's Table 9:", "",
          "| ratio | ours | paper |", "| --- | ---: | ---: |",
          f"| total area (flow) | {ratios['area_flow']:.3f} | {ratios_paper['area']:.3f} |",
          f"| power (flow) | {ratios['power_flow']:.3f} | {ratios_paper['power']:.3f} |",
          f"| MAC unit area vs array | {ratios['unit_area']:.3f} | {ratios_paper['array_area']:.3f} |",
          f"| decoder area | {ratios['decoder_area']:.3f} | {ratios_paper['decoder_area']:.3f} |",
          "", "**Extrapolation** to 16 x 16 (not measured): 256 MAC units + 16 activation "
          "and 16 weight decoders (+ 16 row adders with drain=row) + the glue scaled by "
          "32 / (rows + cols) (drain=row: the two-width fit below where present); power "
          "scaled by "
          "256 / (rows x cols). Beside it, the measured 16 x 16 row-dot-product cores of "
          "the same library and clock.", "",
          "| design | units um^2 | decoders um^2 | row adders um^2 | glue um^2 | area um^2 | "
          "power mW | row core (measured) area um^2 | row core power mW |",
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for d, r in res.items():
        e, m = r["extrapolated_16x16"], r["measured_16x16_row_core"]
        fmt = lambda v, p: "n/a" if v is None else f"{v:.{p}f}"  # noqa: E731
        L.append(f"| {d} | {e['units_um2']:.0f} | {e['decoders_um2']:.0f} | "
                 f"{e['row_adders_um2']:.0f} | {e['glue_um2']:.0f} | {e['area_um2']:.0f} | "
                 f"{e['power_mw']:.0f} | "
                 f"{fmt(m['area_um2'], 0)} | {fmt(m['power_mw'], 1)} |")
    fits = {d: r["row_glue_fit"] for d, r in res.items() if r.get("row_glue_fit")}
    if fits:
        L += ["", "Row drain: the glue (row back ends, the units' accumulator registers and "
              "drain-multiplexer inputs, the edge) fitted over two widths as per_row x rows "
              "+ per_unit x rows x cols, and the 16 x 16 glue taken from the fit:", "",
              "| design | widths | per row um^2 | per unit um^2 |", "| --- | --- | ---: | ---: |"]
        L += [f"| {d} | {f['widths']} | {f['per_row_um2']:.0f} | {f['per_unit_um2']:.0f} |"
              for d, f in fits.items()]
    L += ["", f"Extrapolated RaZeR / NVFP4 area at 16 x 16: "
          f"{ratios['area_16x16_extrapolated']:.3f} (paper: {ratios_paper['area']:.3f})."]
    o = Path(args.output)
    stem = f"os_{R}x{C}" + ("" if args.drain == "unit" else f"_{args.drain}")
    with atomic_outputs(o / f"{stem}.json", o / f"{stem}.md", make_parents=True) as (tj, tm):
        tj.write_text(json.dumps(out, indent=1) + "\n")
        tm.write_text("\n".join(L) + "\n")
    print(f"wrote {o / (stem + '.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
