"""The fixed cost per layer of the W4A16 engine at M = 1 (issue 16's floor measurement).

Every layer of a decoder is one kernel in a CUDA graph; what a kernel costs beyond
streaming its bytes is paid once per layer. This script times the engine on the shapes of
issue 16 (4096x4096, 4096x6144) plus 8192x8192 and a tiny layer (4096x256: almost no
bytes, so its time *is* the floor) inside CUDA graphs of back-to-back launches (weights
rotated over >= 4x L2, random data, median of 15 replays), without and with programmatic
dependent launch (PDL: the next layer's CTAs start on the SMs the previous one frees and
run their set-up before ``griddepcontrol.wait``), beside
cuBLAS FP16 and the same run's streaming-read peak. The fixed cost is reported as
``time - bytes / read_peak``.

Usage (on a Hopper GPU): ``python benchmarks/layer_floor.py -o OUTDIR [--formats nvfp4 ...]
[--shapes KxN ...] [--m M]`` writes ``layer_floor.json`` and ``layer_floor.md`` there and prints the table.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

SHAPES = ((4096, 256), (4096, 4096), (4096, 6144), (8192, 8192))  # (K, N)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True, type=Path, help="output folder (created)")
    ap.add_argument("--formats", nargs="+", default=["nvfp4", "mxfp4", "razer", "razer-g128"],
                    choices=["nvfp4", "mxfp4", "razer", "razer-g128"], help="FP4 weight formats")
    ap.add_argument("--m", type=int, default=1, help="tokens (default 1)")
    ap.add_argument("--shapes", nargs="+", default=None, metavar="KxN",
                    help="layer shapes K x N (default: 4096x256 4096x4096 4096x6144 8192x8192)")
    args = ap.parse_args(argv)

    import cupy as cp

    from mactile.golden.fileio import atomic_write
    from mactile.gpu import engine as e
    from mactile.gpu.bench.gemm_bench import FORMATS, random_quantized
    from mactile.gpu.bench.harness import (parse_shapes, rotation_count, streaming_read_peak, time_launches,
                                           torch_baselines)
    from mactile.gpu.packing import pack_w4a16
    from mactile.gpu.runtime import device_info

    info = device_info()
    rng = np.random.default_rng(11)
    M = args.m
    rows = []
    shapes = parse_shapes(args.shapes, SHAPES)
    for K, N in shapes:
        base = torch_baselines(M, N, K, kinds=("fp16",), l2_bytes=info["l2_bytes"])["fp16"]
        fp16_us = base.timing.median_us if base.timing else None
        x = cp.asarray((rng.standard_normal((M, K)) * 0.5).astype(np.float16))
        for f in args.formats:
            q = random_quantized(FORMATS[f], N, K, rng)
            first = pack_w4a16(q, layouts=("frag",), xp=cp)
            n_sets = rotation_count(first.nbytes("frag"), l2_bytes=info["l2_bytes"])
            sets = [first] + [pack_w4a16(q, layouts=("frag",), xp=cp) for _ in range(n_sets - 1)]
            cfg = e.config_for(f, M)
            xmap = e.activation_map(x, cfg.bn)
            ys = [cp.empty((M, N), dtype=cp.float16) for _ in range(n_sets)]
            ref = e.gemm_fp4(x, first, cfg=cfg).get()
            nbytes = first.nbytes("frag") + M * K * 2 + M * N * 2
            peak = streaming_read_peak(first.nbytes("frag"))["tbps"]
            row = {"format": f, "K": K, "N": N, "M": M, "config": str(cfg), "bytes": nbytes,
                   "read_peak_tbps": peak, "cublas_fp16_us": fp16_us}
            for pdl in (False, True):
                def launch(i, pdl=pdl):
                    e.gemm_fp4(x, sets[i], cfg=cfg, out=ys[i], pdl=pdl, x_map=xmap)
                t = time_launches(launch, n_sets=n_sets)
                # correctness first: every set holds the same weights, so every output equals ref
                cp.cuda.Device().synchronize()
                bad = [i for i in range(n_sets) if not np.array_equal(ys[i].get(), ref)]
                if bad:
                    raise SystemExit(f"{f} {K}x{N} pdl={pdl}: outputs of sets {bad} differ from the reference")
                key = "pdl" if pdl else "plain"
                row[f"{key}_us"] = t.median_us
                row[f"{key}_fixed_us"] = t.median_us - nbytes / (peak * 1e12) * 1e6
                row[f"{key}_speedup_vs_fp16"] = fp16_us / t.median_us if fp16_us else None
                row[f"{key}_fraction_of_peak"] = nbytes / (t.median_us * 1e-6) / 1e12 / peak
            rows.append(row)
            print(f"{f:<11} {K}x{N:<5} plain {row['plain_us']:7.2f} us (fixed {row['plain_fixed_us']:5.2f}, "
                  f"{row['plain_speedup_vs_fp16'] or 0:4.2f}x)  pdl {row['pdl_us']:7.2f} us "
                  f"(fixed {row['pdl_fixed_us']:5.2f}, {row['pdl_speedup_vs_fp16'] or 0:4.2f}x)  "
                  f"cuBLAS {fp16_us or float('nan'):7.2f} us", flush=True)
            del sets, ys
    meta = {"device": info.get("name"), "date": info.get("date"), "versions": info.get("versions", {}),
            "method": "CUDA-graph replay of back-to-back launches, median of 15 replays, weights rotated "
                      "over >= 4x L2; fixed = time - bytes / same-run streaming-read peak"}
    lines = ["| format | K x N | bytes | plain us | fixed us | x cuBLAS | PDL us | fixed us | x cuBLAS "
             "| cuBLAS FP16 us |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['format']} | {r['K']}x{r['N']} | {r['bytes'] / 1e6:.2f} MB | {r['plain_us']:.2f} "
                     f"| {r['plain_fixed_us']:.2f} | {r['plain_speedup_vs_fp16'] or 0:.2f} | {r['pdl_us']:.2f} "
                     f"| {r['pdl_fixed_us']:.2f} | {r['pdl_speedup_vs_fp16'] or 0:.2f} "
                     f"| {r['cublas_fp16_us'] or float('nan'):.2f} |")
    md = (f"# Fixed cost per layer, M = {M} ({meta['device']}, {meta['date']})\n\n{meta['method']}.\n\n"
          + "\n".join(lines) + "\n")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "layer_floor.json", json.dumps({"meta": meta, "rows": rows}, indent=1))
    atomic_write(args.out / "layer_floor.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
