"""NestedFP dual-mode processing element, and the plain FP16 and FP8 MACs it is compared with.

NestedFP (004) Sec. 4.2: one FP16 weight stored as two bytes serves an FP16 datapath (the
FP16 word rebuilt from both bytes, Figure 4b, in logic) and an FP8 one (the upper byte read
as E4M3). Golden model: :class:`mactile.golden.nestedfp_pe.NestedFpPe`; the stages are its
(operand -> exact product as FP32 -> FP32 RNE accumulate). The dual PE shares one 11 x 11
significand multiplier between the modes: an E4M3 operand enters it as an FP16-like
significand (mantissa shifted up 7 places) with its exponent moved to FP16's bias (+8);
every E4M3 value is an FP16 value, so nothing is lost.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mactile.golden.elements import FP8_E4M3, FP16, FP32
from mactile.golden.nestedfp_pe import MODE_FP8, NestedFpPe as _Golden
from mactile.golden.tensorcore import FP32_QNAN

from ..fp4tc.fp32add import FP32Adder, leading_zeros
from ..fp4tc.lint import LINT_WAIVERS, STAGE_SIGNALS

__all__ = ["NestedFpPe", "build_nestedfp_pe", "reconstruct"]

_F32_BIAS = FP32.bias
_F32_MAN = FP32.man_bits


def reconstruct(m: Module, upper, lower) -> Signal:
    """FP16 word from the two stored bytes (Figure 4b; golden ``nestedfp_merge``):
    ``sub = upper[0] ^ lower[7]``, ``field = ((upper - sub) >> 1) & 0x3F``,
    ``word = (upper[7], 0, field, lower)``."""
    sub = Signal(name="rec_sub")
    diff = Signal(8, name="rec_diff")
    word = Signal(16, name="w_word")
    m.d.comb += [
        sub.eq(upper[0] ^ lower[7]),
        diff.eq(upper - sub),  # 8-bit wrap, as the golden model's uint8 arithmetic
        word.eq(Cat(lower, diff[1:7], Const(0, 1), upper[7])),
    ]
    return word


class _Unpacked:
    """An operand in the multiplier's form: ``value = sig * 2**(exp - bias - (len(sig)-1))``."""

    def __init__(self, sign, sig, exp, nan, inf):
        self.sign, self.sig, self.exp, self.nan, self.inf = sign, sig, exp, nan, inf


