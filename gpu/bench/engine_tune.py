"""``mactile bench tune``: the GEMM engine's per-shape tuning sweep, which writes the
``engine`` entries of the device's tuning table (``gpu/tuning/<device>.json``).

For every engine format (nvfp4, mxfp4, razer, razer-g128, NestedFP FP16 and FP8 mode), shape
and M (default 1, 8, 16 .. 512), it times each of
:func:`mactile.gpu.engine.tuning_candidates` (the default first; the variants of its token
tile, with the early weight copies toggled where M launches with PDL, half the tile, one CTA
per SM) the way :func:`mactile.gpu.linear` launches it (FP4:
``gemm_tc`` with its PDL rule; NestedFP: the layer call, FP8 mode with its per-token
quantization), after checking the candidate's output on sampled columns (the benchmark's
checks). The harness is the benchmark's (CUDA-graph replay, weights rotated over >= 4x L2,
random data), with cuBLAS FP16 and FP8 timed for the same shape and M.

Winner's curse: the fastest of several noisy timings is biased low. A candidate replaces the
default only when it beat it by at least ``margin`` in the sweep **and** in a second timing
of both (re-timed back to back); otherwise the entry says ``"default": true`` (the lookup then
takes the engine's current default, so a later change of :func:`~mactile.gpu.engine.config_for`
is not masked by it). Every measured (format, shape, M) gets an entry, so that the lookup
(nearest shape, smallest measured M at or above the request in its token tile) never applies
one M's choice to another M that was measured.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ..formats import ENGINE, NESTEDFP_FORMATS
from ..runtime import device_info, require_cupy, sm_count
from .harness import time_launches, torch_baselines

__all__ = ["TUNE_KINDS", "TUNE_M", "tune_engine", "tune_table", "merge_engine_entries", "config_list",
           "sweep_record"]

#: Formats and modes the engine runs (names of the benchmark's ``KINDS``).
TUNE_KINDS = ("nvfp4", "mxfp4", "razer", "razer-g128", "nestedfp16", "nestedfp8")
#: Default token counts of the sweep: up to 512, where the token tile is M's own or half of
#: it (from 1024 up every format runs 256-token tiles, 128 for NestedFP8, whose alternatives
#: lost 18-40% when measured, docs/gpu.md). M = 1 and 8 are the decode tile (8 tokens).
TUNE_M = (1, 8, 16, 32, 64, 128, 256, 512)


def config_list(cfg) -> list[int]:
    """An :class:`~mactile.gpu.engine.EngineConfig` as the table stores it:
    ``[bn, stages, wgs, n_ctas, sched]`` (the schedule resolved), and ``early`` after them
    where the configuration sets it (absent: the format's rule when looked up)."""
    return [cfg.bn, cfg.stages, cfg.wgs, cfg.n_ctas, cfg.schedule] + ([cfg.early] if cfg.early >= 0 else [])


def _launcher(kind, sets, xs, ys, cfg):
    mode = ENGINE[kind].mode
    if mode is not None:  # NestedFP planes
        return lambda i: sets[i](xs[i], mode=mode, config=cfg, y=ys[i])
    from ..w4a16 import gemm_tc
    return lambda i: gemm_tc(xs[i], sets[i], cfg=cfg, out=ys[i])


# The H100 sweep of 2026-11-27: 2799 timed candidates in about 30 minutes of device time.
SECONDS_PER_CANDIDATE = 0.65


def _approx_weight_bytes(kind: str, N: int, K: int) -> int:
    """The packed weight's bytes as the candidate rules see them, before anything is packed
    (4.5 bits per FP4 weight; NestedFP16 reads both planes, NestedFP8 the upper one)."""
    if kind.startswith("nestedfp"):
        return N * K * (2 if kind == "nestedfp16" else 1)
    return N * K * 9 // 16


def tune_engine(*, shapes=None, Ms=None, kinds=None, margin: float = 0.03, seed: int = 11,
                log=print) -> dict:
    """Run the sweep; returns ``{"meta", "records", "engine"}`` (``engine``: the table's
    entries, one per format, shape and M)."""
    cp = require_cupy()
    from ..engine import config_for, tuning_candidates
    from .gemm_bench import SHAPES, _check, fp4_weight_sets, nestedfp_weight_sets
    if not 0.0 <= margin < 0.5:
        raise ValueError(f"margin must lie in [0, 0.5), got {margin}")
    shapes = shapes or SHAPES
    Ms = list(Ms or TUNE_M)
    kinds = list(kinds or TUNE_KINDS)
    bad = [k for k in kinds if k not in TUNE_KINDS]
    if bad:
        raise ValueError(f"no engine tuning for {bad}; choose from {list(TUNE_KINDS)}")
    info = device_info()
    l2, sms = info["l2_bytes"], sm_count()
    rng = np.random.default_rng(seed)
    records, entries = [], []
    t0 = time.time()
    n_done, n_all = 0, len(shapes) * len(Ms) * len(kinds)
    n_cand = sum(len(tuning_candidates(kind, M, _approx_weight_bytes(kind, N, K), sms=sms, N=N))
                 for (_, _, K, N) in shapes for M in Ms for kind in kinds)
    log(f"{n_all} cells, about {n_cand} candidates: about {n_cand * SECONDS_PER_CANDIDATE / 60:.0f} min "
        f"(at the {SECONDS_PER_CANDIDATE} s per candidate measured on an H100)")
    for (model, layer, K, N) in shapes:
        cols = np.sort(rng.choice(N, size=min(N, 96), replace=False))
        weights = {}
        for kind in kinds:
            if kind in NESTEDFP_FORMATS:
                if "nestedfp" not in weights:
                    weights["nestedfp"] = nestedfp_weight_sets(cp, N, K, rng, l2)
                w, sets = weights["nestedfp"]
                weights[kind] = (w, sets, sets[0].upper.nbytes * ENGINE[kind].planes)
            else:
                q, sets = fp4_weight_sets(cp, kind, N, K, rng, l2, layouts=("frag",))
                weights[kind] = (q, sets, sets[0].nbytes("frag"))
        for M in Ms:
            x_host = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
            base = torch_baselines(M, N, K, kinds=("fp16", "fp8"), l2_bytes=l2)
            b_us = {k: (b.timing.median_us if b.timing else None) for k, b in base.items()}
            for kind in kinds:
                q, sets, wb = weights[kind]
                n = len(sets)
                xs = [cp.asarray(x_host) for _ in range(n)]
                ys = [cp.empty((M, N), cp.float16) for _ in range(n)]
                default = config_for(kind, M, wb, N=N)
                timed = []
                for cfg in tuning_candidates(kind, M, wb, sms=sms, N=N):
                    fn = _launcher(kind, sets, xs, ys, cfg)
                    try:
                        ys[0].fill(np.nan)
                        fn(0)
                        cp.cuda.Device().synchronize()
                        chk = _check(None, "linear", kind, ys[0], x_host, q, cols, sets[0])
                        t, err = time_launches(fn, n_sets=n), ""
                    except Exception as e:  # noqa: BLE001 - recorded, printed, not chosen
                        t, chk, err = None, {}, f"{type(e).__name__}: {e}"[:400]
                        log(f"  {kind} {config_list(cfg)} M={M}: FAILED {err}")
                    records.append(sweep_record(kind, K, N, M, model, layer, cfg, cfg == default, t, b_us, chk, err))
                    if t is not None:
                        timed.append((t.median_us, cfg, fn))
                entry = _choose(kind, K, N, M, default, timed, margin, n, log, sms)
                if entry:
                    entry.update({"cublas_fp16_us": b_us.get("fp16"), "cublas_fp8_us": b_us.get("fp8")})
                    entries.append(entry)
                n_done += 1
                del xs, ys
            el = time.time() - t0
            log(f"[{n_done}/{n_all}, {el:.0f} s, about {el / n_done * (n_all - n_done):.0f} s left] "
                f"{model} {layer} {K}x{N} M={M} done")
        del weights
        cp.get_default_memory_pool().free_all_blocks()
    meta = {"device": info, "seconds": time.time() - t0, "shapes": [list(s) for s in shapes], "M": Ms,
            "kinds": kinds, "margin": margin, "sms": sms,
            "method": "CUDA-graph replay, median of 15 replays; weights rotated over >= 4x L2; random data; "
                      "each candidate checked on 96 sampled columns before timing; a candidate replaces the "
                      f"default only when {100 * margin:.0f}% faster in the sweep and in a second back-to-back "
                      "timing of both"}
    return {"meta": meta, "records": records, "engine": entries}


def sweep_record(kind, K, N, M, model, layer, cfg, is_default, t, b_us, chk, err) -> dict:
    """One timed candidate. Lean on purpose (thousands per sweep): the device, date and
    versions are the sweep's ``meta``, not repeated per record."""
    return {"format": kind, "K": K, "N": N, "M": M, "model": model, "layer": layer, "config": config_list(cfg),
            "default": is_default, "time_us": t.median_us if t else None,
            "p10_us": t.p10_us if t else None, "p90_us": t.p90_us if t else None,
            "launches": t.launches if t else None, "n_sets": t.n_sets if t else None,
            "cublas_fp16_us": b_us.get("fp16"), "cublas_fp8_us": b_us.get("fp8"), "check": chk, "error": err}


def _choose(kind, K, N, M, default, timed, margin, n, log, sms=0):
    """The table entry of one (format, shape, M): the confirmed winner, else the default."""
    d = next((t for t in timed if t[1] == default), None)
    if d is None:
        log(f"  {kind} {K}x{N} M={M}: the default failed; no entry")
        return None
    best = min(timed, key=lambda t: t[0])
    entry = {"format": kind, "K": K, "N": N, "M": M, "config": config_list(default), "default": True,
             "default_us": d[0], "time_us": d[0], "candidates": len(timed)}
    if best[1] != default and best[0] < (1 - margin) * d[0]:
        t_best = time_launches(best[2], n_sets=n).median_us
        t_def = time_launches(d[2], n_sets=n).median_us
        won = t_best < (1 - margin) * t_def
        log(f"  {kind:<11} {K}x{N} M={M:<4} {config_list(best[1])} {best[0]:.1f}/{d[0]:.1f} us, "
            f"again {t_best:.1f}/{t_def:.1f} us: {'kept' if won else 'not confirmed'}")
        if won:
            # one CTA per SM is stored as such: the lookup gives another device its own count
            entry.update({"config": config_list(best[1]), "default": False, "ctas_per_sm": best[1].n_ctas == sms,
                          "time_us": t_best, "default_us": t_def,
                          "sweep_us": best[0], "sweep_default_us": d[0]})
    return entry


def merge_engine_entries(table: dict | None, entries: list[dict]) -> dict:
    """``table`` (a tuning table, or None) with ``entries`` replacing the ``engine`` entries
    of the same format, shape and M; every other key (``crossover``) kept."""
    out = dict(table or {})
    key = lambda e: (e["format"], e["K"], e["N"], e["M"])  # noqa: E731
    new = {key(e): e for e in entries}
    kept = [e for e in out.get("engine", []) if key(e) not in new]
    out["engine"] = sorted(kept + list(new.values()), key=key)
    return out


def tune_table(res: dict) -> str:
    """Markdown: per format, shape and M the default's time, the chosen configuration's, and
    both over cuBLAS FP16; then the geometric mean over shapes of the gain per format and M."""
    lines = ["| format | shape (K x N) | M | default us | chosen | chosen us | gain | x cuBLAS FP16 |",
             "|---|---|---|---|---|---|---|---|"]
    gains = {}
    for e in res["engine"]:
        g = e["default_us"] / e["time_us"]
        gains.setdefault((e["format"], e["M"]), []).append(g)
        sp = f"{e['cublas_fp16_us'] / e['time_us']:.2f}x" if e.get("cublas_fp16_us") else ""
        ch = "default" if e.get("default") else str(e["config"])
        lines.append(f"| {e['format']} | {e['K']}x{e['N']} | {e['M']} | {e['default_us']:.1f} | {ch} | "
                     f"{e['time_us']:.1f} | {g:.3f} | {sp} |")
    Ms = sorted({m for _, m in gains})
    fmts = [k for k in TUNE_KINDS if any(f == k for f, _ in gains)]
    geo = ["| format | " + " | ".join(f"M={m}" for m in Ms) + " |", "|---|" + "---|" * len(Ms)]
    for f in fmts:
        cells = []
        for m in Ms:
            v = gains.get((f, m))
            cells.append(f"{math.exp(sum(map(math.log, v)) / len(v)):.3f}" if v else "")
        geo.append(f"| {f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\nGain of the chosen configuration over the default (geometric mean over " \
                              "shapes; 1.000: the default kept everywhere):\n\n" + "\n".join(geo)
