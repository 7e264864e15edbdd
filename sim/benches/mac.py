"""Testbench of the BlockDialect Table 5 MAC units (:class:`mactile.rtl.mac.unit.MacUnit`).

Suites
------
``random`` (default)
    The named accumulator corner cases (:meth:`MacBench.corner_streams`), then random
    ``terms``-long dot products until ``count`` vectors: half with codes from the golden
    quantizers applied to Gaussian data (the codes a :class:`mactile.golden.Quantized`
    carries; DialectFP4 activations by the two-stage procedure, weights by MSE), half with
    uniform codes, dialects and shared exponents; one cycle in 17 is a bubble
    (``valid = 0``) carrying garbage operands.
``exhaustive``
    Every operand pair with signs (every code pair; for DialectFP4 every dialect pair too),
    one product per sum (``clear`` each cycle), so ``acc`` is the product; for DialectFP4
    also every pair of shared-exponent fields. Then the corner cases.

A checked vector is one (cycle, lane) whose outputs are compared: every cycle of every
sum is checked, bubbles included.
"""
from __future__ import annotations

import numpy as np

from mactile.golden.dialect import FORMATBOOK, N_DIALECTS, DialectFP4, DialectSelect
from mactile.golden.mac import (DIALECT_CODE_BITS, SE_FIELD_BITS, MacDatapath, MacKind)

from ..bench import Bench, Mismatch, Stream, Vectors, pack_streams

__all__ = ["MacBench", "dequantize_codes"]


def dequantize_codes(codes, dialect) -> np.ndarray:
    """DialectFP4 codes ``sign << 3 | index`` of blocks of dialect ``dialect`` as the
    dequantizer's 5-bit ``sign << 4 | q`` (golden formatbook; Sec. 3.3, Fig. 6)."""
    c = np.asarray(codes, np.int64)
    q = FORMATBOOK[np.asarray(dialect, np.int64), c & 7].astype(np.int64)
    return ((c >> 3) << 4) | q

DEFAULT_RANDOM_VECTORS = 65536
BUBBLE_EVERY = 17  # about one cycle in 17 of a random sum is a bubble


