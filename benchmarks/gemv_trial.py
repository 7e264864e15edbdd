"""Trial: CTA partition and pipeline depth of the rowmajor GEMVs (ReSET W4A4, CUDA-core W4A16).

``python benchmarks/gemv_trial.py OUTDIR`` times, on the nine shapes of
``mactile bench gpu`` (nvfp4 weights, M = 1 and 8), the default launch of ``gemv_w4a4``
and ``gemv_cc`` against *tile-aligned* partitions (:func:`mactile.gpu.w4a4.tile_aligned_ctas`:
no CTA's stripe ends inside a row tile except at its own end, so each CTA reduces at most
once, after its last unit) with deeper cp.async pipelines (more weight bytes in flight per
CTA). Same harness and checks as the benchmark: random valid golden weights packed on the GPU,
rotated over >= 4x L2, output checked on 96 sampled columns against the golden float64
product before timing, CUDA-graph replay, median of 15 replays. Writes ``gemv_trial.json``
and a log; the variants and the prediction are in docs/gpu.md (third pass).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from mactile.golden import NVFP4

from mactile.gpu.packing import pack_w4a16
from mactile.gpu.runtime import device_info, require_cupy
from mactile.gpu.bench.gemm_bench import SHAPES, _check_fp4, _copy, random_quantized
from mactile.gpu.bench.harness import make_record, rotation_count, streaming_read_peak, time_launches, write_json

#: (name, slots or None for the default partition, stages or None for the default)
W4A4_M1 = (("default", None, None), ("tile396_s3", 396, 3), ("tile264_s5", 264, 5), ("tile132_s10", 132, 10))
W4A4_M8 = (("default", None, None), ("tile132_s4", 132, 4), ("tile132_s6", 132, 6))
CC_M1 = (("default", None, None), ("tile264_s4", 264, 4), ("tile264_s5", 264, 5), ("tile132_s10", 132, 10))


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    out = Path(argv[0] if argv else "out/gemv_trial")
    out.mkdir(parents=True, exist_ok=True)
    cp = require_cupy()
    from mactile.gpu.w4a16 import cc_units, gemv_cc
    from mactile.gpu.w4a4 import gemv_w4a4, quantize_activation, tile_aligned_ctas
    logf = open(out / "gemv_trial.log", "a")

    def log(s):
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    info = device_info()
    rng = np.random.default_rng(20261122)
    records = []
    t0 = time.time()
    log(f"device {info['name']} {info['versions']}")
    for model, layer, K, N in SHAPES:
        q = random_quantized(NVFP4(), N, K, rng)
        pw = pack_w4a16(q, xp=cp)
        wb = pw.nbytes("rowmajor")
        n = rotation_count(wb, l2_bytes=info["l2_bytes"])
        sets = [pw] + [_copy(pw) for _ in range(n - 1)]
        peak = streaming_read_peak(int(wb))["tbps"]
        RT, KU, U = cc_units(pw)
        cols = np.sort(rng.choice(N, size=min(N, 96), replace=False))
        for M in (1, 8):
            x_host = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
            xs = [cp.asarray(x_host) for _ in range(n)]
            acts = [quantize_activation(xs[i], sync=True) for i in range(n)]
            xq = NVFP4().quantize(x_host).dequantize()
            ys = [cp.empty((M, N), cp.float16) for _ in range(n)]
            jobs = [("w4a4_gemv", v) for v in (W4A4_M1 if M == 1 else W4A4_M8)]
            if M == 1:
                jobs += [("w4a16_cc", v) for v in CC_M1]
            for kern, (vname, slots, S) in jobs:
                C = None if slots is None else tile_aligned_ctas(RT, KU, slots)
                if kern == "w4a4_gemv":
                    fn = lambda i, C=C, S=S: gemv_w4a4(acts[i], sets[i], out=ys[i], n_ctas=C, stages=S)
                    xin, abytes = xq, M * (K // 2 + K // 16)
                else:
                    fn = lambda i, C=C, S=S: gemv_cc(xs[i], sets[i], out=ys[i], n_ctas=C, stages=S)
                    xin, abytes = x_host, M * K * 2
                try:
                    ys[0].fill(np.nan)
                    fn(0)
                    cp.cuda.Device().synchronize()
                    chk = _check_fp4(f"{kern}/{vname}", ys[0], xin, q, cols)  # raises if wrong
                    t = time_launches(fn, n_sets=n)
                    err = ""
                except Exception as e:  # recorded and printed
                    t, chk, err = None, {}, f"{type(e).__name__}: {e}"[:400]
                rec = make_record(kernel=kern, format="nvfp4", K=K, N=N, M=M, timing=t,
                                  bytes_moved=wb + abytes + M * N * 2, baseline_fp16_us=None,
                                  read_peak_tbps=peak, device=info,
                                  extra={"model": model, "layer": layer, "variant": vname, "n_ctas": C,
                                         "stages": S, "RT": RT, "KU": KU, "check": chk, "error": err})
                records.append(rec)
                if t is None:
                    log(f"{layer:8s} {K}x{N} M={M} {kern:9s} {vname:12s} FAILED {err}")
                else:
                    log(f"{layer:8s} {K}x{N} M={M} {kern:9s} {vname:12s} C={C or 'dflt':>4} S={S or 'dflt':>4} "
                        f"{t.median_us:8.2f} us  {rec['achieved_tbps']:.2f} TB/s "
                        f"({100 * rec['fraction_of_read_peak']:.0f}% of {peak:.2f})")
            del xs, acts, ys
        del sets, pw
        cp.get_default_memory_pool().free_all_blocks()
    write_json(records, out / "gemv_trial.json", meta={"device": info, "seconds": time.time() - t0})
    log(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
