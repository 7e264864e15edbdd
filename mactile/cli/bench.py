"""``mactile bench``: benchmarks that need a GPU (``mactile bench gpu``, ``tune``, ``e2e``)."""
from __future__ import annotations

from mactile.cli.common import (CliError, atomic_outputs, atomic_write, check_output_dir,
                                check_output_file, int_at_least, int_list, positive_float)


def _names(text: str) -> list[str]:
    """An argparse type: comma-separated names."""
    import argparse

    parts = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return parts


def _selection(p, m_type, m_help: str, formats: str) -> None:
    """The options that select what a GPU benchmark runs: M values, formats, shapes."""
    p.add_argument("--m", type=m_type, metavar="M,M,...", help=m_help)
    p.add_argument("--formats", type=_names, metavar="F,F,...", help=f"subset of {formats}")
    p.add_argument("--shapes", type=int_list(0, "non-negative integer"), metavar="I,I,...",
                   help="indices into the shape list (see mactile.gpu.bench.gemm_bench.SHAPES)")


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
    _selection(g, int_list(1, "positive integer"), "comma-separated M values",
               "nvfp4,mxfp4,razer,razer-g128,nestedfp16,nestedfp8,flexq-w6a6")
    g.add_argument("--tuning-out", help="also write the measured crossover into this tuning table (JSON; "
                                        "an existing table keeps its other entries)")
    g.add_argument("--temperature", action="store_true", help="also time ReSET's temperature sampler step")
    g.add_argument("--name", default="gpu_gemm", help="file name stem (default gpu_gemm)")
    g.set_defaults(func=run_gpu)

    t = bsub.add_parser("tune", help="measure the GEMM engine's configurations per shape and M (tuning table)",
                        description="Time the GEMM engine's candidate configurations (the default, the variants "
                                    "of its token tile, with the early weight copies toggled where M launches with "
                                    "PDL, half the tile, one CTA per SM) for every engine format "
                                    "and mode on the benchmark's shapes and M = 1 .. 512, next to cuBLAS FP16 "
                                    "and FP8; choose per format, shape and M the default or a candidate that "
                                    "beat it by --margin twice; write JSON and markdown, and the engine "
                                    "entries into a tuning table with --tuning-out.")
    t.add_argument("-o", "--out", default="out/bench-tune", help="output folder (default out/bench-tune)")
    _selection(t, int_list(1, "positive integer"), "comma-separated M values (default 1,8,16,32,64,128,256,512)",
               "nvfp4,mxfp4,razer,razer-g128,nestedfp16,nestedfp8")
    t.add_argument("--margin", type=positive_float("a fraction", upper=0.4), default=0.03,
                   help="fraction a candidate must beat the default by, in the sweep and again (default 0.03)")
    t.add_argument("--tuning-out", help="merge the engine entries into this tuning table (JSON; e.g. "
                                        "gpu/tuning/h100.json; its other entries are kept)")
    t.add_argument("--name", default="gpu_engine_tune", help="file name stem (default gpu_engine_tune)")
    t.set_defaults(func=run_tune)
    _register_e2e(bsub)


def _check_paths(args):
    """The output folder, file stem and tuning table, checked before the GPU is touched;
    returns the folder and the existing table (or None)."""
    import json

    if not args.name or "/" in args.name or args.name in (".", ".."):
        raise CliError(f"--name must be a file name stem without '/', got {args.name!r}")
    out = check_output_dir(args.out)
    table = None
    if args.tuning_out is not None:
        path = check_output_file(args.tuning_out, what="--tuning-out file")
        if path.exists():
            try:
                table = json.loads(path.read_text())
            except (OSError, UnicodeDecodeError, ValueError) as e:
                raise CliError(f"--tuning-out file '{args.tuning_out}' is not a readable JSON tuning table: {e}")
            if not isinstance(table, dict):
                raise CliError(f"--tuning-out file '{args.tuning_out}' holds JSON but not a tuning table "
                               "(an object)")
    return out, table


def _need_gpu(what):
    from mactile.gpu.runtime import gpu_skip_reason

    why = gpu_skip_reason()
    if why:
        raise CliError(f"bench {what} needs a CUDA GPU and CuPy: {why}")


def _select_shapes(args, gb):
    if not args.shapes:
        return gb.SHAPES
    bad = [i for i in args.shapes if i >= len(gb.SHAPES)]
    if bad:
        raise CliError(f"--shapes indices must be in 0..{len(gb.SHAPES) - 1}, got {bad}")
    return [gb.SHAPES[i] for i in args.shapes]