class MacBench(Bench):
    """Vectors and golden expectations for a :class:`~mactile.rtl.mac.unit.MacUnit`.

    Takes the MAC's parameters (``product_register`` changes only the latency, which the
    harness reads from the component).
    """

    suites = ("random", "exhaustive")
    fixed_suites = ("exhaustive",)

    def __init__(self, *, a_format: str, w_format: str, terms: int = 64,
                 multiplier: str = "uint4", dialect_input: str = "codes",
                 acc_sizing: str = "exact", product_register: bool = False,
                 keep_hierarchy: bool = False):
        self.dp = MacDatapath(a_format=a_format, w_format=w_format, terms=terms,
                              multiplier=multiplier, dialect_input=dialect_input,
                              acc_sizing=acc_sizing)

    @property
    def dialect(self) -> bool:
        """DialectFP4 with ``codes`` operands: the dialect-id/exponent ports and ``exp``."""
        return self.dp.decodes

    @property
    def dequantized(self) -> bool:
        """DialectFP4 with the dequantizer's ``sign << 4 | q`` operands."""
        return self.dp.kind is MacKind.DIALECT and not self.dp.decodes

    # ------------------------------------------------------------------ helpers
    def _stream(self, name, a, w, valid, clear, *, ad=None, wd=None, ase=None, wse=None):
        n = len(a)
        s = {"a": np.asarray(a), "w": np.asarray(w), "valid": np.asarray(valid, np.int64),
             "clear": np.asarray(clear, np.int64)}
        if self.dialect:
            for port, v in (("a_dialect", ad), ("w_dialect", wd), ("a_se", ase), ("w_se", wse)):
                s[port] = np.broadcast_to(np.asarray(0 if v is None else v, np.int64), (n,)).copy()
        return Stream(name, s)

    def _extreme_pair(self, which):
        """Operands (and dialects) of the largest (``max``) or smallest (``min``) product."""
        t = self.dp.product_table
        i = int(np.argmax(t) if which == "max" else np.argmin(t))
        idx = np.unravel_index(i, t.shape)
        if self.dialect:
            d_a, d_w, a, w = (int(x) for x in idx)
            return a, w, d_a, d_w
        return int(idx[0]), int(idx[1]), 0, 0

    def _sum(self, name, pairs, *, clear_at=(0,), valid=None, se=(17, 17)):
        """A stream of products given as a list of ``(a, w, d_a, d_w)``."""
        a, w, da, dw = (np.array(x) for x in zip(*pairs))
        n = len(a)
        v = np.ones(n, np.int64) if valid is None else np.asarray(valid, np.int64)
        c = np.zeros(n, np.int64)
        c[list(clear_at)] = 1
        return self._stream(name, a, w, v, c, ad=da, wd=dw, ase=se[0], wse=se[1])

    # ------------------------------------------------------------------ suites
    def corner_streams(self) -> list[Stream]:
        """Named accumulator corner cases; each starts with ``clear``."""
        T = self.dp.terms
        hi, lo = self._extreme_pair("max"), self._extreme_pair("min")
        zero = (0, 0, 0, 0)
        s = [
            self._sum("max positive sum", [hi] * T),
            self._sum("max negative sum", [lo] * T),
            self._sum("back-to-back blocks (max, min, max, min)", ([hi] * T + [lo] * T) * 2,
                      clear_at=(0, T, 2 * T, 3 * T)),
            self._sum("clear mid-stream (with a product)", [hi] * (T // 2 + 3) + [hi] * T,
                      clear_at=(0, T // 2 + 3)),
            self._sum("clear mid-stream (without a product), then idle",
                      [hi] * 5 + [zero] * 3 + [lo] * T,
                      clear_at=(0, 5), valid=[1] * 5 + [0] * 3 + [1] * T),
            self._sum("bubbles hold the sum", [hi, lo] * T,
                      valid=[1, 0] * T),
            self._sum("alternating extremes", [hi, lo] * (T // 2)),
            self._sum("products with zero and negative zero", [
                (0, hi[1], hi[2], hi[3]), (hi[0], 1 << (self.dp.code_bits("w") - 1), hi[2], hi[3]),
                (1 << (self.dp.code_bits("a") - 1), lo[1], lo[2], lo[3]), hi]),
        ]
        if self.dialect:
            top = (1 << SE_FIELD_BITS) - 1
            for ea, ew in ((0, 0), (1, 1), (0, top), (top, 0), (top, top), (17, 17)):
                s.append(self._sum(f"shared exponents E_a={ea} E_w={ew}", [hi, lo, hi],
                                   se=(ea, ew)))
        return s

    def exhaustive_streams(self, lanes: int, rng) -> list[Stream]:
        """Every operand pair (and dialect pair), one product per sum."""
        na, nw = 1 << self.dp.code_bits("a"), 1 << self.dp.code_bits("w")
        if self.dialect:
            grid = np.indices((N_DIALECTS, N_DIALECTS, na, nw)).reshape(4, -1)
            da, dw, a, w = grid
            ne = 1 << SE_FIELD_BITS
            ea, ew = rng.integers(0, ne, size=(2, a.size))
            # Every pair of shared-exponent fields, on random operands.
            se_a, se_w = np.indices((ne, ne)).reshape(2, -1)
            k = se_a.size
            da = np.concatenate([da, rng.integers(0, N_DIALECTS, k)])
            dw = np.concatenate([dw, rng.integers(0, N_DIALECTS, k)])
            a = np.concatenate([a, rng.integers(0, na, k)])
            w = np.concatenate([w, rng.integers(0, nw, k)])
            ea, ew = np.concatenate([ea, se_a]), np.concatenate([ew, se_w])
        else:
            a, w = np.indices((na, nw)).reshape(2, -1)
            da = dw = ea = ew = np.zeros_like(a)
        n = a.size
        per = -(-n // lanes)
        out = []
        for lo in range(0, n, per):
            sl = slice(lo, lo + per)
            m = len(a[sl])
            out.append(self._stream("exhaustive operand pairs", a[sl], w[sl], np.ones(m),
                                    np.ones(m), ad=da[sl], wd=dw[sl], ase=ea[sl], wse=ew[sl]))
        return out

    def _golden_codes(self, n, rng, x=None):
        """Codes of ``n`` sums quantized by the golden models from Gaussian data with a few
        outliers (or from ``x``, ``(2, n, terms)`` activations and weights, as they are):
        ``(a, w, d_a, d_w, se_a, se_w)``, each ``(n, terms)`` or ``(n,)``."""
        T = self.dp.terms
        real = x is not None
        if not real:
            x = rng.standard_normal((2, n, T))
            x *= np.where(rng.random((2, n, T)) < 0.03, 8.0, 1.0)  # outliers
        if self.dialect:
            out = []
            for xi, sel in ((x[0], DialectSelect.TWO_STAGE), (x[1], DialectSelect.MSE)):
                q = DialectFP4(block_size=T, select=sel).quantize(
                    xi if real else xi * np.exp2(rng.integers(-14, 8, size=(n, 1))))
                out.append((q.codes.reshape(n, T), q.meta.reshape(n), q.scales.reshape(n)))
            (a, da, ea), (w, dw, ew) = out
            return a, w, da, dw, ea, ew
        if self.dequantized:
            # The dequantizer's output for golden-quantized blocks: sign << 4 | q.
            ga, gw, gda, gdw, _, _ = MacBench(a_format="dialectfp4", w_format="dialectfp4",
                                              terms=T)._golden_codes(n, rng, x)
            z = np.zeros(n, np.int64)
            return (dequantize_codes(ga, gda[:, None]), dequantize_codes(gw, gdw[:, None]),
                    z, z, z, z)
        codes = []
        for xi, spec in ((x[0], self.dp.a_spec), (x[1], self.dp.w_spec)):
            amax = np.abs(xi).max(axis=1, keepdims=True)
            scale = spec.max_value / np.where(amax > 0, amax, 1.0)
            codes.append(spec.encode(xi * scale))
        z = np.zeros(n, np.int64)
        return codes[0], codes[1], z, z, z, z

    def random_sums(self, n: int, rng) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """``n`` random ``terms``-long sums with bubbles: ``({port: (n, L)}, golden)``,
        ``golden[k]`` telling whether sum ``k`` has golden-quantized codes."""
        T = self.dp.terms
        L = T + max(1, T // (BUBBLE_EVERY - 1))  # cycles per sum, bubbles included
        na, nw = 1 << self.dp.code_bits("a"), 1 << self.dp.code_bits("w")
        ng = n // 2 if (self.dp.kind is not MacKind.DIALECT
                        or T in DialectFP4.allowed_block_sizes) else 0
        a = rng.integers(0, na, (n, T))
        w = rng.integers(0, nw, (n, T))
        da, dw = rng.integers(0, N_DIALECTS, (2, n))
        ea, ew = rng.integers(0, 1 << SE_FIELD_BITS, (2, n))
        if ng:
            ga, gw, gda, gdw, gea, gew = self._golden_codes(ng, rng)
            a[:ng], w[:ng] = ga, gw
            if self.dialect:
                da[:ng], dw[:ng], ea[:ng], ew[:ng] = gda, gdw, gea, gew
        # Valid positions: the first cycle (with clear) and T - 1 of the other L - 1.
        rest = np.argsort(rng.random((n, L - 1)), axis=1)[:, :T - 1] + 1
        valid = np.zeros((n, L), np.int64)
        valid[:, 0] = 1
        np.put_along_axis(valid, rest, 1, axis=1)
        pos = np.clip(np.cumsum(valid, axis=1) - 1, 0, T - 1)
        rows = np.arange(n)[:, None]
        # Bubbles carry garbage operands, which the unit must ignore.
        out = {"a": np.where(valid == 1, a[rows, pos], rng.integers(0, na, (n, L))),
               "w": np.where(valid == 1, w[rows, pos], rng.integers(0, nw, (n, L))),
               "valid": valid, "clear": np.zeros((n, L), np.int64)}
        out["clear"][:, 0] = 1
        if self.dialect:
            for port, v in (("a_dialect", da), ("w_dialect", dw), ("a_se", ea), ("w_se", ew)):
                out[port] = np.repeat(v[:, None], L, axis=1)
        return out, np.arange(n) < ng

    def workload_vectors(self, workload, cycles: int, rng, reuse=None) -> dict[str, np.ndarray]:
        """Stimulus of a real layer (:class:`mactile.sim.workloads.Workload`): its dot
        products in ``terms``-long sums, one term per cycle, no bubbles, operands
        quantized per sum by the golden quantizers (integer/float: scaled to the format's
        maximum; DialectFP4: two-stage activations, MSE weights). ``{port: (cycles,)}``."""
        from mactile.sim.workloads import dot_operands

        T = self.dp.terms
        n = -(-cycles // T)
        xa, xw = dot_operands(workload, T, n)
        n = len(xa)
        a, w, da, dw, ea, ew = self._golden_codes(n, rng, np.stack([xa, xw]))
        out = {"a": a.reshape(-1), "w": w.reshape(-1), "valid": np.ones(n * T, np.int64),
               "clear": np.tile(np.arange(T) == 0, n).astype(np.int64)}
        if self.dialect:
            for port, v in (("a_dialect", da), ("w_dialect", dw), ("a_se", ea), ("w_se", ew)):
                out[port] = np.repeat(np.asarray(v), T)
        return {k: np.asarray(v, np.int64)[:cycles] for k, v in out.items()}

    def vectors(self, suite, *, lanes, count, rng) -> Vectors:
        self.check_suite(suite)
        corners = self.corner_streams()
        if suite == "exhaustive":
            streams = self.exhaustive_streams(lanes, rng) + corners
            inputs, mask, labels, names, _ = pack_streams(streams, lanes)
        else:
            inputs, mask, labels, names, _ = pack_streams(corners, lanes)
            want = DEFAULT_RANDOM_VECTORS if count is None else count
            left = want - int(mask.sum())
            if left > 0:
                # Equal-length random sums, dealt round-robin to the lanes after the corners.
                n_sums = -(-left // (self.dp.terms + max(1, self.dp.terms // (BUBBLE_EVERY - 1))))
                n_sums = -(-n_sums // lanes) * lanes
                block, golden = self.random_sums(n_sums, rng)
                L = block["a"].shape[1]

                def deal(x):  # (n_sums, L) -> (n_sums // lanes * L, lanes)
                    return x.reshape(-1, lanes, L).transpose(0, 2, 1).reshape(-1, lanes)

                for port, v in block.items():
                    inputs[port] = np.concatenate([inputs[port], deal(v)])
                names = names + ["random sum (golden-quantized codes)", "random sum (uniform codes)"]
                lab = np.where(golden, len(names) - 2, len(names) - 1)
                labels = np.concatenate([labels, deal(np.repeat(lab[:, None], L, axis=1))])
                mask = np.concatenate([mask, np.ones((n_sums // lanes * L, lanes), bool)])
        expected = self.golden(inputs)
        return Vectors(inputs, expected, mask, labels=labels, label_names=names,
                       notes={"corner cases": [s.name for s in corners]})

    # ------------------------------------------------------------------ golden
    def golden(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Expected ``acc`` (and ``exp``) after each cycle's inputs, from reset."""
        dp = self.dp
        valid, clear = inputs["valid"], inputs["clear"]
        dp.check_stream(valid=valid, clear=clear)
        if self.dialect:
            p = dp.product(inputs["a"], inputs["w"], a_dialect=inputs["a_dialect"],
                           w_dialect=inputs["w_dialect"])
        else:
            p = dp.product(inputs["a"], inputs["w"])
        out = {"acc": dp.accumulate(p, valid=valid, clear=clear)}
        if self.dialect:
            e = dp.block_end(inputs["a_se"], inputs["w_se"])
            # The exponent register loads on valid cycles and holds otherwise (0 at reset).
            t = np.arange(len(valid))[:, None]
            last = np.maximum.accumulate(np.where(valid == 1, t, -1), axis=0)
            held = np.take_along_axis(e, np.maximum(last, 0), axis=0)
            out["exp"] = np.where(last >= 0, held, 0)
        return out

    # ------------------------------------------------------------------ reports
    def describe(self, vectors: Vectors, mismatch: Mismatch, got) -> str:
        dp, c, l = self.dp, mismatch.cycle, mismatch.lane
        ins = {p: int(v[c, l]) for p, v in vectors.inputs.items()}
        lane_clear = vectors.inputs["clear"][:c + 1, l]
        lane_valid = vectors.inputs["valid"][:c + 1, l]
        starts = np.flatnonzero(lane_clear)
        start = int(starts[-1]) if starts.size else 0
        term = int(lane_valid[start:].sum())
        da, dw = ins.get("a_dialect"), ins.get("w_dialect")
        a_txt = dp.decode_operand(ins["a"], "a", da)
        w_txt = dp.decode_operand(ins["w"], "w", dw)
        prod = int(dp.product(np.array(ins["a"]), np.array(ins["w"]),
                              a_dialect=None if da is None else np.array(da),
                              w_dialect=None if dw is None else np.array(dw)))
        exp_acc = int(vectors.expected["acc"][c, l])
        got_acc = int(got["acc"][c, l])
        prev = int(vectors.expected["acc"][c - 1, l]) if c > 0 else 0
        lab = vectors.label(c, l)
        unit = f" x 2^{dp.product_lsb_exp}" if dp.product_lsb_exp else ""
        txt = (f"cycle {c} lane {l} [{lab}], term {term} of the sum since cycle {start}: "
               f"a={a_txt} w={w_txt} valid={ins['valid']} clear={ins['clear']}"
               f" (product {prod}{unit}); acc expected {exp_acc} got {got_acc}"
               f" (expected acc before: {prev})")
        if self.dialect:
            txt += (f"; a_se={ins['a_se']} w_se={ins['w_se']}: exp expected "
                    f"{int(vectors.expected['exp'][c, l])} got {int(got['exp'][c, l])}")
        return txt
