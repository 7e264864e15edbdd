"""``mactile bench``: benchmarks that need a GPU (``mactile bench gpu``)."""
from __future__ import annotations

from mactile.cli.common import (CliError, atomic_outputs, atomic_write, check_output_dir,
                                check_output_file, int_list)


def _names(text: str) -> list[str]:
    """An argparse type: comma-separated names."""
    import argparse

    parts = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return parts


def register(sub) -> None:
    p = sub.add_parser("bench", help="run GPU benchmarks", description="Run a benchmark and record its results.")
    bsub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    g = bsub.add_parser("gpu", help="every weight format of mactile.gpu.linear vs cuBLAS FP16/FP8",
                        description="Time mactile.gpu.linear for every weight format and mode (nvfp4, mxfp4, "
                                    "razer, razer-g128, NestedFP FP16/FP8, FlexQ W6A6) and the small-M "
                                    "alternatives against cuBLAS FP16 and FP8 on the shapes of Llama-3.1-8B, "
                                    "Qwen3-32B and 8192x8192, M = 1 .. 4096; write JSON, PNG, markdown "
                                    "tables and the measured crossover (tuning) table.")
    g.add_argument("-o", "--out", default="out/bench-gpu", help="output folder (default out/bench-gpu)")
    g.add_argument("--quick", action="store_true", help="three shapes, M in 1, 8, 16, 256")
    g.add_argument("--m", type=int_list(1, "positive integer"), metavar="M,M,...",
                   help="comma-separated M values")
    g.add_argument("--formats", type=_names, metavar="F,F,...",
                   help="subset of nvfp4,mxfp4,razer,razer-g128,nestedfp16,nestedfp8,flexq-w6a6")
    g.add_argument("--shapes", type=int_list(0, "non-negative integer"), metavar="I,I,...",
                   help="indices into the shape list (see mactile.gpu.bench.gemm_bench.SHAPES)")
    g.add_argument("--tuning-out", help="write the measured crossover (tuning) table (JSON) here as well")
    g.add_argument("--temperature", action="store_true", help="also time ReSET's temperature sampler step")
    g.add_argument("--name", default="gpu_gemm", help="file name stem (default gpu_gemm)")
    g.set_defaults(func=run_gpu)


def run_gpu(args) -> int:
    import json
    from pathlib import Path

    # Where the results go is checked before the GPU and the benchmark.
    if not args.name or "/" in args.name or args.name in (".", ".."):
        raise CliError(f"--name must be a file name stem without '/', got {args.name!r}")
    out = check_output_dir(args.out)
    if args.tuning_out:
        check_output_file(args.tuning_out, what="--tuning-out file")

    from mactile.gpu.runtime import gpu_skip_reason

    why = gpu_skip_reason()
    if why:
        raise CliError(f"bench gpu needs a CUDA GPU and CuPy: {why}")
    from mactile.gpu.bench import gemm_bench as gb
    from mactile.gpu.bench.harness import write_json

    shapes = gb.SHAPES
    Ms = args.m or gb.M_VALUES
    if args.quick:
        shapes, Ms = gb.QUICK_SHAPES, (args.m or [1, 8, 16, 256])
    if args.shapes:
        bad = [i for i in args.shapes if i >= len(gb.SHAPES)]
        if bad:
            raise CliError(f"--shapes indices must be in 0..{len(gb.SHAPES) - 1}, got {bad}")
        shapes = [gb.SHAPES[i] for i in args.shapes]
    if args.formats:
        bad = [f for f in args.formats if f not in gb.KINDS]
        if bad:
            raise CliError(f"unknown formats {bad}; choose from {list(gb.KINDS)}")
    res = gb.run_benchmark(shapes=shapes, Ms=Ms, kinds=args.formats, temperature=args.temperature)
    stem = out / args.name
    table = gb.summary_table(res["records"], Ms=[m for m in (1, 8, 16, 64, 256, 1024, 4096) if m in Ms])
    geo = gb.geomean_table(res["records"])
    ttable = gb.temperature_table(res["records"]) if args.temperature else ""
    cx = gb.crossover_table(res["records"])
    cx["device"] = res["meta"]["device"]["name"]
    cx["date"] = res["meta"]["device"]["date"]
    files = [Path(f"{stem}{ext}") for ext in (".json", ".md", "_tuning.json")]
    with atomic_outputs(*files, make_parents=True) as (tj, tm, tc):  # all three or none
        write_json(res["records"], str(tj), meta=res["meta"])
        tm.write_text("## Speedup over cuBLAS FP16\n\n" + table + "\n\n## Geometric mean over "
                      "shapes (and the smallest shape's ratio to it)\n\n" + geo + "\n"
                      + (f"\n## ReSET temperature step\n\n{ttable}\n" if ttable else ""))
        tc.write_text(json.dumps(cx, indent=1))
    if args.tuning_out:
        atomic_write(args.tuning_out, json.dumps(cx, indent=1), what="--tuning-out file")
    try:
        with atomic_outputs(f"{stem}.png") as (tp,):
            gb.plot(res["records"], str(tp))
    except ImportError as e:
        print(f"(no plot: {e})")
    print(table)
    print(geo)
    print(f"wrote {stem}.json, {stem}.md, {stem}_tuning.json, {stem}.png")
    return 0
