"""The output-stationary NVFP4 / MXFP4 / RaZeR tensor core: a ``rows`` x ``cols`` array of
MAC units, each with its own accumulator (RaZeR Sec. 4.4: "16x16 MAC units organized in a
SIMD way"; the reading Table 9's area supports, docs/rtl-razer.md).

Organisation::

    act blocks i (R)  --> R activation decoders + scale decoders --+  (array edge:
    weight blocks j (C) --> C weight decoders + scale decoders --+  |   Table 9's "Decoder")
                                                                 v  v
    MAC unit (i, j), R x C of them (Table 9's "Array"), drain="unit":
       A  k_per_cycle products a_i[t] * w_j[t] -> beat dot
          [cut "dot"]
       B  block dot (sum over block_size/k_per_cycle beats, exact) ; scale product
          [cut "product"]
       C  |dot| * sig -> FP32 pack (or fixed shift)
          [cut "scaled"]
       D  acc[i, j] = round(acc[i, j] + P) -> the unit's accumulator register

Unit ``(i, j)`` is exactly one row of :class:`~mactile.rtl.fp4tc.tensorcore.TensorCore` on
activation block ``i`` and weight block ``j`` (the stages are the same functions,
:mod:`.stages`); the beat counter and the pipeline's control bits are shared at the edge.
Golden: :class:`mactile.golden.tensorcore.OuterProductSpec`.
"""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mactile.golden.elements import FP4_E2M1
from mactile.golden.tensorcore import (OS_DRAINS, FixedAccumulator, OperandSpec,  # noqa: F401
                                       TensorCoreSpec, outer_product_spec)

from .decoders import ElementDecoder, decode_scale, reset_offsets, value_shape
from .fp32add import FP32Adder
from .lint import LINT_WAIVERS, STAGE_SIGNALS
from .stages import (DEFAULT_PIPELINE, accumulate, accumulate_into, acc_members, check_pipeline,
                     config_members, cut, offset_registers, pick, rne_round_up,
                     scale_product, scaled_product, tree_sum)

__all__ = ["OuterCore", "MacUnit", "build_outer_core"]


