"""The NVFP4 / MXFP4 / RaZeR tensor core: one generator, parametric in array shape, decoders,
block-scale formats, accumulation format and pipeline (RaZeR Sec. 4.4, Fig. 4, Table 9).

Datapath of one row (``rows`` copies share the activation decoder and scale)::

    A  decode (act + weights) -> cols exact products -> adder tree -> beat dot
       [cut "dot"]
    B  block dot (sum of block_size/cols beats, exact) ; scale product sig_a*sig_w,
       exponent e_a + e_w, sign, NaN
       [cut "product"]
    C  |dot| * sig_a*sig_w  (exact) -> FP32 pack (normalise; no rounding for NVFP4/RaZeR,
       exact by the spec's check; E8M0 products are rounded to FP32) or fixed-point shift
       [cut "scaled"]
    D  accumulate: acc = round(acc + P) (FP32 adder, RNE) or acc + P (fixed) -> acc register

Each cut named in ``pipeline`` adds one register stage (plus ``"input"``: register every
input port first). Golden: :class:`mactile.golden.tensorcore.TensorCoreSpec`.
"""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from .lint import LINT_WAIVERS, STAGE_SIGNALS

from mactile.golden.elements import FP4_E2M1
from mactile.golden.tensorcore import (FixedAccumulator, OperandSpec,
                                       tensor_core_spec)

from .decoders import ElementDecoder, decode_scale, reset_offsets, value_shape
from .fp32add import FP32Adder
from .stages import (DEFAULT_PIPELINE, PIPELINE_CUTS, accumulate, acc_members, check_pipeline,
                     config_members, cut, offset_registers, rne_round_up, scale_product,
                     scaled_product, tree_sum)

__all__ = ["TensorCore", "PIPELINE_CUTS", "DEFAULT_PIPELINE", "build_tensor_core"]



