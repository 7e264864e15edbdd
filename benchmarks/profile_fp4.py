"""Launch each FP4 kernel once (after one warm-up) on one shape, for a profiler.

``ncu --launch-skip-before-match 0 python benchmarks/profile_fp4.py`` profiles every
launch; each kernel runs twice (warm-up + profiled). Also times the ReSET temperature
step (batch 8, 151936-entry vocabulary) with graph replay and prints it.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--K", type=int, default=8192)
    ap.add_argument("--N", type=int, default=8192)
    ap.add_argument("--m", default="1,8,16,64,256")
    ap.add_argument("--kernels", default="tc,cc,w4a4,temp")
    ap.add_argument("--formats", default="nvfp4")
    ap.add_argument("--time", action="store_true", help="also time each launch (graph replay)")
    a = ap.parse_args(argv)
    import cupy as cp

    from mactile.golden import NVFP4, RaZeR, RaZeRG128
    from mactile.gpu import gemm_tc, gemv_cc, gemv_w4a4, quantize_activation
    from mactile.gpu.bench.gemm_bench import random_quantized
    from mactile.gpu.bench.harness import time_launches
    from mactile.gpu.packing import pack_w4a16

    rng = np.random.default_rng(1)
    kinds = a.kernels.split(",")
    fm = {"nvfp4": NVFP4(), "razer": RaZeR(), "razer-g128": RaZeRG128()}
    for fname in a.formats.split(","):
        q = random_quantized(fm[fname], a.N, a.K, rng)
        pw = pack_w4a16(q, xp=cp)
        for M in (int(m) for m in a.m.split(",")):
            x = cp.asarray((rng.standard_normal((M, a.K)) * 0.5).astype(np.float16))
            y = cp.empty((M, a.N), cp.float16)
            todo = []
            if "tc" in kinds:
                todo.append(("tc", lambda: gemm_tc(x, pw, out=y)))
            if "cc" in kinds and M <= 8:
                todo.append(("cc", lambda: gemv_cc(x, pw, out=y)))
            if "w4a4" in kinds and M <= 8 and pw.fmt.w4a4:
                act = quantize_activation(x)
                todo.append(("w4a4", lambda: gemv_w4a4(act, pw, out=y)))
                todo.append(("quant", lambda: quantize_activation(x, out=act)))
            for name, fn in todo:
                fn()
                cp.cuda.Device().synchronize()
                fn()
                cp.cuda.Device().synchronize()
                if a.time:
                    t = time_launches(lambda i: fn())
                    print(f"{name:<6} {fname:<10} M={M:<4} {t.median_us:8.2f} us (no rotation)")
    if "temp" in kinds:
        from mactile.gpu import StepAwareTemperatureGPU
        B, V = 8, 151936
        s = StepAwareTemperatureGPU(B)
        z = cp.asarray((rng.standard_normal((B, V)) * 3).astype(np.float32))
        mask = cp.asarray((rng.random(V) < 0.01).astype(np.uint8))
        s.step(z, mask, sync=True)
        s.step(z, mask, sync=True)
        t = time_launches(lambda i: s.step(z, mask))
        print(f"temperature step B={B} V={V} fp32 logits: {t.median_us:.2f} us (graph replay)")
        z16 = z.astype(cp.float16)
        t = time_launches(lambda i: s.step(z16, mask))
        print(f"temperature step B={B} V={V} fp16 logits: {t.median_us:.2f} us (graph replay)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
