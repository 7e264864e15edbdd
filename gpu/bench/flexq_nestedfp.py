"""Benchmark of FlexQ (W6A6/W6A8 on binary tensor cores) and NestedFP (FP16/FP8 modes).

``python -m mactile.gpu.bench.flexq_nestedfp OUTDIR [--quick]`` on a Hopper GPU writes
``OUTDIR/flexq_nestedfp.json`` and two PNGs. Shapes: Llama-3.1-8B's four linear layers
(qkv 6144x4096, o 4096x4096, gate_up 28672x4096, down 4096x14336) and 8192x8192.
FlexQ at M in {1..64} against cuBLAS FP16, torch._int_mm INT8 and torch._scaled_mm FP8;
NestedFP at M in {1, 8, 64, 256, 1024, 2048} in both modes against cuBLAS FP16 and FP8.
Every kernel output is checked against a reference before it is timed (the exact golden
comparisons are the ``gpu`` tests); times come from the shared harness (CUDA-graph replay,
weights rotated over >= 4x L2, median of replays).
"""
from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

from ..runtime import device_info, require_cupy
from . import harness

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
          "down": (4096, 14336), "square8k": (8192, 8192)}
FLEXQ_M = (1, 2, 4, 8, 16, 32, 64)
#: time_launches options (the sweep uses fewer, shorter replays)
TIMING: dict = {}
NESTED_M = (1, 8, 64, 256, 1024, 2048)


def _rel(cp, a, b) -> float:
    a = a.astype(cp.float32)
    b = b.astype(cp.float32)
    return float(cp.linalg.norm(a - b) / cp.linalg.norm(b))


def _baselines(M, N, K, kinds, dev, cache):
    key = (M, N, K)
    if key not in cache:
        cache[key] = harness.torch_baselines(M, N, K, kinds=("fp16", "fp8", "int8"),
                                             l2_bytes=dev["l2_bytes"])
    return {k: cache[key][k] for k in kinds}


def _base_extra(bl):
    out = {}
    for k, r in bl.items():
        out[f"baseline_{k}_us"] = r.timing.median_us if r.timing else None
        if r.error or r.note:
            out[f"baseline_{k}_note"] = r.error or r.note
    return out


def _cfg_list(configs, sname, N, K, M, extra=None):
    if configs is None:
        return [None]
    if callable(configs):
        return configs(sname, N, K, M, *(extra or ()))
    return configs.get(M if extra is None else (extra[0], M), [None])


def _cfg_repr(c):
    if c is None:
        return "default"
    return {k: v for k, v in c.__dict__.items()} | {"kind": type(c).__name__}


