"""``mactile bench gpu``: every weight format and mode of ``mactile.gpu.linear`` against
cuBLAS FP16 and FP8, M = 1 .. 4096.

For every shape (Llama-3.1-8B, Qwen3-32B, 8192x8192; K x N) and M in :data:`M_VALUES` it
times, with :mod:`.harness` (CUDA-graph replay, weights rotated over >= 4x L2, random data):

* ``linear`` of the FP4 formats nvfp4, mxfp4, razer, razer-g128 (packed golden weights;
  the GEMM engine, or the CUDA-core GEMV where the tuning table measured it faster),
  NestedFP in FP16 and FP8 mode (``nestedfp16``/``nestedfp8``: the engine; FP8 mode
  includes its per-token activation quantization), and FlexQ
  W6A6 (``flexq-w6a6``, M <= 64: its binary tensor-core GEMM with the activation packing);
* for M <= 8 the alternatives ``w4a16_cc`` (CUDA-core GEMV), ``w4a4_gemv``,
  ``w4a4_quant+gemv`` (ReSET, nvfp4: :func:`~mactile.gpu.w4a4.linear_w4a4`, quantizer and GEMV
  overlapped by programmatic dependent launch), ``w4a4_quant+gemv_serial`` (the same two
  launches without PDL) and ``w4a4_quant+engine`` (the quantizer and the tensor-core engine
  on its exact FP16 values, PDL), so the crossover table can be written;
* baselines ``cublas_fp16`` (``torch.matmul``) and ``torch_fp8`` (``torch._scaled_mm``);
* optionally ReSET's step-aware temperature sampler (``temperature=True``);

after checking each kernel's output on sampled output columns (FP4: against the golden
float64 product within the FP32-accumulation bound; NestedFP: against the float64 GEMM of
its operands; FlexQ: against cuBLAS FP16 within its quantization error). Every record
carries the achieved bandwidth and the streaming-read peak of the same number of bytes,
measured in the same run. For NestedFP FP8 it also records, on one M per shape, the output
error of the engine and of ``torch._scaled_mm`` (fast accumulation off) on the same E4M3
operands against float64.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from mactile.golden import FP16, FP32, MXFP4, NVFP4, RaZeR, RaZeRG128

from ..check import check_close, reference
from ..formats import ENGINE, NESTEDFP_FORMATS
from ..packing import pack_w4a16, quantized_from_arrays
from ..runtime import device_info, require_cupy
from .harness import (make_record, plot_records, rotation_count, streaming_read_peak, time_launches,
                      torch_baselines)

__all__ = ["SHAPES", "M_VALUES", "FORMATS", "KINDS", "run_benchmark", "summary_table", "crossover_table",
           "bench_temperature", "temperature_table",
           "QUICK_SHAPES", "random_quantized", "plot", "geomean_table", "report_markdown"]

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
M_VALUES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
FORMATS = {"nvfp4": NVFP4(), "mxfp4": MXFP4(), "razer": RaZeR(), "razer-g128": RaZeRG128()}
#: Every format/mode `linear` runs, in table order.
KINDS = ("nvfp4", "mxfp4", "razer", "razer-g128", "nestedfp16", "nestedfp8", "flexq-w6a6")
FLEXQ_MAX_M = 64
SMALL_M = 8


#: Random weights' block scales per format: the window of scale exponent fields (E4M3
#: exponents 3..10; E8M0 -10..1 around 2^-4, 12 binades; E3M3 1..6; FP16 11..15, below 2)
#: and the tensor scale (used where the format's storage has one).
RANDOM_SCALES = {"nvfp4": ((3, 10), 2.0e-4), "mxfp4": ((117, 128), None),
                 "razer": ((1, 6), 5.0e-3), "razer-g128": ((11, 15), 1.0e-2)}


def random_quantized(fmt, N: int, K: int, rng: np.random.Generator):
    """A valid golden weight with random codes, realistic random scales and metadata
    (scale words drawn by the format's storage spec, :meth:`ScaleWord.random`)."""
    codes = rng.integers(0, 16, (N, K), dtype=np.uint8)
    nb = K // fmt.block_size
    exp_fields, ts = RANDOM_SCALES[fmt.name]
    sc = fmt.storage.word.random(rng, (N, nb), exp_fields=exp_fields)
    return quantized_from_arrays(fmt, codes, sc, ts if fmt.storage.has_tensor_scale else None)


@dataclass
class _Ctx:
    cp: object
    info: dict
    rng: np.random.Generator
    records: list
    log: callable
    peaks: dict


def _peak(ctx, nbytes):
    nbytes = int(nbytes)
    if nbytes not in ctx.peaks:
        ctx.peaks[nbytes] = streaming_read_peak(nbytes)["tbps"]
    return ctx.peaks[nbytes]


def _check_fp4(what, y_dev, x_host, q, cols):
    sub = quantized_from_arrays(q.format, q.codes.reshape(q.shape)[cols], q.scales.reshape(q.shape[0], -1)[cols],
                                q.tensor_scale)
    y_ref, s = reference(x_host, sub.dequantize())
    return check_close(y_dev.get()[:, cols], y_ref, s, q.shape[1], what=what)


def _check_bound(what, got, ref, mag, K, extra_rel=0.0):
    """|got - ref| <= (K/8 + 64) 2^-23 mag + extra_rel mag + 2^-11 |ref| + 2^-24 (FP16 output)."""
    bound = ((K / 8 + 64) * 2.0 ** -FP32.man_bits * mag + extra_rel * mag
             + 2.0 ** -(FP16.man_bits + 1) * np.abs(ref) + FP16.min_value)
    err = np.abs(got - ref)
    if not np.isfinite(got).all() or (err > bound).any():
        i = np.unravel_index(int(np.argmax(err / bound)), err.shape)
        raise AssertionError(f"{what}: |y - ref| = {err[i]:.3e} exceeds {bound[i]:.3e} at {i}")
    return {"max_ratio_to_bound": float((err / bound).max()),
            "rel_l2": float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300))}


