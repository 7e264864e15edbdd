"""Trial of the GEMM engine on a Hopper GPU (development aid; `mactile bench gpu` is the
benchmark): a smoke check of every format against the golden GEMM, then timings of the
default configurations (and optional alternatives) against cuBLAS FP16/FP8 in the same run.

    python benchmarks/engine_trial.py [--quick] [--alts] [-o results.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from mactile.gpu.formats import ENGINE, NESTEDFP_FORMATS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--alts", action="store_true", help="also time alternative configurations")
    ap.add_argument("--formats", default="nvfp4,mxfp4,razer,razer-g128,nestedfp16,nestedfp8")
    ap.add_argument("--ms", default="1,8,16,64,256,1024,4096")
    ap.add_argument("--shapes", default="4096x4096,8192x8192,14336x4096,4096x28672")
    ap.add_argument("-o", "--out", default=None)
    a = ap.parse_args(argv)
    import cupy as cp

    from mactile.gpu import engine as e
    from mactile.gpu.bench.gemm_bench import FORMATS, random_quantized
    from mactile.gpu.bench.harness import rotation_count, time_launches, torch_baselines
    from mactile.gpu.check import check_close, reference
    from mactile.gpu.nestedfp.kernels import NestedFPLinear, quantize_e4m3
    from mactile.gpu.packing import pack_w4a16
    from mactile.gpu.runtime import device_info

    info = device_info()
    print(f"device {info['name']} sms {info.get('sm_count')} l2 {info.get('l2_bytes')}", flush=True)
    rng = np.random.default_rng(1)
    fmts = a.formats.split(",")
    # ---------------------------------------------------------------- smoke
    for f in fmts:
        for M in (1, 16, 130):
            N, K = 256, 1024
            t0 = time.time()
            if f in NESTEDFP_FORMATS:
                w = (rng.standard_normal((N, K)) * 0.3).clip(-1.7, 1.7).astype(np.float16)
                x = rng.standard_normal((M, K)).astype(np.float16)
                layer = NestedFPLinear(cp.asarray(w))
                cfg = e.config_for(f, M)
                y = layer(cp.asarray(x), mode=ENGINE[f].mode, config=cfg).get()
                ref = x.astype(np.float64) @ w.astype(np.float64).T
                rel = np.linalg.norm(y - ref) / np.linalg.norm(ref)
                print(f"smoke {f:<11} M={M:<4} rel_l2 {rel:.2e} ({time.time() - t0:.1f}s)", flush=True)
            else:
                q = random_quantized(FORMATS[f], N, K, rng)
                pw = pack_w4a16(q, layouts=("frag",)).to(cp)
                x = rng.standard_normal((M, K)).astype(np.float16)
                y = e.gemm_fp4(cp.asarray(x), pw, out_dtype=np.float32).get()
                yr, s = reference(x, q.dequantize())
                try:
                    st = check_close(y, yr, s, K, what=f)
                    print(f"smoke {f:<11} M={M:<4} ok ratio {st['max_ratio_to_bound']:.2f} ({time.time() - t0:.1f}s)", flush=True)
                except AssertionError as ex:
                    print(f"smoke {f:<11} M={M:<4} FAIL {ex}", flush=True)
    # ---------------------------------------------------------------- timing
    out = []
    l2 = info["l2_bytes"]
    for shp in a.shapes.split(","):
        K, N = (int(v) for v in shp.split("x"))
        for M in (int(m) for m in a.ms.split(",")):
            base = torch_baselines(M, N, K, kinds=("fp16", "fp8"), l2_bytes=l2)
            b16 = base["fp16"].timing.median_us if base["fp16"].timing else float("nan")
            b8 = base["fp8"].timing.median_us if base["fp8"].timing else float("nan")
            row = {"K": K, "N": N, "M": M, "cublas_fp16_us": b16, "cublas_fp8_us": b8}
            x = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
            for f in fmts:
                cfgs = [e.config_for(f, M)]
                if a.alts:
                    cfgs += [c for c in _alts(e, f, M) if c != cfgs[0]]
                for ci, cfg in enumerate(cfgs):
                    try:
                        us = _time_fmt(cp, e, f, cfg, M, N, K, x, rng, l2, rotation_count, time_launches,
                                       NestedFPLinear, quantize_e4m3, FORMATS, random_quantized, pack_w4a16)
                    except Exception as ex:  # noqa: BLE001
                        print(f"  {f} {cfg}: ERROR {type(ex).__name__}: {ex}", flush=True)
                        continue
                    key = f if ci == 0 else f"{f}@{cfg.bn},{cfg.stages},{cfg.wgs},{cfg.n_ctas}"
                    row[key] = us
            out.append(row)
            cells = " ".join(f"{k}={b16 / v:.2f}x" for k, v in row.items() if k not in ("K", "N", "M", "cublas_fp16_us", "cublas_fp8_us"))
            print(f"{K}x{N} M={M:<5} fp16 {b16:8.1f}us fp8 {b16 / b8:.2f}x | {cells}", flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"device": info, "rows": out}, fh, indent=1, default=str)
    return 0


def _alts(e, f, M):
    """The default's neighbours: every variant of its token tile (warpgroups, schedule),
    the default of half and double the tile, and one CTA per SM (stream-K)."""
    d = e.config_for(f, M)
    out = list(e._variants(f, d.bn))
    cap = 128 if e.engine_traits(f)["PROMOTE"] else 256
    for b in (d.bn // 2, d.bn * 2):
        if 8 <= b <= cap:
            out.append(e.config_for(f, b))
    out.append(e.EngineConfig(d.bn, d.stages, d.wgs, 132, d.sched))
    return out


def _time_fmt(cp, e, f, cfg, M, N, K, x, rng, l2, rotation_count, time_launches, NestedFPLinear,
              quantize_e4m3, FORMATS, random_quantized, pack_w4a16):
    if f in NESTEDFP_FORMATS:
        w = (rng.standard_normal((N, K)) * 0.3).clip(-1.7, 1.7).astype(np.float16)
        layer = NestedFPLinear(cp.asarray(w))
        nbytes = layer.upper.nbytes * ENGINE[f].planes
        n = rotation_count(nbytes, l2_bytes=l2)
        layers = [layer] + [_nfp_copy(cp, layer) for _ in range(n - 1)]
        xs = [cp.asarray(x) for _ in range(n)]
        ys = [cp.empty((M, N), cp.float16) for _ in range(n)]
        mode = ENGINE[f].mode
        t = time_launches(lambda i: layers[i](xs[i], mode=mode, config=cfg, y=ys[i]), n_sets=n)
        return t.median_us
    key = (f, K, N)
    if key not in _SETS:  # one rotation of weight sets per format and shape
        _SETS.clear()
        q = random_quantized(FORMATS[f], N, K, rng)
        pw = pack_w4a16(q, layouts=("frag",), xp=cp)
        n = rotation_count(pw.nbytes("frag"), l2_bytes=l2)
        sets = [pw] + [pw.to(cp) for _ in range(n - 1)]
        for s in sets[1:]:
            s.layouts["frag"] = {k: (v.copy() if hasattr(v, "copy") else v) for k, v in pw.layouts["frag"].items()}
        _SETS[key] = sets
    sets = _SETS[key]
    n = len(sets)
    xs = [cp.asarray(x) for _ in range(n)]
    maps = [e.activation_map(xs[i], cfg.bn) for i in range(n)]
    ys = [cp.empty((M, N), cp.float16) for _ in range(n)]
    t = time_launches(lambda i: e.gemm_fp4(xs[i], sets[i], cfg=cfg, out=ys[i], x_map=maps[i]), n_sets=n)
    return t.median_us


_SETS: dict = {}


def _nfp_copy(cp, layer):
    import copy
    c = copy.copy(layer)
    c.upper = layer.upper.copy()
    c.lower = layer.lower.copy()
    c._fp8 = {}
    return c


if __name__ == "__main__":
    sys.exit(main())
