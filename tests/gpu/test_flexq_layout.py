"""FlexQ packed layout, plane schedule and generated MMA code, checked on the CPU."""
import re

import numpy as np
import pytest

from mactile.golden import IntGroup, bitplane_matmul
from mactile.golden.block import InputError
from mactile.gpu.flexq.codegen import mma_count, tile_source
from mactile.gpu.flexq.layout import (PlaneStep, emulate_gemm_int, evaluate_schedule,
                                      interleave_lanes, lane_major, pack_planes,
                                      pack_quantized, plane_schedule, plane_word,
                                      unpack_planes)


def _popc(v):
    return np.unpackbits(np.ascontiguousarray(v, dtype="<u4").view(np.uint8)
                         .reshape(v.shape + (4,)), axis=-1).sum(-1).astype(np.int64)


@pytest.mark.parametrize("rows,tile,bits", [(1, 8, 6), (13, 8, 8), (37, 16, 6), (16, 16, 6)])
def test_pack_roundtrip(rng, rows, tile, bits):
    x = rng.standard_normal((rows, 384)).astype(np.float32)
    q = IntGroup(bits=bits).quantize(x)
    p = pack_quantized(q, tile=tile)
    words = bits * tile // 8
    v = 4 if words % 4 == 0 else 2
    assert p.planes.shape == (-(-rows // tile), 3, words // v, 32, v)
    assert np.array_equal(interleave_lanes(lane_major(p.planes)), p.planes)
    ints, scales = unpack_planes(p)
    assert np.array_equal(ints, IntGroup(bits=bits).integers(q).reshape(rows, 384))
    assert np.array_equal(scales, q.scales)
    assert not p.scales[:, rows:].any()  # padded rows carry zero scales


@pytest.mark.parametrize("tile,bits", [(16, 6), (8, 6), (8, 8)])
def test_pack_word_bits(rng, tile, bits):
    """Named bits: plane s of q[row, k] is bit (k % 32) of word w = s*(R/8) + h of lane
    4g + c, stored lane-interleaved at ((w // V) * 32 + lane) * V + w % V of its block."""
    words, v = bits * tile // 8, (4 if bits * tile // 8 % 4 == 0 else 2)
    lim = 1 << (bits - 1)
    q = rng.integers(-lim, lim, size=(tile, 256))
    p = pack_planes(q, np.ones((tile, 2), np.uint16), bits=bits, tile=tile)
    block = p.planes.reshape(1, 2, 32 * words)
    for row, k, s in [(0, 0, 0), (tile - 7, 77, bits - 1), (tile - 1, 255, 3), (7, 160, 1)]:
        h, g, c, j = row // 8, row % 8, (k % 128) // 32, k % 32
        lane, w = 4 * g + c, s * (tile // 8) + h
        off = ((w // v) * 32 + lane) * v + w % v
        assert off == plane_word(lane, w, words)
        word = int(block[0, k // 128, off])
        assert (word >> j) & 1 == ((int(q[row, k]) & (2 * lim - 1)) >> s) & 1


def test_pack_errors():
    with pytest.raises(InputError, match="multiple of the group size 128"):
        pack_planes(np.zeros((4, 100), int), np.zeros((4, 1), np.uint16), bits=6, tile=8)
    with pytest.raises(InputError, match="outside the 6-bit range"):
        pack_planes(np.full((4, 128), 40), np.zeros((4, 1), np.uint16), bits=6, tile=8)
    with pytest.raises(InputError, match="scales must be uint16"):
        pack_planes(np.zeros((4, 128), int), np.zeros((4, 2), np.uint16), bits=6, tile=8)
    with pytest.raises(ValueError, match="tile must be 16"):
        pack_planes(np.zeros((4, 128), int), np.zeros((4, 1), np.uint16), bits=6, tile=4)


@pytest.mark.parametrize("bw,ba", [(6, 6), (6, 8), (4, 8), (2, 3)])
def test_schedule_covers_every_pair_once(bw, ba):
    steps = plane_schedule(bw, ba)
    pairs = [p for st in steps for p in st.pos + st.neg]
    assert sorted(pairs) == [(s, t) for s in range(bw) for t in range(ba)]
    assert [st.k for st in steps] == list(range(bw + ba - 2, -1, -1))


def test_schedule_equals_integer_product_exhaustive():
    """Every pair of INT6 x INT6 and INT6 x INT8 values, through Horner on the bit planes."""
    for ba in (6, 8):
        a = np.arange(-32, 32)[:, None] * np.ones((1, 1 << ba), int)
        b = np.ones((64, 1), int) * np.arange(-(1 << (ba - 1)), 1 << (ba - 1))[None, :]
        pa, pb = (a & 63), (b & ((1 << ba) - 1))
        got = evaluate_schedule(plane_schedule(6, ba),
                                lambda s, t: ((pa >> s) & 1) * ((pb >> t) & 1))
        assert np.array_equal(got, a * b)


def test_broken_schedule_fails():
    """A schedule that forgets the negative MSB plane (all weights positive) is caught."""
    steps = [PlaneStep(st.k, st.pos + st.neg, ()) for st in plane_schedule(6, 6)]
    a = np.arange(-32, 32)[:, None] * np.ones((1, 64), int)
    b = a.T
    got = evaluate_schedule(steps, lambda s, t: (((a & 63) >> s) & 1) * (((b & 63) >> t) & 1))
    assert not np.array_equal(got, a * b)


def _run_generated(src, w, x):
    """Interpret the generated CUDA body: the b1 MMAs (k256/k128) as per-thread popcounts of words."""
    env = {"w": w, "x": x, "z": np.zeros(4, np.int64), "acc": None, "n": None}

    def val(tok):
        tok = tok.strip()
        if tok == "0u":
            return np.uint32(0)
        m = re.fullmatch(r"([wx])\[(\d+)\]", tok)
        return env[m.group(1)][int(m.group(2))]

    body = src.split("{", 2)[2]
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("mma_b1_and_popc_"):
            name, args = line.split("(", 1)
            args = [a.strip() for a in args.rstrip(");").split(",")]
            dst, ops, c = args[0], args[1:-1], args[-1]
            cin = env[c]
            if name.endswith("k256"):
                a0, _, a2, _, b0, b1 = ops
                d = cin + _popc(val(a0) & val(b0)) + _popc(val(a2) & val(b1))
            else:
                a0, _, b0 = ops
                d = cin + _popc(val(a0) & val(b0))
            env[dst] = d
        elif line.startswith("neg("):
            env["acc"] = -env["n"]
        elif line.startswith("acc[0] = "):
            env["acc"] = np.zeros(4, np.int64)
        elif line.startswith("dbl_sub"):
            env["acc"] = 2 * env["acc"] - env["n"]
        elif line.startswith("dbl("):
            env["acc"] = 2 * env["acc"]
    return env["acc"]


@pytest.mark.parametrize("ba", [6, 8])
@pytest.mark.parametrize("singles", ["k128", "k256"])
def test_generated_tile_code(rng, ba, singles):
    """The emitted MMA sequence (operand words, Horner steps) computes sum w_s w_t popc."""
    src = tile_source(6, ba, singles=singles)
    from mactile.golden.intgroup import plane_weights
    ws, wt = plane_weights(6), plane_weights(ba)
    for _ in range(20):
        w = rng.integers(0, 2**32, size=12, dtype=np.uint64).astype(np.uint32)
        x = rng.integers(0, 2**32, size=ba, dtype=np.uint64).astype(np.uint32)
        got = _run_generated(src, w, x)
        # h = 0 only (the interpreter follows register a0 / rows g); per-thread partial.
        ref = sum(int(ws[s] * wt[t]) * _popc(w[2 * s] & x[t]) for s in range(6) for t in range(ba))
        assert got[0] == ref


def test_mma_counts():
    assert mma_count(6, 6) == {"k256": 15, "k128": 6}
    assert mma_count(6, 8) == {"k256": 19, "k128": 10}


@pytest.mark.parametrize("m,n,ba", [(1, 16, 6), (11, 37, 8), (8, 32, 6)])
def test_emulated_kernel_layout_matches_golden(rng, m, n, ba):
    """Lane-by-lane gather of the packed words, as the kernel reads them, gives golden ints."""
    w = rng.standard_normal((n, 256)).astype(np.float16)
    x = (rng.standard_normal((m, 256)) * 3).astype(np.float16)
    qw, qx = IntGroup(bits=6).quantize(w), IntGroup(bits=ba).quantize(x)
    got = emulate_gemm_int(pack_quantized(qw, tile=16), pack_quantized(qx, tile=8))
    iw = IntGroup(bits=6).integers(qw).reshape(n, 256)
    ix = IntGroup(bits=ba).integers(qx).reshape(m, 256)
    for g in range(2):
        sl = slice(128 * g, 128 * g + 128)
        assert np.array_equal(got[:, :, g], bitplane_matmul(ix[:, sl], iw[:, sl], ba, 6))


def test_choose_config_small_m_rule():
    """M <= 8: 32-row blocks unless that grid has no more blocks than SMs (then 16 rows)."""
    from mactile.gpu.flexq.kernels import SMALL_M_CONFIG, SMALL_M_NARROW_CONFIG, choose_config
    assert choose_config(1, 4096, 32, sms=132) == SMALL_M_NARROW_CONFIG   # 128 blocks
    assert choose_config(8, 4096, 112, sms=132) == SMALL_M_NARROW_CONFIG  # K does not count
    assert choose_config(1, 4224, 32, sms=132) == SMALL_M_NARROW_CONFIG   # 264 tiles: 132 blocks
    assert choose_config(1, 4225, 32, sms=132) == SMALL_M_CONFIG          # 265 tiles: 133 blocks
    assert choose_config(4, 6144, 32, sms=132) == SMALL_M_CONFIG          # 192 blocks
    assert choose_config(9, 4096, 32, sms=132).mt == 2
