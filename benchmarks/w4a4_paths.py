"""ReSET W4A4's two paths with their activation quantization, M = 1 and 8 (a result script).

``python benchmarks/w4a4_paths.py OUTDIR`` times, on the nine shapes of ``mactile bench gpu``
(nvfp4 weights, random data, rotated over >= 4x L2, CUDA-graph replay, PDL):

* ``quant_only``: :func:`~mactile.gpu.w4a4.quantize_activation` alone (with its FP16 values),
* ``gemv_only``: :func:`~mactile.gpu.w4a4.gemv_w4a4` alone on quantized activations (at
  M = 1 the row-streaming kernel),
* ``quant+gemv``: ``linear_w4a4(kernel="gemv")``, the quantizer and ReSET's CUDA-core GEMV
  (at M = 1 the row-streaming kernel, at M = 8 the staged one),
* ``quant+staged``: the quantizer and the staged GEMV (``w4a4_gemv``) with, at M = 1, its
  former launch rule (tile-aligned stripes: three 3-stage CTAs per SM where the row tiles
  are at least the SMs, else two 5-stage ones): the kernel the row-streaming one replaced,
* ``quant+engine``: ``linear_w4a4(kernel="engine")``, the quantizer and the GEMM engine,
* ``engine_w4a16``: the engine on FP16 activations (the same weights, no quantization),

and writes ``w4a4_paths.json`` (records with the same run's streaming-read peak and
``w4a4_kernel``'s default) and ``w4a4_paths.md``. ``--report FILE.json`` re-renders the
markdown of an earlier run. Outputs are checked by the GPU tests, not here.
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

PATHS = ("engine_w4a16", "quant_only", "gemv_only", "quant+gemv", "quant+staged", "quant+engine")


def report(data: dict) -> str:
    """Markdown of a run: per shape and M the times, the default path and its fraction of
    the read peak; geomeans of the fractions."""
    recs = data["records"]
    paths = [p for p in PATHS if any(r["path"] == p for r in recs)]  # earlier runs had fewer
    gm = lambda v: math.exp(sum(math.log(x) for x in v) / len(v))  # noqa: E731
    out = [f"# ReSET W4A4 paths ({data['device']['name']}, {data['date']})", "",
           "Microseconds per layer (CUDA-graph replay, PDL, weights rotated past the L2); "
           "`default` is `w4a4_kernel`'s choice; last column: its weight bytes over its time as a "
           "fraction of the same run's streaming-read peak (the geomean row: the same for each path).", ""]
    for M in sorted({r["M"] for r in recs}):
        by: dict = {}
        for r in recs:
            if r["M"] == M:
                by.setdefault((r["K"], r["N"]), {})[r["path"]] = r
        out += [f"## M = {M}", "", "| K x N | " + " | ".join(paths) + " | default | of read peak |",
                "|---|" + "---:|" * (len(paths) + 2)]
        fr = {p: [] for p in paths + ["default"]}
        for (K, N), p in sorted(by.items()):
            d = "quant+" + p["quant+gemv"]["default_kernel"]
            fr["default"].append(p[d]["fraction_of_read_peak"])
            for name in paths:
                fr[name].append(p[name]["fraction_of_read_peak"])
            out.append(f"| {K}x{N} | " + " | ".join(f"{p[n]['time_us']:.2f}" for n in paths)
                       + f" | {d} | {100 * p[d]['fraction_of_read_peak']:.0f}% |")
        out.append("| geomean of read peak | " + " | ".join(
            "" if n == "quant_only" else f"{100 * gm(fr[n]):.0f}%" for n in paths)
            + f" | | {100 * gm(fr['default']):.0f}% |")
        out.append("")
    return "\n".join(out)


def run(out: Path) -> dict:
    import cupy as cp
    import numpy as np

    from mactile.gpu.bench.gemm_bench import SHAPES, fp4_weight_sets
    from mactile.gpu.bench.harness import streaming_read_peak, time_launches
    from mactile.gpu.engine import gemm_fp4
    from mactile.gpu.runtime import device_info
    from mactile.gpu.runtime import sm_count
    from mactile.gpu.w4a16 import cc_units
    from mactile.gpu.w4a4 import gemv_w4a4, linear_w4a4, quantize_activation, tile_aligned_ctas, w4a4_kernel

    info = device_info()
    sms = sm_count()
    rng = np.random.default_rng(3)
    recs = []
    for _model, _layer, K, N in SHAPES:
        q, sets = fp4_weight_sets(cp, "nvfp4", N, K, rng, info["l2_bytes"])
        n, wb = len(sets), sets[0].nbytes("frag")
        peak = streaming_read_peak(int(wb))["tbps"]
        for M in (1, 8):
            xs = [cp.asarray((rng.standard_normal((M, K)) * .5).astype(np.float16)) for _ in range(n)]
            acts = [quantize_activation(xs[i], sync=True, dequant=True) for i in range(n)]
            ys = [cp.empty((M, N), cp.float16) for _ in range(n)]
            RT, KU, _ = cc_units(sets[0])
            if M == 1:  # the staged kernel's former M = 1 rule
                C, S = ((tile_aligned_ctas(RT, KU, 3 * sms), 3) if RT >= sms
                        else (tile_aligned_ctas(RT, KU, 2 * sms), 5))
            else:
                C, S = None, None

            def staged(i, C=C, S=S):
                quantize_activation(xs[i], out=acts[i], pdl=True)
                gemv_w4a4(acts[i], sets[i], out=ys[i], n_ctas=C, stages=S, pdl=True)

            fns = {"engine_w4a16": lambda i: gemm_fp4(xs[i], sets[i], out=ys[i], pdl=True),
                   "gemv_only": lambda i: gemv_w4a4(acts[i], sets[i], out=ys[i]),
                   "quant+staged": staged,
                   "quant_only": lambda i: quantize_activation(xs[i], out=acts[i], pdl=True, dequant=True),
                   "quant+gemv": lambda i: linear_w4a4(xs[i], sets[i], act=acts[i], out=ys[i], kernel="gemv"),
                   "quant+engine": lambda i: linear_w4a4(xs[i], sets[i], act=acts[i], out=ys[i], kernel="engine")}
            for name in PATHS:
                t = time_launches(fns[name], n_sets=n).median_us
                recs.append({"path": name, "K": K, "N": N, "M": M, "time_us": t, "weight_bytes": int(wb),
                             "read_peak_tbps": peak, "fraction_of_read_peak": wb / t / 1e6 / peak,
                             "default_kernel": w4a4_kernel(M, sets[0])})
                print(f"{K}x{N} M={M} {name:13s} {t:8.2f} us", flush=True)
        del sets
        cp.get_default_memory_pool().free_all_blocks()
    return {"device": info, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "records": recs}


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--report"]:
        src = Path(argv[1])
        data = json.loads(src.read_text())
        src.with_suffix(".md").write_text(report(data) + "\n")
        return
    out = Path(argv[0] if argv else "out/w4a4_paths")
    out.mkdir(parents=True, exist_ok=True)
    data = run(out)
    (out / "w4a4_paths.json").write_text(json.dumps(data, indent=1, default=str))
    (out / "w4a4_paths.md").write_text(report(data) + "\n")


if __name__ == "__main__":
    main()