def run_tune(args) -> int:
    import json

    out, table = _check_paths(args)
    eng = (table or {}).get("engine", [])
    if not isinstance(eng, list) or not all(isinstance(e, dict) and {"format", "K", "N", "M"} <= e.keys() for e in eng):
        raise CliError(f"--tuning-out file '{args.tuning_out}': its 'engine' entries are not a list of "
                       "{format, K, N, M, config} objects")
    from mactile.gpu.bench import engine_tune as et
    if args.formats:
        bad = [f for f in args.formats if f not in et.TUNE_KINDS]
        if bad:
            raise CliError(f"no engine tuning for {bad}; choose from {list(et.TUNE_KINDS)}")
    from mactile.gpu.bench import gemm_bench as gb

    shapes = _select_shapes(args, gb)
    _need_gpu("tune")
    from mactile.gpu.bench.harness import write_json

    res = et.tune_engine(shapes=shapes, Ms=args.m, kinds=args.formats, margin=args.margin)
    stem = out / args.name
    md = et.tune_table(res)
    with atomic_outputs(f"{stem}.json", f"{stem}.md", make_parents=True) as (tj, tm):
        write_json(res["records"], str(tj), meta={**res["meta"], "engine": res["engine"]})
        tm.write_text("## GEMM engine tuning sweep\n\n" + md + "\n")
    if args.tuning_out:
        merged = et.merge_engine_entries(table, res["engine"])
        merged["engine_device"] = res["meta"]["device"]["name"]
        merged["engine_date"] = res["meta"]["device"]["date"]
        atomic_write(args.tuning_out, json.dumps(merged, indent=1), what="--tuning-out file")
    print(md)
    print(f"wrote {stem}.json, {stem}.md" + (f", {args.tuning_out}" if args.tuning_out else ""))
    return 0


def run_gpu(args) -> int:
    import json
    from pathlib import Path

    # Where the results go is checked before the GPU and the benchmark.
    out, old_table = _check_paths(args)
    from mactile.gpu.bench import gemm_bench as gb

    shapes = _select_shapes(args, gb)
    if args.formats:
        bad = [f for f in args.formats if f not in gb.KINDS]
        if bad:
            raise CliError(f"unknown formats {bad}; choose from {list(gb.KINDS)}")
    _need_gpu("gpu")
    from mactile.gpu.bench.harness import write_json

    Ms = args.m or gb.M_VALUES
    if args.quick:
        shapes, Ms = (gb.QUICK_SHAPES if not args.shapes else shapes), (args.m or [1, 8, 16, 256])
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
        tm.write_text(gb.report_markdown(res["records"], Ms, ttable))
        tc.write_text(json.dumps(cx, indent=1))
    if args.tuning_out:
        merged = {**(old_table or {}), **cx}  # the crossover replaced, the engine entries kept
        atomic_write(args.tuning_out, json.dumps(merged, indent=1), what="--tuning-out file")
    try:
        with atomic_outputs(f"{stem}.png") as (tp,):
            gb.plot(res["records"], str(tp))
    except ImportError as e:
        print(f"(no plot: {e})")
    print(table)
    print(geo)
    print(f"wrote {stem}.json, {stem}.md, {stem}_tuning.json, {stem}.png")
    return 0


# --------------------------------------------------------------------------- bench e2e
def _register_e2e(bsub) -> None:
    e = bsub.add_parser("e2e", help="decode and prefill tokens/s of a Llama/Qwen decoder in every format",
                        description="Build a decoder with random weights (default Llama-3.1-8B's shapes) and "
                                    "measure decode tokens/s and time per output token per batch size (one "
                                    "CUDA graph per step), prefill tokens/s, and a breakdown of one decode step, "
                                    "for FP16, FP8 (torch._scaled_mm), every mactile format and mode "
                                    "(mactile.torch.quantize_model) and the peers (PyTorch int4 tinygemm, "
                                    "GemLite A16W4) in the same run; write JSON, markdown and PNG.")
    e.add_argument("-o", "--out", default="out/bench-e2e", help="output folder (default out/bench-e2e)")
    e.add_argument("--name", default="e2e", help="file name stem (default e2e)")
    e.add_argument("--config", default="llama-3.1-8b",
                   help="decoder configuration: llama-3.1-8b (default), qwen3-8b, qwen3-32b, tiny, tiny-qwen3")
    e.add_argument("--tiny", action="store_true",
                   help="quick check: the tiny configuration, batches 1,4, context 64, 8 steps, prefill 64")
    e.add_argument("--layers", type=int_at_least(1, "positive integer"), help="override the layer count")
    e.add_argument("--batches", type=int_list(1, "positive integer"), metavar="B,B,...",
                   help="decode batch sizes (default 1,4,8,16,32,64,128,256)")
    e.add_argument("--context", type=int_at_least(1, "positive integer"), help="cached positions (default 1024)")
    e.add_argument("--gen", type=int_at_least(1, "positive integer"),
                   help="generated tokens the static cache is sized for (default 128)")
    e.add_argument("--timed-steps", type=int_at_least(1, "positive integer"),
                   help="decode steps timed per batch (default min(gen, 32): steady-state steps of the gen-token run)")
    e.add_argument("--warmup", type=int_at_least(1, "positive integer"), default=3,
                   help="untimed steps first, capture included (default 3)")
    e.add_argument("--prefill", type=int_list(1, "positive integer"), metavar="T,T,...",
                   help="prefill prompt lengths (default 512,2048)")
    e.add_argument("--no-prefill", action="store_true", help="skip the prefill measurement")
    e.add_argument("--formats", type=_names, metavar="V,V,...", help="subset of the variants (see --list)")
    e.add_argument("--list", action="store_true", help="list the variants and exit")
    e.add_argument("--device", default="cuda", help="cuda (default) or cpu (the tiny check without a GPU)")
    e.add_argument("--decode", choices=("graph", "compile", "eager"), help="decode step mode (default graph on CUDA)")
    e.add_argument("--ops", choices=("fused", "eager"), default="fused",
                   help="the work between the linear layers: the decoder ops (norms fused with the residual "
                        "adds, rotary + cache writes, decode attention, SwiGLU; default) or eager torch")
    e.add_argument("--no-fuse-projections", action="store_true",
                   help="keep q/k/v and gate/up as separate products (default: one product each, every variant)")
    e.add_argument("--breakdown-batches", type=int_list(1, "positive integer"), metavar="B,B,...",
                   help="batches whose decode step is broken down (default 1,64; measured ones only)")
    e.add_argument("--head", action="store_true", help="quantize the output head too (default: FP16 head)")
    e.add_argument("--distinct-weights", action="store_true",
                   help="quantize every layer from its own weights (slow) instead of copying layer 0")
    e.add_argument("--fp8-scaling", choices=("tensor", "row"), default="tensor",
                   help="FP8 baseline scales: per tensor (default) or per row and token")
    e.add_argument("--sampler", choices=("greedy", "reset"), default="greedy",
                   help="decode sampling: greedy (default) or ReSET's step-aware temperature sampler")
    e.add_argument("--budget-min", type=positive_float("minutes"), default=9.0,
                   help="start no measurement after this many minutes, so that what was measured is "
                        "written within a time limit (default 9; the rest recorded as skipped)")
    e.set_defaults(func=run_e2e)


