"""``dialect-chain``: quantizer -> dequantizer -> DialectFP4 MAC, the activation path of
BlockDialect end to end (Sec. 3.3: "the optimal dialect selection, quantization, and MAC
operations can be pipelined"), for verification against the golden dot product.

A block of FP16 activations enters with a pre-quantized DialectFP4 weight block (codes,
dialect id, shared-exponent field). :class:`~.quantizer.DialectQuantizer` quantizes the
activations, :class:`~.dequantizer.DialectDequantizer` turns their codes into 5-bit
sign-magnitude integers (Figure 6), a block buffer feeds them one per cycle, with the weight
codes, into the ``mac-dialectfp4`` unit (:class:`mactile.rtl.mac.unit.MacUnit`, Table 5
"Ours"), whose activation operand is the dequantizer's output instead of its own formatbook
lookup. After the block's last term the MAC holds the block's partial dot product
``acc * 2**exp`` (its ``acc-exp`` convention, :mod:`mactile.golden.mac`).
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mactile.golden.mac import DIALECT_CODE_BITS, DIALECT_ID_BITS, SE_FIELD_BITS
from mactile.rtl.mac.unit import MacUnit

from .common import BACKEND_WAIVERS, FP16_BITS, check_block_size
from .dequantizer import VALUE_BITS, DialectDequantizer
from .quantizer import QUANTIZER_BOUNDARIES, DialectQuantizer

__all__ = ["DialectChain", "DequantizedMac"]


class DequantizedMac(MacUnit):
    """``MacUnit`` (DialectFP4, ``uint4`` multiplier) whose activation operand is a 5-bit
    sign-magnitude value from the dequantizer (``a_value``, driven by the parent) rather
    than a code looked up in the MAC's own formatbook table; the ``a`` and ``a_dialect``
    ports are unused. The weight side, multiplier, accumulator and block-end exponent are
    the Table 5 unit's."""

    def __init__(self, **params):
        super().__init__(**params)
        if self.datapath.a_format != "dialectfp4" or self.datapath.w_format != "dialectfp4":
            raise ValueError("DequantizedMac needs the DialectFP4 x DialectFP4 MAC")
        self.a_value = Signal(VALUE_BITS, name="a_value")

    def _dialect_q(self, m, code, dialect, side):
        if side == "a":
            return self.a_value[VALUE_BITS - 1], self.a_value[:VALUE_BITS - 1]
        return super()._dialect_q(m, code, dialect, side)