def bench_flexq(dev, peak, cache, records, log, *, shapes, ms, configs=None, act_bits=(6, 8),
                pdl_launch=None):
    cp = require_cupy()
    from ..flexq.kernels import FlexQLinear, GpuPlanes
    rng = cp.random.default_rng(7)
    for sname, (N, K) in shapes.items():
        w16 = (rng.standard_normal((N, K), dtype=cp.float32) * 0.02).astype(cp.float16)
        base = FlexQLinear(w16)
        if pdl_launch is not None:
            base.pdl_launch = bool(pdl_launch)
        wbytes = base.w.planes.nbytes + base.w.scales.nbytes
        nset = harness.rotation_count(wbytes, l2_bytes=dev["l2_bytes"])
        layers = [base]
        for _ in range(nset - 1):
            lay = copy.copy(base)
            lay.w = GpuPlanes(base.w.planes.copy(), base.w.scales.copy(), base.w.rows, base.w.k,
                              base.w.bits, base.w.tile)
            lay._acts, lay._flag = {}, cp.zeros(1, dtype=cp.int32)
            lay._ws = lay._counters = None
            layers.append(lay)
        for M in ms:
            xs = [rng.standard_normal((M, K), dtype=cp.float32).astype(cp.float16) for _ in range(nset)]
            bl = _baselines(M, N, K, ("fp16", "fp8", "int8"), dev, cache)
            b16 = bl["fp16"].timing.median_us if bl["fp16"].timing else None
            ref = xs[0] @ w16.T
            for ab in act_bits:
                for c in _cfg_list(configs, sname, N, K, M):
                    cfg = c
                    ys = [cp.empty((M, N), dtype=cp.float16) for _ in range(nset)]
                    y = layers[0](xs[0], act_bits=ab, config=c, y=ys[0])
                    err = _rel(cp, y, ref)
                    if not err < 0.05:  # INT6 quantization error is ~1e-2; garbage is ~1
                        raise RuntimeError(f"flexq {sname} M={M} A{ab}: rel err {err}")

                    def launch(i, ab=ab, c=c, ys=ys):
                        layers[i](xs[i], act_bits=ab, config=c, y=ys[i])
                    t = harness.time_launches(launch, n_sets=nset, **TIMING)
                    moved = wbytes + M * K * 2 + M * N * 2
                    rec = harness.make_record(
                        kernel="flexq", format=f"W6A{ab}", K=K, N=N, M=M, timing=t,
                        bytes_moved=moved, baseline_fp16_us=b16, read_peak_tbps=peak,
                        device=dev, extra={"shape": sname, "rel_err_vs_fp16": err,
                                           "config": _cfg_repr(cfg), "pdl": base.pdl_launch,

                                           **_base_extra(bl)})
                    records.append(rec)
                    log(f"flexq {sname:9s} M={M:5d} W6A{ab} cfg={_short(cfg)} pdl={int(base.pdl_launch)} "
                        f"{t.median_us:8.2f} us  fp16 {b16 or float('nan'):8.2f}  "
                        f"x{rec['speedup_vs_fp16'] or float('nan'):5.2f}  err {err:.3g}")
            del xs
        del layers, base, w16
        cp.get_default_memory_pool().free_all_blocks()


def _short(c):
    if c is None:
        return "default"
    return type(c).__name__[0] + str(tuple(v for v in c.__dict__.values()))


def bench_nested(dev, peak, cache, records, log, *, shapes, ms, configs=None, modes=("fp16", "fp8")):
    cp = require_cupy()
    from ..nestedfp.kernels import NestedFPLinear
    rng = cp.random.default_rng(11)
    for sname, (N, K) in shapes.items():
        nset = harness.rotation_count(N * K * 2, l2_bytes=dev["l2_bytes"])
        w16 = [(rng.standard_normal((N, K), dtype=cp.float32) * 0.02).astype(cp.float16)
               for _ in range(nset)]
        layers = [NestedFPLinear(w) for w in w16]
        assert all(lay.eligible for lay in layers)
        w0 = w16[0]
        del w16[1:]
        for M in ms:
            xs = [rng.standard_normal((M, K), dtype=cp.float32).astype(cp.float16) for _ in range(nset)]
            bl = _baselines(M, N, K, ("fp16", "fp8"), dev, cache)
            b16 = bl["fp16"].timing.median_us if bl["fp16"].timing else None
            ref = xs[0] @ w0.T
            for mode in modes:
                for c in _cfg_list(configs, sname, N, K, M, (mode,)):
                    cfg = c
                    ys = [cp.empty((M, N), dtype=cp.float16) for _ in range(nset)]
                    y = layers[0](xs[0], mode=mode, config=c, y=ys[0])
                    err = _rel(cp, y, ref)
                    if not err < (2e-3 if mode == "fp16" else 0.08):
                        raise RuntimeError(f"nestedfp {sname} M={M} {mode}: rel err {err}")

                    def launch(i, mode=mode, c=c, ys=ys):
                        layers[i](xs[i], mode=mode, config=c, y=ys[i])
                    t = harness.time_launches(launch, n_sets=nset, **TIMING)
                    moved = N * K * (2 if mode == "fp16" else 1) + M * K * 2 + M * N * 2
                    rec = harness.make_record(
                        kernel="nestedfp", format=mode, K=K, N=N, M=M, timing=t,
                        bytes_moved=moved, baseline_fp16_us=b16, read_peak_tbps=peak,
                        device=dev, extra={"shape": sname, "rel_err_vs_fp16": err,
                                           "config": _cfg_repr(cfg),
                                           "tflops": 2 * M * N * K / (t.median_us * 1e-6) / 1e12,
                                           **_base_extra(bl)})
                    records.append(rec)
                    log(f"nested {sname:9s} M={M:5d} {mode} cfg={_short(cfg)} "
                        f"{t.median_us:8.2f} us  fp16 {b16 or float('nan'):8.2f}  "
                        f"x{rec['speedup_vs_fp16'] or float('nan'):5.2f}  err {err:.3g}")
            del xs
        del layers, w0
        cp.get_default_memory_pool().free_all_blocks()


