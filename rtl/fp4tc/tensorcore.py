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

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .lint import LINT_WAIVERS, STAGE_SIGNALS

from mactile.golden.elements import FP4_E2M1, FP32
from mactile.golden.tensorcore import (ELEM_FRAC, FP32_QNAN, OFFSET_BITS, FixedAccumulator,
                                       FP32Accumulator, OperandSpec, tensor_core_spec)

from .decoders import ElementDecoder, decode_scale, reset_offsets, value_shape
from .fp32add import FP32Adder, leading_zeros

__all__ = ["TensorCore", "PIPELINE_CUTS", "DEFAULT_PIPELINE", "build_tensor_core"]

#: Where a register stage can go, in datapath order.
PIPELINE_CUTS = ("input", "dot", "product", "scaled")
#: Default cuts: three balanced stages before the accumulate loop (latency 3).
DEFAULT_PIPELINE = ("dot", "scaled")

_F32_MAN, _F32_BIAS = FP32.man_bits, FP32.bias
_F32_EXP_TOP = (1 << FP32.exp_bits) - 1


def _tree_sum(terms):
    """Balanced adder tree (widths grow one bit per level)."""
    terms = list(terms)
    while len(terms) > 1:
        nxt = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return terms[0]


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
    product_round_up = staticmethod(lambda lsb, guard, sticky: guard & (sticky | lsb))

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
        pipeline = tuple(pipeline)
        bad = [c for c in pipeline if c not in PIPELINE_CUTS]
        if bad or len(set(pipeline)) != len(pipeline):
            raise ValueError(f"pipeline cuts must be distinct names from {PIPELINE_CUTS}, "
                             f"got {pipeline!r}")
        self.pipeline = tuple(c for c in PIPELINE_CUTS if c in pipeline)
        self.w_offsets_reset = reset_offsets(w_op, w_specials, name="w_specials")
        self.a_offsets_reset = reset_offsets(a_op, a_specials, name="a_specials")

        members = {
            "valid": In(1), "clear": In(1),
            "act_codes": In(FP4_E2M1.bits).array(cols),
            "act_scale": In(OperandSpec.BYTE_BITS),
            "w_codes": In(FP4_E2M1.bits).array(rows, cols),
            "w_scales": In(OperandSpec.BYTE_BITS).array(rows),
        }
        if w_op.specials or a_op.specials:
            members["cfg_we"] = In(1)
        if w_op.specials:
            members["cfg_w_offsets"] = In(OFFSET_BITS).array(w_op.specials)
        if a_op.specials:
            members["cfg_a_offsets"] = In(OFFSET_BITS).array(a_op.specials)
        # fixed: signed, so the two's-complement pattern reads back as the value
        acc_shape = signed(acc_spec.width) if isinstance(acc_spec, FixedAccumulator) else 32
        members["acc"] = Out(acc_shape).array(rows)
        if isinstance(acc_spec, FixedAccumulator):
            members["acc_nan"] = Out(1).array(rows)
        members["acc_valid"] = Out(1)
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
        if name not in self.pipeline:
            return sigs
        out = {}
        for k, v in sigs.items():
            if isinstance(v, list):
                out[k] = [self._reg(m, f"{name}_{k}{i}", x) for i, x in enumerate(v)]
            else:
                out[k] = self._reg(m, f"{name}_{k}", v)
        return out

    @staticmethod
    def _reg(m, name, v):
        if isinstance(v, list):
            return [TensorCore._reg(m, f"{name}_{i}", x) for i, x in enumerate(v)]
        r = Signal(v.shape(), name=name)
        m.d.sync += r.eq(v)
        return r

    # ------------------------------------------------------------------ datapath
    def elaborate(self, platform):
        m = Module()
        s = self.spec
        R, C = s.rows, s.cols
        w_op, a_op = s.weight, s.act

        # Offset registers (Fig. 4 (1)), shared by every decoder of an operand.
        regs = {}
        for side, op, init, port in (("w", w_op, self.w_offsets_reset, "cfg_w_offsets"),
                                     ("a", a_op, self.a_offsets_reset, "cfg_a_offsets")):
            regs[side] = []
            for k in range(op.specials):
                r = Signal(OFFSET_BITS, init=init[k], name=f"of_{side}{k}")
                with m.If(self.cfg_we):
                    m.d.sync += r.eq(getattr(self, port)[k])
                regs[side].append(r)

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
            m.d.comb += d.eq(_tree_sum(prods))
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
        sig_bits = w_op.scale_sig_bits + a_op.scale_sig_bits
        e_bits = max(w_op.scale_format.exp_bits, a_op.scale_format.exp_bits) + 1
        sp, es, neg, nan = [], [], [], []
        for r in range(R):
            x = Signal(sig_bits, name=f"scale_sig{r}")
            e = Signal(e_bits, name=f"scale_e{r}")
            n = Signal(name=f"scale_neg{r}")
            q = Signal(name=f"scale_nan{r}")
            m.d.comb += [x.eq(st["a_sig"] * st["w_sig"][r]), e.eq(st["a_e"] + st["w_e"][r]),
                         n.eq(st["a_neg"] ^ st["w_neg"][r]), q.eq(st["a_nan"] | st["w_nan"][r])]
            sp.append(x), es.append(e), neg.append(n), nan.append(q)

        st = self._cut(m, "product", {
            "valid": st["valid"] & last, "clear": st["clear"], "dot": block_dot,
            "sig": sp, "e": es, "neg": neg, "nan": nan,
        })

        # ---- C: exact scaled product, packed for the accumulator
        pw = s.product_bits
        scaled = []
        for r in range(R):
            dot = st["dot"][r]
            mag = Signal(pw, name=f"pmag{r}")
            m.d.comb += mag.eq(Mux(dot < 0, -dot, dot).as_unsigned() * st["sig"][r])
            sign = Signal(name=f"psign{r}")
            m.d.comb += sign.eq((dot < 0) ^ st["neg"][r])
            if isinstance(s.acc, FP32Accumulator):
                scaled.append(self._pack_fp32(m, r, mag, sign, st["e"][r], st["nan"][r]))
            else:
                scaled.append(self._pack_fixed(m, r, mag, sign, st["e"][r], st["nan"][r]))

        st = self._cut(m, "scaled", {"valid": st["valid"], "clear": st["clear"],
                                     "p": scaled, "nan": st["nan"]})

        # ---- D: accumulate (the loop: one block per cycle per row)
        for r in range(R):
            if isinstance(s.acc, FP32Accumulator):
                add = self.adder_cls()
                m.submodules[f"acc_add{r}"] = add
                m.d.comb += [add.a.eq(Mux(st["clear"], 0, self.acc[r])), add.b.eq(st["p"][r])]
                with m.If(st["valid"]):
                    m.d.sync += self.acc[r].eq(add.s)
            else:
                with m.If(st["valid"]):
                    m.d.sync += [
                        self.acc[r].eq(Mux(st["clear"], 0, self.acc[r]) + st["p"][r]),
                        self.acc_nan[r].eq((~st["clear"] & self.acc_nan[r]) | st["nan"][r]),
                    ]
        m.d.sync += self.acc_valid.eq(st["valid"])
        return m

    def _pack_fp32(self, m, r, mag, sign, e_sum, nan):
        """FP32 bits of ``(-1)**sign * mag * 2**(e_sum - K)``: exact where the spec
        guarantees it (at most 24 significant bits and a normal exponent: NVFP4, RaZeR);
        with E8M0 scales (:attr:`TensorCoreSpec.rounds_products`) rounded to binary32
        (RNE, gradual underflow to a signed zero, overflow to +-Inf) as the golden model."""
        s = self.spec
        pw = len(mag)
        k = (s.weight.scale_format.bias + s.weight.scale_format.man_bits
             + s.act.scale_format.bias + s.act.scale_format.man_bits + 2 * ELEM_FRAC)
        lz = leading_zeros(m, mag, name=f"plz{r}")
        norm = Signal(pw, name=f"pnorm{r}")
        m.d.comb += norm.eq((mag << lz)[:pw])
        field = Signal(signed(max(10, len(e_sum) + 2)), name=f"pexp{r}")
        m.d.comb += field.eq(e_sum + (_F32_BIAS - k + pw - 1) - lz)
        assert pw <= _F32_MAN + 1, "spec check guarantees products fit FP32's significand"
        sig24 = Cat(Const(0, _F32_MAN + 1 - pw), norm)  # hidden bit at 23
        out = Signal(32, name=f"pf32_{r}")
        if s.rounds_products:
            lim = _F32_MAN + 2  # a shift of 25 or more leaves less than half an ulp: zero
            sh = Signal(range(lim + 1), name=f"psub_sh{r}")
            m.d.comb += sh.eq(Mux(field < 1 - lim, lim, 1 - field))
            wide = Signal(2 * (_F32_MAN + 1) + 2, name=f"psub_wide{r}")
            m.d.comb += wide.eq(Cat(Const(0, lim + 1), sig24) >> sh)
            kept = wide[lim + 1:]
            guard, sticky = wide[lim], wide[:lim].any()
            sub = Signal(_F32_MAN + 1, name=f"psub{r}")  # 2**23: rounds up to the smallest normal
            m.d.comb += sub.eq(kept + self.product_round_up(kept[0], guard, sticky))
        with m.If(nan):
            m.d.comb += out.eq(FP32_QNAN)
        with m.Elif(mag == 0):
            m.d.comb += out.eq(0)
        if s.rounds_products:
            with m.Elif(field >= _F32_EXP_TOP):
                m.d.comb += out.eq(Cat(Const(0, _F32_MAN), Const(_F32_EXP_TOP, FP32.exp_bits),
                                       sign))
            with m.Elif(field < 1):
                m.d.comb += out.eq(Cat(sub, Const(0, 31 - len(sub)), sign))
        with m.Else():
            m.d.comb += out.eq(Cat(sig24[:_F32_MAN], field[:FP32.exp_bits], sign))
        return out

    def _pack_fixed(self, m, r, mag, sign, e_sum, nan):
        """``+-mag`` shifted to the accumulator's binary point (exact); a NaN product adds
        0 (the row's sticky flag records it)."""
        s = self.spec
        f = s.acc
        extra = f.frac_bits - s.product_frac  # constant part of the shift
        max_e = (1 << len(e_sum)) - 1
        sh = Signal(range(max_e + 1), name=f"pshamt{r}")
        m.d.comb += sh.eq(e_sum - 2)  # e_sum >= 2: each e_eff = max(E, 1) >= 1
        shifted = Signal(f.width, name=f"pshift{r}")
        m.d.comb += shifted.eq((mag << extra) << sh)
        out = Signal(f.width, name=f"pfix{r}")
        m.d.comb += out.eq(Mux(nan, 0, Mux(sign, -shifted, shifted)))
        return out


def build_tensor_core(**params) -> TensorCore:
    """Registry builder."""
    return TensorCore(**params)
