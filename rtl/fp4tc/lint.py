"""Verilator ``-Wall`` findings on the fp4tc designs that are idioms of Yosys's Verilog
backend, not design issues (every width and value is checked bit-exactly against the golden
model in simulation). Read by :func:`mactile.rtl.verilog.lint_waivers`."""
from __future__ import annotations

__all__ = ["LINT_WAIVERS", "STAGE_SIGNALS"]

LINT_WAIVERS = (
    ("DECLFILENAME", None,
     "Amaranth writes submodules (element decoders, FP32 adders) into the top module's file "
     "as modules named top.sub"),
    ("WIDTHEXPAND", "*Operator * expects * bits on the *, but * generates * bits*",
     "Yosys's Verilog backend writes additions, subtractions, negations, comparisons and "
     "shifts of operands narrower than the result (constants at their minimal width) and "
     "relies on Verilog's context widths; Amaranth's widths are what the golden model checks"),
    ("WIDTHTRUNC", "*Logical operator LOGNOT expects 1 bit*",
     "Yosys writes a comparison of a vector with zero as !vec"),
)

#: Named signals of the fp4tc designs (wildcards) whose Verilog wires Yosys leaves
#: dangling after inlining the expression they name: kept for waveforms.
STAGE_SIGNALS = (
    # element decoders (submodule ports and internals)
    "codes__*", "meta*", "offsets__*", "values__*", "special*",
    # scale decode, products, adder tree, block sum, scale product
    "a_scale_*", "w*_scale_*", "p*_*", "dot_beat*", "partial*", "block_dot*", "beat",
    "last_beat", "scale_sig*", "scale_e*", "scale_neg*", "scale_nan*",
    # packing of the scaled product
    "pmag*", "psign*", "plz*", "pnorm*", "pexp*", "pf32_*", "pshamt*", "pshift*", "pfix*",
    "psub*",
    # pipeline registers' named copies and the FP32 adder's stages
    "input_*", "dot_*", "product_*", "scaled_*", "a", "b", "s", "x", "y", "ex_eff", "ey_eff",
    "mx", "my", "d", "d_capped", "y_wide", "y_aligned", "raw", "lz", "room", "shl", "norm",
    "e_norm", "rounded", "mant", "e_final", "finite", "of*", "a$*", "b$*", "s$*",
)
