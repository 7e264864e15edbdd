"""FP4 element decoders and the block-scale decoder (RaZeR Fig. 4; MXFP4's E8M0 scales).

An element decoder turns FP4 E2M1 codes into two's-complement fixed-point values with
``ELEM_FRAC`` (= 1) fraction bits, i.e. integers in half units, which the MAC array
multiplies exactly. A RaZeR decoder also compares each code with the special code and,
on a match, emits ``+-(6 + OF[sel])`` built from the offset registers and the block's
metadata bits (Fig. 4: the selector picks the register, the sign bit is concatenated).
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .lint import LINT_WAIVERS, STAGE_SIGNALS

from mactile.golden.elements import FP4_E2M1
from mactile.golden import validate
from mactile.golden.fp4blocks import razer_offset_code, special_magnitude
from mactile.golden.tensorcore import ELEM_FRAC, OFFSET_BITS, OPERANDS, OperandSpec
from mactile.golden.tensorcore import default_specials as _golden_default_specials

__all__ = ["value_shape", "ElementDecoder", "DecoderUnit", "ScaleDecode", "decode_scale",
           "build_decoder", "default_specials", "reset_offsets"]

#: Decoded FP4 magnitudes in half units, indexed by the code's 3 magnitude bits.
_FP4_HALF_UNITS = [int(v * (1 << ELEM_FRAC)) for v in FP4_E2M1.values[:8]]
#: 6.0 in half units: the base the offset registers are added to.
_SPECIAL_BASE = int(FP4_E2M1.max_value * (1 << ELEM_FRAC))


def value_shape(operand: OperandSpec):
    """Signed shape that holds every decoded value of ``operand`` (half units)."""
    return signed(operand.max_element.bit_length() + 1)


def reset_offsets(operand: OperandSpec, specials, *, name: str = "specials") -> tuple[int, ...]:
    """Offset-register reset codes from special magnitudes (``None``: the defaults),
    checked: a sequence of as many numbers as the operand has registers, each a valid
    special magnitude."""
    if specials is None:
        vals = default_specials(operand)
    elif not operand.specials and specials in ([], ()):
        vals = ()
    elif not operand.specials:
        raise TypeError(f"{operand.name} has no special values: {name} must be null or "
                        f"empty, got {specials!r}")
    else:
        if isinstance(specials, (str, bytes)) or not hasattr(specials, "__iter__"):
            raise TypeError(f"{name} must be a list of {operand.specials} special "
                            f"magnitude(s) for {operand.name}, got {specials!r}")
        vals = tuple(special_magnitude(operand.name, name, v) for v in specials)
    if len(vals) != operand.specials:
        raise ValueError(f"{operand.name}: needs {operand.specials} special magnitude(s) in "
                         f"{name}, got {len(vals)}")
    return tuple(razer_offset_code(v) for v in vals)


def default_specials(operand: OperandSpec) -> tuple[float, ...]:
    """The golden quantizers' default special magnitudes for this operand's registers."""
    return _golden_default_specials(operand)


def _operand(operand) -> OperandSpec:
    if isinstance(operand, OperandSpec):
        return operand
    try:
        return OPERANDS[operand]
    except (KeyError, TypeError):  # TypeError: an unhashable value (a list)
        raise ValueError(f"unknown operand {operand!r}; known: {', '.join(OPERANDS)}") from None


class ElementDecoder(wiring.Component):
    """Combinational decoder of ``lanes`` FP4 codes of one block.

    Ports
    -----
    codes : In(4).array(lanes)
        FP4 E2M1 codes.
    meta : In(8)
        The block's scale byte (only its metadata bits are used).
    offsets : In(4).array(specials)
        Offset-register values (RaZeR operands only).
    values : Out(signed).array(lanes)
        Decoded values, two's complement in half units.
    """

    def __init__(self, *, operand: OperandSpec, lanes: int = 16):
        self.operand = _operand(operand)
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, got {lanes}")
        self.lanes = lanes
        members = {"codes": In(FP4_E2M1.bits).array(lanes), "meta": In(OperandSpec.BYTE_BITS)}
        if self.operand.specials:
            members["offsets"] = In(OFFSET_BITS).array(self.operand.specials)
        members["values"] = Out(value_shape(self.operand)).array(lanes)
        super().__init__(members)

    @staticmethod
    def special_negative(sign_bit):
        """The special value is negative when the metadata sign bit is set (a subclass may
        change it: the tests' mutant)."""
        return sign_bit

    def elaborate(self, platform):
        m = Module()
        op = self.operand
        shape = value_shape(op)
        table = Array(Const(v, shape) for v in _FP4_HALF_UNITS)
        sign_pos = FP4_E2M1.bits - 1
        special = None
        if op.specials:
            # Fig. 4 (2): the selector picks the register; 6 + offset is the magnitude.
            sel = self.meta[op.select_bit] if op.select_bits else Const(0, 1)
            reg = Array(self.offsets)[sel] if op.specials > 1 else self.offsets[0]
            off = reg[:OFFSET_BITS - 1]  # magnitude, half units (1 fraction bit)
            mag = Signal(range(_SPECIAL_BASE + (1 << (OFFSET_BITS - 1))), name="special_mag")
            m.d.comb += mag.eq(Mux(reg[OFFSET_BITS - 1], _SPECIAL_BASE - off, _SPECIAL_BASE + off))
            special = Signal(shape, name="special")
            m.d.comb += special.eq(Mux(self.special_negative(self.meta[op.sign_bit]), -mag, mag))
        for i in range(self.lanes):
            code = self.codes[i]
            mag = table[code[:sign_pos]]
            val = Mux(code[sign_pos], -mag, mag)
            if special is not None:
                # Fig. 4 (3): the code is compared with the special code.
                val = Mux(code == op.special_code, special, val)
            m.d.comb += self.values[i].eq(val)
        return m


class DecoderUnit(wiring.Component):
    """A standalone decoder design: ``lanes`` element decoders sharing programmable offset
    registers (the ``nvfp4-decoder``, ``razer-weight-decoder`` and ``razer-act-decoder``).

    Ports
    -----
    codes, meta, values
        As :class:`ElementDecoder`.
    cfg_we : In(1); cfg_offsets : In(4).array(specials)
        RaZeR only: write every offset register at the clock edge; decoding in the same
        cycle still sees the old values.

    Parameters
    ----------
    operand : str | OperandSpec
        ``"nvfp4"``, ``"mxfp4"``, ``"razer"``, ``"razer-act"`` or a spec.
    lanes : int
        Elements decoded per cycle (one block: 16).
    specials : sequence of float
        Reset values of the offset registers, as special magnitudes (default: the golden
        quantizers' defaults, 5 and 8 for weights, 5 for activations).
    """

    def __init__(self, *, operand="razer", lanes: int = 16, specials=None):
        self.operand = op = _operand(operand)
        self.lanes = lanes = validate.integer("", "lanes", lanes, lo=1)
        self.reset_offsets = reset_offsets(op, specials)
        members = {"codes": In(FP4_E2M1.bits).array(lanes), "meta": In(OperandSpec.BYTE_BITS)}
        if op.specials:
            members["cfg_we"] = In(1)
            members["cfg_offsets"] = In(OFFSET_BITS).array(op.specials)
        members["values"] = Out(value_shape(op)).array(lanes)
        super().__init__(members)

    #: Documented Verilator -Wall waivers (:mod:`.lint`).
    lint_waivers = LINT_WAIVERS
    waveform_signals = STAGE_SIGNALS

    @property
    def latency(self) -> int:
        """Combinational: values follow codes in the same cycle."""
        return 0

    @property
    def module_name(self) -> str:
        return f"{self.operand.name.replace('-', '_')}_decoder_x{self.lanes}"

    #: The element decoder (a class attribute so a test can swap in a broken one).
    decoder_cls = ElementDecoder

    def elaborate(self, platform):
        m = Module()
        m.submodules.dec = dec = self.decoder_cls(operand=self.operand, lanes=self.lanes)
        m.d.comb += dec.meta.eq(self.meta)
        for i in range(self.lanes):
            m.d.comb += [dec.codes[i].eq(self.codes[i]), self.values[i].eq(dec.values[i])]
        for k, init in enumerate(self.reset_offsets):
            reg = Signal(OFFSET_BITS, init=init, name=f"of{k}")
            with m.If(self.cfg_we):
                m.d.sync += reg.eq(self.cfg_offsets[k])
            m.d.comb += dec.offsets[k].eq(reg)
        return m


class ScaleDecode:
    """Signals of one decoded block scale: ``(-1)**neg * sig * 2**(e_eff - K)``,
    ``e_eff = max(E, 1)`` (``E`` for a format without subnormals, E8M0), and ``nan`` for
    the format's NaN codes."""

    def __init__(self, neg, sig, e_eff, nan):
        self.neg, self.sig, self.e_eff, self.nan = neg, sig, e_eff, nan


def decode_scale(m: Module, operand: OperandSpec, byte, *, name: str) -> ScaleDecode:
    """Combinational block-scale decode of ``byte`` (metadata bits dropped)."""
    f = operand.scale_format
    code = byte[:operand.scale_field_bits]
    man = code[:f.man_bits]
    e = code[f.man_bits:f.man_bits + f.exp_bits]
    sig = Signal(f.man_bits + 1, name=f"{name}_sig")
    e_eff = Signal(f.exp_bits, name=f"{name}_e")
    nan = Signal(name=f"{name}_nan")
    neg = Signal(name=f"{name}_neg")
    if f.subnormals:  # exponent field 0: subnormal, the binade of field 1
        m.d.comb += [sig.eq(Cat(man, e.any())), e_eff.eq(Mux(e.any(), e, 1))]
    else:  # no subnormals (E8M0): every field is a binade with the hidden 1
        m.d.comb += [sig.eq(Cat(man, Const(1, 1))), e_eff.eq(e)]
    m.d.comb += neg.eq(code[f.bits - 1] if operand.scale_signed else 0)
    mag_mask = (1 << (f.exp_bits + f.man_bits)) - 1
    classes = f.classes.restrict((1 << operand.scale_field_bits) - 1)  # the classifier record
    if classes.inf:  # never decode an Inf code as a finite 2**k
        raise ValueError(f"{operand.name}: the scale decode has no Inf output, and "
                         f"{f.name} codes {list(classes.inf)} are Inf")
    nan_mags = sorted({int(c) & mag_mask for c in classes.nan})
    m.d.comb += nan.eq(Cat(*(code[:f.exp_bits + f.man_bits] == c for c in nan_mags)).any()
                       if nan_mags else 0)
    return ScaleDecode(neg, sig, e_eff, nan)


def build_decoder(**params) -> DecoderUnit:
    """Registry builder."""
    return DecoderUnit(**params)
