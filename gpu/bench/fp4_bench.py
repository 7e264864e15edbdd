"""``mactile bench gpu``: the FP4 kernels of issue 7 against cuBLAS FP16 and FP8.

For every shape (Llama-3.1-8B, Qwen3-32B, 8192x8192; K x N as in RaZeR's Tables 16-18)
and M in {1, 2, 4, ..., 256} it times, with :mod:`.harness` (graph replay, weights
rotated over >= 4x L2, random data):

* ``w4a16_tc`` (nvfp4, razer, razer-g128): tensor-core GEMM, every M;
* ``w4a16_cc`` (same formats): CUDA-core GEMV/small GEMM, M <= 8;
* ``w4a4_gemv`` (nvfp4): ReSET's GEMV on pre-quantized activations, M <= 8, and
  ``w4a4_quant+gemv``: activation quantization plus GEMV;
* baselines ``cublas_fp16`` (``torch.matmul``) and ``torch_fp8`` (``torch._scaled_mm``);

after checking each kernel's output on sampled output columns against the golden float64
product (:mod:`mactile.gpu.check`). Weights are random *valid* golden ``Quantized``
objects (random codes, scales and metadata), packed on the GPU. Each record carries the
achieved bandwidth (weights + activations + output bytes over time) and the streaming-read
peak measured in the same run over the same number of bytes.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from mactile.golden import MXFP4, NVFP4, RaZeR, RaZeRG128

from ..check import check_close, reference
from ..packing import pack_w4a16, quantized_from_arrays
from ..runtime import device_info, require_cupy
from .harness import (make_record, plot_records, rotation_count, streaming_read_peak, time_launches,
                      torch_baselines)

__all__ = ["SHAPES", "M_VALUES", "run_benchmark", "summary_table", "crossover_table", "QUICK_SHAPES"]

#: (model, layer, K, N)
SHAPES = [
    ("Llama-3.1-8B", "qkv", 4096, 6144),
    ("Llama-3.1-8B", "o", 4096, 4096),
    ("Llama-3.1-8B", "gate_up", 4096, 28672),
    ("Llama-3.1-8B", "down", 14336, 4096),
    ("Qwen3-32B", "qkv", 5120, 10240),
    ("Qwen3-32B", "o", 8192, 5120),
    ("Qwen3-32B", "gate_up", 5120, 25600),
    ("Qwen3-32B", "down", 25600, 5120),
    ("square", "8192", 8192, 8192),
]
QUICK_SHAPES = [SHAPES[1], SHAPES[3], SHAPES[8]]
M_VALUES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
FORMATS = {"nvfp4": NVFP4(), "mxfp4": MXFP4(), "razer": RaZeR(), "razer-g128": RaZeRG128()}


def random_quantized(fmt, N: int, K: int, rng: np.random.Generator):
    """A valid golden weight with random codes, realistic random scales and metadata."""
    codes = rng.integers(0, 16, (N, K), dtype=np.uint8)
    nb = K // fmt.block_size
    if fmt.name == "nvfp4":  # E4M3 exponents 3..10 (no NaN code)
        sc = (rng.integers(3, 11, (N, nb)) << 3 | rng.integers(0, 8, (N, nb))).astype(np.uint8)
        ts = 2.0e-4
    elif fmt.name == "mxfp4":  # E8M0 exponents -10..1 around 2^-4 (12 binades)
        sc = rng.integers(117, 129, (N, nb)).astype(np.uint8)
        ts = None
    elif fmt.name == "razer":
        sc = (rng.integers(1, 7, (N, nb)) << 3 | rng.integers(0, 8, (N, nb)) | rng.integers(0, 4, (N, nb)) << 6).astype(np.uint8)
        ts = 5.0e-3
    else:
        sc = (rng.integers(11, 16, (N, nb)) << 10 | rng.integers(0, 1024, (N, nb))
              | rng.integers(0, 4, (N, nb)) << 14).astype(np.uint16)
        ts = 1.0e-2
    return quantized_from_arrays(fmt, codes, sc, ts)


@dataclass
class _Ctx:
    cp: object
    info: dict
    rng: np.random.Generator
    records: list
    log: callable


def _peak(ctx, nbytes):
    r = streaming_read_peak(int(nbytes))
    return r["tbps"]


def _check(ctx, what, y_dev, x_host, q, cols):
    """Correctness on sampled output columns before timing (raises on failure)."""
    from ..packing import quantized_from_arrays as qa
    sub = qa(q.format, q.codes.reshape(q.shape)[cols], q.scales.reshape(q.shape[0], -1)[cols], q.tensor_scale)
    y_ref, s = reference(x_host, sub.dequantize())
    return check_close(y_dev.get()[:, cols], y_ref, s, q.shape[1], what=what)


def _bench_shape(ctx: _Ctx, model, layer, K, N, Ms, formats, kernels, baselines):
    cp = ctx.cp
    from ..w4a16 import gemm_tc, gemv_cc
    from ..w4a4 import gemv_w4a4, quantize_activation
    l2 = ctx.info["l2_bytes"]
    cols = np.sort(ctx.rng.choice(N, size=min(N, 96), replace=False))
    extra = {"model": model, "layer": layer}
    packed = {}
    for fname in formats:
        q = random_quantized(FORMATS[fname], N, K, ctx.rng)
        pw = pack_w4a16(q, xp=cp)  # packed on the GPU
        n_sets = rotation_count(pw.nbytes("frag"), l2_bytes=l2)
        sets = [pw] + [_copy(pw) for _ in range(n_sets - 1)]  # same bits, distinct addresses
        packed[fname] = (q, sets)
    for M in Ms:
        x_host = (ctx.rng.standard_normal((M, K)) * 0.5).astype(np.float16)
        base = torch_baselines(M, N, K, kinds=baselines, l2_bytes=l2)
        fp16_us = base["fp16"].timing.median_us if "fp16" in base and base["fp16"].timing else None
        for kind, b in base.items():
            rec_k = {"fp16": "cublas_fp16", "fp8": "torch_fp8", "int8": "torch_int8"}[kind]
            wbytes = N * K * (2 if kind == "fp16" else 1)
            if b.timing is None:
                ctx.log(f"  {rec_k:<18} M={M:<4} error: {b.error}")
            ctx.records.append(make_record(kernel=rec_k, format=kind, K=K, N=N, M=M, timing=b.timing,
                                           bytes_moved=wbytes + M * K * 2 + M * N * 2, baseline_fp16_us=fp16_us,
                                           read_peak_tbps=_peak(ctx, wbytes), device=ctx.info,
                                           extra={**extra, "note": b.note, "error": b.error}))
        for fname, (q, sets) in packed.items():
            n = len(sets)
            xs = [cp.asarray(x_host) for _ in range(n)]
            for kern in kernels:
                if kern == "w4a16_cc" and M > 8:
                    continue
                if kern.startswith("w4a4") and (fname != "nvfp4" or M > 8):
                    continue
                layout = "frag" if kern == "w4a16_tc" else "rowmajor"
                wb = sets[0].nbytes(layout)
                ys = [cp.empty((M, N), cp.float16) for _ in range(n)]
                if kern == "w4a16_tc":
                    fn = lambda i: gemm_tc(xs[i], sets[i], out=ys[i])
                elif kern == "w4a16_cc":
                    fn = lambda i: gemv_cc(xs[i], sets[i], out=ys[i])
                else:
                    acts = [quantize_activation(xs[i], sync=True) for i in range(n)]
                    if kern == "w4a4_gemv":
                        fn = lambda i: gemv_w4a4(acts[i], sets[i], out=ys[i])
                    else:
                        fn = lambda i: (quantize_activation(xs[i], out=acts[i]), gemv_w4a4(acts[i], sets[i], out=ys[i]))
                try:
                    fn(0)
                    cp.cuda.Device().synchronize()
                    if kern.startswith("w4a4"):
                        qa = NVFP4().quantize(x_host)
                        chk = _check(ctx, f"{kern}/{fname}", ys[0], qa.dequantize(), q, cols)
                    else:
                        chk = _check(ctx, f"{kern}/{fname}", ys[0], x_host, q, cols)
                    t = time_launches(fn, n_sets=n)
                    err = ""
                except Exception as e:  # recorded, printed, not hidden
                    t, chk, err = None, {}, f"{type(e).__name__}: {e}"[:400]
                    ctx.log(f"  {kern:<18} {fname:<11} M={M:<4} FAILED: {err}")
                abytes = M * K * 2 if kern != "w4a4_gemv" else M * (K // 2 + K // 16)
                rec = make_record(kernel=kern, format=fname, K=K, N=N, M=M, timing=t,
                                  bytes_moved=wb + abytes + M * N * 2, baseline_fp16_us=fp16_us,
                                  read_peak_tbps=_peak(ctx, wb), device=ctx.info,
                                  extra={**extra, "check": chk, "error": err, "weight_bytes": wb})
                ctx.records.append(rec)
                if t is not None:
                    sp = rec["speedup_vs_fp16"]
                    ctx.log(f"  {kern:<18} {fname:<11} M={M:<4} {t.median_us:8.2f} us  "
                            f"x{sp if sp else float('nan'):5.2f} vs fp16  "
                            f"{rec['achieved_tbps']:.2f} TB/s ({100 * rec['fraction_of_read_peak']:.0f}% of read peak)")
            del xs
        if fp16_us:
            ctx.log(f"  cublas_fp16        M={M:<4} {fp16_us:8.2f} us")
        if K * N <= 4096 * 6144 and M in (1, 16) and "nvfp4" in packed:
            _cta_sweep(ctx, packed["nvfp4"], x_host, K, N, M, fp16_us, extra)


def _cta_sweep(ctx, qsets, x_host, K, N, M, fp16_us, extra):
    """RaZeR App. E: fewer CTAs than the default for small matrices (fewer partial tiles)."""
    cp = ctx.cp
    from ..w4a16 import gemm_tc
    q, sets = qsets
    n = len(sets)
    xs = [cp.asarray(x_host) for _ in range(n)]
    ys = [cp.empty((M, N), cp.float16) for _ in range(n)]
    sms = ctx.info["sm_count"]
    for C in (sms // 2, sms, 2 * sms):
        fn = lambda i: gemm_tc(xs[i], sets[i], out=ys[i], n_ctas=C)
        fn(0)
        t = time_launches(fn, n_sets=n)
        wb = sets[0].nbytes("frag")
        ctx.records.append(make_record(kernel=f"w4a16_tc[ctas={C}]", format="nvfp4", K=K, N=N, M=M, timing=t,
                                       bytes_moved=wb + M * K * 2 + M * N * 2, baseline_fp16_us=fp16_us,
                                       read_peak_tbps=_peak(ctx, wb), device=ctx.info,
                                       extra={**extra, "n_ctas": C}))
        ctx.log(f"  w4a16_tc ctas={C:<4} nvfp4       M={M:<4} {t.median_us:8.2f} us")


def bench_temperature(ctx, *, batches=(1, 8), vocab=151936, clusters=(8, 16)):
    """ReSET temperature step: one launch per decoding step, logits rotated over 4x L2, for
    each cluster size (CTAs per sequence)."""
    cp = ctx.cp
    from ..temperature import StepAwareTemperatureGPU
    for cl in clusters:
        for B in batches:
            for dt in (np.float32, np.float16):
                n = rotation_count(B * vocab * np.dtype(dt).itemsize, l2_bytes=ctx.info["l2_bytes"])
                zs = [cp.asarray((ctx.rng.standard_normal((B, vocab)) * 3).astype(dt)) for _ in range(n)]
                mask = cp.asarray((ctx.rng.random(vocab) < 0.01).astype(np.uint8))
                s = StepAwareTemperatureGPU(B, seed=3, cluster=cl)
                s.step(zs[0], mask, sync=True)
                t = time_launches(lambda i: s.step(zs[i], mask), n_sets=n)
                ctx.records.append(make_record(kernel="reset_temperature", format=np.dtype(dt).name, K=vocab, N=B,
                                               M=B, timing=t, bytes_moved=B * vocab * np.dtype(dt).itemsize,
                                               baseline_fp16_us=None, read_peak_tbps=None, device=ctx.info,
                                               extra={"model": "ReSET sampler", "layer": f"batch {B}",
                                                      "cluster": cl}))
                ctx.log(f"reset_temperature cluster={cl} B={B} V={vocab} {np.dtype(dt).name}: {t.median_us:.2f} us")


def _copy(pw):
    from ..packing import PackedW4A16
    lays = {k: {kk: (v.copy() if hasattr(v, "copy") and hasattr(v, "shape") else v) for kk, v in lay.items()}
            for k, lay in pw.layouts.items()}
    return PackedW4A16(pw.fmt, pw.N, pw.K, pw.tensor_scale, lays)


def run_benchmark(*, shapes=None, Ms=None, formats=None, kernels=None, baselines=("fp16", "fp8"),
                  seed: int = 7, temperature: bool = True, log=print) -> dict:
    """Run the benchmark; returns ``{"meta": ..., "records": [...]}``."""
    cp = require_cupy()
    info = device_info()
    shapes = shapes or SHAPES
    Ms = Ms or M_VALUES
    formats = formats or list(FORMATS)
    kernels = kernels or ["w4a16_tc", "w4a16_cc", "w4a4_gemv", "w4a4_quant+gemv"]
    ctx = _Ctx(cp, info, np.random.default_rng(seed), [], log)
    t0 = time.time()
    peak_1g = streaming_read_peak(1 << 30)["tbps"]
    log(f"device {info['name']}  SMs {info['sm_count']}  L2 {info['l2_bytes'] / 2**20:.0f} MiB  "
        f"streaming read (1 GiB): {peak_1g:.2f} TB/s")
    for (model, layer, K, N) in shapes:
        log(f"{model} {layer}: K={K} N={N}")
        _bench_shape(ctx, model, layer, K, N, Ms, formats, kernels, baselines)
        cp.get_default_memory_pool().free_all_blocks()
    if temperature:
        bench_temperature(ctx)
    meta = {"device": info, "read_peak_1gib_tbps": peak_1g, "seconds": time.time() - t0,
            "shapes": [list(s) for s in shapes], "M": list(Ms), "formats": formats, "kernels": kernels,
            "method": "CUDA-graph replay, median of 15 replays; weights rotated over >= 4x L2; "
                      "random codes/scales; correctness on 96 sampled columns before timing"}
    return {"meta": meta, "records": ctx.records}


def temperature_table(records) -> str:
    rows = [r for r in records if r["kernel"] == "reset_temperature" and r["time_us"]]
    lines = ["| CTAs per sequence | batch | vocabulary | logits | time per step (us) |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.get('cluster', 8)} | {r['N']} | {r['K']} | {r['format']} | {r['time_us']:.2f} |")
    return "\n".join(lines)


def crossover_table(records) -> dict:
    """Per (format, N, K): the largest M <= 8 at which w4a16_cc beat w4a16_tc (0: never)."""
    best = {}
    for r in records:
        if r["kernel"] not in ("w4a16_cc", "w4a16_tc") or r["time_us"] is None:
            continue
        best.setdefault((r["format"], r["N"], r["K"]), {}).setdefault(r["M"], {})[r["kernel"]] = r["time_us"]
    entries = []
    for (f, N, K), byM in sorted(best.items()):
        cx = 0
        for M in sorted(byM):
            d = byM[M]
            if M <= 8 and "w4a16_cc" in d and "w4a16_tc" in d and d["w4a16_cc"] < d["w4a16_tc"]:
                cx = M
        entries.append({"format": f, "N": N, "K": K, "crossover_m": cx,
                        "times_us": {str(M): d for M, d in sorted(byM.items())}})
    return {"entries": entries}


def summary_table(records, *, Ms=(1, 8, 16, 64, 256)) -> str:
    """Markdown table: speedup over cuBLAS FP16 (and % of read peak at M = 1)."""
    idx = {}
    for r in records:
        if r["time_us"] is not None:
            idx[(r["kernel"], r["format"], r["K"], r["N"], r["M"])] = r
    shapes = sorted({(r["K"], r["N"], r.get("model", ""), r.get("layer", "")) for r in records},
                    key=lambda s: (s[2], s[0] * s[1]))
    cols = [("w4a16_cc", "nvfp4"), ("w4a16_tc", "nvfp4"), ("w4a16_cc", "razer"), ("w4a16_tc", "razer"),
            ("w4a16_cc", "razer-g128"), ("w4a16_tc", "razer-g128"), ("w4a4_gemv", "nvfp4"),
            ("w4a4_quant+gemv", "nvfp4"), ("torch_fp8", "fp8")]
    head = "| shape (K x N) | M | cuBLAS FP16 us | " + " | ".join(f"{k.replace('w4a16_', '')} {f}" for k, f in cols) + " |"
    lines = [head, "|" + "---|" * (3 + len(cols))]
    for (K, N, model, layer) in shapes:
        for M in Ms:
            b = idx.get(("cublas_fp16", "fp16", K, N, M))
            if b is None:
                continue
            cells = []
            for k, f in cols:
                r = idx.get((k, f, K, N, M))
                if r is None or not r["speedup_vs_fp16"]:
                    cells.append("")
                else:
                    s = f"{r['speedup_vs_fp16']:.2f}x"
                    if M == 1 and r.get("fraction_of_read_peak") and k != "torch_fp8":
                        s += f" ({100 * r['fraction_of_read_peak']:.0f}%)"
                    cells.append(s)
            lines.append(f"| {model} {layer} {K}x{N} | {M} | {b['time_us']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(records, path) -> None:
    recs = [r for r in records if r["kernel"] not in ("cublas_fp16", "reset_temperature") and "[" not in r["kernel"]]
    plot_records(recs, path, panel=lambda r: f"{r.get('model', '')} {r.get('layer', '')} K={r['K']} N={r['N']}",
                 series=lambda r: f"{r['kernel']}/{r['format']}", title="Speedup over cuBLAS FP16 (H100)")
