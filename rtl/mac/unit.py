"""One parametric MAC component for every row of BlockDialect Table 5.

Every width and table comes from :class:`mactile.golden.mac.MacDatapath`; the stages are
the golden model's (unpack -> multiply -> accumulate -> block end), so a mismatch can be
traced to one of them.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Elaboratable, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mactile.golden.dialect import FORMATBOOK, SE_BIAS
from mactile.golden.mac import (DEQUANT_BITS, DIALECT_CODE_BITS, DIALECT_ID_BITS,
                                SE_FIELD_BITS, DialectMultiplier, MacDatapath, MacKind)

__all__ = ["MacUnit", "build_mac"]


class _Part(Elaboratable):
    """A named submodule built by a callback, so the multiplier and the accumulator stay
    separate modules in the Verilog (``keep_hierarchy``) and a synthesis that keeps the
    hierarchy reports their area apart (``benchmarks/synth_breakdown.py``)."""

    def __init__(self, build):
        self._build = build

    def elaborate(self, platform):
        m = Module()
        self._build(m)
        return m


class MacUnit(wiring.Component):
    """Iterative multiply-accumulate unit.

    Each cycle: ``acc <= (clear ? 0 : acc) + (valid ? a * w : 0)``, the product exact in
    units of ``2**datapath.product_lsb_exp`` and the accumulator ``datapath.acc_bits`` wide,
    so ``terms`` worst-case products cannot overflow it.

    Parameters
    ----------
    a_format, w_format, terms, multiplier, dialect_input, acc_sizing
        Features, as :class:`mactile.golden.mac.MacDatapath`.
    product_register : bool
        Implementation: register the product (and the controls) before the adder; the
        latency becomes 2.
    keep_hierarchy : bool
        Implementation: build the multiplier (operand decode included) and the
        accumulator (with the optional product register) as submodules ``multiplier`` and
        ``accumulator`` so a synthesis without flattening reports them apart, as Table 5
        does. The logic is the same either way.

    Ports
    -----
    a, w : In(code bits)
        Operand codes (DialectFP4 ``codes``: ``sign << 3 | index``; ``dequantized``:
        ``sign << 4 | q``).
    valid, clear : In(1)
        Add this cycle's product; start a new sum (``clear`` without ``valid`` zeroes it).
    a_dialect, w_dialect : In(4); a_se, w_se : In(5)
        DialectFP4 ``codes`` only: the blocks' dialect ids and stored shared-exponent fields.
    acc : Out(signed(acc_bits))
        The running sum, ``latency`` cycles after the inputs.
    exp : Out(signed(exp_bits))
        DialectFP4 ``codes`` only: block-end exponent of the last valid term, convention ``acc-exp``:
        the block's partial sum is ``acc * 2**exp``.
    """

    def __init__(self, *, a_format: str, w_format: str, terms: int = 64,
                 multiplier: str = "uint4", dialect_input: str = "codes",
                 acc_sizing: str = "exact", product_register: bool = False,
                 keep_hierarchy: bool = False):
        for name, v in (("product_register", product_register),
                        ("keep_hierarchy", keep_hierarchy)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool, got {v!r}")
        self.datapath = dp = MacDatapath(a_format=a_format, w_format=w_format, terms=terms,
                                         multiplier=multiplier, dialect_input=dialect_input,
                                         acc_sizing=acc_sizing)
        self.product_register = product_register
        self.keep_hierarchy = keep_hierarchy
        members = {
            "a": In(dp.code_bits("a")),
            "w": In(dp.code_bits("w")),
            "valid": In(1),
            "clear": In(1),
        }
        if dp.decodes:
            members.update(a_dialect=In(DIALECT_ID_BITS), w_dialect=In(DIALECT_ID_BITS),
                           a_se=In(SE_FIELD_BITS), w_se=In(SE_FIELD_BITS))
        members["acc"] = Out(signed(dp.acc_bits))
        if dp.decodes:
            members["exp"] = Out(signed(dp.exp_bits))
        super().__init__(members)

    @property
    def latency(self) -> int:
        """Cycles from an input to the ``acc`` that includes it."""
        return 1 + int(self.product_register)

    @property
    def module_name(self) -> str:
        """Verilog module name; carries the parameters (``mac_fp4_e2m1_t64_l1``)."""
        dp = self.datapath
        fmt = dp.a_format if dp.a_format == dp.w_format else f"{dp.a_format}_{dp.w_format}"
        mult = f"_{dp.multiplier.value}" if dp.kind is MacKind.DIALECT else ""
        if dp.decodes:
            mult += "_dec"  # the variant that decodes codes in the MAC
        acc = "" if dp.acc_sizing == "exact" else f"_{dp.acc_sizing}"
        return f"mac_{fmt}{mult}_t{dp.terms}{acc}_l{self.latency}"

    @property
    def lint_waivers(self):
        """Design-specific Verilator waivers (read by :func:`mactile.sim.hdl.lint_waivers`)."""
        if not self.keep_hierarchy:
            return ()
        return (("DECLFILENAME", None,
                 "keep_hierarchy: Amaranth writes the multiplier and accumulator submodules "
                 "into the top module's file as modules named top.sub"),)

    @property
    def waveform_signals(self) -> tuple[str, ...]:
        """Named stage signals (the golden model's stages) kept for waveforms; Amaranth's
        backend may read the expressions they alias instead, so the lint waivers of
        ``mactile generate`` list them."""
        dp = self.datapath
        names = ["product", "addend"]
        if dp.kind is MacKind.FLOAT:
            names += ["a_sig", "a_shift", "w_sig", "w_shift", "mag"]
        elif dp.kind is MacKind.DIALECT:
            names += ["a_q", "w_q"] + (["exp_next"] if dp.decodes else [])
            if dp.multiplier is DialectMultiplier.UINT4:
                names += ["mag"]
            else:
                names += ["a_x", "a_r", "w_x", "w_r", "int4", "residual", "lsb"]
        if self.product_register:
            names += ["product_q", "valid_q", "clear_q"] + (["exp_q"] if dp.decodes else [])
        return tuple(names)

    # ------------------------------------------------------------------ stages
    def _unpack_float(self, m, code, spec, side):
        """sign, significand with hidden bit, shift = max(E, 1) - 1."""
        man = code[:spec.man_bits]
        e = code[spec.man_bits:spec.man_bits + spec.exp_bits]
        sig = Signal(spec.man_bits + 1, name=f"{side}_sig")
        shift = Signal(spec.exp_bits, name=f"{side}_shift")
        m.d.comb += [
            sig.eq(Cat(man, e.any())),
            shift.eq(Mux(e.any(), (e - 1)[:spec.exp_bits], 0)),
        ]
        return code[-1], sig, shift

    def _dialect_q(self, m, code, dialect, side):
        """Sign and the 4-bit unsigned q (value 0.5 * q): the operand's own fields when
        it is dequantized, else the formatbook entry for the code's index."""
        if not self.datapath.decodes:
            q = Signal(4, name=f"{side}_q")
            m.d.comb += q.eq(code[:DEQUANT_BITS - 1])
            return code[DEQUANT_BITS - 1], q
        table = Array(Const(int(q), 4) for q in FORMATBOOK.reshape(-1))
        q = Signal(4, name=f"{side}_q")
        m.d.comb += q.eq(table[Cat(code[:DIALECT_CODE_BITS - 1], dialect)])
        return code[DIALECT_CODE_BITS - 1], q

    def _multiply(self, m, product):
        dp = self.datapath
        if dp.kind is MacKind.INT:
            m.d.comb += product.eq(self.a.as_signed() * self.w.as_signed())
        elif dp.kind is MacKind.FLOAT:
            sa, siga, sha = self._unpack_float(m, self.a, dp.a_spec, "a")
            sw, sigw, shw = self._unpack_float(m, self.w, dp.w_spec, "w")
            mag = Signal(dp.product_bits - 1)
            m.d.comb += [
                mag.eq((siga * sigw) << (sha + shw)),
                product.eq(Mux(sa ^ sw, -mag, mag)),
            ]
        elif dp.multiplier is DialectMultiplier.UINT4:
            sa, qa = self._dialect_q(m, self.a, getattr(self, "a_dialect", None), "a")
            sw, qw = self._dialect_q(m, self.w, getattr(self, "w_dialect", None), "w")
            mag = Signal(8)
            m.d.comb += [
                mag.eq(qa * qw),                      # the 4b x 4b unsigned multiplier
                product.eq(Mux(sa ^ sw, -mag, mag)),  # sign by XOR
            ]
        else:
            self._multiply_int4(m, product)

    def _multiply_int4(self, m, product):
        """Ours-INT4: operand = 2x + r, x = ±(q >> 1) on the INT4 multiplier, r = ±(q & 1)
        handled by gating and shifts (golden: ``MacDatapath.int4_split_product``)."""
        parts = {}
        for side, code, dialect in (("a", self.a, getattr(self, "a_dialect", None)),
                                    ("w", self.w, getattr(self, "w_dialect", None))):
            s, q = self._dialect_q(m, code, dialect, side)
            x = Signal(signed(4), name=f"{side}_x")
            r = Signal(1, name=f"{side}_r")
            m.d.comb += [x.eq(Mux(s, -q[1:], q[1:])), r.eq(q[0])]
            parts[side] = (s, x, r)
        (sa, xa, ra), (sw, xw, rw) = parts["a"], parts["w"]
        int4 = Signal(signed(8))
        residual = Signal(signed(6))
        lsb = Signal(signed(2))
        m.d.comb += [
            int4.eq(xa * xw),  # the stock signed INT4 multiplier
            # x_a * r_w + r_a * x_w with r = ±1 or 0: gate and negate, no multiplier.
            residual.eq(Mux(rw, Mux(sw, -xa, xa), 0) + Mux(ra, Mux(sa, -xw, xw), 0)),
            lsb.eq(Mux(ra & rw, Mux(sa ^ sw, -1, 1), 0)),
            product.eq((int4 << 2) + (residual << 1) + lsb),
        ]

    def _accumulate(self, m, product, valid, clear):
        """``acc <= (clear ? 0 : acc) + (valid ? product : 0)``. The gated product is
        sign-extended to the accumulator width; the sum wraps at ``acc_bits``, which a
        stream of at most ``terms`` products never reaches."""
        addend = Signal(signed(self.datapath.acc_bits))
        m.d.comb += addend.eq(Mux(valid, product, 0))
        m.d.sync += self.acc.eq(Mux(clear, 0, self.acc) + addend)

    def elaborate(self, platform):
        m = Module()
        dp = self.datapath
        product = Signal(signed(dp.product_bits))
        if self.keep_hierarchy:
            m.submodules.multiplier = _Part(lambda mm: self._multiply(mm, product))
        else:
            self._multiply(m, product)

        exp_next = None
        if dp.decodes:
            exp_next = Signal(signed(dp.exp_bits))
            ea = Mux(self.a_se.any(), self.a_se, 1)  # max(E, 1)
            ew = Mux(self.w_se.any(), self.w_se, 1)
            m.d.comb += exp_next.eq(ea + ew - (2 * SE_BIAS - dp.product_lsb_exp))

        acc_m = m
        if self.keep_hierarchy:
            acc_m = Module()
            m.submodules.accumulator = _Wrap(acc_m)
        # Optional pipeline register between multiplier and adder.
        if self.product_register:
            p, v, c = Signal.like(product, name="product_q"), Signal(name="valid_q"), Signal(name="clear_q")
            acc_m.d.sync += [p.eq(product), v.eq(self.valid), c.eq(self.clear)]
            if exp_next is not None:
                e = Signal.like(exp_next, name="exp_q")
                m.d.sync += e.eq(exp_next)
                exp_next = e
        else:
            p, v, c = product, self.valid, self.clear

        self._accumulate(acc_m, p, v, c)
        if exp_next is not None:
            with m.If(v):
                m.d.sync += self.exp.eq(exp_next)
        return m


class _Wrap(Elaboratable):
    """A prebuilt :class:`Module` as a submodule."""

    def __init__(self, module):
        self._module = module

    def elaborate(self, platform):
        return self._module


def build_mac(**params) -> MacUnit:
    """Registry builder: a :class:`MacUnit` from preset/YAML parameters."""
    return MacUnit(**params)
