"""The catalog of RTL designs, importable without Amaranth.

Each :class:`Design` names the callable that builds its Amaranth component from a
parameter dict, and its default parameters (overridable from a YAML config or the CLI).
``mactile list``, ``mactile generate``, ``mactile sim``, ``mactile synth`` and the
report all read this one table.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Design", "DESIGNS", "get_design"]


@dataclass(frozen=True)
class Design:
    """One generatable design.

    Parameters
    ----------
    name : str
        CLI name (``"mac-int4"``).
    summary : str
        One line for ``mactile list``.
    builder : str
        ``"module:callable"``; the callable takes keyword parameters and returns an
        Amaranth ``wiring.Component`` (imported only when building).
    params : dict
        Default parameters.
    reference : str
        Paper, section and table the design reproduces.
    group : str
        Which table of a paper it belongs to (used to group reports and plots).
    bench : str
        Only for designs defined outside this package: ``"module:callable"`` of its
        :class:`mactile.sim.Bench`. The project's designs leave it empty; their benches
        are mapped where the benches live (:data:`mactile.sim.benches.BENCHES`), so the
        registry names no simulation code.
    in_default_report : bool
        Whether ``mactile report`` without ``--designs`` (and ``make demo``) synthesizes
        it. False only for designs whose synthesis takes hours (the 16 x 16
        output-stationary tensor cores); ``--designs all`` or their names include them.
    """

    name: str
    summary: str
    builder: str
    params: dict[str, Any] = field(default_factory=dict)
    reference: str = ""
    group: str = ""
    bench: str = ""
    in_default_report: bool = True

    def load_builder(self) -> Callable[..., Any]:
        module, _, attr = self.builder.partition(":")
        return getattr(importlib.import_module(module), attr)

    def resolve(self, **overrides) -> dict[str, Any]:
        """Default parameters plus ``overrides``, with unknown names rejected.

        An override must have the kind of value its default has (a string, a bool, an
        integer, a number or a list; anything where the default is ``None``), so that a
        value from the command line or a YAML file that cannot be meant (``--lanes 1.5``,
        ``--weight []``) is refused here with the parameter's name; the builder checks
        ranges.
        """
        unknown = set(overrides) - set(self.params)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {sorted(unknown)}; "
                             f"known: {sorted(self.params)}")
        for key, value in overrides.items():
            _check_kind(self.name, key, self.params[key], value)
            _check_size(self.name, key, value)
        return {**self.params, **overrides}

    def build(self, **overrides):
        """Build the Amaranth component with the default parameters plus ``overrides``."""
        return self.load_builder()(**self.resolve(**overrides))


def _check_kind(design: str, key: str, default, value) -> None:
    """TypeError unless ``value`` is of the kind of ``default`` (see Design.resolve)."""
    if default is None:
        return
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, float):
        ok, kind = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif isinstance(default, str):
        ok, kind = isinstance(value, str), "a string"
    elif isinstance(default, (list, tuple)):
        ok, kind = isinstance(value, (list, tuple)), "a list (comma-separated on the command line)"
    else:
        return
    if not ok:
        raise TypeError(f"{design}: parameter {key} must be {kind} like its default "
                        f"{default!r}, got {value!r}")


#: The largest value of an integer design parameter that the generators, simulators and
#: synthesis flow are sized for (a tensor core of 64 x 64 units already takes days of
#: Yosys); larger ones are refused at once, with the limit, rather than hanging the
#: generator for minutes. Parameters not listed here get :data:`DEFAULT_SIZE_LIMIT`.
SIZE_LIMITS = {"lanes": 1024, "rows": 64, "cols": 64, "block_size": 1024, "terms": 1 << 24,
               "k_per_cycle": 64, "dialects_per_cycle": 64, "frac_bits": 64,
               "err_frac_bits": 64, "acc_int_bits": 256, "acc_frac_bits": 256,
               "acc_guard_bits": 256}
DEFAULT_SIZE_LIMIT = 1 << 16


def _check_size(design: str, key: str, value) -> None:
    """ValueError if an integer parameter exceeds its :data:`SIZE_LIMITS` bound."""
    if isinstance(value, bool) or not isinstance(value, int):
        return
    limit = SIZE_LIMITS.get(key, DEFAULT_SIZE_LIMIT)
    if value > limit:
        raise ValueError(f"{design}: parameter {key} must be at most {limit} (the largest "
                         f"the generators and tools are sized for), got {value}")


#: Every design by name. Each RTL module adds its rows here.
DESIGNS: dict[str, Design] = {}


# ---- BlockDialect Table 5 MAC units (parameters from rtl/mac/presets.yaml) ----
def _mac(name: str) -> Design:
    from mactile.golden.mac import MacDatapath
    from mactile.rtl.mac.presets import mac_presets
    p = mac_presets()[name]
    features = {k: v for k, v in p["params"].items()
                if k not in ("product_register", "keep_hierarchy")}
    summary = f"{p['summary']}; {MacDatapath(**features).acc_bits}-bit accumulator"
    return Design(name, summary, builder="mactile.rtl.mac.unit:build_mac",
                  params=p["params"], reference=f"BlockDialect (001) Sec. 4.3, Table 5 ({p['table5']}"
                  + (f"; variant: {p['variant']})" if p.get("variant") else ")"),
                  group="blockdialect-table5")


for _name in ("mac-int4", "mac-int5", "mac-int8", "mac-fp4", "mac-fp6-e2m3", "mac-fp6-e3m2",
              "mac-dialectfp4", "mac-dialectfp4-int4", "mac-dialectfp4-decode",
              "mac-dialectfp4-int4-decode"):
    DESIGNS[_name] = _mac(_name)


# ---- BlockDialect Tables 6-7: on-the-fly activation quantizer, dequantizer, MSE selector ----
DESIGNS["dialect-quantizer"] = Design(
    "dialect-quantizer",
    "DialectFP4 activation quantizer: FP16 block -> shared exponent, dialect (two-stage), "
    "4-bit codes; pipelined, 1 block/cycle",
    builder="mactile.rtl.dialect.quantizer:DialectQuantizer",
    params={"block_size": 32, "count_tie": "even",
            "registers": "exp_max,align,pair,count,quantize", "clock_gating": False},
    reference="BlockDialect (001) Sec. 3.2-3.3, Fig. 5, Table 6", group="blockdialect-table6")
DESIGNS["dialect-dequantizer"] = Design(
    "dialect-dequantizer",
    "DialectFP4 dequantizer: codes + dialect id -> 5-bit sign-magnitude integers, 1 cycle",
    builder="mactile.rtl.dialect.dequantizer:DialectDequantizer",
    params={"block_size": 32, "registered": True, "clock_gating": False},
    reference="BlockDialect (001) Sec. 3.3, Fig. 6, Table 6", group="blockdialect-table6")
DESIGNS["dialect-mse-selector"] = Design(
    "dialect-mse-selector",
    "DialectFP4 quantizer choosing the dialect by fixed-point MSE: 16 dialects as rounds, "
    "8 per cycle on a held block (Table 7's comparison point; latency 8)",
    builder="mactile.rtl.dialect.mse:DialectMseSelector",
    params={"block_size": 32, "frac_bits": 6, "err_frac_bits": 6, "dialects_per_cycle": 8,
            "registers": "exp_max,align,error,square,sum_a,sum_b,argmin,quantize",
            "clock_gating": False},
    reference="BlockDialect (001) Sec. 4.3, Table 7", group="blockdialect-table7")
DESIGNS["dialect-mse-selector-parallel"] = Design(
    "dialect-mse-selector-parallel",
    "DialectFP4 MSE selector, all 16 dialects in parallel, a block every cycle (variant)",
    builder="mactile.rtl.dialect.mse:DialectMseSelector",
    params={"block_size": 32, "frac_bits": 6, "err_frac_bits": 6, "dialects_per_cycle": 16,
            "registers": "exp_max,align,error,square,sum_a,sum_b,argmin,quantize",
            "clock_gating": False},
    reference="BlockDialect (001) Sec. 4.3, Table 7 (variant: fully parallel)",
    group="blockdialect-table7")

# The same units with clock_gating on (the paper view's "clock gating on" variants).
for _base in ("dialect-quantizer", "dialect-dequantizer", "dialect-mse-selector"):
    _d = DESIGNS[_base]
    DESIGNS[_base + "-cg"] = Design(
        _base + "-cg", _d.summary + "; clock gating: registers load only with valid data "
        "(integrated clock-gate cells)", builder=_d.builder,
        params={**_d.params, "clock_gating": True}, reference=_d.reference + " (clock gated)",
        group=_d.group, in_default_report=False)


DESIGNS["dialect-chain"] = Design(
    "dialect-chain",
    "Verification composite: dialect-quantizer -> dialect-dequantizer -> mac-dialectfp4-decode, "
    "one block dot product per block_size cycles",
    builder="mactile.rtl.dialect.chain:DialectChain",
    params={"block_size": 32, "registers": "exp_max,align,pair,count,quantize"},
    reference="BlockDialect (001) Sec. 3.3, Fig. 5-6, Tables 5-6", group="blockdialect-table6")


def get_design(name: str) -> Design:
    """The design called ``name``, or a ``ValueError`` listing the known ones."""
    try:
        return DESIGNS[name]
    except KeyError:
        known = ", ".join(sorted(DESIGNS)) or "(none)"
        raise ValueError(f"unknown design {name!r}; known designs: {known}") from None


# ---- RaZeR Sec. 4.4 / Fig. 4 / Table 9: decoders and the NVFP4 vs RaZeR tensor cores ----
# ---- plus MXFP4 (OCP MX v1.0) from the same generator: the cross-format comparison ----
_RAZER_REF = "RaZeR (000) Sec. 4.4, Fig. 4, Table 9"
_MX_REF = "OCP Microscaling Formats (MX) v1.0, Sec. 5-6 (E2M1, E8M0 per 32); generator of " + _RAZER_REF
# Offset-register reset values: the golden quantizers' default special magnitudes.
from mactile.golden.tensorcore import OPERANDS as _OPS, default_specials as _defaults  # noqa: E402
_W_SPECIALS = [float(v) for v in _defaults(_OPS["razer"])]
_A_SPECIALS = [float(v) for v in _defaults(_OPS["razer-act"])]
_TC = "mactile.rtl.fp4tc.tensorcore:build_tensor_core"
_DEC = "mactile.rtl.fp4tc.decoders:build_decoder"
_TC_COMMON = {"rows": 16, "cols": 16, "block_size": 16, "acc": "fp32", "acc_int_bits": None,
              "acc_frac_bits": None, "acc_guard_bits": 14, "pipeline": ["dot", "scaled"]}
DESIGNS["nvfp4-decoder"] = Design(
    "nvfp4-decoder", "FP4 E2M1 codes -> signed fixed-point values (16 lanes, combinational)",
    builder=_DEC, params={"operand": "nvfp4", "lanes": 16, "specials": None},
    reference=_RAZER_REF, group="razer-table9")
DESIGNS["mxfp4-decoder"] = Design(
    "mxfp4-decoder", "MXFP4 E2M1 codes -> signed fixed-point values (32 lanes: one MX block, "
    "combinational)",
    builder=_DEC, params={"operand": "mxfp4", "lanes": 32, "specials": None},
    reference=_MX_REF, group="fp4-tc-formats")
DESIGNS["razer-weight-decoder"] = Design(
    "razer-weight-decoder",
    "RaZeR weight decoder: FP4 + 2 offset registers, select and sign from the scale byte",
    builder=_DEC, params={"operand": "razer", "lanes": 16, "specials": _W_SPECIALS},
    reference=_RAZER_REF, group="razer-table9")
DESIGNS["razer-act-decoder"] = Design(
    "razer-act-decoder", "RaZeR activation decoder: FP4 + 1 offset register, sign from the scale byte",
    builder=_DEC, params={"operand": "razer-act", "lanes": 16, "specials": _A_SPECIALS},
    reference=_RAZER_REF, group="razer-table9")
DESIGNS["fp32-adder"] = Design(
    "fp32-adder", "IEEE binary32 adder, RNE, subnormals, Inf/NaN (the tensor cores' accumulator)",
    builder="mactile.rtl.fp4tc.fp32add:build_fp32_adder", params={},
    reference=_RAZER_REF + " (FP32 accumulation)", group="razer-table9")
DESIGNS["nvfp4-tc"] = Design(
    "nvfp4-tc", "NVFP4 tensor core: 16x16 FP4 MACs, E4M3 block scales, FP32 RNE accumulators",
    builder=_TC, params={**_TC_COMMON, "weight": "fp4", "weight_scale": "e4m3", "act": "fp4",
                         "act_scale": "e4m3", "w_specials": None, "a_specials": None},
    reference=_RAZER_REF, group="razer-table9")
DESIGNS["mxfp4-tc"] = Design(
    "mxfp4-tc", "MXFP4 tensor core: 16x16 FP4 MACs, blocks of 32 in 2 beats, E8M0 block "
    "scales (NaN 0xFF), FP32 RNE accumulators",
    builder=_TC, params={**_TC_COMMON, "block_size": 32, "weight": "fp4", "weight_scale": "e8m0",
                         "act": "fp4", "act_scale": "e8m0", "w_specials": None,
                         "a_specials": None},
    reference=_MX_REF, group="fp4-tc-formats")
DESIGNS["razer-tc"] = Design(
    "razer-tc", "RaZeR tensor core: NVFP4 array with RaZeR decoders (E3M3 weight scales)",
    builder=_TC, params={**_TC_COMMON, "weight": "razer", "weight_scale": "e3m3",
                         "act": "razer-act", "act_scale": "e4m3", "w_specials": _W_SPECIALS,
                         "a_specials": _A_SPECIALS},
    reference=_RAZER_REF, group="razer-table9")

# ---- the same three cores organised output-stationary (issue 18 item 4): 16 x 16 MAC units,
# ---- one element pair per unit per cycle, each unit with its own accumulator ----
_TC_OS = "mactile.rtl.fp4tc.outer:build_outer_core"
_OS_COMMON = {**_TC_COMMON, "cols": 16, "k_per_cycle": 1, "drain": "unit"}
_OS_REF = " (output-stationary reading of Sec. 4.4's \"16x16 MAC units organized in a SIMD way\")"
for _base in ("nvfp4-tc", "razer-tc", "mxfp4-tc"):
    _p = {**DESIGNS[_base].params, **_OS_COMMON}
    _p["block_size"] = DESIGNS[_base].params["block_size"]
    DESIGNS[_base + "-os"] = Design(
        _base + "-os",
        f"{_base} organised output-stationary: 16x16 MAC units (one FP4 multiply per cycle, "
        f"a block per {_p['block_size']} cycles), each with its own scale product and FP32 "
        "accumulator; activation/weight decoders at the array edge",
        builder=_TC_OS, params=_p, reference=DESIGNS[_base].reference + _OS_REF,
        group=DESIGNS[_base].group,
        # 256 FP32 back ends: hours of Yosys at 16 x 16 (docs/rtl-razer.md measures 4 x 4)
        in_default_report=False)
# ---- 4 x 4 output-stationary arrays (both drains): what the paper view measures of that
# ---- organisation (comparisons in synth/paper_tables.yaml); 16 x 16 is extrapolated from them
for _base in ("nvfp4-tc", "razer-tc"):
    for _drain, _sfx in (("unit", ""), ("row", "-row")):
        _p = {**DESIGNS[_base + "-os"].params, "rows": 4, "cols": 4, "drain": _drain}
        DESIGNS[f"{_base}-os-4x4{_sfx}"] = Design(
            f"{_base}-os-4x4{_sfx}",
            f"{_base}-os at 4x4 MAC units, drain={_drain} ("
            + ("each unit its own scale product and FP32 accumulator" if _drain == "unit" else
               "units keep block dots; one back end per row drains them") + ")",
            builder=_TC_OS, params=_p, reference=DESIGNS[_base + "-os"].reference,
            group=DESIGNS[_base].group, in_default_report=False)

# ---- NestedFP Sec. 4.2: the dual-mode PE (one stored FP16 word, FP16 or FP8 datapath) and the
# ---- plain FP16 and FP8 MACs it is measured against (FP32 RNE accumulation in all three) ----
_NFP_REF = "NestedFP (004) Sec. 4.2, Fig. 4"
_NFP_PE = "mactile.rtl.mac.nestedfp_pe:build_nestedfp_pe"
DESIGNS["nestedfp-pe"] = Design(
    "nestedfp-pe", "NestedFP dual-mode PE: two stored bytes -> FP16 x FP16 (rebuilt word) or "
    "E4M3 x E4M3 (upper byte) on one 11x11 multiplier, FP32 RNE accumulator",
    builder=_NFP_PE, params={"modes": "dual", "product_register": True},
    reference=_NFP_REF, group="nestedfp-pe")
DESIGNS["fp16-mac"] = Design(
    "fp16-mac", "Plain FP16 x FP16 MAC, exact product, FP32 RNE accumulator (NestedFP baseline)",
    builder=_NFP_PE, params={"modes": "fp16", "product_register": True},
    reference=_NFP_REF + " (baseline)", group="nestedfp-pe")
DESIGNS["fp8-mac"] = Design(
    "fp8-mac", "Plain E4M3 x E4M3 MAC, exact product, FP32 RNE accumulator (NestedFP baseline)",
    builder=_NFP_PE, params={"modes": "fp8", "product_register": True},
    reference=_NFP_REF + " (baseline)", group="nestedfp-pe")

# ---- FlexQ Sec. 4.2-4.3, Eq. 5: the INT6 group dot product on bit planes (binary AND +
# ---- popcount arrays), against direct INT6 and INT8 multiplier arrays; FP16 group scales last ----
_FLEXQ_REF = "FlexQ (003) Sec. 4.2-4.3, Eq. 5-6"
_GDOT = "mactile.rtl.mac.intgroup_dot:build_intgroup_dot"
DESIGNS["flexq-int6-dot"] = Design(
    "flexq-int6-dot", "FlexQ INT6 group dot product on bit planes: 6x6 AND + popcount arrays "
    "over 16 lanes, shifts of Eq. 5, groups of 128, FP16 group scales then one FP32 rounding",
    builder=_GDOT, params={"bits": 6, "lanes": 16, "group_size": 128, "structure": "bitplane"},
    reference=_FLEXQ_REF, group="flexq-int6")
DESIGNS["int6-mult-dot"] = Design(
    "int6-mult-dot", "INT6 group dot product on 16 direct 6x6 signed multipliers (FlexQ baseline)",
    builder=_GDOT, params={"bits": 6, "lanes": 16, "group_size": 128, "structure": "multiplier"},
    reference=_FLEXQ_REF + " (baseline)", group="flexq-int6")
DESIGNS["int8-mult-dot"] = Design(
    "int8-mult-dot", "INT8 group dot product on 16 direct 8x8 signed multipliers (FlexQ baseline)",
    builder=_GDOT, params={"bits": 8, "lanes": 16, "group_size": 128, "structure": "multiplier"},
    reference=_FLEXQ_REF + " (baseline)", group="flexq-int6")
