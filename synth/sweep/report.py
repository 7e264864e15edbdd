"""A sweep's report: CSV, Markdown and Pareto plots per design family.

Written from the results database (every job's latest record) by ``mactile sweep`` at the
end of a run and by ``mactile sweep --report DIR``; all files or none
(:func:`mactile.golden.fileio.atomic_outputs`).

Pareto fronts are drawn per family and library (areas of different processes are not
alternatives to each other):

- area vs energy per operation, over the configurations that meet timing at their clock
  (the power of a clock a design cannot reach is not an operating point);
- fmax vs area, over every configuration with figures (fmax = 1 / (clock - slack)).

The papers' points (:mod:`mactile.synth.paper`, ``paper_tables.yaml``) are drawn on the
area-energy panel of the library the table is compared on, where the table states its
clock (energy per operation = power x clock period / operations per cycle); they come
from other processes and tools, so they show the paper's trade-off, not a target.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

from mactile.golden.fileio import atomic_outputs

from .jobs import record_fields

__all__ = ["write_sweep_report", "pareto_front", "report_files", "paper_points"]


def pareto_front(points: list[tuple[float, float]], *, maximize_y: bool = False) -> list[int]:
    """Indices of the points no other point beats: smaller x and smaller y (larger y
    with ``maximize_y``), ties kept once. Sorted by x."""
    sgn = -1.0 if maximize_y else 1.0
    order = sorted(range(len(points)), key=lambda i: (points[i][0], sgn * points[i][1]))
    front, best = [], math.inf
    for i in order:
        y = sgn * points[i][1]
        if y < best:
            front.append(i)
            best = y
    return front


#: Longest slug of a family in a file name (the rest replaced by a hash: names stay
#: under every file system's 255-byte limit).
_SLUG_MAX = 80


def _slug(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "family"
    if len(s) > _SLUG_MAX:
        import hashlib

        s = s[:_SLUG_MAX - 9] + "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return s


def report_files(out_dir: Path, families: list[str]) -> dict[str, Path]:
    """The report's paths: ``sweep.csv``, ``sweep.md`` and one plot per family.

    Two families whose names give the same slug (``a b`` and ``a-b``) get distinct files
    (``pareto-a-b.png``, ``pareto-a-b-2.png``, in the order given): the report of any set
    of family names can be written."""
    files = {"csv": out_dir / "sweep.csv", "md": out_dir / "sweep.md"}
    used: set[str] = set()
    for f in families:
        base = _slug(f)
        slug, n = base, 1
        while slug.lower() in used:  # case-insensitive file systems too
            n += 1
            slug = f"{base}-{n}"
        used.add(slug.lower())
        files[f"png:{f}"] = out_dir / f"pareto-{slug}.png"
    return files


def _families(records: list[dict]) -> dict[str, list[dict]]:
    fam: dict[str, list[dict]] = {}
    for r in records:
        fam.setdefault(r["family"], []).append(r)
    return fam


def _fronts(rs: list[dict]) -> tuple[set[str], set[str]]:
    """Job ids on the area-energy and the fmax-area fronts (per library)."""
    ae, fa = set(), set()
    for pdk in sorted({r["pdk"] for r in rs}):
        ok = [r for r in rs if r["pdk"] == pdk and r["status"] == "ok"]
        e = [r for r in ok if r["meets_timing"] and r["energy_per_op_pj"] is not None]
        ae |= {e[i]["job_id"] for i in pareto_front([(r["area_um2"], r["energy_per_op_pj"])
                                                     for r in e])}
        f = [r for r in ok if r["fmax_mhz"] is not None]
        fa |= {f[i]["job_id"] for i in pareto_front([(r["area_um2"], r["fmax_mhz"])
                                                     for r in f], maximize_y=True)}
    return ae, fa


def paper_points(records: list[dict]) -> list[dict]:
    """The papers' rows for the designs of ``records``, as points to plot.

    One point per table row whose design was swept on the table's library, where the
    table states its clock: ``{family, pdk, name, table, area_um2, energy_per_op_pj, op}``.
    """
    from mactile.synth.paper import load_tables

    from .spec import ops_per_cycle

    try:
        tables = load_tables()
    except (OSError, ValueError, KeyError):
        return []
    seen = {(r["design"], r["pdk"]): r for r in records}
    out = []
    for t in tables:
        if "not stated" in t.get("paper_process", ""):
            continue  # no clock: no energy per operation
        scale = 1e-3 if t["units"]["power"] == "uW" else 1.0
        for row in t["rows"]:
            r = seen.get((row.get("design"), t["pdk"]))
            if r is None:
                continue
            from mactile.rtl.registry import get_design
            ops, op = ops_per_cycle(row["design"], get_design(row["design"]).params)
            # A row of N copies ("32 MACs") is drawn per copy, like our one unit.
            count = int(row.get("count", 1))
            out.append({"family": r["family"], "pdk": t["pdk"], "table": t["id"],
                        "name": row["name"] + (f" (1 of {count})" if count > 1 else ""),
                        "process": t["paper_process"],
                        "area_um2": float(row["area"]) / count,
                        "energy_per_op_pj": float(row["power"]) * scale * float(t["clock_ns"])
                        / (ops * count), "op": op})
    return out


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return v


def format_csv(records: list[dict]) -> str:
    ae, fa = _fronts(records)
    fields = [f for f in record_fields() if f not in ("params",)] + ["params", "pareto_area_energy",
                                                                      "pareto_fmax_area"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in records:
        row = {k: _cell(r.get(k)) for k in fields}
        row["pareto_area_energy"] = r["job_id"] in ae
        row["pareto_fmax_area"] = r["job_id"] in fa
        w.writerow(row)
    return buf.getvalue()


def _g(x, fmt="{:.4g}") -> str:
    return "-" if x is None else fmt.format(x)


def _over(r: dict) -> str:
    o = r.get("overrides") or {}
    return ", ".join(f"{k}={'+'.join(map(str, v)) if isinstance(v, list) else v}"
                     for k, v in o.items()) or "defaults"


def format_markdown(records: list[dict], *, name: str, families: dict[str, str]) -> str:
    """The report: status counts, then per family its plot and a table of every
    configuration with figures (fronts marked), then the failures."""
    ae, fa = _fronts(records)
    counts = {s: sum(r["status"] == s for r in records) for s in ("ok", "unproven", "timeout",
                                                                    "failed")}
    lines = [f"# Sweep {name}", "",
             f"{len(records)} configurations: " + ", ".join(f"{n} {s}" for s, n in counts.items())
             + ". Area from Yosys `stat -liberty` (um^2), power from OpenSTA at each job's "
             "workload (mW), fmax = 1 / (clock - worst slack), energy per operation = "
             "power x clock period / operations per cycle. Fronts per library: **AE** = on "
             "the area-energy front (among the configurations that meet timing), **FA** = on "
             "the fmax-area front.", ""]
    for fam, rs in _families(records).items():
        lines += [f"## {fam}", "", f"![Pareto fronts of {fam}]({families[fam]})", "",
                  "| design | parameters | library | clock (ns) | area (um^2) | cells | "
                  "slack (ns) | fmax (MHz) | power (mW) | energy/op (pJ) | equivalence | front |",
                  "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
        ok = sorted((r for r in rs if r["status"] == "ok"),
                    key=lambda r: (r["pdk"], r["design"], r["energy_per_op_pj"] or 0))
        for r in ok:
            front = " ".join(x for x, s in (("AE", ae), ("FA", fa)) if r["job_id"] in s)
            timing = "" if r["meets_timing"] else " (fails)"
            lines.append(
                f"| {r['design']} | {_over(r)} | {r['pdk']} | {r['clock_ns']:g} | "
                f"{r['area_um2']:.0f} | {r['cell_count']} | {_g(r['slack_ns'], '{:.3f}')}{timing} | "
                f"{_g(r['fmax_mhz'], '{:.0f}')} | {_g(r['power_total_mw'])} | "
                f"{_g(r['energy_per_op_pj'])} per {r['op']} | {r['equivalence']} | {front} |")
        lines.append("")
    bad = [r for r in records if r["status"] != "ok"]
    if bad:
        lines += ["## Jobs without figures", "", "| design | parameters | library | clock (ns) "
                  "| status | reason |", "| --- | --- | --- | ---: | --- | --- |"]
        for r in bad:
            reason = " ".join((r.get("error") or "").split())[:300].replace("|", "/")
            lines.append(f"| {r['design']} | {_over(r)} | {r['pdk']} | {r['clock_ns']:g} | "
                         f"{r['status']} | {reason} |")
        lines.append("")
    return "\n".join(lines)


def _annotation(r: dict) -> str:
    o = r.get("overrides") or {}
    parts = [f"{k}={'+'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in o.items()]
    return " ".join(parts + [f"{r['clock_ns']:g}ns"])


def plot_family(fam: str, rs: list[dict], papers: list[dict], path: Path) -> None:
    """Two panels: area vs energy per operation, fmax vs area; one colour per design,
    one marker per library, each library's front as a line (front points labelled with
    their parameters and clock), the papers' points as stars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rs if r["status"] == "ok"]
    pdks = sorted({r["pdk"] for r in rs})
    designs = sorted({r["design"] for r in rs})
    # Colours, markers and line styles repeat beyond their palettes (any number of designs
    # and libraries can be drawn; the legend and the table tell repeated colours apart).
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {d: palette[i % len(palette)] for i, d in enumerate(designs)}
    markers = {p: "osD^v<>ph"[i % 9] for i, p in enumerate(pdks)}
    styles = {p: ["-", "--", ":", "-."][i % 4] for i, p in enumerate(pdks)}
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    ax_e, ax_f = axes
    op = ok[0]["op"] if ok else "op"
    for pdk in pdks:
        p_ok = [r for r in ok if r["pdk"] == pdk]
        for d in designs:
            pts = [r for r in p_ok if r["design"] == d]
            if not pts:
                continue
            met = [r for r in pts if r["meets_timing"] and r["energy_per_op_pj"] is not None]
            miss = [r for r in pts if not r["meets_timing"] and r["energy_per_op_pj"] is not None]
            label = None
            ax_e.scatter([r["area_um2"] for r in met], [r["energy_per_op_pj"] for r in met],
                         color=colors[d], marker=markers[pdk], label=label, s=32)
            ax_e.scatter([r["area_um2"] for r in miss], [r["energy_per_op_pj"] for r in miss],
                         facecolors="none", edgecolors=colors[d], marker=markers[pdk], s=32)
            fm = [r for r in pts if r["fmax_mhz"]]
            ax_f.scatter([r["area_um2"] for r in fm], [r["fmax_mhz"] for r in fm],
                         color=colors[d], marker=markers[pdk], label=label, s=32)
        e = [r for r in p_ok if r["meets_timing"] and r["energy_per_op_pj"] is not None]
        f = [r for r in p_ok if r["fmax_mhz"]]
        for ax, pts, ykey, maxy in ((ax_e, e, "energy_per_op_pj", False),
                                    (ax_f, f, "fmax_mhz", True)):
            front = [pts[i] for i in pareto_front([(r["area_um2"], r[ykey]) for r in pts],
                                                  maximize_y=maxy)]
            if not front:
                continue
            ax.step([r["area_um2"] for r in front], [r[ykey] for r in front], where="post",
                    color="0.4", ls=styles[pdk], lw=1, zorder=0,
                    label=None)
            if len(front) <= 12 and len(ok) <= 40:  # beyond that the table names them
                for r in front:
                    ax.annotate(_annotation(r), (r["area_um2"], r[ykey]), xytext=(4, -9),
                                textcoords="offset points", fontsize=6.5, color="0.25")
    for p in papers:
        ax_e.scatter([p["area_um2"]], [p["energy_per_op_pj"]], marker="*", s=120,
                     color="gold", edgecolors="k", linewidths=0.6, zorder=3)
        ax_e.annotate(f"paper: {p['name']}", (p["area_um2"], p["energy_per_op_pj"]),
                      xytext=(5, 3), textcoords="offset points", fontsize=7)
    # One legend: colours are designs, markers libraries, lines fronts, stars papers.
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", color=colors[d], label=d) for d in designs]
    if len(pdks) > 1:
        handles += [Line2D([], [], ls="", marker=markers[p], color="0.5", label=p) for p in pdks]
    handles.append(Line2D([], [], color="0.4", label="front" + (" (line style: library)"
                                                                 if len(pdks) > 1 else "")))
    if papers:
        procs = sorted({p["process"].split(",")[0] for p in papers})
        handles.append(Line2D([], [], ls="", marker="*", markersize=11, color="gold",
                              markeredgecolor="k", label=f"paper ({'; '.join(procs)})"))
    for ax in axes:
        xs = [c.get_offsets()[:, 0] for c in ax.collections if len(c.get_offsets())]
        if xs:
            lo, hi = min(x.min() for x in xs), max(x.max() for x in xs)
            if lo > 0 and hi / lo > 30:
                ax.set_xscale("log")
            else:  # a linear axis of large areas: 250k, not 250000 run together
                from matplotlib.ticker import FuncFormatter

                ax.xaxis.set_major_formatter(FuncFormatter(
                    lambda x, _: f"{x / 1e3:g}k" if abs(x) >= 1e4 else f"{x:g}"))
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("area (um$^2$)")
    ys = [r["energy_per_op_pj"] for r in ok if r["energy_per_op_pj"]] + \
         [p["energy_per_op_pj"] for p in papers]
    if ys and min(ys) > 0 and max(ys) / min(ys) > 30:
        ax_e.set_yscale("log")
    ax_e.set_ylabel(f"energy per {op} (pJ)")
    ax_e.set_title("area vs energy per operation (hollow: fails timing at its clock)",
                   fontsize=9)
    ax_f.set_ylabel("fmax (MHz)")
    ax_f.set_title("fmax vs area", fontsize=9)
    fig.legend(handles=handles, loc="center right", fontsize=7, frameon=False)
    fig.suptitle(f"{fam}: {len(ok)} of {len(rs)} configurations with figures", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_sweep_report(records: list[dict], out_dir: str | Path, *, name: str,
                       plots: bool = True) -> dict[str, Path]:
    """Write ``sweep.csv``, ``sweep.md`` and ``pareto-FAMILY.png`` into ``out_dir``."""
    out = Path(out_dir)
    fams = _families(records)
    files = report_files(out, list(fams))
    if not plots:
        files = {k: v for k, v in files.items() if not k.startswith("png:")}
    pngs = {f: files[f"png:{f}"].name if f"png:{f}" in files else "" for f in fams}
    papers = paper_points(records) if plots else []
    keys = list(files)
    with atomic_outputs(*files.values(), make_parents=True) as tmps:
        tmp = dict(zip(keys, tmps))
        tmp["csv"].write_text(format_csv(records))
        tmp["md"].write_text(format_markdown(records, name=name, families=pngs))
        for fam, rs in fams.items():
            if f"png:{fam}" in tmp:
                plot_family(fam, rs, [p for p in papers if p["family"] == fam],
                            tmp[f"png:{fam}"])
    return files
