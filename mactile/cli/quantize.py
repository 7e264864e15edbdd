"""``mactile quantize``: quantize an array with a block format, write the dequantized one."""
from __future__ import annotations

import numpy as np

from mactile.cli.common import CliError, atomic_outputs, check_outputs, load_array
# Light: the conventions module needs NumPy only (the choices below come from its enums).
from mactile.golden.conventions import (PRESETS, Dequantization, ElementScaling, ElementTies,
                                        MXScaleRule, NegativeZero, ScaleArgument)


def _special_values(text: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise CliError(f"--special-values must be numbers separated by commas, got {text!r}") from None
    return vals


def register(sub) -> None:
    p = sub.add_parser(
        "quantize", help="quantize a .npy array with a block format",
        description="Read a floating-point array (blocks along the last axis), quantize it "
                    "and write the dequantized float64 array of the same shape.")
    p.add_argument("--format", required=True, metavar="NAME",
                   help="block format (see `mactile list formats`)")
    p.add_argument("--block", type=int, metavar="N", help="block size (format default if omitted)")
    p.add_argument("--special-values", metavar="A[,B]",
                   help="RaZeR special magnitudes (razer: A,B; razer-act: A); multiples of "
                        "0.5 in [2.5, 9.5]")
    p.add_argument("--select", choices=["two-stage", "mse"], help="DialectFP4 dialect selection")
    p.add_argument("--bits", type=int, metavar="N", help="int-group element width")
    conv = p.add_argument_group(
        "quantization convention (nvfp4, mxfp4; docs/formats.md lists each preset's options)")
    conv.add_argument("--convention", choices=list(PRESETS), metavar="NAME",
                      help="preset: ocp (default), torchao, microxcaling; the options below "
                           "override single choices of it")
    conv.add_argument("--tensor-scale", choices=["on", "off"],
                      help="nvfp4: FP32 tensor scale amax/2688 (on) or none")
    conv.add_argument("--block-scale-floor", type=float, metavar="S",
                      help="nvfp4: smallest E4M3 block scale (0: none; torchao 0.015625)")
    conv.add_argument("--scale-argument", choices=[m.value for m in ScaleArgument],
                      help="nvfp4: block-scale argument amax/(T*6) (product) or (amax/6)/T")
    conv.add_argument("--element-scaling", choices=[m.value for m in ElementScaling],
                      help="nvfp4: x/(T*s) (divide) or x*((1/T)/s) (reciprocal)")
    conv.add_argument("--dequantize", choices=[m.value for m in Dequantization],
                      help="nvfp4: exact values or fl32(fl32(T*s)*q) (fp32)")
    conv.add_argument("--mx-scale-rule", choices=[m.value for m in MXScaleRule],
                      help="mxfp4: E8M0 scale rule (floor: OCP; rceil: cuBLAS)")
    conv.add_argument("--ties", choices=[m.value for m in ElementTies],
                      help="FP4 ties to even (default) or away from zero")
    conv.add_argument("--negative-zero", choices=[m.value for m in NegativeZero],
                      help="-0.0 input: keep its sign or store +0 (positive-after-scaling: "
                           "also negatives that underflow when scaled)")
    p.add_argument("--codes", metavar="FILE.npz",
                   help="also write codes, scales and metadata exactly as stored")
    p.add_argument("input", metavar="IN.npy")
    p.add_argument("output", metavar="OUT.npy")
    p.set_defaults(func=run)


def convention_options(args) -> dict:
    """The per-option flags given, as :func:`~mactile.golden.convention_for` keywords."""
    opts = {"tensor_scale": None if args.tensor_scale is None else args.tensor_scale == "on",
            "block_scale_floor": args.block_scale_floor, "scale_argument": args.scale_argument,
            "element_scaling": args.element_scaling, "dequantize": args.dequantize,
            "mx_scale_rule": args.mx_scale_rule, "element_ties": args.ties,
            "negative_zero": args.negative_zero}
    return {k: v for k, v in opts.items() if v is not None}


def run(args) -> int:
    from mactile.golden import InputError, get_format

    try:
        fmt = get_format(
            args.format, block_size=args.block, select=args.select, bits=args.bits,
            special_values=None if args.special_values is None else _special_values(args.special_values),
            convention=args.convention, **convention_options(args))
    except ValueError as e:
        raise CliError(str(e)) from None
    # Outputs are checked before the input is read: a bad path costs no work.
    names = ["output", "--codes file"]
    check_outputs([args.output, args.codes], inputs=[args.input], what=names)
    x = load_array(args.input)
    if x.size == 0:
        raise CliError(f"{args.input}: the array holds no elements (shape {x.shape}); "
                       f"nothing to quantize")
    limit = getattr(fmt, "saturation_limit", lambda: None)()
    if limit is not None and x.dtype.kind == "f" and np.isfinite(x).all():
        over = int(np.count_nonzero(np.abs(x) > limit))
        if over:
            raise CliError(f"{args.input}: {fmt.name} without a tensor scale (--tensor-scale "
                           f"off) takes |x| <= {limit:g} (the largest block scale x FP4's 6); "
                           f"{over} value(s) are larger and would saturate; use --tensor-scale "
                           f"on, or scale the input")
    try:
        q = fmt.quantize(x)
    except InputError as e:
        raise CliError(f"{args.input}: {e}") from None
    y = q.dequantize()
    with atomic_outputs(args.output, args.codes, inputs=[args.input], what=names) as tmps:
        with open(tmps[0], "wb") as fh:
            np.save(fh, y)
        if args.codes:
            with open(tmps[1], "wb") as fh:
                q.save_npz(fh)
    print(f"{fmt.describe()}: {x.shape} {x.dtype} -> {args.output} (float64); "
          f"{fmt.bits_per_element:.4g} bits/element, {q.error(x).summary()}"
          + (f"; codes -> {args.codes}" if args.codes else ""))
    return 0