class NestedFpPe(wiring.Component):
    """FP32-accumulating processing element: the NestedFP dual PE or a plain FP16/FP8 MAC.

    Each cycle: ``acc <= clear ? (valid ? p : +0) : (valid ? RNE(acc + p) : acc)``, ``p``
    the exact product of this cycle's operands as an FP32 pattern.

    Parameters
    ----------
    modes : {"dual", "fp16", "fp8"}
        As :class:`mactile.golden.nestedfp_pe.NestedFpPe`.
    product_register : bool
        Register the product (and ``valid``/``clear``) before the FP32 adder; latency 2
        (default), else 1.

    Ports
    -----
    a : In(16) (``fp8``: In(8))
        Activation: an FP16 code, or in FP8 mode an E4M3 code in the low byte.
    w_upper, w_lower : In(8)
        ``dual``: the two stored bytes of the NestedFP weight.
    mode : In(1)
        ``dual``: 0 = FP16 x FP16 (rebuilt weight), 1 = E4M3 x E4M3 (upper byte).
    w : In(16) / In(8)
        ``fp16`` / ``fp8``: the weight code.
    valid, clear : In(1)
    acc : Out(32)
        The FP32 sum, ``latency`` cycles after the inputs.
    """

    #: The FP32 adder (a test swaps in a broken one).
    adder_cls = FP32Adder
    lint_waivers = LINT_WAIVERS

    def __init__(self, *, modes: str = "dual", product_register: bool = True):
        if not isinstance(product_register, bool):
            raise TypeError(f"product_register must be a bool, got {product_register!r}")
        self.golden = _Golden(modes=modes)
        self.modes = modes
        self.product_register = product_register
        members = {"a": In(self.golden.a_bits)}
        if modes == "dual":
            members.update(w_upper=In(8), w_lower=In(8), mode=In(1))
        else:
            members["w"] = In(self.golden.a_bits)
        members.update(valid=In(1), clear=In(1), acc=Out(32))
        super().__init__(members)

    @property
    def latency(self) -> int:
        return 1 + int(self.product_register)

    @property
    def module_name(self) -> str:
        base = "nestedfp_pe_dual" if self.modes == "dual" else f"{self.modes}_mac"
        return f"{base}_fp32_l{self.latency}"

    @property
    def waveform_signals(self) -> tuple[str, ...]:
        return STAGE_SIGNALS + ("rec_*", "w_word", "a_*", "w_*", "prod*", "p_*", "pe_*")

    @property
    def _sig_bits(self) -> int:
        spec = FP8_E4M3 if self.modes == "fp8" else FP16
        return spec.man_bits + 1

    @property
    def _bias(self) -> int:
        return (FP8_E4M3 if self.modes == "fp8" else FP16).bias

    # ------------------------------------------------------------------ operand
    def _unpack_fp16(self, m, code, side) -> _Unpacked:
        man, e = code[:FP16.man_bits], code[FP16.man_bits:15]
        top = (1 << FP16.exp_bits) - 1
        sig = Signal(FP16.man_bits + 1, name=f"{side}_sig16")
        exp = Signal(FP16.exp_bits + 1, name=f"{side}_exp16")
        m.d.comb += [sig.eq(Cat(man, e.any())), exp.eq(Mux(e.any(), e, 1))]
        return _Unpacked(code[15], sig, exp, (e == top) & man.any(), (e == top) & ~man.any())

    def _unpack_e4m3(self, m, code, side, *, into_fp16: bool) -> _Unpacked:
        """E4M3 fields; ``into_fp16``: as the FP16 multiplier's operand (the significand
        shifted to FP16's 11 bits, the exponent moved to FP16's bias)."""
        mb, eb = FP8_E4M3.man_bits, FP8_E4M3.exp_bits
        man, e = code[:mb], code[mb:mb + eb]
        nan = (e == (1 << eb) - 1) & (man == (1 << mb) - 1)  # S.1111.111, no Inf
        shift = FP16.man_bits - mb if into_fp16 else 0
        rebias = FP16.bias - FP8_E4M3.bias if into_fp16 else 0
        sig = Signal(mb + 1 + shift, name=f"{side}_sig8")
        exp = Signal(FP16.exp_bits + 1, name=f"{side}_exp8")
        m.d.comb += [sig.eq(Cat(Const(0, shift), man, e.any())),
                     exp.eq(Mux(e.any(), e, 1) + rebias)]
        return _Unpacked(code[mb + eb], sig, exp, nan, Const(0, 1))

    def _select(self, m, fp8, x16: _Unpacked, x8: _Unpacked, side) -> _Unpacked:
        out = []
        for name, a, b in (("sign", x16.sign, x8.sign), ("sig", x16.sig, x8.sig),
                           ("exp", x16.exp, x8.exp), ("nan", x16.nan, x8.nan),
                           ("inf", x16.inf, x8.inf)):
            s = Signal(len(a) if name in ("sig", "exp") else 1, name=f"{side}_{name}")
            m.d.comb += s.eq(Mux(fp8, b, a))
            out.append(s)
        return _Unpacked(*out)

    def _operands(self, m) -> tuple[_Unpacked, _Unpacked]:
        if self.modes == "fp16":
            return self._unpack_fp16(m, self.a, "a"), self._unpack_fp16(m, self.w, "w")
        if self.modes == "fp8":
            return (self._unpack_e4m3(m, self.a, "a", into_fp16=False),
                    self._unpack_e4m3(m, self.w, "w", into_fp16=False))
        fp8 = self.mode == MODE_FP8
        word = reconstruct(m, self.w_upper, self.w_lower)
        a = self._select(m, fp8, self._unpack_fp16(m, self.a, "a"),
                         self._unpack_e4m3(m, self.a[:8], "a", into_fp16=True), "a")
        w = self._select(m, fp8, self._unpack_fp16(m, word, "w"),
                         self._unpack_e4m3(m, self.w_upper, "w", into_fp16=True), "w")
        return a, w

    # ------------------------------------------------------------------ product
    def _product(self, m, a: _Unpacked, w: _Unpacked) -> Signal:
        """The exact product as an FP32 pattern: the significand product normalised by its
        leading zeros; exponent field ``E_a + E_w - lz + 128 - 2 * bias`` (always a normal
        FP32 exponent, so no rounding and no subnormal case)."""
        n = 2 * self._sig_bits
        prod = Signal(n, name="prod_sig")
        m.d.comb += prod.eq(a.sig * w.sig)
        lz = leading_zeros(m, prod, name="prod_lz")
        norm = Signal(n, name="prod_norm")
        m.d.comb += norm.eq(prod << lz)
        efield = Signal(FP32.exp_bits, name="prod_exp")
        m.d.comb += efield.eq(a.exp + w.exp - lz + (_F32_BIAS + 1 - 2 * self._bias))
        sign = a.sign ^ w.sign
        zero_a, zero_w = ~a.sig.any(), ~w.sig.any()
        p = Signal(32, name="prod_bits")
        with m.If(a.nan | w.nan | (a.inf & zero_w) | (w.inf & zero_a)):
            m.d.comb += p.eq(FP32_QNAN)
        with m.Elif(a.inf | w.inf):
            m.d.comb += p.eq(Cat(Const(0, _F32_MAN), Const(-1, FP32.exp_bits), sign))
        with m.Elif(~prod.any()):
            m.d.comb += p.eq(Cat(Const(0, 31), sign))
        with m.Else():
            m.d.comb += p.eq(Cat(Const(0, _F32_MAN - (n - 1)), norm[:n - 1], efield, sign))
        return p

    def elaborate(self, platform):
        m = Module()
        a, w = self._operands(m)
        p = self._product(m, a, w)
        valid, clear = self.valid, self.clear
        if self.product_register:
            pq, vq, cq = Signal(32, name="p_q"), Signal(name="pe_valid_q"), Signal(name="pe_clear_q")
            m.d.sync += [pq.eq(p), vq.eq(valid), cq.eq(clear)]
            p, valid, clear = pq, vq, cq
        m.submodules.adder = adder = self.adder_cls()
        m.d.comb += [adder.a.eq(self.acc), adder.b.eq(p)]
        with m.If(clear):
            m.d.sync += self.acc.eq(Mux(valid, p, 0))
        with m.Elif(valid):
            m.d.sync += self.acc.eq(adder.s)
        return m


def build_nestedfp_pe(**params) -> NestedFpPe:
    """Registry builder."""
    return NestedFpPe(**params)
