"""``mactile list``: every number format and every RTL design."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("list", help="list number formats and designs",
                       description="List the element formats, block formats and RTL designs.")
    p.add_argument("what", nargs="?", choices=["all", "formats", "designs"], default="all")
    p.set_defaults(func=run)


def run(args) -> int:
    from mactile.golden import BLOCK_FORMATS, ELEMENT_FORMATS, PRESETS

    if args.what in ("all", "formats"):
        print("Element formats:")
        for f in ELEMENT_FORMATS.values():
            print(f"  {f.name:<12} {f.bits:>2} bits  {f.description}")
        print("\nBlock formats (mactile quantize --format NAME):")
        for name, cls in BLOCK_FORMATS.items():
            spec = cls()
            print(f"  {name:<12} {spec.bits_per_element:>6.3f} bits/element  "
                  f"{spec.describe()}  [{cls.reference}]")
        print("\nQuantization conventions (mactile quantize --convention NAME; docs/formats.md):")
        for name, by_fmt in PRESETS.items():
            opts = "; ".join(f"{f}: " + (", ".join(f"{k}={v}" for k, v in c.differences().items())
                                         or "the defaults") for f, c in by_fmt.items())
            print(f"  {name:<12} {opts}")
    if args.what in ("all", "designs"):
        from mactile.rtl.registry import DESIGNS

        if args.what == "all":
            print()
        print("RTL designs (mactile generate|sim|synth NAME):")
        if not DESIGNS:
            print("  (none registered)")
        for d in DESIGNS.values():
            print(f"  {d.name:<22} {d.summary}" + (f"  [{d.reference}]" if d.reference else ""))
    return 0