class MacUnit(wiring.Component):
    """One MAC unit of the output-stationary array with its own back end (``drain="unit"``).

    Ports
    -----
    a_vals, w_vals : In(signed).array(k_per_cycle)
        Decoded elements of this beat (stage A).
    a_sig, a_e, a_neg, a_nan, w_sig, w_e, w_neg, w_nan : In
        Decoded block scales of its activation row and weight column (stage B, after the
        edge's ``dot`` cut).
    b_valid, b_last : In(1)
        A beat is in stage B; it is its block's last.
    d_valid, d_clear : In(1)
        A block product is in stage D; it starts a fresh accumulation.
    acc, acc_nan : Out
        The unit's accumulator (FP32 bits or fixed) and sticky NaN flag (fixed only).
    dot : Out(signed)
        Without ``back_end`` (``drain="row"``) instead of the scale and accumulate ports:
        the last block dot, registered at the block's last beat.
    """

    def __init__(self, *, spec: TensorCoreSpec, pipeline, adder_cls=FP32Adder,
                 product_round_up=rne_round_up, back_end: bool = True):
        self.spec, self.pipeline, self.back_end = spec, pipeline, back_end
        self.adder_cls, self.product_round_up = adder_cls, product_round_up
        w_op, a_op = spec.weight, spec.act
        k = spec.cols
        members = {"a_vals": In(value_shape(a_op)).array(k),
                   "w_vals": In(value_shape(w_op)).array(k),
                   "b_valid": In(1), "b_last": In(1)}
        if back_end:
            for side, op in (("a", a_op), ("w", w_op)):
                members[f"{side}_sig"] = In(op.scale_sig_bits)
                members[f"{side}_e"] = In(op.scale_format.exp_bits)
                members[f"{side}_neg"] = In(1)
                members[f"{side}_nan"] = In(1)
            members.update({"d_valid": In(1), "d_clear": In(1)})
            members.update({k_: v for k_, v in acc_members(spec.acc).items()
                            if k_ != "acc_valid"})
        else:  # drain="row": the block dot, held for the row's back end
            members["dot"] = Out(signed(spec.dot_max.bit_length() + 1))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        s = self.spec
        k = s.cols
        prod_shape = signed(len(self.a_vals[0]) + len(self.w_vals[0]) - 1)
        prods = []
        for t in range(k):
            p = Signal(prod_shape, name=f"p{t}")
            m.d.comb += p.eq(self.a_vals[t] * self.w_vals[t])
            prods.append(p)
        beat = Signal(signed((k * s.weight.max_element * s.act.max_element).bit_length() + 1),
                      name="dot_beat")
        m.d.comb += beat.eq(tree_sum(prods))
        beat = cut(m, self.pipeline, "dot", {"dot": beat})["dot"]

        # B: block dot over the beats (exact), scale product
        bd = Signal(signed(s.dot_max.bit_length() + 1), name="block_dot")
        if s.beats > 1:
            part = Signal(bd.shape(), name="partial")
            m.d.comb += bd.eq(part + beat)
            with m.If(self.b_valid):
                m.d.sync += part.eq(Mux(self.b_last, 0, bd))
        else:
            m.d.comb += bd.eq(beat)
        if not self.back_end:
            with m.If(self.b_valid & self.b_last):
                m.d.sync += self.dot.eq(bd)
            return m
        sig, e, neg, nan = scale_product(m, s, self.a_sig, self.a_e, self.a_neg, self.a_nan,
                                         self.w_sig, self.w_e, self.w_neg, self.w_nan, tag="")
        st = cut(m, self.pipeline, "product",
                 {"dot": bd, "sig": sig, "e": e, "neg": neg, "nan": nan})
        # C: exact scaled product, packed
        p = scaled_product(m, s, st["dot"], st["sig"], st["e"], st["neg"], st["nan"], tag="",
                           round_up=self.product_round_up)
        st = cut(m, self.pipeline, "scaled", {"p": p, "nan": st["nan"]})
        # D: the unit's own accumulator
        fixed = isinstance(s.acc, FixedAccumulator)
        accumulate(m, s, self.adder_cls, self.acc, self.acc_nan if fixed else None, st["p"],
                   st["nan"], self.d_valid, self.d_clear, tag="")
        return m