class DialectChain(wiring.Component):
    """Quantizer -> dequantizer -> block buffer -> DialectFP4 MAC.

    Parameters
    ----------
    block_size : {16, 32, 64}
    registers : quantizer pipeline split (as :class:`~.quantizer.DialectQuantizer`)
    mac : dict, optional
        Parameters of the MAC (default: the registered ``mac-dialectfp4-decode`` design's).

    Ports
    -----
    valid : In(1); x : In(16) x B
        An activation block. Blocks must be at least ``block_size`` cycles apart (the MAC
        takes one term per cycle); the bench keeps to that, the unit does not check it.
    w : In(4) x B; w_dialect : In(4); w_se : In(5)
        The weight block, in the same cycle.
    out_valid : Out(1); acc, exp : the MAC's outputs
        ``latency`` cycles after ``valid``: the block's dot product ``acc * 2**exp``.
    """

    def __init__(self, *, block_size: int = 32, registers=QUANTIZER_BOUNDARIES,
                 mac: dict | None = None):
        owner = type(self).__name__
        self.block_size = check_block_size(owner, block_size)
        if mac is None:
            from mactile.rtl.registry import get_design
            mac = dict(get_design("mac-dialectfp4-decode").params)
        self.quantizer = DialectQuantizer(block_size=block_size, registers=registers)
        self.dequantizer = DialectDequantizer(block_size=block_size)
        self.mac = DequantizedMac(**mac)
        if self.mac.latency != 1:
            raise ValueError(f"{owner}: expects a MAC of latency 1, got {self.mac.latency}")
        if block_size > self.mac.datapath.terms:
            raise ValueError(f"{owner}: block_size {block_size} exceeds the MAC's "
                             f"terms={self.mac.datapath.terms}")
        dp = self.mac.datapath
        super().__init__({
            "valid": In(1),
            "x": In(FP16_BITS).array(block_size),
            "w": In(DIALECT_CODE_BITS).array(block_size),
            "w_dialect": In(DIALECT_ID_BITS),
            "w_se": In(SE_FIELD_BITS),
            "out_valid": Out(1),
            "acc": Out(signed(dp.acc_bits)),
            "exp": Out(signed(dp.exp_bits)),
        })

    @property
    def latency(self) -> int:
        """Quantizer, dequantizer (1), block buffer (1), ``block_size`` terms, where the
        accumulator register holds the sum one cycle after the last term."""
        return self.quantizer.latency + self.dequantizer.latency + 1 + self.block_size

    @property
    def module_name(self) -> str:
        return f"dialect_chain_b{self.block_size}_l{self.latency}"

    sim_cxx_opt = DialectQuantizer.sim_cxx_opt

    @property
    def lint_waivers(self):
        """This verification composite keeps its submodules in one file, and Amaranth's
        hierarchy writes parent-side connection wires the backend never reads; the units
        themselves lint clean on their own (``mactile generate dialect-quantizer`` ...)."""
        why = ("verification composite: Amaranth writes the submodules into one file and "
               "parent-side connection wires the backend does not read; the units are "
               "linted on their own")
        return BACKEND_WAIVERS + (("UNUSEDSIGNAL", None, why), ("DECLFILENAME", None, why))

    def elaborate(self, platform):
        m = Module()
        b = self.block_size
        q, dq, mac = self.quantizer, self.dequantizer, self.mac
        m.submodules.quantizer, m.submodules.dequantizer, m.submodules.mac = q, dq, mac

        m.d.comb += q.valid.eq(self.valid)
        m.d.comb += [q.x[j].eq(self.x[j]) for j in range(b)]

        # The weight block travels beside the activations, delayed to meet the dequantizer.
        w = list(self.w) + [self.w_dialect, self.w_se]
        for stage in range(q.latency + dq.latency):
            nxt = [Signal.like(s, name=f"wdelay{stage}_{i}", reset_less=True)
                   for i, s in enumerate(w)]
            m.d.sync += [n.eq(s) for n, s in zip(nxt, w)]
            w = nxt
        a_se = Signal(SE_FIELD_BITS, reset_less=True)
        m.d.sync += a_se.eq(q.se)          # the se leaves the quantizer with the codes

        m.d.comb += [dq.valid.eq(q.out_valid), dq.dialect.eq(q.dialect)]
        m.d.comb += [dq.codes[j].eq(q.codes[j]) for j in range(b)]

        # Block buffer: holds the dequantized block while the MAC walks through it.
        buf_a = [Signal(VALUE_BITS, name=f"buf_a_{j}", reset_less=True) for j in range(b)]
        buf_w = [Signal(DIALECT_CODE_BITS, name=f"buf_w_{j}", reset_less=True) for j in range(b)]
        buf_wd = Signal(DIALECT_ID_BITS, reset_less=True)
        buf_ase = Signal(SE_FIELD_BITS, reset_less=True)
        buf_wse = Signal(SE_FIELD_BITS, reset_less=True)
        busy = Signal()
        j = Signal(range(b))
        with m.If(dq.out_valid):
            m.d.sync += [busy.eq(1), j.eq(0), buf_wd.eq(w[b]), buf_wse.eq(w[b + 1]),
                         buf_ase.eq(a_se)]
            m.d.sync += [ba.eq(v) for ba, v in zip(buf_a, dq.values)]
            m.d.sync += [bw.eq(x) for bw, x in zip(buf_w, w[:b])]
        with m.Elif(busy):
            m.d.sync += j.eq(j + 1)
            with m.If(j == b - 1):
                m.d.sync += busy.eq(0)

        # One term per cycle into the MAC; the first term of a block clears it.
        a_sel = Signal(VALUE_BITS)
        w_sel = Signal(DIALECT_CODE_BITS)
        with m.Switch(j):
            for k in range(b):
                with m.Case(k):
                    m.d.comb += [a_sel.eq(buf_a[k]), w_sel.eq(buf_w[k])]
        m.d.comb += [
            mac.a_value.eq(a_sel), mac.a.eq(0), mac.a_dialect.eq(0),
            mac.w.eq(w_sel), mac.w_dialect.eq(buf_wd),
            mac.a_se.eq(buf_ase), mac.w_se.eq(buf_wse),
            mac.valid.eq(busy), mac.clear.eq(busy & (j == 0)),
        ]
        done = Signal()
        m.d.sync += done.eq(busy & (j == b - 1))
        m.d.comb += [self.out_valid.eq(done), self.acc.eq(mac.acc), self.exp.eq(mac.exp)]
        return m

