"""CUDA source for FlexQ's plane-pair schedules, generated from :func:`plane_schedule`.

Each ``FlexqTile<P, Q>::run(w, x, acc)`` computes one 16 x 8 integer tile of one group
with Horner's rule in the MMA accumulator::

    acc_k = 2 * acc_{k+1} + sum_{w_s w_t = +2^k} popc(W_s & X_t) - sum_{w_s w_t = -2^k} popc(W_s & X_t)

Same-weight pairs share one ``m16n8k256`` (one pair per 128-wide K half); an odd pair out
uses ``m16n8k128`` (``singles='k128'``) or a 256-wide MMA with a zero half
(``singles='k256'``). Register words: ``w[2*s + h]`` is weight plane s, rows g + 8h;
``x[t]`` is activation plane t (see :mod:`.layout`).
"""
from __future__ import annotations

from .layout import plane_schedule

__all__ = ["tile_source", "schedule_source", "mma_count"]

SINGLES = ("k128", "k256")


def _chain(pairs, dst: str, init: str, singles: str) -> list[str]:
    """MMAs accumulating ``pairs`` into ``dst``, the first one reading ``init``."""
    lines, src = [], init
    pairs = list(pairs)
    while pairs:
        if len(pairs) >= 2:
            (s0, t0), (s1, t1) = pairs[0], pairs[1]
            pairs = pairs[2:]
            lines.append(f"mma_b1_and_popc_m16n8k256({dst}, w[{2*s0}], w[{2*s0+1}], w[{2*s1}], w[{2*s1+1}], "
                         f"x[{t0}], x[{t1}], {src});")
        else:
            (s0, t0), = pairs
            pairs = []
            if singles == "k128":
                lines.append(f"mma_b1_and_popc_m16n8k128({dst}, w[{2*s0}], w[{2*s0+1}], x[{t0}], {src});")
            else:
                lines.append(f"mma_b1_and_popc_m16n8k256({dst}, w[{2*s0}], w[{2*s0+1}], 0u, 0u, x[{t0}], 0u, {src});")
        src = dst
    return lines


def tile_source(bits_w: int, bits_a: int, *, singles: str = "k128") -> str:
    """``template<> struct FlexqTile<bits_w, bits_a>`` for one schedule."""
    if singles not in SINGLES:
        raise ValueError(f"singles must be one of {SINGLES}, got {singles!r}")
    body = ["const int z[4] = {0, 0, 0, 0};", "int n[4];"]
    first = True
    for st in plane_schedule(bits_w, bits_a):
        body.append(f"// 2^{st.k}: +{list(st.pos)} -{list(st.neg)}")
        if st.neg:
            body += _chain(st.neg, "n", "z", singles)
        if first:
            if st.neg:
                body.append("neg(acc, n);")
            else:
                body.append("acc[0] = acc[1] = acc[2] = acc[3] = 0;")
        else:
            body.append("dbl_sub(acc, n);" if st.neg else "dbl(acc);")
        if st.pos:
            if first and not st.neg:
                body += _chain(st.pos, "acc", "z", singles)
            else:
                body += _chain(st.pos, "acc", "acc", singles)
        first = False
    inner = "\n    ".join(body)
    return (f"template <> struct FlexqTile<{bits_w}, {bits_a}> {{\n"
            f"  static __device__ __forceinline__ void run(const uint32_t (&w)[{2*bits_w}], "
            f"const uint32_t (&x)[{bits_a}], int (&acc)[4]) {{\n    {inner}\n  }}\n}};\n")


def schedule_source(pairs=((6, 6), (6, 8)), *, singles: str = "k128") -> str:
    """Every schedule the kernels instantiate, inside ``namespace flexq``."""
    return ("namespace flexq {\n"
            + "".join(tile_source(p, q, singles=singles) for p, q in pairs)
            + "}  // namespace flexq\n")


def mma_count(bits_w: int, bits_a: int) -> dict:
    """MMAs per 16x8 tile and group: ``{'k256': n, 'k128': n}`` (singles as k128)."""
    n256 = n128 = 0
    for st in plane_schedule(bits_w, bits_a):
        for pairs in (st.pos, st.neg):
            n256 += len(pairs) // 2
            n128 += len(pairs) % 2
    return {"k256": n256, "k128": n128}
