"""Datapath stages shared by the two tensor-core organisations of :mod:`mactile.rtl.fp4tc`:
the row-dot-product core (:mod:`.tensorcore`) and the output-stationary array
(:mod:`.outer`). Each function builds one stage of one output (a row of the former, a MAC
unit of the latter), named with ``tag``; the widths come from the golden
:class:`~mactile.golden.tensorcore.TensorCoreSpec`.

Stages (golden: :meth:`TensorCoreSpec.products` / :meth:`TensorCoreSpec.accumulate`)::

    scale_product   sig_a*sig_w, e_a + e_w, sign, NaN              (stage B)
    scaled_product  |dot| * sig (exact) -> FP32 pack or fixed shift (stage C)
    accumulate      acc = round(acc + P) or acc + P -> register     (stage D)
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Mux, Signal, signed
from amaranth.lib.wiring import In, Out

from mactile.golden.elements import FP32
from mactile.golden.tensorcore import (ELEM_FRAC, FP32_QNAN, OFFSET_BITS, FixedAccumulator,
                                       FP32Accumulator)

from .fp32add import leading_zeros

__all__ = ["PIPELINE_CUTS", "DEFAULT_PIPELINE", "check_pipeline", "config_members",
           "acc_members", "offset_registers", "tree_sum", "register", "cut", "scale_product",
           "scaled_product", "accumulate", "accumulate_into", "pick", "rne_round_up"]

#: Where a register stage can go, in datapath order.
PIPELINE_CUTS = ("input", "dot", "product", "scaled")
#: Default cuts: three balanced stages before the accumulate loop (latency 3).
DEFAULT_PIPELINE = ("dot", "scaled")

_F32_MAN, _F32_BIAS = FP32.man_bits, FP32.bias
_F32_EXP_TOP = (1 << FP32.exp_bits) - 1


def check_pipeline(pipeline) -> tuple[str, ...]:
    """The cuts of ``pipeline`` in datapath order, or a ValueError."""
    pipeline = tuple(pipeline)
    bad = [c for c in pipeline if c not in PIPELINE_CUTS]
    if bad or len(set(pipeline)) != len(pipeline):
        raise ValueError(f"pipeline cuts must be distinct names from {PIPELINE_CUTS}, "
                         f"got {pipeline!r}")
    return tuple(c for c in PIPELINE_CUTS if c in pipeline)


def config_members(w_op, a_op) -> dict:
    """Ports writing the offset registers (RaZeR operands only)."""
    members = {}
    if w_op.specials or a_op.specials:
        members["cfg_we"] = In(1)
    if w_op.specials:
        members["cfg_w_offsets"] = In(OFFSET_BITS).array(w_op.specials)
    if a_op.specials:
        members["cfg_a_offsets"] = In(OFFSET_BITS).array(a_op.specials)
    return members


def acc_members(acc_spec, *dims) -> dict:
    """Accumulator output ports of shape ``dims``: ``acc`` (FP32 bits, or the fixed
    accumulator as signed, so the two's-complement pattern reads back as the value),
    ``acc_nan`` (fixed only) and ``acc_valid``."""
    fixed = isinstance(acc_spec, FixedAccumulator)
    members = {"acc": Out(signed(acc_spec.width) if fixed else 32).array(*dims)}
    if fixed:
        members["acc_nan"] = Out(1).array(*dims)
    members["acc_valid"] = Out(1)
    return members


def offset_registers(m, core) -> dict:
    """Offset registers (Fig. 4 (1)) of a core, shared by every decoder of an operand:
    ``{"w": [...], "a": [...]}``, written from the ``cfg_*`` ports."""
    regs = {}
    for side, op, init, port in (("w", core.spec.weight, core.w_offsets_reset, "cfg_w_offsets"),
                                 ("a", core.spec.act, core.a_offsets_reset, "cfg_a_offsets")):
        regs[side] = []
        for k in range(op.specials):
            r = Signal(OFFSET_BITS, init=init[k], name=f"of_{side}{k}")
            with m.If(core.cfg_we):
                m.d.sync += r.eq(getattr(core, port)[k])
            regs[side].append(r)
    return regs


def rne_round_up(lsb, guard, sticky):
    """Rounding increment of a product rounded to FP32: nearest, ties to even."""
    return guard & (sticky | lsb)


def tree_sum(terms):
    """Balanced adder tree (widths grow one bit per level)."""
    terms = list(terms)
    while len(terms) > 1:
        nxt = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return terms[0]


def register(m, name, v):
    """A register named ``name`` loaded with ``v`` every cycle (lists: one per item)."""
    if isinstance(v, list):
        return [register(m, f"{name}_{i}", x) for i, x in enumerate(v)]
    r = Signal(v.shape(), name=name)
    m.d.sync += r.eq(v)
    return r


def cut(m, pipeline, name, sigs: dict) -> dict:
    """Register ``sigs`` when ``name`` is in ``pipeline``; else pass them through."""
    if name not in pipeline:
        return sigs
    out = {}
    for k, v in sigs.items():
        if isinstance(v, list):
            out[k] = [register(m, f"{name}_{k}{i}", x) for i, x in enumerate(v)]
        else:
            out[k] = register(m, f"{name}_{k}", v)
    return out


def scale_product(m, spec, a_sig, a_e, a_neg, a_nan, w_sig, w_e, w_neg, w_nan, *, tag):
    """Exact product of the two decoded block scales: ``(sig, e, neg, nan)``."""
    w_op, a_op = spec.weight, spec.act
    sig_bits = w_op.scale_sig_bits + a_op.scale_sig_bits
    e_bits = max(w_op.scale_format.exp_bits, a_op.scale_format.exp_bits) + 1
    x = Signal(sig_bits, name=f"scale_sig{tag}")
    e = Signal(e_bits, name=f"scale_e{tag}")
    n = Signal(name=f"scale_neg{tag}")
    q = Signal(name=f"scale_nan{tag}")
    m.d.comb += [x.eq(a_sig * w_sig), e.eq(a_e + w_e), n.eq(a_neg ^ w_neg), q.eq(a_nan | w_nan)]
    return x, e, n, q


def scaled_product(m, spec, dot, sig, e_sum, neg, nan, *, tag, round_up=rne_round_up):
    """The exact block product ``dot * scale`` packed for the accumulator: FP32 bits or
    the fixed accumulator's two's complement (``round_up``: E8M0 product rounding)."""
    mag = Signal(spec.product_bits, name=f"pmag{tag}")
    m.d.comb += mag.eq(Mux(dot < 0, -dot, dot).as_unsigned() * sig)
    sign = Signal(name=f"psign{tag}")
    m.d.comb += sign.eq((dot < 0) ^ neg)
    if isinstance(spec.acc, FP32Accumulator):
        return _pack_fp32(m, spec, mag, sign, e_sum, nan, tag=tag, round_up=round_up)
    return _pack_fixed(m, spec, mag, sign, e_sum, nan, tag=tag)


def accumulate(m, spec, adder_cls, acc, acc_nan, p, nan, valid, clear, *, tag):
    """Stage D of one output: ``acc = round(acc + p)`` (FP32 adder ``adder_cls`` as
    submodule ``acc_add{tag}``) or ``acc + p`` with the sticky ``acc_nan`` (fixed), taken
    when ``valid``; ``clear`` starts from 0."""
    if isinstance(spec.acc, FP32Accumulator):
        add = adder_cls()
        m.submodules[f"acc_add{tag}"] = add
        m.d.comb += [add.a.eq(Mux(clear, 0, acc)), add.b.eq(p)]
        with m.If(valid):
            m.d.sync += acc.eq(add.s)
    else:
        with m.If(valid):
            m.d.sync += [acc.eq(Mux(clear, 0, acc) + p),
                         acc_nan.eq((~clear & acc_nan) | nan)]


def pick(items, index):
    """``items[index]`` as a full multiplexer: the list padded with its last item to every
    value of ``index`` (a complete case; ``index`` never exceeds ``len(items) - 1``)."""
    items = list(items)
    return Array(items + [items[-1]] * ((1 << len(index)) - len(items)))[index]


def accumulate_into(m, spec, adder_cls, accs, acc_nans, index, p, nan, valid, clear, *,
                    tag):
    """Stage D of a back end shared by several outputs: like :func:`accumulate` on
    ``accs[index]`` (and ``acc_nans[index]``, fixed), one adder for all of them."""
    fixed = not isinstance(spec.acc, FP32Accumulator)
    cur = Signal(accs[0].shape(), name=f"acc_cur{tag}")
    m.d.comb += cur.eq(pick(accs, index))
    if fixed:
        new = Mux(clear, 0, cur) + p
        cur_nan = pick(acc_nans, index)
    else:
        add = adder_cls()
        m.submodules[f"acc_add{tag}"] = add
        m.d.comb += [add.a.eq(Mux(clear, 0, cur)), add.b.eq(p)]
        new = add.s
    for k, acc in enumerate(accs):
        with m.If(valid & (index == k)):
            m.d.sync += acc.eq(new)
            if fixed:
                m.d.sync += acc_nans[k].eq((~clear & cur_nan) | nan)


def _pack_fp32(m, spec, mag, sign, e_sum, nan, *, tag, round_up):
    """FP32 bits of ``(-1)**sign * mag * 2**(e_sum - K)``: exact where the spec
    guarantees it (at most 24 significant bits and a normal exponent: NVFP4, RaZeR);
    with E8M0 scales (:attr:`TensorCoreSpec.rounds_products`) rounded to binary32
    (RNE, gradual underflow to a signed zero, overflow to +-Inf) as the golden model."""
    s = spec
    pw = len(mag)
    k = (s.weight.scale_format.bias + s.weight.scale_format.man_bits
         + s.act.scale_format.bias + s.act.scale_format.man_bits + 2 * ELEM_FRAC)
    lz = leading_zeros(m, mag, name=f"plz{tag}")
    norm = Signal(pw, name=f"pnorm{tag}")
    m.d.comb += norm.eq((mag << lz)[:pw])
    field = Signal(signed(max(10, len(e_sum) + 2)), name=f"pexp{tag}")
    m.d.comb += field.eq(e_sum + (_F32_BIAS - k + pw - 1) - lz)
    assert pw <= _F32_MAN + 1, "spec check guarantees products fit FP32's significand"
    sig24 = Cat(Const(0, _F32_MAN + 1 - pw), norm)  # hidden bit at 23
    out = Signal(32, name=f"pf32_{tag}")
    if s.rounds_products:
        lim = _F32_MAN + 2  # a shift of 25 or more leaves less than half an ulp: zero
        sh = Signal(range(lim + 1), name=f"psub_sh{tag}")
        m.d.comb += sh.eq(Mux(field < 1 - lim, lim, 1 - field))
        wide = Signal(2 * (_F32_MAN + 1) + 2, name=f"psub_wide{tag}")
        m.d.comb += wide.eq(Cat(Const(0, lim + 1), sig24) >> sh)
        kept = wide[lim + 1:]
        guard, sticky = wide[lim], wide[:lim].any()
        sub = Signal(_F32_MAN + 1, name=f"psub{tag}")  # 2**23: rounds up to the smallest normal
        m.d.comb += sub.eq(kept + round_up(kept[0], guard, sticky))
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


def _pack_fixed(m, spec, mag, sign, e_sum, nan, *, tag):
    """``+-mag`` shifted to the accumulator's binary point (exact); a NaN product adds
    0 (the output's sticky flag records it)."""
    f = spec.acc
    extra = f.frac_bits - spec.product_frac  # constant part of the shift
    max_e = (1 << len(e_sum)) - 1
    sh = Signal(range(max_e + 1), name=f"pshamt{tag}")
    m.d.comb += sh.eq(e_sum - 2)  # e_sum >= 2: each e_eff = max(E, 1) >= 1
    shifted = Signal(f.width, name=f"pshift{tag}")
    m.d.comb += shifted.eq((mag << extra) << sh)
    out = Signal(f.width, name=f"pfix{tag}")
    m.d.comb += out.eq(Mux(nan, 0, Mux(sign, -shifted, shifted)))
    return out
