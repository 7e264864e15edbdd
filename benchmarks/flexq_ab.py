"""Same-process A/B of two (or more) FlexQ kernel sources on a Hopper GPU (development aid).

A change of ``gpu/flexq/flexq.cu`` is measured against the source it replaces in one process,
interleaved (A, B, then B, A, ...), on FlexQ's whole W6A6 path as ``linear`` runs it (the
activation quantizer, then the GEMM, with PDL where the layer uses it; each source's default
kernel shape), with CUDA-graph replay, weights rotated past the L2 and cuBLAS FP16 timed
beside them. Outputs must be bitwise equal across the sources unless ``--allow-different``
(a source with another plane layout than this tree's packer computes with misplaced bits:
its times still count, its outputs do not).

A source is a complete ``flexq.cu`` as this tree has it: write one with ``--dump FILE`` (then
edit it, or dump it from another checkout), and name the current tree's ``tree``. Sources
without prebuilt cubins (``MACTILE_CUBIN_DIR``) compile with NVRTC on first use.

    python benchmarks/flexq_ab.py --dump base.cu
    sed 's/constexpr bool PEEL = MT != 4;/constexpr bool PEEL = true;/' base.cu > peel.cu
    python benchmarks/flexq_ab.py --source tree=tree --source peel=peel.cu --ms 1 16 32 64 \\
        [--shapes 4096x4096 ...] [-o ab.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _sources(specs: list[str]) -> dict[str, Path | None]:
    """``NAME=PATH`` (``PATH`` = ``tree``: the package's source, ``None``) -> {name: path}."""
    from mactile.gpu.bench.harness import ab_sources
    return ab_sources(specs, tool="flexq_ab", marker="flexq_gemm", what="a FlexQ source")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", type=Path, default=None, metavar="FILE",
                    help="write this tree's flexq.cu to FILE and exit")
    ap.add_argument("--source", action="append", default=[], metavar="NAME=PATH",
                    help="a flexq.cu to time (PATH from --dump, or 'tree'); two or more")
    ap.add_argument("--ms", nargs="+", type=int, default=[1, 8, 16, 32, 64], help="token counts")
    ap.add_argument("--shapes", nargs="+", default=None, metavar="KxN",
                    help="layer shapes K x N (default: the benchmark's nine)")
    ap.add_argument("--reps", type=int, default=2, help="interleaved rounds per case (default 2; best kept)")
    ap.add_argument("--allow-different", action="store_true",
                    help="outputs may differ (another plane layout; no bitwise check)")
    ap.add_argument("-o", "--out", type=Path, default=None, help="JSON file of the records")
    args = ap.parse_args(argv)

    from mactile.golden.fileio import atomic_write
    from mactile.gpu.flexq import kernels as fk

    tree_src = fk._SRC
    if args.dump is not None:
        atomic_write(args.dump, tree_src.read_text(encoding="utf-8"))
        print(f"wrote {args.dump}")
        return 0
    sources = _sources(args.source)
    if args.reps < 1:
        raise SystemExit("flexq_ab: --reps must be >= 1")
    if any(m < 1 or m > 64 for m in args.ms):
        raise SystemExit("flexq_ab: --ms must lie in 1..64 (the benchmark's FlexQ range)")
    from mactile.gpu.bench.gemm_bench import SHAPES
    from mactile.gpu.bench.harness import geomean, parse_shapes, rotation_count, time_launches, torch_baselines

    shapes = parse_shapes(args.shapes, [(K, N) for _, _, K, N in SHAPES])

    import cupy as cp

    from mactile.gpu.runtime import device_info

    info = device_info()
    L2 = info["l2_bytes"]
    print(f"{info['name']} driver {info['versions'].get('driver')} {info['date']}", flush=True)
    rng = np.random.default_rng(7)
    names = list(sources)
    records, ratios = [], {}
    try:
        for K, N in shapes:
            w = (rng.standard_normal((N, K)) * 0.05).astype(np.float16)
            fk._SRC = tree_src  # the weights are packed by this tree's kernels
            n_sets = rotation_count(int(N * K * 6.25 / 8), l2_bytes=L2)
            layers = [fk.FlexQLinear(cp.asarray(w)) for _ in range(n_sets)]
            for M in args.ms:
                x = cp.asarray((rng.standard_normal((M, K)) * 0.5).astype(np.float16))
                ys = [cp.empty((M, N), dtype=cp.float16) for _ in layers]
                fp16_us = torch_baselines(M, N, K, kinds=("fp16",), l2_bytes=L2)["fp16"].timing.median_us
                times, ref = {n: [] for n in names}, None
                for rep in range(args.reps):
                    for n in (names if rep % 2 == 0 else names[::-1]):
                        fk._SRC = tree_src if sources[n] is None else sources[n]
                        if rep == 0:  # correctness first: the sources against each other
                            layers[0](x, y=ys[0])
                            out = ys[0].get()
                            if ref is None:
                                ref = out
                            elif not args.allow_different and not np.array_equal(
                                    out.view(np.uint16), ref.view(np.uint16)):
                                raise SystemExit(f"flexq_ab: {K}x{N} M={M}: source {n!r}'s output differs "
                                                 f"from {names[0]!r}'s (--allow-different if intended)")
                        t = time_launches(lambda i, x=x: layers[i](x, y=ys[i]), n_sets=n_sets)
                        times[n].append(t.median_us)
                best = {n: min(v) for n, v in times.items()}
                for n in names:
                    records.append({"K": K, "N": N, "M": M, "source": n, "time_us": best[n],
                                    "times_us": times[n], "cublas_fp16_us": fp16_us,
                                    "speedup_vs_fp16": fp16_us / best[n], "device": info["name"],
                                    "date": info["date"], "versions": info["versions"]})
                    ratios.setdefault((n, M), []).append(best[names[0]] / best[n])
                print(f"{K:5d}x{N:<5d} M={M:<3d} cuBLAS {fp16_us:7.2f} us  " + "  ".join(
                    f"{n} {best[n]:7.2f} ({fp16_us / best[n]:.2f}x)" for n in names), flush=True)
            del layers
            cp.get_default_memory_pool().free_all_blocks()
    finally:
        fk._SRC = tree_src
    print(f"\ngeomean speed over {names[0]!r} (> 1: faster)")
    for M in args.ms:
        print(f"M={M:<3d} " + "  ".join(f"{n} {geomean(ratios[(n, M)]):.3f} "
                                       f"({min(ratios[(n, M)]):.2f}-{max(ratios[(n, M)]):.2f})"
                                       for n in names[1:]))
    if args.out is not None:
        atomic_write(args.out, json.dumps({"records": records}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