class TensorCore(wiring.Component):
    """``rows`` x ``cols`` block-scaled FP4 tensor core with per-row accumulators.

    Each block step takes one activation block and ``rows`` weight blocks; with
    ``cols == block_size`` (default) that is one cycle, otherwise ``block_size // cols``
    beats (the codes of consecutive element groups; the scale bytes and ``clear`` must be
    held for every beat of a block, the last beat's are used for scaling).

    Parameters
    ----------
    rows, cols, block_size : int
        Array shape and block size (features, see :class:`TensorCoreSpec`).
    weight, act : str
        Element decoders: ``"fp4"`` (NVFP4), ``"razer"`` (weights, 2 offset registers),
        ``"razer-act"`` (1 offset register).
    weight_scale, act_scale : str
        Block-scale formats, ``"e4m3"``, ``"e3m3"`` or ``"e8m0"`` (MXFP4).
    acc : str
        ``"fp32"`` (IEEE binary32, RNE; default) or ``"fixed"``.
    acc_int_bits, acc_frac_bits, acc_guard_bits : int | None
        Fixed accumulator widths (default: exact for NVFP4 and RaZeR alike plus
        ``acc_guard_bits`` of headroom; see :func:`mactile.golden.tensorcore.accumulator`).
    pipeline : sequence of str
        Register cuts from :data:`PIPELINE_CUTS` (implementation choice).
    w_specials, a_specials : sequence of float | None
        Reset values of the offset registers as special magnitudes (default: the golden
        quantizers' defaults).

    Ports
    -----
    valid, clear : In(1)
        A beat is present; its block starts a fresh accumulation.
    act_codes : In(4).array(cols); act_scale : In(8)
        Activation codes and scale byte (scale code + metadata as stored).
    w_codes : In(4).array(rows, cols); w_scales : In(8).array(rows)
        Weight codes and scale bytes, one block per row.
    cfg_we : In(1); cfg_w_offsets : In(4).array(.); cfg_a_offsets : In(4).array(.)
        RaZeR only: write all offset registers (affects beats decoded after the edge).
    acc : Out(32 or width).array(rows)
        Accumulator bit patterns (FP32, or two's-complement fixed point).
    acc_nan : Out(1).array(rows)
        Fixed accumulator only: sticky NaN-product flags.
    acc_valid : Out(1)
        ``acc`` has just taken a new block (``latency`` cycles after its last beat).
    """

    #: Documented Verilator -Wall waivers (:mod:`.lint`).
    lint_waivers = LINT_WAIVERS
    waveform_signals = STAGE_SIGNALS

    #: The accumulator adder (a class attribute so a test can swap in a broken one).
    adder_cls = FP32Adder
    #: Rounding increment of a product rounded to FP32 (E8M0 scales): nearest, ties to
    #: even (a static method so a test can swap in a broken one).
    product_round_up = staticmethod(rne_round_up)

    def __init__(self, *, rows: int = 16, cols: int = 16, block_size: int = 16,
                 weight: str = "fp4", weight_scale: str = "e4m3", act: str = "fp4",
                 act_scale: str = "e4m3", acc: str = "fp32", acc_int_bits: int | None = None,
                 acc_frac_bits: int | None = None, acc_guard_bits: int = 14,
                 pipeline=DEFAULT_PIPELINE, w_specials=None, a_specials=None):
        self.spec = tensor_core_spec(
            rows=rows, cols=cols, block_size=block_size, weight=weight,
            weight_scale=weight_scale, act=act, act_scale=act_scale, acc=acc,
            acc_int_bits=acc_int_bits, acc_frac_bits=acc_frac_bits,
            acc_guard_bits=acc_guard_bits)
        w_op, a_op, acc_spec = self.spec.weight, self.spec.act, self.spec.acc
        self.pipeline = check_pipeline(pipeline)
        self.w_offsets_reset = reset_offsets(w_op, w_specials, name="w_specials")
        self.a_offsets_reset = reset_offsets(a_op, a_specials, name="a_specials")

        members = {
            "valid": In(1), "clear": In(1),
            "act_codes": In(FP4_E2M1.bits).array(cols),
            "act_scale": In(OperandSpec.BYTE_BITS),
            "w_codes": In(FP4_E2M1.bits).array(rows, cols),
            "w_scales": In(OperandSpec.BYTE_BITS).array(rows),
        }
        members.update(config_members(w_op, a_op))
        members.update(acc_members(acc_spec, rows))
        super().__init__(members)

    # ------------------------------------------------------------------ properties
    @property
    def latency(self) -> int:
        """Cycles from a block's last beat to the ``acc`` that includes it."""
        return len(self.pipeline) + 1

    @property
    def beats(self) -> int:
        """Cycles per block step (``block_size // cols``)."""
        return self.spec.beats

    @property
    def throughput(self) -> dict:
        """Sustained rates: one beat per cycle, no stalls."""
        s = self.spec
        return {"beats_per_cycle": 1, "blocks_per_cycle": 1 / s.beats,
                "macs_per_cycle": s.rows * s.cols}

    @property
    def module_name(self) -> str:
        s = self.spec
        ops = f"{s.weight.name}_{s.act.name}".replace("-", "_")
        return f"tc_{ops}_{s.rows}x{s.cols}_b{s.block_size}_{s.acc.name}_l{self.latency}"

    # ------------------------------------------------------------------ helpers
    def _cut(self, m, name, sigs: dict) -> dict:
        """Register ``sigs`` when ``name`` is a pipeline cut; else pass them through."""
        return cut(m, self.pipeline, name, sigs)

    # ------------------------------------------------------------------ datapath
    def elaborate(self, platform):
        m = Module()
        s = self.spec
        R, C = s.rows, s.cols
        w_op, a_op = s.weight, s.act

        regs = offset_registers(m, self)  # Fig. 4 (1), shared by an operand's decoders

        inp = self._cut(m, "input", {
            "valid": self.valid, "clear": self.clear,
            "act_codes": list(self.act_codes), "act_scale": self.act_scale,
            "w_codes": [list(row) for row in self.w_codes], "w_scales": list(self.w_scales),
        })

        # ---- A: decode, multiply, adder tree
        m.submodules.act_dec = adec = ElementDecoder(operand=a_op, lanes=C)
        m.d.comb += adec.meta.eq(inp["act_scale"])
        m.d.comb += [adec.codes[j].eq(inp["act_codes"][j]) for j in range(C)]
        m.d.comb += [adec.offsets[k].eq(regs["a"][k]) for k in range(a_op.specials)]
        a_sc = decode_scale(m, a_op, inp["act_scale"], name="a_scale")
        prod_shape = signed(value_shape(a_op).width + value_shape(w_op).width - 1)
        dot_beat, w_sc = [], []
        for r in range(R):
            dec = ElementDecoder(operand=w_op, lanes=C)
            m.submodules[f"w_dec{r}"] = dec
            m.d.comb += dec.meta.eq(inp["w_scales"][r])
            m.d.comb += [dec.codes[j].eq(inp["w_codes"][r][j]) for j in range(C)]
            m.d.comb += [dec.offsets[k].eq(regs["w"][k]) for k in range(w_op.specials)]
            prods = []
            for j in range(C):
                p = Signal(prod_shape, name=f"p{r}_{j}")
                m.d.comb += p.eq(adec.values[j] * dec.values[j])
                prods.append(p)
            d = Signal(signed((C * w_op.max_element * a_op.max_element).bit_length() + 1),
                       name=f"dot_beat{r}")
            m.d.comb += d.eq(tree_sum(prods))
            dot_beat.append(d)
            w_sc.append(decode_scale(m, w_op, inp["w_scales"][r], name=f"w{r}_scale"))

        st = self._cut(m, "dot", {
            "valid": inp["valid"], "clear": inp["clear"], "dot": dot_beat,
            "a_neg": a_sc.neg, "a_sig": a_sc.sig, "a_e": a_sc.e_eff, "a_nan": a_sc.nan,
            "w_neg": [x.neg for x in w_sc], "w_sig": [x.sig for x in w_sc],
            "w_e": [x.e_eff for x in w_sc], "w_nan": [x.nan for x in w_sc],
        })

        # ---- B: block dot over beats, scale product
        dot_shape = signed(s.dot_max.bit_length() + 1)
        if s.beats > 1:
            count = Signal(range(s.beats), name="beat")
            last = Signal(name="last_beat")
            m.d.comb += last.eq(count == s.beats - 1)
            with m.If(st["valid"]):
                m.d.sync += count.eq(Mux(last, 0, count + 1))
        else:
            last = Const(1, 1)
        block_dot = []
        for r in range(R):
            bd = Signal(dot_shape, name=f"block_dot{r}")
            if s.beats > 1:
                part = Signal(dot_shape, name=f"partial{r}")
                m.d.comb += bd.eq(part + st["dot"][r])
                with m.If(st["valid"]):
                    m.d.sync += part.eq(Mux(last, 0, bd))
            else:
                m.d.comb += bd.eq(st["dot"][r])
            block_dot.append(bd)
        sp, es, neg, nan = [], [], [], []
        for r in range(R):
            x, e, n, q = scale_product(m, s, st["a_sig"], st["a_e"], st["a_neg"], st["a_nan"],
                                       st["w_sig"][r], st["w_e"][r], st["w_neg"][r],
                                       st["w_nan"][r], tag=r)
            sp.append(x), es.append(e), neg.append(n), nan.append(q)

        st = self._cut(m, "product", {
            "valid": st["valid"] & last, "clear": st["clear"], "dot": block_dot,
            "sig": sp, "e": es, "neg": neg, "nan": nan,
        })

        # ---- C: exact scaled product, packed for the accumulator
        scaled = [scaled_product(m, s, st["dot"][r], st["sig"][r], st["e"][r], st["neg"][r],
                                 st["nan"][r], tag=r, round_up=self.product_round_up)
                  for r in range(R)]

        st = self._cut(m, "scaled", {"valid": st["valid"], "clear": st["clear"],
                                     "p": scaled, "nan": st["nan"]})

        # ---- D: accumulate (the loop: one block per cycle per row)
        fixed = isinstance(s.acc, FixedAccumulator)
        for r in range(R):
            accumulate(m, s, self.adder_cls, self.acc[r], self.acc_nan[r] if fixed else None,
                       st["p"][r], st["nan"][r], st["valid"], st["clear"], tag=r)
        m.d.sync += self.acc_valid.eq(st["valid"])
        return m


def build_tensor_core(**params) -> TensorCore:
    """Registry builder."""
    return TensorCore(**params)