def _flexq_sweep(sname, N, K, M):
    """FlexQ at M <= 8: the two-launch GEMM shapes and the fused kernel without a K split
    (the first sweep's split-K fused shapes all lost; see docs/gpu.md)."""
    from ..flexq.kernels import FUSED_SWEEP, SWEEP_CONFIGS, FusedConfig, GemmConfig
    out = [None] + [GemmConfig(*t) for t in SWEEP_CONFIGS if t[0] == 1]
    out += [FusedConfig(*t) for t in FUSED_SWEEP if t[3] >= 4]
    return out


def _stream_sweep(sname, N, K, M, mode):
    from ..nestedfp.kernels import STREAM_SWEEP, NfpConfig, StreamConfig, choose_config
    out = [None]
    for t in STREAM_SWEEP:
        if t[0] * 8 < M or (M <= 8 and t[0] != 1):
            continue
        base = StreamConfig(*t, fuse=M <= 8)
        rb = 128 * -(-N // 128) // base.block_rows
        auto = base.spans(K, rb)
        # few K splits (long blocks; the activations' shared memory caps the span count)
        few = min(K // 64, 96 // t[0], -(-(K // 64) // max(1, -(-132 // rb))))
        for sps in sorted({auto, few}):
            out.append(StreamConfig(*t, sps=sps, fuse=M <= 8))
    if mode == "fp8" and M == 8:
        out.append(StreamConfig(1, fuse=False))
    c = choose_config(M, N, K, mode)
    out.append(NfpConfig(c.wg, c.bn, c.stages, c.split, c.a_src))  # the wgmma kernel, for reference
    return out


#: FP16-mode defaults of the second pass that the third pass replaced (docs/gpu.md,
#: "Regressions against the first pass"): timed in the same run as the new defaults.
_SECOND_PASS_M8 = {"o": (1, 1, 1, 8, 2, 64), "gate_up": (1, 1, 1, 8, 2, 64)}
_SECOND_PASS_M64 = {"qkv": (8, 1, 8, 1, 2, 12), "down": (8, 1, 8, 1, 2, 12),
                    "o": (1, 64, 6, 5), "square8k": (1, 64, 6, 3),
                    "gate_up": (1, 64, 6, 1, "regs")}  # gate_up kept smem-A: time regs instead
_SECOND_PASS_M256 = {"qkv": 2, "o": 3, "gate_up": 1, "down": 3, "square8k": 2}


def _regress_cfgs(sname, N, K, M, mode):
    """The second pass's FP16 defaults at M = 8, 64 and 256 that the third pass replaced (the
    new ones are the main run's); gate_up at M = 64 kept its default: the register-fed one."""
    from ..nestedfp.kernels import NfpConfig, StreamConfig
    if mode != "fp16":
        return []
    if M == 8 and sname in _SECOND_PASS_M8:
        t = _SECOND_PASS_M8[sname]
        return [StreamConfig(*t[:5], sps=t[5])]
    if M == 64:
        t = _SECOND_PASS_M64[sname]
        if len(t) == 6:
            return [StreamConfig(*t[:5], sps=t[5], fuse=False)]
        return [NfpConfig(*t)]
    if M == 256:
        return [NfpConfig(2, 128, 5, _SECOND_PASS_M256[sname])]
    return []


def _large_sweep(sname, N, K, M, mode):
    from ..nestedfp.kernels import NfpConfig, choose_config
    c = choose_config(M, N, K, mode)
    if mode == "fp8":
        return [None]
    return [None, NfpConfig(c.wg, c.bn, 3, c.split, "regs"), NfpConfig(2, 128, 5, c.split),
            NfpConfig(2, 256, 4, c.split), NfpConfig(2, 128, 6, c.split)]


def run_sweeps(dev, peak, cache, records, log, shapes):
    TIMING.update(replays=7, target_replay_us=1000.0)
    bench_flexq(dev, peak, cache, records, log, shapes=shapes, ms=(1, 8), configs=_flexq_sweep,
                act_bits=(6,))
    bench_nested(dev, peak, cache, records, log, shapes=shapes, ms=(1, 64),
                 configs=_stream_sweep)
    bench_nested(dev, peak, cache, records, log, shapes=shapes, ms=(8,), configs=_stream_sweep,
                 modes=("fp8",))
    bench_nested(dev, peak, cache, records, log, shapes={"square8k": SHAPES["square8k"]},
                 ms=(256, 2048), configs=_large_sweep, modes=("fp16",))
    TIMING.clear()


def baseline_records(cache, dev, peak, records):
    for (M, N, K), bl in cache.items():
        for kind, r in bl.items():
            if r.timing is None:
                continue
            bpe = 2 if kind == "fp16" else 1
            records.append(harness.make_record(
                kernel="cublas", format=kind, K=K, N=N, M=M, timing=r.timing,
                bytes_moved=N * K * bpe + M * K * bpe + M * N * 2,
                baseline_fp16_us=bl["fp16"].timing.median_us if bl["fp16"].timing else None,
                read_peak_tbps=peak, device=dev, extra={"note": r.note}))


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    quick = "--quick" in argv
    sweep_on = "--sweep" in argv
    regress = "--regress" in argv
    compare = "--compare" in argv
    argv = [a for a in argv if not a.startswith("--")]
    out = Path(argv[0] if argv else "out/bench")
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "bench.log", "a")

    def log(s):
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    dev = device_info()
    peak = harness.streaming_read_peak(1 << 30)["tbps"]
    log(f"device {dev['name']} read peak {peak:.2f} TB/s versions {json.dumps(dev['versions'])}")
    t0 = time.time()
    records, cache = [], {}
    shapes = {k: SHAPES[k] for k in (("o", "square8k") if quick else SHAPES)}
    if sweep_on:
        run_sweeps(dev, peak, cache, records, log, shapes)
    if compare:  # the FlexQ default GEMM launched without PDL, for comparison
        TIMING.update(replays=7, target_replay_us=1000.0)
        bench_flexq(dev, peak, cache, records, log, shapes=shapes, ms=(1, 8), act_bits=(6,),
                    pdl_launch=False)
        TIMING.clear()
    if regress:  # the replaced second-pass FP16 defaults, same run
        TIMING.update(replays=7, target_replay_us=1000.0)
        bench_nested(dev, peak, cache, records, log, shapes=shapes, ms=(8, 64, 256),
                     configs=_regress_cfgs, modes=("fp16",))
        TIMING.clear()
    sweep = [dict(r, sweep=True) for r in records]
    records = []
    bench_flexq(dev, peak, cache, records, log, shapes=shapes, ms=FLEXQ_M)
    bench_nested(dev, peak, cache, records, log, shapes=shapes, ms=NESTED_M)
    baseline_records(cache, dev, peak, records)
    meta = {"device": dev, "read_peak_tbps": peak, "wall_s": time.time() - t0,
            "shapes": {k: list(v) for k, v in shapes.items()}}
    harness.write_json(records + sweep, out / "flexq_nestedfp.json", meta=meta)
    try:
        harness.plot_records([r for r in records if r["kernel"] == "flexq"], out / "flexq.png",
                             panel=lambda r: f"{r['shape']} N={r['N']} K={r['K']}",
                             title=f"FlexQ speedup vs cuBLAS FP16 ({dev['name']})")
        harness.plot_records([r for r in records if r["kernel"] == "nestedfp"], out / "nestedfp.png",
                             panel=lambda r: f"{r['shape']} N={r['N']} K={r['K']}",
                             title=f"NestedFP speedup vs cuBLAS FP16 ({dev['name']})")
    except Exception as e:  # matplotlib missing: the JSON is the result
        log(f"plot skipped: {e}")
    log(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
