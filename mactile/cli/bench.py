"""``mactile bench``: benchmarks that need a GPU (``mactile bench gpu``)."""
from __future__ import annotations

from mactile.cli.common import CliError


def register(sub) -> None:
    p = sub.add_parser("bench", help="run GPU benchmarks", description="Run a benchmark and record its results.")
    bsub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    g = bsub.add_parser("gpu", help="FP4 kernels (nvfp4/razer/razer-g128 W4A16, ReSET W4A4) vs cuBLAS",
                        description="Time the FP4 GEMM/GEMV kernels against cuBLAS FP16 and FP8 on the "
                                    "shapes of Llama-3.1-8B, Qwen3-32B and 8192x8192; write JSON, PNG and a "
                                    "markdown table.")
    g.add_argument("-o", "--out", default="out/bench-gpu", help="output folder (default out/bench-gpu)")
    g.add_argument("--quick", action="store_true", help="three shapes, M in 1, 8, 16, 256")
    g.add_argument("--m", type=lambda s: [int(v) for v in s.split(",")], help="comma-separated M values")
    g.add_argument("--formats", type=lambda s: s.split(","), help="subset of nvfp4,razer,razer-g128")
    g.add_argument("--shapes", type=lambda s: [int(v) for v in s.split(",")],
                   help="indices into the shape list (see mactile.gpu.bench.fp4_bench.SHAPES)")
    g.add_argument("--tuning-out", help="write the measured crossover table (JSON) here as well")
    g.add_argument("--name", default="gpu_fp4", help="file name stem (default gpu_fp4)")
    g.set_defaults(func=run_gpu)


def run_gpu(args) -> int:
    import json
    from pathlib import Path

    from mactile.gpu.runtime import gpu_skip_reason

    why = gpu_skip_reason()
    if why:
        raise CliError(f"bench gpu needs a CUDA GPU and CuPy: {why}")
    from mactile.gpu.bench import fp4_bench as fb
    from mactile.gpu.bench.harness import write_json

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shapes = fb.SHAPES
    Ms = args.m or fb.M_VALUES
    if args.quick:
        shapes, Ms = fb.QUICK_SHAPES, (args.m or [1, 8, 16, 256])
    if args.shapes:
        try:
            shapes = [fb.SHAPES[i] for i in args.shapes]
        except IndexError:
            raise CliError(f"--shapes indices must be in 0..{len(fb.SHAPES) - 1}") from None
    if args.formats:
        bad = [f for f in args.formats if f not in fb.FORMATS]
        if bad:
            raise CliError(f"unknown formats {bad}; choose from {list(fb.FORMATS)}")
    res = fb.run_benchmark(shapes=shapes, Ms=Ms, formats=args.formats)
    stem = out / args.name
    write_json(res["records"], f"{stem}.json", meta=res["meta"])
    table = fb.summary_table(res["records"], Ms=[m for m in (1, 2, 4, 8, 16, 64, 256) if m in Ms])
    ttable = fb.temperature_table(res["records"])
    Path(f"{stem}.md").write_text(table + "\n\n" + ttable + "\n")
    cx = fb.crossover_table(res["records"])
    cx["device"] = res["meta"]["device"]["name"]
    cx["date"] = res["meta"]["device"]["date"]
    Path(f"{stem}_crossover.json").write_text(json.dumps(cx, indent=1))
    if args.tuning_out:
        Path(args.tuning_out).write_text(json.dumps(cx, indent=1))
    try:
        fb.plot(res["records"], f"{stem}.png")
    except ImportError as e:
        print(f"(no plot: {e})")
    print(table)
    print(ttable)
    print(f"wrote {stem}.json, {stem}.md, {stem}_crossover.json, {stem}.png")
    return 0