def run_e2e(args) -> int:
    try:
        from mactile.torch import e2e_bench as eb
        from mactile.torch.decoder import CONFIGS
    except ImportError as ex:
        raise CliError(f"bench e2e needs torch (pip install 'mactile[torch]'): {ex}")
    if args.list:
        for v in eb.VARIANTS:
            what = f"{v.format}" + (f" mode {v.mode}" if v.mode else "") if v.kind == "mactile" else v.kind
            print(f"{v.name:<18} {what:<22} {v.note}")
        return 0
    if not args.name or "/" in args.name or args.name in (".", ".."):
        raise CliError(f"--name must be a file name stem without '/', got {args.name!r}")
    config = "tiny" if args.tiny and args.config == "llama-3.1-8b" else args.config
    if config not in CONFIGS:
        raise CliError(f"unknown --config {config!r}; choose from {', '.join(CONFIGS)}")
    if args.formats:
        bad = [f for f in args.formats if f not in eb.variant_names()]
        if bad:
            raise CliError(f"unknown variants {bad}; choose from {eb.variant_names()}")
    small = args.tiny
    opts = eb.Options(config=config, batches=tuple(args.batches or ((1, 4) if small else eb.DEFAULT_BATCHES)),
                      context=args.context or (64 if small else 1024), gen=args.gen or (8 if small else 128),
                      timed_steps=args.timed_steps, warmup=args.warmup,
                      prefill=() if args.no_prefill else tuple(args.prefill or ((64,) if small else eb.PREFILL_LENGTHS)),
                      variants=tuple(args.formats or ()), device=args.device, decode=args.decode,
                      breakdown_batches=tuple(args.breakdown_batches or ((1,) if small else (1, 64))),
                      head=args.head, distinct_weights=args.distinct_weights, fp8_scaling=args.fp8_scaling,
                      sampler=args.sampler, budget_s=60.0 * args.budget_min,
                      layers=args.layers, fused_ops=args.ops == "fused",
                      fuse_projections=not args.no_fuse_projections)
    need = max([opts.context + max(opts.warmup, opts.gen, opts.timed_steps or 0) + 1, *opts.prefill])
    if need > CONFIGS[config].max_position:
        raise CliError(f"context + warm-up + steps ({need}) exceed {config}'s {CONFIGS[config].max_position} positions")
    out = check_output_dir(args.out)
    import torch
    if args.device not in ("cuda", "cpu") and not args.device.startswith("cuda:"):
        raise CliError(f"--device must be cuda, cuda:N or cpu, got {args.device!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise CliError("bench e2e needs a CUDA GPU (torch sees none); --device cpu --tiny runs the quick check")
    if args.device == "cpu" and args.decode in ("graph", "compile"):
        raise CliError(f"--decode {args.decode} needs --device cuda")
    res = eb.run_e2e(opts)
    files = eb.write_outputs(res, out, args.name)
    print(eb.markdown(res))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
