"""INT group dot-product units: FlexQ's bit-plane INT6 unit (Eq. 5) and the direct INT6 /
INT8 multiplier arrays it is compared with.

Golden: :class:`mactile.golden.intgroup_dot.GroupDotUnit`, same stages (beat ->
accumulate -> scale). Each cycle one beat of ``lanes`` code pairs is added to the group's
integer sum; ``y`` is that sum times the group's two FP16 scales, rounded once to FP32.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mactile.golden.elements import FP32
from mactile.golden.intgroup_dot import GroupDotUnit as _Golden

from ..fp4tc.lint import LINT_WAIVERS

__all__ = ["IntGroupDot", "build_intgroup_dot", "tree_sum", "normalize"]


def normalize(m: Module, x, *, name: str) -> tuple[Signal, Signal]:
    """``(x << lz, lz)`` with ``lz`` the leading zeros of ``x`` (``x`` nonzero; for zero
    the shift is the largest the stages make), in log2(len(x)) stages: each shifts left by
    2**k when the top 2**k bits are zero. The depth is that of a barrel shifter, not of a
    priority chain as long as ``x``."""
    n = len(x)
    cur, lz_bits = x, []
    k = 1 << (max(n - 1, 1).bit_length() - 1)
    stage = 0
    while k >= 1:
        zero = Signal(name=f"{name}_z{stage}")
        nxt = Signal(n, name=f"{name}_n{stage}")
        m.d.comb += [zero.eq(~cur[n - k:].any()), nxt.eq(Mux(zero, cur << k, cur))]
        lz_bits.append(zero)
        cur, k, stage = nxt, k >> 1, stage + 1
    lz = Signal(len(lz_bits), name=f"{name}_lz")
    m.d.comb += lz.eq(Cat(*reversed(lz_bits)))
    return cur, lz


def tree_sum(terms):
    """Balanced adder tree of Amaranth values (Amaranth widens each sum by a bit)."""
    terms = list(terms)
    while len(terms) > 1:
        nxt = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return terms[0]


class IntGroupDot(wiring.Component):
    """Group dot-product unit (FlexQ Eq. 5 bit planes, or a multiplier array).

    Each cycle: ``acc <= (clear ? 0 : acc) + (valid ? sum_i a_i w_i : 0)``; ``sa``, ``sw``
    are registered with every valid beat (as their significand product, exponent sum and
    sign: formed once per group); ``y = RNE_FP32(acc * s_a * s_w)`` (combinational from the
    registers), so after a group's last beat ``acc`` is its integer dot and ``y``
    its scaled result.

    Parameters
    ----------
    bits, lanes, group_size, structure
        As :class:`mactile.golden.intgroup_dot.GroupDotUnit`.

    Ports
    -----
    a, w : In(bits).array(lanes)
        Two's-complement codes of one beat.
    sa, sw : In(16)
        FP16 scales of the activation and weight group (finite).
    valid, clear : In(1)
    acc : Out(signed(acc_bits)); y : Out(32)
    """

    lint_waivers = LINT_WAIVERS

    def __init__(self, *, bits: int = 6, lanes: int = 16, group_size: int = 128,
                 structure: str = "bitplane"):
        self.golden = g = _Golden(bits=bits, lanes=lanes, group_size=group_size,
                                  structure=structure)
        super().__init__({
            "a": In(bits).array(lanes), "w": In(bits).array(lanes),
            "sa": In(16), "sw": In(16), "valid": In(1), "clear": In(1),
            "acc": Out(signed(g.acc_bits)), "y": Out(32),
        })

    @property
    def latency(self) -> int:
        return 1

    @property
    def module_name(self) -> str:
        g = self.golden
        return f"int{g.bits}_group_dot_{g.structure}_l{g.lanes}_g{g.group_size}"

    @property
    def waveform_signals(self) -> tuple[str, ...]:
        return ("beat", "pop_*", "plane_*", "prod_*", "sp_q", "se_q", "ss_q", "sc_*")

    # ------------------------------------------------------------------ beat
    def plane_sign(self, s: int, t: int) -> int:
        """Sign of plane pair (s, t): negative when exactly one is the top plane (Eq. 5's
        two's-complement weights; a test's broken unit overrides it)."""
        top = self.golden.bits - 1
        return -1 if (s == top) != (t == top) else 1

    def _beat(self, m) -> Signal:
        g = self.golden
        beat = Signal(signed(g.acc_bits), name="beat")
        if g.structure == "multiplier":
            prods = []
            for i in range(g.lanes):
                p = Signal(signed(2 * g.bits), name=f"prod_{i}")
                m.d.comb += p.eq(self.a[i].as_signed() * self.w[i].as_signed())
                prods.append(p)
            m.d.comb += beat.eq(tree_sum(prods))
            return beat
        planes_a = [Cat(self.a[i][s] for i in range(g.lanes)) for s in range(g.bits)]
        planes_w = [Cat(self.w[i][t] for i in range(g.lanes)) for t in range(g.bits)]
        terms = []
        for s in range(g.bits):
            for t in range(g.bits):
                anded = Signal(g.lanes, name=f"plane_{s}_{t}")
                m.d.comb += anded.eq(planes_a[s] & planes_w[t])   # the binary AND array
                pop = Signal(g.pop_bits, name=f"pop_{s}_{t}")
                m.d.comb += pop.eq(tree_sum(anded[i] for i in range(g.lanes)))  # popcount
                shifted = pop << (s + t)
                terms.append(shifted if self.plane_sign(s, t) > 0 else -shifted)
        m.d.comb += beat.eq(tree_sum(terms))
        return beat

    # ------------------------------------------------------------------ scale
    def _scale_product(self, m):
        """The group's scale product, formed once per group: registered with every valid
        beat (the scales are constant within a group). ``s_a * s_w = sp * 2**(se - 50)``
        with ``sp`` the 22-bit product of the FP16 significands and ``se`` the sum of
        ``max(E, 1)``; the sign is the XOR of the scales' signs."""
        sigs, exps = [], []
        for name, x in (("a", self.sa), ("w", self.sw)):
            e = x[10:15]
            sig = Signal(11, name=f"sc_sig_{name}")
            ex = Signal(5, name=f"sc_exp_{name}")
            m.d.comb += [sig.eq(Cat(x[:10], e.any())), ex.eq(Mux(e.any(), e, 1))]
            sigs.append(sig)
            exps.append(ex)
        sp, se, ss = Signal(22, name="sp_q"), Signal(6, name="se_q"), Signal(name="ss_q")
        with m.If(self.valid):
            m.d.sync += [sp.eq(sigs[0] * sigs[1]), se.eq(exps[0] + exps[1]),
                         ss.eq(self.sa[15] ^ self.sw[15])]
        return sp, se, ss

    def _scale(self, m, acc, sp, se, ss) -> Signal:
        """``RNE_FP32(acc * s_a * s_w)``: exact product of |acc| and the scale product's
        significand, normalised by its leading zeros, rounded once (guard + sticky, ties to
        even)."""
        g = self.golden
        mag = Signal(g.acc_bits, name="sc_mag")
        m.d.comb += mag.eq(Mux(acc < 0, -acc, acc))
        n = g.acc_bits + len(sp)
        big = Signal(n, name="sc_big")
        m.d.comb += big.eq(mag * sp)
        norm, lz = normalize(m, big, name="sc")
        keep = FP32.man_bits + 1
        lsb, guard = norm[n - keep], norm[n - keep - 1]
        sticky = norm[:n - keep - 1].any()
        up = guard & (sticky | lsb)
        rounded = Signal(keep + 1, name="sc_rounded")
        m.d.comb += rounded.eq(norm[n - keep:] + up)
        # value = big * 2**(se - 50); the normalised MSB has weight 2**(n - 1 - lz)
        efield = Signal(FP32.exp_bits, name="sc_exp")
        m.d.comb += efield.eq(se + rounded[keep] - lz + (FP32.bias + n - 1 - 50))
        mant = Signal(FP32.man_bits, name="sc_mant")
        m.d.comb += mant.eq(Mux(rounded[keep], rounded[1:keep], rounded[:keep - 1]))
        sign = ss ^ (acc < 0)
        y = Signal(32, name="sc_y")
        m.d.comb += y.eq(Mux(big.any(), Cat(mant, efield, sign), Cat(Const(0, 31), sign)))
        return y

    def elaborate(self, platform):
        m = Module()
        beat = self._beat(m)
        m.d.sync += self.acc.eq(Mux(self.clear, 0, self.acc) + Mux(self.valid, beat, 0))
        m.d.comb += self.y.eq(self._scale(m, self.acc, *self._scale_product(m)))
        return m


def build_intgroup_dot(**params) -> IntGroupDot:
    """Registry builder."""
    return IntGroupDot(**params)
