"""mactile.fast.recode against convert's golden path (dequantize as the library does,
golden quantize, golden error): every scale word x every largest code magnitude x every
code, each input layout, target conventions and nibble orders; array_equal on the bytes."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mactile.fast.recode import applies, recode_layer
from mactile.golden import MXFP4, NVFP4, RaZeR
from mactile.golden import checkpoints as C
from mactile.golden.block import InputError
from mactile.golden.conventions import (Convention, ElementScaling, ElementTies, MXScaleRule,
                                        NegativeZero, ScaleArgument)
from mactile.golden.elements import FP4_E2M1

F32 = np.float32
LAYOUT_FMT = {"compressed-tensors-nvfp4": NVFP4, "modelopt-nvfp4": NVFP4,
              "compressed-tensors-mxfp4": MXFP4, "gpt-oss-mxfp4": MXFP4}


def golden_recode(p: C.PackedLayer, fmt, out_layout: C.Layout):
    """What convert's golden path writes for the layer: (bytes, scales, tensor scale, mse,
    sqnr), or the InputError it raises."""
    w = p.unpacked()
    x = C.model_values(C.dequantize_layer(w, transpose=False), p.layout.model_dtype)
    q = fmt.quantize(x)
    mse, sqnr = C.requant_error(x, q)
    nw = C.layer_from_quantized(w.base, q, out_layout, shape=x.shape)
    t = C.layer_tensors(nw)
    return t[0][3](), t[1][3](), q.tensor_scale, mse, sqnr


def exhaustive_layer(layout: C.Layout, rng, *, global_scale=None, scale_codes=None):
    """A layer with one block per (scale word, largest magnitude m) pair, its codes every
    code of magnitude <= m in a random order (the rest random codes <= m)."""
    src = LAYOUT_FMT[layout.name]()
    bs = src.block_size
    codes_all = np.arange(FP4_E2M1.code_count, dtype=np.uint8)
    words = np.arange(256) if scale_codes is None else np.asarray(scale_codes)
    if src.name == "nvfp4":
        words = words[(words & 0x7F) != 0x7F]  # read_layer refuses NaN and negative scales
        words = words[words < 0x80]
    else:
        words = words[words != 0xFF]
    rows, scales = [], []
    for s, m in itertools.product(words, range(FP4_E2M1.sign_mask)):
        ok = codes_all[(codes_all & 7) <= m]
        block = np.concatenate([ok, rng.choice(ok, bs - ok.size)])
        rng.shuffle(block)
        rows.append(block)
        scales.append(s)
    codes = np.asarray(rows, dtype=np.uint8)
    n = codes.shape[0]
    pad = (-n) % 4
    codes = np.concatenate([codes, codes[:pad]])
    scales = np.asarray(scales + scales[:pad], dtype=np.uint8)
    lead = (4, codes.shape[0] // 4)  # [N, K]: 4 rows of blocks
    packed = C._pack(codes.reshape(lead[0], -1), layout.nibble_order)
    if layout.grouped_codes:
        packed = packed.reshape(lead[0], lead[1], bs // 2)
    t = stored = None
    if src.storage.tensor_scale:
        stored = F32(global_scale if global_scale is not None else 2688.0 / 3.0)
        t = F32(F32(1.0) / stored) if layout.global_scale is C.GlobalScale.DIVIDE else stored
    return C.PackedLayer(base="l", layout=layout, format=src, packed=packed,
                         scales=scales.reshape(lead), tensor_scale=t,
                         shape=(lead[0], lead[1] * bs), n_blocks=lead[1], stored_global=stored)


def assert_recode_is_golden(p, fmt, out_layout, *, expect_fast=True):
    try:
        want = golden_recode(p, fmt, out_layout)
    except InputError:
        assert recode_layer(p, fmt, out_layout.nibble_order) is None  # golden path: its error
        return None
    got = recode_layer(p, fmt, out_layout.nibble_order)
    if got is None:
        assert not expect_fast, "fast path declined an ordinary layer"
        return None
    packed, scales, t, mse, sqnr = got
    np.testing.assert_array_equal(packed.reshape(-1), want[0].reshape(-1))
    assert packed.dtype == np.uint8
    np.testing.assert_array_equal(scales.reshape(-1), want[1].reshape(-1))
    assert (t is None) == (want[2] is None) and (t is None or t.tobytes() == want[2].tobytes())
    assert math.isclose(mse, want[3], rel_tol=1e-12, abs_tol=0)
    assert sqnr == want[4] or math.isclose(sqnr, want[4], rel_tol=1e-12)
    return got


def _out_layout(fmt, order: C.NibbleOrder) -> C.Layout:
    import dataclasses
    return dataclasses.replace(C.LAYOUTS["mactile"], nibble_order=order)


NV_TARGETS = [Convention(), Convention(tensor_scale=False),
              Convention(block_scale_floor=2.0 ** -6, scale_argument=ScaleArgument.SEQUENTIAL,
                         element_scaling=ElementScaling.RECIPROCAL),
              Convention(element_ties=ElementTies.AWAY, negative_zero=NegativeZero.POSITIVE),
              Convention(negative_zero=NegativeZero.POSITIVE_AFTER_SCALING)]
MX_TARGETS = [Convention(mx_scale_rule=r) for r in MXScaleRule] + [
    Convention(element_ties=ElementTies.AWAY, negative_zero=NegativeZero.POSITIVE_AFTER_SCALING),
    Convention(negative_zero=NegativeZero.POSITIVE)]


@pytest.mark.parametrize("layout", ["compressed-tensors-nvfp4", "modelopt-nvfp4"])
@pytest.mark.parametrize("conv", NV_TARGETS, ids=lambda c: c.label("nvfp4"))
def test_nvfp4_every_scale_word_magnitude_and_code(layout, conv, rng):
    lay = C.LAYOUTS[layout]
    p = exhaustive_layer(lay, rng)
    assert assert_recode_is_golden(p, NVFP4(convention=conv), lay) is not None
    for order in C.NibbleOrder:
        assert_recode_is_golden(p, NVFP4(convention=conv), _out_layout(NVFP4, order))


@pytest.mark.parametrize("layout", ["compressed-tensors-mxfp4", "gpt-oss-mxfp4"])
@pytest.mark.parametrize("conv", MX_TARGETS, ids=lambda c: c.label("mxfp4"))
def test_mxfp4_every_scale_word_magnitude_and_code(layout, conv, rng):
    lay = C.LAYOUTS[layout]
    fmt = MXFP4(convention=conv)
    # the E8M0 extremes make BF16 Inf/zero and blocks beyond the quantizer's range: those
    # go to the golden path (None) whose own error the test checks
    assert_recode_is_golden(exhaustive_layer(lay, rng), fmt, lay, expect_fast=False)
    # the ordinary range: the fast path takes every block
    p = exhaustive_layer(lay, rng, scale_codes=np.arange(60, 200))
    assert assert_recode_is_golden(p, fmt, lay) is not None
    for order in C.NibbleOrder:
        assert_recode_is_golden(p, fmt, _out_layout(MXFP4, order))


@pytest.mark.parametrize("g", [1.0, 2688.0 / 3.0, 1e-30, 3e35, 0.37])
def test_nvfp4_global_scales(g, rng):
    """Global scales far from the usual (the dequantized values then span other binades,
    E4M3 subnormal source scales included): still the fast path, still the golden bytes."""
    lay = C.LAYOUTS["compressed-tensors-nvfp4"]
    assert assert_recode_is_golden(exhaustive_layer(lay, rng, global_scale=g), NVFP4(),
                                   lay) is not None


@pytest.mark.parametrize("layout, to", [("compressed-tensors-nvfp4", NVFP4()),
                                        ("modelopt-nvfp4", NVFP4()),
                                        ("compressed-tensors-mxfp4", MXFP4()),
                                        ("gpt-oss-mxfp4", MXFP4())])
def test_random_layers(layout, to, rng):
    lay = C.LAYOUTS[layout]
    bs = to.block_size
    for trial in range(3):
        n, nb = 64, 48
        codes = rng.integers(0, 16, (n, nb * bs), dtype=np.uint8)
        codes[: 5 + trial, :bs] = rng.choice([0, 8], (5 + trial, bs))  # zero blocks
        # scale words: trial 0 so few that (word, magnitude) keys index bytes in uint16
        lo, width = {("nvfp4", True): (0x18, 64), ("nvfp4", False): (0x30, 30),
                     ("mxfp4", True): (110, 30), ("mxfp4", False): (120, 10)}[to.name, trial > 0]
        scales = rng.integers(lo, lo + width, (n, nb)).astype(np.uint8)
        packed = C._pack(codes, lay.nibble_order)
        if lay.grouped_codes:
            packed = packed.reshape(n, nb, bs // 2)
        stored = t = None
        if to.storage.tensor_scale:
            stored = F32(rng.uniform(100, 5000))
            t = F32(F32(1) / stored) if lay.global_scale is C.GlobalScale.DIVIDE else stored
        p = C.PackedLayer(base="l", layout=lay, format=type(to)(), packed=packed,
                          scales=scales, tensor_scale=t, shape=(n, nb * bs), n_blocks=nb,
                          stored_global=stored)
        assert assert_recode_is_golden(p, to, lay) is not None


def test_what_does_not_apply(rng):
    lay = C.LAYOUTS["compressed-tensors-nvfp4"]
    p = exhaustive_layer(lay, rng, scale_codes=[0x38])
    assert applies(p, NVFP4())
    assert not applies(p, MXFP4())  # blocks of 32 over blocks of 16
    assert not applies(p, RaZeR())  # candidates chosen per block: not elementwise
    assert not applies(p, NVFP4(block_size=32))
    part = C.PackedLayer(base="l", layout=lay, format=NVFP4(), packed=p.packed[:, :-1],
                         scales=p.scales, tensor_scale=p.tensor_scale,
                         shape=(p.shape[0], p.shape[1] - 2), n_blocks=p.n_blocks,
                         stored_global=p.stored_global)
    assert not applies(part, NVFP4())  # a partial last block


def test_threads_give_the_same_bytes(rng, monkeypatch):
    lay = C.LAYOUTS["compressed-tensors-nvfp4"]
    p = exhaustive_layer(lay, rng)
    a = recode_layer(p, NVFP4(), lay.nibble_order, threads=1)
    b = recode_layer(p, NVFP4(), lay.nibble_order, threads=3)
    for u, v in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(u, v)
    assert a[3:] == b[3:]  # exact counts: the sums do not depend on the chunks
