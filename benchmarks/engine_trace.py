"""Where one engine launch spends its time: per-CTA phase stamps (issue 16's fixed cost).

The engine's fixed cost per layer (5-8 us at M = 1, ``benchmarks/layer_floor.py``) is the
time a launch takes beyond streaming its bytes. This script runs a build of the engine with
``globaltimer`` stamps compiled in (``MT_ENGINE_TRACE``; :func:`mactile.gpu.engine.set_trace`)
and splits every launch into phases, per CTA:

* ``skew``: when the CTA started, after the grid's first CTA (launch spread over the SMs);
* ``setup``: entry -> after barrier init, ``__syncthreads`` and ``griddepcontrol.wait``;
* ``first_data``: producer's first copy issued -> the first stage's bytes landed (one
  DRAM round trip of a cold pipeline);
* ``main``: first stage landed -> the last tile's k-loop done (streaming);
* ``finish``: -> the CTA's last epilogue / partial-sum reduction written (the last arriver
  of a shared tile sums every other part here);
* ``span``: first entry of the grid -> last end (the kernel's time on the GPU).

Weights rotate over >= 4x L2 (each launch reads cold weights), launches back to back on one
stream, traces of the first two launches dropped; every traced output is checked equal to
the untraced kernel's. Medians over launches of the per-launch median (and max) over CTAs.

Usage (on a Hopper GPU): ``python benchmarks/engine_trace.py -o OUTDIR [--format nvfp4]
[--m 1] [--shapes KxN ...]`` writes ``engine_trace.json`` and ``engine_trace.md`` there.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

SHAPES = ((4096, 256), (4096, 4096), (14336, 4096), (8192, 8192))  # (K, N)
PHASES = ("skew", "setup", "first_data", "main", "finish", "span")


def phases(tr: np.ndarray) -> dict:
    """Per-launch phase statistics (us) from one launch's stamps ``[CTAs, TRACE_SLOTS]``."""
    from mactile.gpu.engine import TRACE_FIELDS
    f = {name: tr[:, i].astype(np.int64) for i, name in enumerate(TRACE_FIELDS)}
    busy = f["tiles"] > 0
    t0 = f["entry"].min()
    per = {
        "skew": f["entry"] - t0,
        "setup": f["ready"] - f["entry"],
        "first_data": (f["first_data"] - f["first_copy"])[busy],
        "main": (f["main_end"] - f["first_data"])[busy],
        "finish": (f["end"] - f["main_end"])[busy],
    }
    out = {k: {"median_us": float(np.median(v)) / 1e3, "max_us": float(v.max()) / 1e3} for k, v in per.items()}
    span = float(f["end"][busy].max() - t0) / 1e3
    out["span"] = {"median_us": span, "max_us": span}
    out["ctas"] = int(len(tr))
    out["sms"] = int(len(np.unique(f["sm"])))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True, type=Path, help="output folder (created)")
    ap.add_argument("--format", default="nvfp4", choices=["nvfp4", "mxfp4", "razer", "razer-g128"])
    ap.add_argument("--m", type=int, nargs="+", default=[1], help="token counts (default 1)")
    ap.add_argument("--shapes", nargs="+", default=None, metavar="KxN",
                    help="layer shapes K x N (default: 4096x256 4096x4096 14336x4096 8192x8192)")
    ap.add_argument("--launches", type=int, default=12, help="traced launches per case (default 12)")
    args = ap.parse_args(argv)

    import cupy as cp

    from mactile.golden.fileio import atomic_write
    from mactile.gpu import engine as e
    from mactile.gpu.bench.gemm_bench import FORMATS, random_quantized
    from mactile.gpu.bench.harness import parse_shapes, rotation_count, streaming_read_peak
    from mactile.gpu.packing import pack_w4a16
    from mactile.gpu.runtime import device_info

    info = device_info()
    rng = np.random.default_rng(5)
    shapes = parse_shapes(args.shapes, SHAPES)
    rows = []
    for K, N in shapes:
        q = random_quantized(FORMATS[args.format], N, K, rng)
        first = pack_w4a16(q, layouts=("frag",), xp=cp)
        n_sets = max(rotation_count(first.nbytes("frag"), l2_bytes=info["l2_bytes"]), 2)
        sets = [first] + [pack_w4a16(q, layouts=("frag",), xp=cp) for _ in range(n_sets - 1)]
        peak = streaming_read_peak(first.nbytes("frag"))["tbps"]
        for M in args.m:
            x = cp.asarray((rng.standard_normal((M, K)) * 0.5).astype(np.float16))
            cfg = e.config_for(args.format, M)
            ref = e.gemm_fp4(x, first, cfg=cfg).get()
            bufs = [cp.zeros(e.TRACE_SLOTS * 1024, dtype=cp.uint64) for _ in range(args.launches + 2)]
            ys = [cp.empty((M, N), dtype=cp.float16) for _ in bufs]
            for i, (b, y) in enumerate(zip(bufs, ys)):
                e.set_trace(b)
                e.gemm_fp4(x, sets[i % n_sets], cfg=cfg, out=y)
            e.set_trace(None)
            cp.cuda.Device().synchronize()
            for i, y in enumerate(ys):
                if not np.array_equal(y.get(), ref):
                    raise SystemExit(f"{K}x{N} M={M}: traced launch {i} differs from the untraced kernel")
            ctas = int(np.count_nonzero(bufs[0].get().reshape(-1, e.TRACE_SLOTS)[:, 0]))
            stats = [phases(b.get().reshape(-1, e.TRACE_SLOTS)[:ctas]) for b in bufs[2:]]
            row = {"format": args.format, "K": K, "N": N, "M": M, "config": str(cfg), "ctas": ctas,
                   "weight_bytes": first.nbytes("frag"), "read_peak_tbps": peak,
                   "stream_us": first.nbytes("frag") / (peak * 1e6)}
            for p in PHASES:
                row[p] = {k: float(np.median([s[p][k] for s in stats])) for k in ("median_us", "max_us")}
            row["example_trace_ns"] = (bufs[2].get().reshape(-1, e.TRACE_SLOTS)[:ctas]).tolist()
            rows.append(row)
            print(f"{args.format} {K}x{N} M={M} {cfg} CTAs={ctas}: "
                  + "  ".join(f"{p} {row[p]['median_us']:.2f}/{row[p]['max_us']:.2f}" for p in PHASES)
                  + f"  (bytes at peak {row['stream_us']:.2f} us)", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"device": info, "date": info.get("date"), "format": args.format, "rows": rows,
           "phases": {"skew": "CTA entry after the grid's first CTA",
                      "setup": "entry -> after barrier init, __syncthreads, griddepcontrol.wait",
                      "first_data": "producer's first copy issued -> first stage landed",
                      "main": "first stage landed -> last tile's k-loop done",
                      "finish": "-> CTA's last epilogue / partial-sum reduction written",
                      "span": "grid's first entry -> last end"}}
    atomic_write(args.out / "engine_trace.json", json.dumps(doc, indent=1))
    lines = [f"# Engine launch phases ({info.get('name')}, {info.get('date')})", "",
             "Per-CTA globaltimer stamps (traced build), weights cold (rotated over >= 4x L2); "
             "median over launches of the median / max over CTAs, us. `stream` = weight bytes "
             "at the same run's streaming-read peak.", "",
             "| format | K x N | M | CTAs | stream | " + " | ".join(PHASES) + " |",
             "|---|---|---:|---:|---:|" + "---:|" * len(PHASES)]
    for r in rows:
        lines.append(f"| {r['format']} | {r['K']}x{r['N']} | {r['M']} | {r['ctas']} | {r['stream_us']:.2f} | "
                     + " | ".join(f"{r[p]['median_us']:.2f} / {r[p]['max_us']:.2f}" for p in PHASES) + " |")
    atomic_write(args.out / "engine_trace.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
