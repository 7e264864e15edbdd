"""Same-process A/B of two (or more) GEMM-engine sources on a Hopper GPU (development aid).

A kernel change is measured against the kernel it replaces in one process, interleaved
(A, B, then B, A, ...), on each format's default configuration (``engine.config_for``,
the tuning table left out), with CUDA-graph replay, weights rotated past the L2 and cuBLAS
FP16/FP8 timed beside them; each source runs through ``engine.set_source``. Outputs must be
bitwise equal across the sources unless ``--allow-different`` (a change of the arithmetic).
``--resident`` also times every case with a single weight set, resident in the L2 where it
fits: how much of the time is the weights' path from the DRAM (docs/gpu.md, note 12).

A source is a complete engine source as ``engine.engine_source()`` returns it: write one
from a checkout with ``--dump FILE`` (the other revision's, before switching), and name the
current tree's ``tree``. The sources must take the kernel parameters this tree's host code
passes (``engine._run``): a revision that changed them needs its own host code. Sources
without prebuilt cubins (``MACTILE_CUBIN_DIR``) compile with NVRTC on first use.

    python benchmarks/engine_ab.py --dump old.cu                 # in the other checkout
    python benchmarks/engine_ab.py --source old=old.cu --source new=tree \\
        --formats nvfp4 nestedfp16 --ms 1 16 256 [--shapes 4096x4096 ...] [-o ab.json]

A host-side rule of ``mactile.gpu.engine`` (``PARTS_MIN``, ``STREAMK_IDLE``, ``HYBRID``, ...)
is compared the same way: one source twice, one with ``--set NAME:CONST=VALUE`` (each
source's configuration and partition are then taken under its own settings)::

    python benchmarks/engine_ab.py --source p4=tree --source p2=tree --set p2:PARTS_MIN=2 --ms 64 256
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from mactile.gpu.formats import ENGINE, ENGINE_FORMATS, NESTEDFP_FORMATS


def _sources(specs: list[str]) -> dict[str, str | None]:
    """``NAME=PATH`` (``PATH`` = ``tree``: the package's source, ``None``) -> {name: source text}."""
    from mactile.gpu.bench.harness import ab_sources
    paths = ab_sources(specs, tool="engine_ab", marker="engine_gemm", what="an engine source")
    return {n: None if p is None else p.read_text(encoding="utf-8") for n, p in paths.items()}


def _settings(specs: list[str], names, engine) -> dict[str, dict[str, object]]:
    """``NAME:CONST=VALUE`` -> {source name: {engine constant: value}}: a host-side rule of
    ``mactile.gpu.engine`` (e.g. ``PARTS_MIN``, ``STREAMK_IDLE``) set while that source runs,
    its value parsed as the constant's own type (int, float or bool)."""
    out: dict[str, dict[str, object]] = {n: {} for n in names}
    for spec in specs:
        name, sep, rest = spec.partition(":")
        const, sep2, text = rest.partition("=")
        if not sep or not sep2 or not name or not const or not text:
            raise SystemExit(f"engine_ab: --set {spec!r}: expected NAME:CONST=VALUE")
        if name not in out:
            raise SystemExit(f"engine_ab: --set {spec!r}: no --source named {name!r}")
        cur = getattr(engine, const, None) if const.isupper() else None
        if type(cur) not in (bool, int, float):
            raise SystemExit(f"engine_ab: --set {spec!r}: {const!r} is not a numeric or boolean "
                             f"constant of mactile.gpu.engine")
        try:
            if type(cur) is bool:
                if text.lower() not in ("0", "1", "true", "false"):
                    raise ValueError(text)
                value = text.lower() in ("1", "true")
            else:
                value = type(cur)(text)
        except ValueError:
            raise SystemExit(f"engine_ab: --set {spec!r}: {text!r} is not a valid {type(cur).__name__}") from None
        out[name][const] = value
    return out


class _Constants:
    """Set engine constants for one source's runs and put the previous values back."""

    def __init__(self, engine, values: dict[str, object]):
        self.engine, self.values, self.saved = engine, values, {}

    def __enter__(self):
        for k, v in self.values.items():
            self.saved[k] = getattr(self.engine, k)
            setattr(self.engine, k, v)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            setattr(self.engine, k, v)
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", type=Path, default=None, metavar="FILE",
                    help="write this tree's complete engine source to FILE and exit")
    ap.add_argument("--source", action="append", default=[], metavar="NAME=PATH",
                    help="an engine source to time (PATH from --dump, or 'tree'); two or more")
    ap.add_argument("--set", action="append", default=[], metavar="NAME:CONST=VALUE",
                    help="a host-side engine constant (e.g. PARTS_MIN) for source NAME's runs; "
                         "repeatable (two sources may be the same file with different settings)")
    ap.add_argument("--formats", nargs="+", default=["nvfp4"], choices=ENGINE_FORMATS)
    ap.add_argument("--ms", nargs="+", type=int, default=[1, 16, 64, 256], help="token counts")
    ap.add_argument("--shapes", nargs="+", default=None, metavar="KxN",
                    help="layer shapes K x N (default: the benchmark's nine)")
    ap.add_argument("--reps", type=int, default=2, help="interleaved rounds per case (default 2; best kept)")
    ap.add_argument("--resident", action="store_true", help="also time each case with one weight set")
    ap.add_argument("--allow-different", action="store_true",
                    help="sources may round differently (no bitwise check)")
    ap.add_argument("-o", "--out", type=Path, default=None, help="JSON file of the records")
    args = ap.parse_args(argv)

    from mactile.golden.fileio import atomic_write
    from mactile.gpu import engine as e

    if args.dump is not None:
        atomic_write(args.dump, e.engine_source())
        print(f"wrote {args.dump}")
        return 0
    sources = _sources(args.source)
    settings = _settings(args.set, list(sources), e)
    if args.reps < 1:
        raise SystemExit("engine_ab: --reps must be >= 1")
    from mactile.gpu.bench.gemm_bench import SHAPES, fp4_weight_sets, nestedfp_weight_sets
    from mactile.gpu.bench.harness import geomean, parse_shapes, time_launches, torch_baselines

    shapes = parse_shapes(args.shapes, [(K, N) for _, _, K, N in SHAPES])

    import cupy as cp

    from mactile.gpu.runtime import device_info

    info = device_info()
    L2 = info["l2_bytes"]
    print(f"{info['name']} driver {info['versions'].get('driver')} {info['date']}", flush=True)
    rng = np.random.default_rng(7)
    names = list(sources)
    records, ratios = [], {}
    try:
        for f in args.formats:
            for K, N in shapes:
                if f in NESTEDFP_FORMATS:
                    _, sets = nestedfp_weight_sets(cp, N, K, rng, L2)
                    nbytes = ENGINE[f].planes * N * K
                    mode = ENGINE[f].mode
                else:
                    _, sets = fp4_weight_sets(cp, f, N, K, rng, L2, layouts=("frag",))
                    nbytes = sets[0].nbytes("frag")
                for M in args.ms:
                    x = cp.asarray((rng.standard_normal((M, K)) * 0.5).astype(np.float16))
                    ys = [cp.empty((M, N), dtype=cp.float16) for _ in sets]
                    bl = torch_baselines(M, N, K, kinds=("fp16", "fp8"), l2_bytes=L2)
                    fp16_us, fp8_us = bl["fp16"].timing.median_us, bl["fp8"].timing.median_us
                    cfgs = {}
                    for n in names:  # each source's configuration under its own settings
                        with _Constants(e, settings[n]):
                            cfgs[n] = e.config_for(f, M, nbytes, N=N)
                    cfg = cfgs[names[0]]
                    if f in NESTEDFP_FORMATS:
                        def call(i, n, x=x):
                            sets[i](x, mode=mode, config=cfgs[n], y=ys[i])
                    else:
                        def call(i, n, x=x):
                            e.gemm_fp4(x, sets[i], cfg=cfgs[n], out=ys[i], pdl=e.use_pdl(M))
                    times, resident, ref = {n: [] for n in names}, {n: [] for n in names}, None
                    for rep in range(args.reps):
                        for n in (names if rep % 2 == 0 else names[::-1]):
                            with _Constants(e, settings[n]):
                                e.set_source(sources[n])
                                if rep == 0:  # correctness first: the sources against each other
                                    call(0, n)
                                    out = ys[0].get()
                                    if ref is None:
                                        ref = out
                                    elif not args.allow_different and not np.array_equal(
                                            out.view(np.uint16), ref.view(np.uint16)):
                                        raise SystemExit(f"engine_ab: {f} {K}x{N} M={M}: source {n!r}'s output "
                                                         f"differs from {names[0]!r}'s (--allow-different if intended)")
                                times[n].append(time_launches(lambda i, n=n: call(i, n), n_sets=len(sets)).median_us)
                                if args.resident:
                                    resident[n].append(time_launches(lambda i, n=n: call(i, n), n_sets=1).median_us)
                    best = {n: min(t) for n, t in times.items()}
                    base = fp8_us if ENGINE[f].fp8 else fp16_us
                    rec = {"format": f, "K": K, "N": N, "M": M, "config": str(cfg), "weight_bytes": nbytes,
                           "settings": {n: settings[n] for n in names if settings[n]},
                           "configs": {n: str(c) for n, c in cfgs.items()},
                           "cublas_fp16_us": fp16_us, "cublas_fp8_us": fp8_us, "time_us": best,
                           "speedup": {n: base / t for n, t in best.items()},
                           "speedup_vs": "cuBLAS FP8" if ENGINE[f].fp8 else "cuBLAS FP16"}
                    if args.resident:
                        rec["resident_us"] = {n: min(t) for n, t in resident.items()}
                    records.append(rec)
                    for n in names:
                        ratios.setdefault((f, M, n), []).append(rec["speedup"][n])
                    shown = (f"{cfg.bn}/{cfg.wgs}/{cfg.schedule}" if len({str(c) for c in cfgs.values()}) == 1
                             else ",".join(f"{n}:{c.bn}/{c.wgs}/{c.schedule}/{c.n_ctas}" for n, c in cfgs.items()))
                    print(f"{f:<10} {K:>5}x{N:<5} M={M:<4} {shown} "
                          f"fp16 {fp16_us:8.2f} fp8 {fp8_us:8.2f} | "
                          + " | ".join(f"{n} {best[n]:8.2f} ({rec['speedup'][n]:.2f}x"
                                       + (f", resident {rec['resident_us'][n]:8.2f}" if args.resident else "")
                                       + ")" for n in names), flush=True)
                del sets
    finally:
        e.set_source(None)
    summary = []
    for (f, M, n), r in ratios.items():
        g = geomean(r)
        summary.append({"format": f, "M": M, "source": n, "geomean_speedup": g, "min_over_geomean": min(r) / g,
                        "shapes": len(r)})
        print(f"GEOMEAN {f:<10} M={M:<4} {n:<10} {g:.3f}  (smallest shape {min(r) / g:.2f} of it)", flush=True)
    if args.out is not None:
        meta = {"device": info.get("name"), "date": info.get("date"), "versions": info.get("versions", {}),
                "sources": {n: ("tree" if s is None else "file") for n, s in sources.items()},
                "settings": {n: v for n, v in settings.items() if v},
                "method": "same process, sources interleaved, best of --reps; CUDA-graph replay, weights "
                          "rotated past the L2; each format's default configuration"}
        atomic_write(args.out, json.dumps({"meta": meta, "records": records, "summary": summary}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
