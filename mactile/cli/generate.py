"""``mactile generate``: write a design's Verilog and lint it with Verilator -Wall."""
from __future__ import annotations

import json

from mactile.cli.common import CliError, atomic_outputs, check_output_dir
from mactile.cli.design_args import add_design_args, build_component, resolve_design


def register(sub) -> None:
    p = sub.add_parser(
        "generate", help="write a design's Verilog (linted with Verilator -Wall)",
        description="Build a registered design from its parameters (defaults, overridden by "
                    "--config) and write DIR/<module>.v, the Verilator waivers of the "
                    "documented Amaranth idioms DIR/<module>.vlt, and DIR/<module>.json "
                    "(parameters, latency, ports). Then lint with `verilator --lint-only "
                    "-Wall` (exit status 1 if it warns).")
    add_design_args(p)
    p.add_argument("-o", "--out", metavar="DIR", help="output folder (created; required unless "
                   "--show-params)")
    p.add_argument("--no-lint", action="store_true", help="skip the Verilator lint")
    p.set_defaults(func=run)


def run(args) -> int:
    from mactile.sim.hdl import generate, lint

    design, params = resolve_design(args)
    if not args.out:
        raise CliError("generate needs an output folder: -o DIR")
    out = check_output_dir(args.out)
    comp = build_component(design, params)
    gen = generate(comp)
    manifest = {
        "design": design.name, "module": gen.module, "params": params,
        "latency": getattr(comp, "latency", None), "reference": design.reference,
        "ports": [{"name": p.name, "direction": p.direction, "width": p.width,
                   "signed": p.signed} for p in gen.ports],
        "clocked": gen.clocked,
    }
    # All three files or none (each written beside its target, then renamed).
    files = [out / f"{gen.module}{ext}" for ext in (".v", ".vlt", ".json")]
    with atomic_outputs(*files, make_parents=True) as (tv, tw, tj):
        tv.write_text(gen.verilog)
        tw.write_text(gen.waivers)
        tj.write_text(json.dumps(manifest, indent=1) + "\n")
    v, w = out / f"{gen.module}.v", out / f"{gen.module}.vlt"
    print(f"{design.name}: wrote {v}, {w.name}, {gen.module}.json "
          f"(latency {manifest['latency']}, {len(gen.ports)} ports)")
    if args.no_lint:
        return 0
    try:
        res = lint(v, waivers=w)
    except FileNotFoundError as e:
        raise CliError(str(e)) from None
    if res.ok:
        n = sum(1 for ln in w.read_text().splitlines() if ln.startswith("lint_off"))
        print(f"lint: verilator --lint-only -Wall is clean ({n} documented waivers in {w.name})")
        return 0
    print("lint: verilator --lint-only -Wall reports:")
    for m in res.messages:
        print(f"  {m}")
    return 1


__all__ = ["register", "run"]