class OuterCore(wiring.Component):
    """Output-stationary ``rows`` x ``cols`` block-scaled FP4 tensor core.

    Each block step takes ``rows`` activation blocks and ``cols`` weight blocks over
    ``block_size // k_per_cycle`` beats: beat ``t`` carries elements ``t*k .. t*k+k-1`` of
    every block; the scale bytes and ``clear`` are held for every beat of a block (the
    last beat's are used). Unit ``(i, j)`` accumulates activation block ``i`` times weight
    block ``j`` into ``acc[i][j]``.

    Parameters
    ----------
    rows, cols : int
        Activation rows and weight columns (16 x 16 in the paper).
    k_per_cycle : int
        Element pairs each MAC unit multiplies per cycle (default 1: one multiplier per
        unit, the paper's "MAC unit"); must divide ``block_size``.
    block_size, weight, weight_scale, act, act_scale, acc, acc_int_bits, acc_frac_bits,
    acc_guard_bits, w_specials, a_specials
        As :class:`~mactile.rtl.fp4tc.tensorcore.TensorCore`.
    pipeline : sequence of str
        Register cuts from :data:`~mactile.rtl.fp4tc.stages.PIPELINE_CUTS`.
    drain : str
        Where block products meet the accumulators (:data:`OS_DRAINS`): ``"unit"``
        (default, the paper's SIMD reading: every unit has its own scale product, FP32
        pack and adder) or ``"row"`` (the units keep their block dots; one back end per
        activation row drains unit ``(i, j)`` in the ``j``-th cycle after the block, while
        the next block streams in, into accumulator ``acc[i][j]``; needs ``cols <=
        block_size / k_per_cycle``). Column ``j`` lands ``cols - 1 - j`` cycles before
        ``latency``; :attr:`column_latency` gives each.

    Ports
    -----
    valid, clear : In(1)
    act_codes : In(4).array(rows, k_per_cycle); act_scales : In(8).array(rows)
    w_codes : In(4).array(cols, k_per_cycle); w_scales : In(8).array(cols)
    cfg_we, cfg_w_offsets, cfg_a_offsets : RaZeR offset registers, as TensorCore
    acc : Out(32 or width).array(rows, cols); acc_nan (fixed); acc_valid : Out(1)
    """

    lint_waivers = LINT_WAIVERS
    #: Named signals Yosys leaves dangling after inlining them, kept for waveforms: the
    #: row core's plus the MAC units' ports and beat products.
    waveform_signals = STAGE_SIGNALS + (
        "a_vals__*", "w_vals__*", "a_sig*", "a_e*", "a_neg*", "a_nan*", "w_sig*", "w_e*",
        "w_neg*", "w_nan*", "b_valid*", "b_last*", "d_valid*", "d_clear*", "acc", "acc$*",
        "p?", "p?$*", "a*_scale_*", "acc_nan", "acc_nan$*")

    #: The accumulator adder of every unit (a test can swap in a broken one).
    adder_cls = FP32Adder
    #: E8M0 product rounding increment (a test can swap in a broken one).
    product_round_up = staticmethod(rne_round_up)

    def __init__(self, *, rows: int = 16, cols: int = 16, k_per_cycle: int = 1,
                 block_size: int = 16, weight: str = "fp4", weight_scale: str = "e4m3",
                 act: str = "fp4", act_scale: str = "e4m3", acc: str = "fp32",
                 acc_int_bits: int | None = None, acc_frac_bits: int | None = None,
                 acc_guard_bits: int = 14, pipeline=DEFAULT_PIPELINE, drain: str = "unit",
                 w_specials=None, a_specials=None):
        self.os_spec = outer_product_spec(
            rows=rows, cols=cols, k_per_cycle=k_per_cycle, drain=drain, block_size=block_size,
            weight=weight, weight_scale=weight_scale, act=act, act_scale=act_scale, acc=acc,
            acc_int_bits=acc_int_bits, acc_frac_bits=acc_frac_bits,
            acc_guard_bits=acc_guard_bits)
        self.spec = self.os_spec.row_core  # widths and formats of one unit's arithmetic
        self.drain = drain
        w_op, a_op = self.spec.weight, self.spec.act
        self.pipeline = check_pipeline(pipeline)
        self.w_offsets_reset = reset_offsets(w_op, w_specials, name="w_specials")
        self.a_offsets_reset = reset_offsets(a_op, a_specials, name="a_specials")
        k = k_per_cycle
        members = {
            "valid": In(1), "clear": In(1),
            "act_codes": In(FP4_E2M1.bits).array(rows, k),
            "act_scales": In(OperandSpec.BYTE_BITS).array(rows),
            "w_codes": In(FP4_E2M1.bits).array(cols, k),
            "w_scales": In(OperandSpec.BYTE_BITS).array(cols),
        }
        members.update(config_members(w_op, a_op))
        members.update(acc_members(self.spec.acc, rows, cols))
        super().__init__(members)

    # ------------------------------------------------------------------ properties
    @property
    def latency(self) -> int:
        """Cycles from a block's last beat to the ``acc`` that includes it (every column:
        the last one to land with ``drain="row"``; ``acc_valid`` then)."""
        return max(self.column_latency)

    @property
    def column_latency(self) -> tuple[int, ...]:
        """Cycles from a block's last beat to ``acc[.][j]`` including it, per column ``j``:
        all ``len(pipeline) + 1`` with ``drain="unit"``; with ``drain="row"`` one more for
        the hand-over to the row's back end, plus ``j`` (one column per cycle)."""
        base = len(self.pipeline) + 1
        if self.drain == "row":
            return tuple(base + 1 + j for j in range(self.os_spec.cols))
        return (base,) * self.os_spec.cols

    @property
    def beats(self) -> int:
        """Cycles per block step (``block_size // k_per_cycle``)."""
        return self.os_spec.beats

    @property
    def throughput(self) -> dict:
        """Sustained rates: one beat per cycle, no stalls."""
        s = self.os_spec
        return {"beats_per_cycle": 1, "blocks_per_cycle": 1 / s.beats,
                "macs_per_cycle": s.rows * s.cols * s.k_per_cycle}

    @property
    def module_name(self) -> str:
        s = self.os_spec
        ops = f"{s.weight.name}_{s.act.name}".replace("-", "_")
        return (f"tc_os_{ops}_{s.rows}x{s.cols}_k{s.k_per_cycle}_b{s.block_size}_"
                f"{s.acc.name}_{self.drain}_l{self.latency}")

    # ------------------------------------------------------------------ datapath
    def elaborate(self, platform):
        m = Module()
        s = self.os_spec
        R, C, K = s.rows, s.cols, s.k_per_cycle
        w_op, a_op = s.weight, s.act
        regs = offset_registers(m, self)

        inp = cut(m, self.pipeline, "input", {
            "valid": self.valid, "clear": self.clear,
            "act_codes": [list(r) for r in self.act_codes], "act_scales": list(self.act_scales),
            "w_codes": [list(r) for r in self.w_codes], "w_scales": list(self.w_scales),
        })

        # ---- the array edge: element decoders (Table 9 "Decoder") and scale decoders
        def decoders(side, op, n, codes, scales):
            vals, scs = [], []
            for i in range(n):
                dec = ElementDecoder(operand=op, lanes=K)
                m.submodules[f"{side}_dec{i}"] = dec
                m.d.comb += dec.meta.eq(scales[i])
                m.d.comb += [dec.codes[t].eq(codes[i][t]) for t in range(K)]
                m.d.comb += [dec.offsets[q].eq(regs[side][q]) for q in range(op.specials)]
                vals.append(dec.values)
                scs.append(decode_scale(m, op, scales[i], name=f"{side}{i}_scale"))
            return vals, scs

        a_vals, a_sc = decoders("a", a_op, R, inp["act_codes"], inp["act_scales"])
        w_vals, w_sc = decoders("w", w_op, C, inp["w_codes"], inp["w_scales"])

        # scale terms and control through the "dot" cut (the units cut their beat dots)
        terms = {}
        for side, scs in (("a", a_sc), ("w", w_sc)):
            for f in ("sig", "e_eff", "neg", "nan"):
                terms[f"{side}_{f}"] = [getattr(x, f) for x in scs]
        st = cut(m, self.pipeline, "dot", {"valid": inp["valid"], "clear": inp["clear"],
                                           **terms})
        if s.beats > 1:
            count = Signal(range(s.beats), name="beat")
            last = Signal(name="last_beat")
            m.d.comb += last.eq(count == s.beats - 1)
            with m.If(st["valid"]):
                m.d.sync += count.eq(Mux(last, 0, count + 1))
        else:
            last = Const(1, 1)
        if self.drain == "row":
            self._row_drain(m, a_vals, w_vals, st, last)
            return m
        ctl = cut(m, self.pipeline, "product", {"valid": st["valid"] & last,
                                                "clear": st["clear"]})
        ctl = cut(m, self.pipeline, "scaled", ctl)

        # ---- the R x C MAC units
        for i in range(R):
            for j in range(C):
                u = MacUnit(spec=self.spec, pipeline=self.pipeline, adder_cls=self.adder_cls,
                            product_round_up=self.product_round_up)
                m.submodules[f"u{i}_{j}"] = u
                m.d.comb += [u.a_vals[t].eq(a_vals[i][t]) for t in range(K)]
                m.d.comb += [u.w_vals[t].eq(w_vals[j][t]) for t in range(K)]
                for side, idx in (("a", i), ("w", j)):
                    m.d.comb += [getattr(u, f"{side}_sig").eq(st[f"{side}_sig"][idx]),
                                 getattr(u, f"{side}_e").eq(st[f"{side}_e_eff"][idx]),
                                 getattr(u, f"{side}_neg").eq(st[f"{side}_neg"][idx]),
                                 getattr(u, f"{side}_nan").eq(st[f"{side}_nan"][idx])]
                m.d.comb += [u.b_valid.eq(st["valid"]), u.b_last.eq(last),
                             u.d_valid.eq(ctl["valid"]), u.d_clear.eq(ctl["clear"]),
                             self.acc[i][j].eq(u.acc)]
                if isinstance(s.acc, FixedAccumulator):
                    m.d.comb += self.acc_nan[i][j].eq(u.acc_nan)
        m.d.sync += self.acc_valid.eq(ctl["valid"])
        return m


    def _row_drain(self, m, a_vals, w_vals, st, last):
        """``drain="row"``: units without back ends; at a block's last beat their block
        dots, the block's decoded scales and ``clear`` are held; the row's back end then
        takes unit ``j`` in drain step ``j`` (scale product, [product], pack, [scaled],
        accumulate into ``acc[i][j]``)."""
        s = self.os_spec
        R, C, K = s.rows, s.cols, s.k_per_cycle
        spec = self.spec
        units = [[None] * C for _ in range(R)]
        for i in range(R):
            for j in range(C):
                u = MacUnit(spec=spec, pipeline=self.pipeline, back_end=False)
                m.submodules[f"u{i}_{j}"] = u
                m.d.comb += [u.a_vals[t].eq(a_vals[i][t]) for t in range(K)]
                m.d.comb += [u.w_vals[t].eq(w_vals[j][t]) for t in range(K)]
                m.d.comb += [u.b_valid.eq(st["valid"]), u.b_last.eq(last)]
                units[i][j] = u
        # hand-over: the block's scales and clear held while its units drain
        take = Signal(name="drain_take")
        m.d.comb += take.eq(st["valid"] & last)
        held = {}
        for key in ("a_sig", "a_e_eff", "a_neg", "a_nan", "w_sig", "w_e_eff", "w_neg", "w_nan",
                    "clear"):
            src = st[key] if isinstance(st[key], list) else [st[key]]
            held[key] = [Signal(x.shape(), name=f"held_{key}{n}") for n, x in enumerate(src)]
            with m.If(take):
                m.d.sync += [h.eq(x) for h, x in zip(held[key], src)]
        busy = Signal(name="draining")
        if C == 1:  # one column: drained the cycle after its block
            step = Const(0, 1)
            m.d.sync += busy.eq(take)
        else:
            step = Signal(range(C), name="drain_step")
            with m.If(take):
                m.d.sync += [step.eq(0), busy.eq(1)]
            with m.Elif(busy):
                with m.If(step == C - 1):
                    m.d.sync += [step.eq(0), busy.eq(0)]
                with m.Else():
                    m.d.sync += step.eq(step + 1)
        # the weight column being drained (shared by every row)
        w_terms = {}
        for key in ("w_sig", "w_e_eff", "w_neg", "w_nan"):
            x = Signal(held[key][0].shape(), name=f"drain_{key}")
            m.d.comb += x.eq(pick(held[key], step))
            w_terms[key] = x
        dots, sp, es, neg, nan = [], [], [], [], []
        for i in range(R):
            d = Signal(units[i][0].dot.shape(), name=f"drain_dot{i}")
            m.d.comb += d.eq(pick([u.dot for u in units[i]], step))
            x, e, n, q = scale_product(m, spec, held["a_sig"][i], held["a_e_eff"][i],
                                       held["a_neg"][i], held["a_nan"][i], w_terms["w_sig"],
                                       w_terms["w_e_eff"], w_terms["w_neg"], w_terms["w_nan"],
                                       tag=i)
            dots.append(d), sp.append(x), es.append(e), neg.append(n), nan.append(q)
        st = cut(m, self.pipeline, "product", {
            "valid": busy, "clear": held["clear"][0], "col": step, "dot": dots, "sig": sp,
            "e": es, "neg": neg, "nan": nan})
        scaled = [scaled_product(m, spec, st["dot"][i], st["sig"][i], st["e"][i],
                                 st["neg"][i], st["nan"][i], tag=i,
                                 round_up=self.product_round_up) for i in range(R)]
        st = cut(m, self.pipeline, "scaled", {"valid": st["valid"], "clear": st["clear"],
                                              "col": st["col"], "p": scaled, "nan": st["nan"]})
        fixed = isinstance(s.acc, FixedAccumulator)
        for i in range(R):
            accumulate_into(m, spec, self.adder_cls, list(self.acc[i]),
                            list(self.acc_nan[i]) if fixed else None, st["col"], st["p"][i],
                            st["nan"][i], st["valid"], st["clear"], tag=i)
        m.d.sync += self.acc_valid.eq(st["valid"] & (st["col"] == C - 1))


def build_outer_core(**params) -> OuterCore:
    """Registry builder."""
    return OuterCore(**params)