def _fp8_accuracy(ctx, layer, x_host):
    """Relative Frobenius error against float64 of the engine's FP8 mode (FP32 output) and
    of ``torch._scaled_mm`` (use_fast_accum off) on the same E4M3 operands."""
    cp = ctx.cp
    from ..engine import config_for, gemm_fp8
    from ..nestedfp.kernels import quantize_e4m3
    M = x_host.shape[0]
    xq, xs = quantize_e4m3(cp.asarray(x_host), layer.kp)
    y = gemm_fp8(xq, xs, layer.upper, layer.n, cfg=config_for("nestedfp8", M), out_dtype=np.float32).get()
    from mactile.golden import FP8_E4M3
    a = FP8_E4M3.values[xq.get()].astype(np.float64)
    b = FP8_E4M3.values[layer.upper.get()[: layer.n]].astype(np.float64)
    ref = (a @ b.T) * xs.get().astype(np.float64)[:, None] * 2.0 ** -8
    out = {"K": layer.k, "engine_rel": float(np.linalg.norm(y - ref) / np.linalg.norm(ref))}
    try:
        import torch
        ta = torch.as_tensor(xq.get(), device="cuda").view(torch.float8_e4m3fn)
        tb = torch.as_tensor(layer.upper.get()[: layer.n], device="cuda").view(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        Mp = -(-M // 16) * 16
        if Mp != M:
            ta = torch.cat([ta, torch.zeros((Mp - M, ta.shape[1]), device="cuda").to(torch.float8_e4m3fn)])
        raw = torch._scaled_mm(ta, tb.t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                               use_fast_accum=False)[:M].double().cpu().numpy()
        yt = raw * xs.get().astype(np.float64)[:, None] * 2.0 ** -8
        out["torch_scaled_mm_rel"] = float(np.linalg.norm(yt - ref) / np.linalg.norm(ref))
    except Exception as e:  # noqa: BLE001 - recorded, not hidden
        out["torch_error"] = f"{type(e).__name__}: {e}"[:200]
    return out


def _bench_shape(ctx: _Ctx, model, layer, K, N, Ms, kinds, baselines):
    cp = ctx.cp
    from ..linear import linear
    from ..w4a16 import gemv_cc
    from ..w4a4 import gemv_w4a4, linear_w4a4, quantize_activation
    l2 = ctx.info["l2_bytes"]
    cols = np.sort(ctx.rng.choice(N, size=min(N, 96), replace=False))
    extra = {"model": model, "layer": layer}
    weights = {}
    for kind in kinds:
        if kind in FORMATS:  # every layout the format's kernels read
            weights[kind] = fp4_weight_sets(cp, kind, N, K, ctx.rng, l2)
        elif kind in NESTEDFP_FORMATS and "nestedfp" not in weights:
            weights["nestedfp"] = nestedfp_weight_sets(cp, N, K, ctx.rng, l2)
        elif kind == "flexq-w6a6":
            from ..flexq.kernels import FlexQLinear
            w = (ctx.rng.standard_normal((N, K)) * 0.05).astype(np.float16)
            first = FlexQLinear(cp.asarray(w))
            n_sets = rotation_count(int(N * K * 6.25 / 8), l2_bytes=l2)
            weights[kind] = (w, [first] + [FlexQLinear(cp.asarray(w)) for _ in range(n_sets - 1)])
    fp8_done = False
    for M in Ms:
        x_host = (ctx.rng.standard_normal((M, K)) * 0.5).astype(np.float16)
        base = torch_baselines(M, N, K, kinds=baselines, l2_bytes=l2)
        fp16_us = base["fp16"].timing.median_us if "fp16" in base and base["fp16"].timing else None
        for bk, b in base.items():
            rec_k = {"fp16": "cublas_fp16", "fp8": "torch_fp8", "int8": "torch_int8"}[bk]
            wbytes = N * K * (2 if bk == "fp16" else 1)
            if b.timing is None:
                ctx.log(f"  {rec_k:<18} M={M:<4} error: {b.error}")
            ctx.records.append(make_record(kernel=rec_k, format=bk, K=K, N=N, M=M, timing=b.timing,
                                           bytes_moved=wbytes + M * K * 2 + M * N * 2, baseline_fp16_us=fp16_us,
                                           read_peak_tbps=_peak(ctx, wbytes), device=ctx.info,
                                           extra={**extra, "note": b.note, "error": b.error}))
        jobs = []
        for kind in kinds:
            if kind == "flexq-w6a6" and M > FLEXQ_MAX_M:
                continue
            if kind in FORMATS:
                q, sets = weights[kind]
                jobs.append(("linear", kind, q, sets, sets[0].nbytes("frag")))
                if M <= SMALL_M and "rowmajor" in sets[0].layouts:
                    jobs.append(("w4a16_cc", kind, q, sets, sets[0].nbytes("rowmajor")))
                    if sets[0].fmt.w4a4:  # ReSET's W4A4 kernels read this storage
                        jobs.append(("w4a4_gemv", kind, q, sets, sets[0].nbytes("rowmajor")))
                        jobs.append(("w4a4_quant+gemv", kind, q, sets, sets[0].nbytes("rowmajor")))
                        jobs.append(("w4a4_quant+gemv_serial", kind, q, sets, sets[0].nbytes("rowmajor")))
                        jobs.append(("w4a4_quant+engine", kind, q, sets, sets[0].nbytes("frag")))
            elif kind in NESTEDFP_FORMATS:
                w, layers = weights["nestedfp"]
                jobs.append(("linear", kind, w, layers, layers[0].upper.nbytes * ENGINE[kind].planes))
            else:
                w, layers = weights[kind]
                jobs.append(("linear", kind, w, layers, int(N * K * 6.25 / 8)))
        for kern, kind, q, sets, wb in jobs:
            n = len(sets)
            xs = [cp.asarray(x_host) for _ in range(n)]
            ys = [cp.empty((M, N), cp.float16) for _ in range(n)]
            acc = {}
            if kern == "linear" and kind in FORMATS:
                fn = lambda i: linear(xs[i], sets[i], out=ys[i])  # noqa: E731
            elif kern == "linear" and kind in NESTEDFP_FORMATS:
                mode = ENGINE[kind].mode
                fn = lambda i: linear(xs[i], sets[i], mode=mode, out=ys[i])  # noqa: E731
            elif kern == "linear":
                fn = lambda i: linear(xs[i], sets[i], out=ys[i])  # noqa: E731
            elif kern == "w4a16_cc":
                fn = lambda i: gemv_cc(xs[i], sets[i], out=ys[i])  # noqa: E731
            else:
                acts = [quantize_activation(xs[i], sync=True, dequant=True) for i in range(n)]
                if kern == "w4a4_gemv":
                    fn = lambda i: gemv_w4a4(acts[i], sets[i], out=ys[i])  # noqa: E731
                else:
                    use_pdl = kern != "w4a4_quant+gemv_serial"
                    wk = "engine" if kern == "w4a4_quant+engine" else "gemv"
                    fn = lambda i, p=use_pdl, wk=wk: linear_w4a4(xs[i], sets[i], act=acts[i], out=ys[i], pdl=p,  # noqa: E731
                                                                 kernel=wk)
            try:
                ys[0].fill(np.nan)
                fn(0)
                cp.cuda.Device().synchronize()
                chk = _check(ctx, kern, kind, ys[0], x_host, q, cols, sets[0])
                t = time_launches(fn, n_sets=n)
                err = ""
                if kind in NESTEDFP_FORMATS and ENGINE[kind].fp8 and not fp8_done and M >= 64:
                    acc = _fp8_accuracy(ctx, sets[0], x_host)
                    fp8_done = True
            except Exception as e:  # recorded, printed, not hidden
                t, chk, err = None, {}, f"{type(e).__name__}: {e}"[:400]
                ctx.log(f"  {kern:<16} {kind:<11} M={M:<4} FAILED: {err}")
            abytes = M * K * 2 if kern != "w4a4_gemv" else M * (K // 2 + K // 16)
            rec = make_record(kernel=kern, format=kind, K=K, N=N, M=M, timing=t,
                              bytes_moved=wb + abytes + M * N * 2, baseline_fp16_us=fp16_us,
                              read_peak_tbps=_peak(ctx, wb), device=ctx.info,
                              extra={**extra, "check": chk, "error": err, "weight_bytes": wb,
                                     **({"fp8_accuracy": acc} if acc else {})})
            ctx.records.append(rec)
            if t is not None:
                sp = rec["speedup_vs_fp16"]
                ctx.log(f"  {kern:<16} {kind:<11} M={M:<4} {t.median_us:8.2f} us  x{sp if sp else float('nan'):5.2f} "
                        f"vs fp16  {rec['achieved_tbps']:.2f} TB/s ({100 * rec['fraction_of_read_peak']:.0f}% of read peak)")
            if acc:
                ctx.log(f"  fp8 accuracy K={K}: {acc}")
            del xs, ys
        if fp16_us:
            ctx.log(f"  cublas_fp16      M={M:<4} {fp16_us:8.2f} us")


def _check(ctx, kern, kind, y_dev, x_host, q, cols, first):
    """Correctness on sampled output columns before timing (raises on failure)."""
    if kind in FORMATS:
        if kern.startswith("w4a4"):
            return _check_fp4(f"{kern}/{kind}", y_dev, NVFP4().quantize(x_host).dequantize(), q, cols)
        return _check_fp4(f"{kern}/{kind}", y_dev, x_host, q, cols)
    got = y_dev.get()[:, cols].astype(np.float64)
    ef = ENGINE[kind]
    if not ef.fp8:  # NestedFP's FP16 mode
        xd, wd = x_host.astype(np.float64), q[cols].astype(np.float64)
        return _check_bound(kind, got, xd @ wd.T, np.abs(xd) @ np.abs(wd).T, x_host.shape[1])
    if ef.fp8:
        from mactile.golden import FP8_E4M3
        from mactile.golden.fp8token import per_token_e4m3
        codes, scales = per_token_e4m3(x_host)
        u, _ = first.planes()
        a = FP8_E4M3.values[codes].astype(np.float64) * scales.astype(np.float64)[:, None]
        b = FP8_E4M3.values[u[cols]].astype(np.float64) * 2.0 ** -8
        # the FP8 wgmma adds inside a 128-wide k block with ~14 significant bits (promoted to
        # FP32 every 128 of K): 2^-13 of the magnitude on top of the FP32 bound
        return _check_bound(kind, got, a @ b.T, np.abs(a) @ np.abs(b).T, x_host.shape[1], extra_rel=2.0 ** -13)
    # FlexQ: INT6 weights and activations; the GEMM itself is exact (tests); here a sanity
    # check of the whole path against the FP16 product within the quantization error
    ref = x_host.astype(np.float64) @ q[cols].astype(np.float64).T
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    if not np.isfinite(got).all() or rel > 0.05:
        raise AssertionError(f"{kind}: relative error {rel:.3e} against the FP16 product exceeds 5%")
    return {"rel_l2_vs_fp16_product": rel}


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


def fp4_weight_sets(cp, fmt: str, N: int, K: int, rng, l2: int, layouts=None):
    """``(q, sets)``: a random golden weight of format ``fmt`` and its packing on the GPU
    (``layouts``, default every layout), copied into enough sets to rotate over >= 4x L2."""
    q = random_quantized(FORMATS[fmt], N, K, rng)
    pw = pack_w4a16(q, layouts=layouts, xp=cp)
    n_sets = rotation_count(pw.nbytes("frag"), l2_bytes=l2)
    return q, [pw] + [_copy(pw) for _ in range(n_sets - 1)]


def nestedfp_weight_sets(cp, N: int, K: int, rng, l2: int):
    """``(w, layers)``: a random FP16 weight (NestedFP-eligible range) and its
    ``NestedFPLinear``, copied into enough layers to rotate over >= 4x L2."""
    from ..nestedfp.kernels import NestedFPLinear
    w = (rng.standard_normal((N, K)) * 0.3).clip(-1.7, 1.7).astype(np.float16)
    first = NestedFPLinear(cp.asarray(w))
    n_sets = rotation_count(first.upper.nbytes * 2, l2_bytes=l2)
    return w, [first] + [_nfp_copy(first) for _ in range(n_sets - 1)]


def _copy(pw):
    from ..packing import PackedW4A16
    lays = {k: {kk: (v.copy() if hasattr(v, "copy") and hasattr(v, "shape") else v) for kk, v in lay.items()}
            for k, lay in pw.layouts.items()}
    return PackedW4A16(pw.fmt, pw.N, pw.K, pw.tensor_scale, lays)


def _nfp_copy(layer):
    import copy
    c = copy.copy(layer)
    c.upper, c.lower, c._fp8 = layer.upper.copy(), layer.lower.copy(), {}
    return c


def run_benchmark(*, shapes=None, Ms=None, kinds=None, baselines=("fp16", "fp8"), seed: int = 7,
                  temperature: bool = False, log=print) -> dict:
    """Run the benchmark; returns ``{"meta": ..., "records": [...]}``."""
    cp = require_cupy()
    info = device_info()
    shapes = shapes or SHAPES
    Ms = Ms or M_VALUES
    kinds = list(kinds or KINDS)
    ctx = _Ctx(cp, info, np.random.default_rng(seed), [], log, {})
    t0 = time.time()
    peak_1g = streaming_read_peak(1 << 30)["tbps"]
    log(f"device {info['name']}  SMs {info['sm_count']}  L2 {info['l2_bytes'] / 2**20:.0f} MiB  "
        f"streaming read (1 GiB): {peak_1g:.2f} TB/s")
    for (model, layer, K, N) in shapes:
        log(f"{model} {layer}: K={K} N={N}")
        _bench_shape(ctx, model, layer, K, N, Ms, kinds, baselines)
        cp.get_default_memory_pool().free_all_blocks()
    if temperature:
        bench_temperature(ctx)
    from ..tuning import table_origin  # noqa: PLC0415
    meta = {"device": info, "read_peak_1gib_tbps": peak_1g, "seconds": time.time() - t0,
            "tuning_table": table_origin()[1],
            "shapes": [list(s) for s in shapes], "M": list(Ms), "kinds": kinds,
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
    """Per (format, N, K): the largest M <= 8 at which the CUDA-core GEMV beat ``linear``'s
    engine path (0: never), in the tuning table's ``crossover`` schema."""
    best = {}
    for r in records:
        if r["kernel"] not in ("w4a16_cc", "linear") or r["time_us"] is None or r["format"] not in FORMATS:
            continue
        best.setdefault((r["format"], r["N"], r["K"]), {}).setdefault(r["M"], {})[r["kernel"]] = r["time_us"]
    entries = []
    for (f, N, K), byM in sorted(best.items()):
        cx = 0
        for M in sorted(byM):
            d = byM[M]
            if M <= SMALL_M and "w4a16_cc" in d and "linear" in d and d["w4a16_cc"] < d["linear"]:
                cx = M
        if any("w4a16_cc" in d for d in byM.values()):
            entries.append({"format": f, "N": N, "K": K, "crossover_m": cx,
                            "times_us": {str(M): d for M, d in sorted(byM.items()) if M <= SMALL_M}})
    return {"crossover": entries}


def report_markdown(records, Ms, temperature: str = "") -> str:
    """The benchmark's markdown file: speedups per shape at the table's M values among
    ``Ms``, the geometric means, and ``temperature`` (:func:`temperature_table`) if given."""
    table = summary_table(records, Ms=[m for m in (1, 8, 16, 64, 256, 1024, 4096) if m in Ms])
    return ("## Speedup over cuBLAS FP16\n\n" + table + "\n\n## Geometric mean over shapes (and the "
            "smallest shape's ratio to it)\n\n" + geomean_table(records) + "\n"
            + (f"\n## ReSET temperature step\n\n{temperature}\n" if temperature else ""))


def _index(records):
    return {(r["kernel"], r["format"], r["K"], r["N"], r["M"]): r for r in records if r["time_us"] is not None}


def summary_table(records, *, Ms=(1, 8, 16, 64, 256, 1024, 4096)) -> str:
    """Markdown: speedup of ``linear`` over cuBLAS FP16 per format (at M = 1 with the fraction
    of the same-size streaming-read peak), and cuBLAS FP8's."""
    idx = _index(records)
    shapes = sorted({(r["K"], r["N"], r.get("model", ""), r.get("layer", "")) for r in records},
                    key=lambda s: (s[2], s[0] * s[1], s[0], s[1]))  # (K, N) breaks ties: same order every run
    cols = [("linear", k) for k in KINDS] + [("torch_fp8", "fp8")]
    head = "| shape (K x N) | M | cuBLAS FP16 us | " + " | ".join(f for _, f in cols) + " |"
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
                    continue
                s = f"{r['speedup_vs_fp16']:.2f}x"
                if M == 1 and r.get("fraction_of_read_peak") and k != "torch_fp8":
                    s += f" ({100 * r['fraction_of_read_peak']:.0f}%)"
                cells.append(s)
            lines.append(f"| {model} {layer} {K}x{N} | {M} | {b['time_us']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def geomean_table(records) -> str:
    """Markdown: per format and M the geometric mean over shapes of the speedup over cuBLAS
    FP16 (NestedFP FP8 also over cuBLAS FP8), and the smallest shape's ratio to that mean."""
    idx = _index(records)
    Ms = sorted({r["M"] for r in records})
    shapes = sorted({(r["K"], r["N"]) for r in records})
    lines = ["| format | " + " | ".join(f"M={m}" for m in Ms) + " |", "|---|" + "---|" * len(Ms)]
    rows = [(k, "fp16") for k in KINDS] + [("nestedfp8", "fp8")]
    for k, base in rows:
        cells = []
        for M in Ms:
            sp = []
            for K, N in shapes:
                r = idx.get(("linear", k, K, N, M))
                b = idx.get(("torch_fp8", "fp8", K, N, M)) if base == "fp8" else None
                if r is None or (base == "fp8" and b is None):
                    continue
                sp.append(b["time_us"] / r["time_us"] if base == "fp8" else r["speedup_vs_fp16"])
            if not sp or any(s is None for s in sp):
                cells.append("")
                continue
            g = math.exp(sum(math.log(s) for s in sp) / len(sp))
            cells.append(f"{g:.2f} ({min(sp) / g:.2f})")
        lines.append(f"| {k}{' vs FP8' if base == 'fp8' else ''} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(records, path) -> None:
    """One panel per format: speedup of ``linear`` over cuBLAS FP16 against M, one line per
    shape; cuBLAS FP8 (geometric mean over the shapes) as a dashed line."""
    recs = [r for r in records if r["kernel"] == "linear"]
    fp8 = {}
    for r in records:
        if r["kernel"] == "torch_fp8" and r.get("speedup_vs_fp16"):
            fp8.setdefault(r["M"], []).append(r["speedup_vs_fp16"])
    plot_records(recs, path, panel=lambda r: r["format"],
                 series=lambda r: f"{r.get('model', '')} {r.get('layer', '')} {r['K']}x{r['N']}",
                 title="mactile.gpu.linear: speedup over cuBLAS FP16 (dashed: cuBLAS FP8, geomean)",
                 extra_line={m: math.exp(sum(map(math.log, v)) / len(v)) for m, v in fp8.items()})
