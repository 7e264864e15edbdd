"""The paper view: the papers' hardware tables beside this project's numbers, as ratios.

The tables are transcribed in ``paper_tables.yaml`` (with their source). Each is run on
its open library at its clock (:func:`paper_configs`); each row's area and power are then
divided by the table's baseline row, for the paper and for us, since absolute numbers
differ between commercial and open tools and between processes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from .flow import SynthResult

__all__ = ["load_tables", "load_comparisons", "paper_configs", "compare", "cross_format",
           "format_paper_markdown", "format_cross_markdown", "TABLES_FILE"]

TABLES_FILE = Path(__file__).resolve().parent / "paper_tables.yaml"


def load_tables(path: Path = TABLES_FILE) -> list[dict]:
    """The transcribed tables, checked for a baseline row and numeric area/power."""
    tables = yaml.safe_load(path.read_text())["tables"]
    for t in tables:
        names = [r["name"] for r in t["rows"]]
        if t["baseline"] not in names:
            raise ValueError(f"{path}: table {t['id']}: baseline {t['baseline']!r} is not a row")
        for r in t["rows"]:
            for k in ("area", "power"):
                if not isinstance(r.get(k), (int, float)):
                    raise ValueError(f"{path}: table {t['id']} row {r['name']!r}: {k} missing")
    return tables


@dataclass(frozen=True)
class Config:
    pdk: str
    clock_ns: float
    designs: tuple[str, ...]
    workload: str = "bench"


def _row_designs(row: dict) -> list[str]:
    """The row's paper-faithful design, then its variants' designs."""
    out = [row["design"]] if row.get("design") else []
    return out + [v["design"] for v in row.get("variants", ())]


def load_comparisons(path: Path = TABLES_FILE) -> list[dict]:
    """The cross-format comparisons (our designs side by side, no paper figures)."""
    comps = yaml.safe_load(path.read_text()).get("comparisons") or []
    for c in comps:
        if c["baseline"] not in c["designs"]:
            raise ValueError(f"{path}: comparison {c['id']}: baseline {c['baseline']!r} is "
                             "not one of its designs")
    return comps


def paper_configs(tables: list[dict], known: set[str],
                  comparisons: list[dict] = ()) -> list[Config]:
    """(library, clock, workload) -> the built designs the tables (each row's
    paper-faithful design and its variants) and comparisons need there."""
    want: dict[tuple[str, float, str], list[str]] = {}
    rows = [(t["pdk"], t["clock_ns"], t.get("workload", "bench"), d)
            for t in tables for r in t["rows"] for d in _row_designs(r)]
    rows += [(c["pdk"], c["clock_ns"], c.get("workload", "bench"), d)
             for c in comparisons for d in c["designs"]]
    for pdk, clock, wl, d in rows:
        if d and d in known:
            lst = want.setdefault((pdk, float(clock), wl), [])
            if d not in lst:
                lst.append(d)
    return [Config(p, c, tuple(ds), w) for (p, c, w), ds in want.items()]


def _ratio(x, base):
    if x is None or base in (None, 0):
        return None
    return x / base


def compare(tables: list[dict], results: list[SynthResult], *,
            skipped_pdks: dict[str, str] | None = None) -> list[dict]:
    """One comparison per table: every row with the paper's and our figures and ratios.

    ``results`` may hold runs of several (library, clock) pairs; each table uses those
    on its own. Power is compared in the table's unit (uW or mW).
    """
    by_key = {}
    for r in results:
        wl = getattr(r, "workload", "bench")
        by_key[(r.design, r.pdk, float(r.clock_ns), wl)] = r
    out = []
    for t in tables:
        scale = 1e3 if t["units"]["power"] == "uW" else 1.0
        workload = t.get("workload", "bench")
        rows = []
        expanded = []
        for row in t["rows"]:
            expanded.append(row)
            for v in row.get("variants", ()):
                expanded.append({**{k: x for k, x in row.items() if k != "variants"},
                                 "design": v["design"], "variant": v["label"],
                                 **({"note": v["note"]} if "note" in v else {})})
        for row in expanded:
            count = int(row.get("count", 1))
            r = by_key.get((row.get("design"), t["pdk"], float(t["clock_ns"]), workload))
            ours_area = ours_power = slack = fmax = None
            activity = ""
            status = "not built" if row.get("design") else "no design"
            if r is not None:
                if r.ok:
                    ours_area = r.area_um2 * count
                    ours_power = r.power_mw["total"] * scale * count
                    activity = getattr(r, "activity_method", "") or ""
                    slack = r.slack_ns
                    if slack is not None:
                        fmax = 1e3 / (r.clock_ns - slack)
                    status = "met" if r.meets_timing else "fails timing"
                else:
                    status = f"{r.failure} (no figures)"
            elif skipped_pdks and t["pdk"] in skipped_pdks and row.get("design"):
                status = f"not run ({skipped_pdks[t['pdk']]})"
            rows.append({"name": row["name"], "design": row.get("design"), "count": count,
                         "variant": row.get("variant", ""),
                         "paper": {k: v for k, v in row.items()
                                   if k not in ("name", "design", "count", "note", "variants",
                                                "variant")},
                         "note": row.get("note", ""),
                         "ours": {"area": ours_area, "power": ours_power, "slack_ns": slack,
                                  "fmax_mhz": fmax},
                         "status": status, "activity": activity})
        base = next(x for x in rows if x["name"] == t["baseline"] and not x["variant"])
        for x in rows:
            x["paper_ratio"] = {k: _ratio(x["paper"][k], base["paper"][k])
                                for k in ("area", "power")}
            x["ours_ratio"] = {k: _ratio(x["ours"][k], base["ours"][k])
                               for k in ("area", "power")}
        out.append({"id": t["id"], "title": t["title"], "source": " ".join(t["source"].split()),
                    "paper_process": t["paper_process"], "pdk": t["pdk"],
                    "clock_ns": t["clock_ns"], "units": t["units"], "baseline": t["baseline"],
                    "workload": workload,
                    "workload_source": next((x["activity"] for x in rows if x.get("activity")), ""),
                    "rows": rows})
    return out


def _workload_text(c: dict) -> str:
    """The stimulus the table's power was measured under, in words."""
    src = c.get("workload_source", "")
    m = src.split(" cycles of ", 1)
    src = m[1].split(", mean ")[0].split(" stimulus")[0] if len(m) == 2 else src
    if c.get("workload", "bench") == "bench":
        return f"each design's test-suite stimulus ({src or 'not run'})"
    return f"`{c['workload']}`: {src or 'not run'}"


