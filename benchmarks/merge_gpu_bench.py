"""Merge `mactile bench gpu` runs over disjoint shape sets into one result (development aid).

One device call may not hold the whole benchmark (the lent machines cap a command at ten
minutes), so it runs in parts, e.g. ``--shapes 0,1,3,2 --name part1`` and ``--shapes
4,5,8,6,7 --name part2``. This writes the merged JSON (records of every part, each part's
device, date, duration and streaming-read peak under ``meta.runs``), the markdown tables and
the PNG exactly as `mactile bench gpu` does for one run, and with ``--tuning-out`` the
measured crossover into the tuning table (its engine entries kept).

    python benchmarks/merge_gpu_bench.py part1.json part2.json -o docs/results/gpu_gemm_h100 \\
        --tuning-out gpu/tuning/h100.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def merge(parts: list[tuple[dict, list[dict]]]) -> tuple[dict, list[dict]]:
    """``[(meta, records)]`` of runs on disjoint shapes -> one ``(meta, records)``; the runs
    must be of one device and one set of M values and formats."""
    from mactile.gpu.bench.gemm_bench import SHAPES

    metas = [m for m, _ in parts]
    names = {m["device"]["name"] for m in metas}
    if len(names) != 1:
        raise SystemExit(f"merge_gpu_bench: the runs are of different devices: {sorted(names)}")
    for key in ("M", "kinds"):
        if len({json.dumps(m.get(key)) for m in metas}) != 1:
            raise SystemExit(f"merge_gpu_bench: the runs differ in {key!r}")
    seen: set = set()
    for m in metas:
        for s in m.get("shapes", []):
            if tuple(s) in seen:
                raise SystemExit(f"merge_gpu_bench: shape {s} is in more than one run")
            seen.add(tuple(s))
    order = {tuple(s): i for i, s in enumerate(SHAPES)}
    meta = dict(metas[0])
    meta["shapes"] = sorted((s for m in metas for s in m.get("shapes", [])),
                            key=lambda s: order.get(tuple(s), len(order)))
    meta["seconds"] = sum(m.get("seconds", 0.0) for m in metas)
    meta["runs"] = [{"date": m["device"].get("date"), "seconds": m.get("seconds"), "shapes": m.get("shapes"),
                     "read_peak_1gib_tbps": m.get("read_peak_1gib_tbps")} for m in metas]
    meta["note"] = (f"{len(metas)} runs on one {names.pop()} in one session, merged "
                    f"(benchmarks/merge_gpu_bench.py): shapes "
                    + " and ".join(",".join(str(order.get(tuple(s), "?")) for s in m.get("shapes", []))
                                   for m in metas) + " at every M")
    records = [r for _, recs in parts for r in recs]
    return meta, records


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="JSON files written by `mactile bench gpu`")
    ap.add_argument("-o", "--out", type=Path, required=True, help="output stem (writes .json, .md, .png)")
    ap.add_argument("--tuning-out", type=Path, default=None, help="tuning table to write the crossover into")
    args = ap.parse_args(argv)
    if len(args.runs) < 2:
        raise SystemExit("merge_gpu_bench: give two or more runs")

    from mactile.golden.fileio import atomic_outputs, atomic_write
    from mactile.gpu.bench import gemm_bench as gb
    from mactile.gpu.bench.harness import read_json, write_json

    meta, records = merge([read_json(p) for p in args.runs])
    stem = args.out
    with atomic_outputs(Path(f"{stem}.json"), Path(f"{stem}.md"), make_parents=True) as (tj, tm):
        write_json(records, str(tj), meta=meta)
        tm.write_text(gb.report_markdown(records, meta["M"]))
    with atomic_outputs(Path(f"{stem}.png")) as (tp,):
        gb.plot(records, str(tp))
    if args.tuning_out is not None:
        cx = gb.crossover_table(records)
        cx["device"] = meta["device"]["name"]
        cx["date"] = meta["device"]["date"]
        old = json.loads(args.tuning_out.read_text()) if args.tuning_out.exists() else {}
        atomic_write(args.tuning_out, json.dumps({**old, **cx}, indent=1))
    print(gb.geomean_table(records))
    print(f"wrote {stem}.json, {stem}.md, {stem}.png" + (f", {args.tuning_out}" if args.tuning_out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
