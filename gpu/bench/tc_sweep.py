"""Pipeline-depth and grid sweep of the tensor-core W4A16 kernel (nvfp4), for tuning.

``python -m mactile.gpu.bench.tc_sweep OUT.json`` times ``gemm_tc`` at M = 1 and 16 on a
few shapes for every instantiated stage count (:data:`mactile.gpu.w4a16.TC_STAGE_SWEEP`)
and 1, 2 and 3 CTAs per SM, with the benchmark's method (random weights rotated over
>= 4x L2, CUDA-graph replay, median of 15 replays, output checked against the golden
float64 product first); also one L2-resident timing (no rotation) per shape, which
separates DRAM-bound from issue/latency-bound behaviour, and the ReSET temperature step
for both cluster sizes. Prints a table; writes every timing to the JSON file.
"""
from __future__ import annotations

import json
import sys

import numpy as np

SHAPES = [(4096, 4096), (14336, 4096), (8192, 8192), (25600, 5120)]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_path = argv[0] if argv else "tc_sweep.json"
    import cupy as cp

    from mactile.golden import NVFP4
    from mactile.gpu import gemm_tc
    from mactile.gpu.bench.fp4_bench import random_quantized
    from mactile.gpu.bench.harness import rotation_count, streaming_read_peak, time_launches
    from mactile.gpu.check import check_close, reference
    from mactile.gpu.packing import pack_w4a16
    from mactile.gpu.runtime import device_info, versions
    from mactile.gpu.w4a16 import TC_CONFIGS, TC_STAGE_SWEEP, tc_config

    info = device_info()
    sms = info["sm_count"]
    rng = np.random.default_rng(5)
    rows = []
    for K, N in SHAPES:
        q = random_quantized(NVFP4(), N, K, rng)
        pw0 = pack_w4a16(q, layouts=("frag",), xp=cp)
        wb = pw0.nbytes("frag")
        n = rotation_count(wb, l2_bytes=info["l2_bytes"])
        sets = [pw0] + [pack_w4a16(q, layouts=("frag",), xp=cp) for _ in range(n - 1)]
        peak = streaming_read_peak(wb)["tbps"]
        for M in (1, 16):
            x = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
            xs = [cp.asarray(x) for _ in range(n)]
            ys = [cp.empty((M, N), cp.float16) for _ in range(n)]
            MT = tc_config(M)[0]
            y_ref, abs_sum = reference(x, q.dequantize())
            for S in TC_STAGE_SWEEP[MT]:
                for cps in (1, 2, 3):
                    C = cps * sms
                    fn = lambda i: gemm_tc(xs[i], sets[i], out=ys[i], n_ctas=C, stages=S)
                    fn(0)
                    check_close(ys[0].get(), y_ref, abs_sum, K, what=f"tc S={S} C={C}")
                    t = time_launches(fn, n_sets=n)
                    r = {"K": K, "N": N, "M": M, "stages": S, "n_ctas": C, "time_us": t.median_us,
                         "tbps": wb / t.median_us / 1e6, "read_peak_tbps": peak,
                         "default": (S == TC_CONFIGS[MT][2])}
                    rows.append(r)
                    print(f"K={K:<6} N={N:<6} M={M:<3} S={S} C={C:<4} {t.median_us:8.2f} us  "
                          f"{r['tbps']:.2f} TB/s ({100 * r['tbps'] / peak:.0f}% of {peak:.2f})", flush=True)
            # L2-resident (one set, no rotation), default config
            fn = lambda i: gemm_tc(xs[0], sets[0], out=ys[0])
            t = time_launches(fn, n_sets=1)
            rows.append({"K": K, "N": N, "M": M, "stages": None, "n_ctas": None, "time_us": t.median_us,
                         "l2_resident": True})
            print(f"K={K:<6} N={N:<6} M={M:<3} default, no rotation (L2-resident if it fits): "
                  f"{t.median_us:8.2f} us", flush=True)
        del sets, xs
        cp.get_default_memory_pool().free_all_blocks()
    from mactile.gpu import StepAwareTemperatureGPU
    V = 151936
    for cl in (16, 8):
        for B in (1, 8):
            for dt in (np.float32, np.float16):
                n = rotation_count(B * V * np.dtype(dt).itemsize, l2_bytes=info["l2_bytes"])
                zs = [cp.asarray((rng.standard_normal((B, V)) * 3).astype(dt)) for _ in range(n)]
                mask = cp.asarray((rng.random(V) < 0.01).astype(np.uint8))
                s = StepAwareTemperatureGPU(B, seed=3, cluster=cl)
                s.step(zs[0], mask, sync=True)
                t = time_launches(lambda i: s.step(zs[i], mask), n_sets=n)
                rows.append({"temperature": True, "cluster": cl, "batch": B, "dtype": np.dtype(dt).name,
                             "time_us": t.median_us})
                print(f"temperature cluster={cl:<2} B={B} {np.dtype(dt).name}: {t.median_us:.2f} us", flush=True)
    with open(out_path, "w") as f:
        json.dump({"device": info, "versions": versions(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