def _f(x, fmt="{:.3g}"):
    return "-" if x is None else fmt.format(x)


def format_paper_markdown(comparisons: list[dict], cross: list[dict] = ()) -> str:
    """The paper view as Markdown: per table, paper vs ours, absolute and ratios."""
    lines = ["# The papers' hardware tables vs this project", "",
             "Ratios are each row over the table's baseline row (marked *), for the paper and "
             "for us; absolute figures are not comparable across tools and processes. "
             "'x N' rows are N copies of one design with nothing shared. Each paper row is "
             "first measured on the design that follows the paper's text (the default); "
             "rows marked 'variant' are other organisations of the same row, kept for "
             "comparison (their ratios are over the default baseline). Regenerate with "
             "`mactile report --paper -o docs/results/synth`.", ""]
    for c in comparisons:
        pu = c["units"]["power"]
        lines += [f"## {c['title']}", "",
                  f"Paper: {c['paper_process']}. Ours: {c['pdk']} at {c['clock_ns']:g} ns "
                  f"(Yosys + OpenSTA). Source: {c['source']}", "",
                  f"Power workload: {_workload_text(c)}", "",
                  f"| row | design | paper area (um^2) | ours area (um^2) | paper area ratio | "
                  f"ours area ratio | paper power ({pu}) | ours power ({pu}) | paper power "
                  f"ratio | ours power ratio | ours fmax (MHz) | status |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for x in c["rows"]:
            mark = " *" if x["name"] == c["baseline"] and not x.get("variant") else ""
            if x.get("variant"):
                mark += f" (variant: {x['variant']})"
            design = (x["design"] or "-") + (f" x {x['count']}" if x["count"] > 1 else "")
            lines.append(
                f"| {x['name']}{mark} | {design} | {_f(x['paper']['area'], '{:.6g}')} | "
                f"{_f(x['ours']['area'], '{:.1f}')} | {_f(x['paper_ratio']['area'], '{:.2f}')} | "
                f"{_f(x['ours_ratio']['area'], '{:.2f}')} | {_f(x['paper']['power'], '{:.6g}')} | "
                f"{_f(x['ours']['power'], '{:.4g}')} | {_f(x['paper_ratio']['power'], '{:.2f}')} | "
                f"{_f(x['ours_ratio']['power'], '{:.2f}')} | {_f(x['ours']['fmax_mhz'], '{:.0f}')} | "
                f"{x['status']}{'; ' + x['note'] if x['note'] else ''} |")
        lines.append("")
    if cross:
        lines.append(format_cross_markdown(cross))
    return "\n".join(lines)


def cross_format(specs: list[dict], results: list[SynthResult]) -> list[dict]:
    """Each comparison's designs on its library and clock: area, power, fmax and energy per
    MAC (power x clock period / MACs per cycle, ``rows * cols * lanes`` of the design), and the
    ratios of area, power and energy per MAC over the baseline design."""
    out = []
    for c in specs:
        wl = c.get("workload", "bench")
        by_key = {(r.design, r.pdk, float(r.clock_ns)): r for r in results
                  if getattr(r, "workload", "bench") == wl}
        rows = []
        for d in c["designs"]:
            r = by_key.get((d, c["pdk"], float(c["clock_ns"])))
            row = {"design": d, "area": None, "power": None, "fmax_mhz": None,
                   "energy_pj_per_mac": None, "macs_per_cycle": None, "status": "not built"}
            if r is not None and r.ok:
                # MACs per cycle: a rows x cols array, times the lanes of a dot-product unit
                macs = (int(r.params.get("rows", 1)) * int(r.params.get("cols", 1))
                        * int(r.params.get("lanes", 1)))
                power = r.power_mw["total"]
                row.update(area=r.area_um2, power=power, macs_per_cycle=macs,
                           energy_pj_per_mac=power * r.clock_ns / macs,  # mW * ns = pJ
                           fmax_mhz=(None if r.slack_ns is None
                                     else 1e3 / (r.clock_ns - r.slack_ns)),
                           status="met" if r.meets_timing else "fails timing",
                           equivalence=r.equivalence)
            elif r is not None:
                row["status"] = f"{r.failure} (no figures)"
            rows.append(row)
        base = next(x for x in rows if x["design"] == c["baseline"])
        for x in rows:
            x["ratio"] = {k: _ratio(x[k], base[k]) for k in ("area", "power", "energy_pj_per_mac")}
        out.append({"id": c["id"], "title": c["title"], "note": " ".join(c["note"].split()),
                    "pdk": c["pdk"], "clock_ns": c["clock_ns"], "baseline": c["baseline"],
                    "rows": rows})
    return out


def format_cross_markdown(cross: list[dict]) -> str:
    """The cross-format comparisons as Markdown tables."""
    lines = []
    for c in cross:
        lines += [f"## {c['title']}", "",
                  f"Ours: {c['pdk']} at {c['clock_ns']:g} ns (Yosys + OpenSTA), every netlist "
                  f"proven equivalent to its RTL. {c['note']}", "",
                  "| design | area (um^2) | area ratio | power (mW) | power ratio | fmax (MHz) "
                  "| MACs/cycle | energy per MAC (pJ) | energy ratio | status |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for x in c["rows"]:
            mark = " *" if x["design"] == c["baseline"] else ""
            lines.append(
                f"| {x['design']}{mark} | {_f(x['area'], '{:.1f}')} | "
                f"{_f(x['ratio']['area'], '{:.2f}')} | {_f(x['power'], '{:.4g}')} | "
                f"{_f(x['ratio']['power'], '{:.2f}')} | {_f(x['fmax_mhz'], '{:.0f}')} | "
                f"{_f(x['macs_per_cycle'], '{}')} | {_f(x['energy_pj_per_mac'], '{:.4f}')} | "
                f"{_f(x['ratio']['energy_pj_per_mac'], '{:.2f}')} | {x['status']} |")
        lines.append("")
    return "\n".join(lines)


def write_paper_view(comparisons: list[dict], out_dir: Path,
                     cross: list[dict] = ()) -> dict[str, Path]:
    """``paper.json`` and ``paper.md`` in ``out_dir``, all or nothing (the JSON: the paper
    tables' comparisons, plus ``cross_format`` entries with ``"kind": "cross-format"``)."""
    from mactile.golden.fileio import atomic_outputs

    files = {"json": Path(out_dir) / "paper.json", "md": Path(out_dir) / "paper.md"}
    data = list(comparisons) + [{"kind": "cross-format", **c} for c in cross]
    with atomic_outputs(*files.values(), make_parents=True) as (tj, tm):
        tj.write_text(json.dumps(data, indent=1) + "\n")
        tm.write_text(format_paper_markdown(comparisons, cross))
    return files
