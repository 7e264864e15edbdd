"""mactile's conventions against torchao and microxcaling, bit for bit.

The vectors in ``tests/data/interop`` were made by the peers themselves (see
``peer_vectors.py`` there: torchao 0.18.0 on torch 2.13.0 CPU, microxcaling at commit
7bc4195); these tests need neither. With each configuration's convention
(``peer_vectors.MACTILE``) mactile's dequantized values equal the peer's bit for bit (sign
of zero included), and for torchao so do the stored FP4 codes and scale bytes, except where
a named bug of the peer (:data:`PEER_BUGS`, each with its model of what the peer computes)
explains the difference. Where torch, torchao and microxcaling (``$MICROXCALING``) are
importable, the live test repeats the comparison on fresh random data.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from mactile.golden import (FP4_E2M1, MXFP4, NVFP4, Convention, convention_for, get_format,
                            require_default_convention)

DATA = Path(__file__).resolve().parent.parent / "data" / "interop"


def _module(name):
    spec = importlib.util.spec_from_file_location(name, DATA / f"{name}.py")
    mod = sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses need it
    spec.loader.exec_module(mod)
    return mod


pv = _module("peer_vectors")
pb = _module("peer_bugs")
same, PEER_BUGS = pb.same, pb.PEER_BUGS


def load(file):
    with np.load(DATA / file) as z:
        meta = json.loads(str(z["meta"]))
        arrays = {k: z[k] for k in z.files if k != "meta"}
    return meta, arrays


VECTORS = {f: load(f) for f in ("torchao.npz", "microxcaling.npz")}
CONFIGS = [(f, cfg) for f, (meta, _) in VECTORS.items() for cfg in meta["configs"]]


def spec_of(cfg):
    fmt, conv, overrides = pv.MACTILE[cfg]
    return get_format(fmt, convention=conv, **overrides)


def compare(cfg, x, y, codes=None, scales=None):
    """Check one input against the peer's output; returns ``{bug name: elements where the
    peer's value is the bug's and not the correct one}``."""
    spec = spec_of(cfg)
    q = spec.quantize(x)
    mine = q.dequantize()
    differ = ~same(mine, y)
    explained = np.zeros(x.shape, bool)
    seen = {}
    for bug in PEER_BUGS.get(cfg, []):
        where = bug.where(x, q)
        model = bug.model(x, q)
        ok = same(model, y) if bug.always else same(model, y) | same(mine, y)
        assert ok[where].all(), (f"{cfg}: the peer does not do what '{bug.name}' says at "
                                 f"x={x[where & ~ok][:4]}, peer {y[where & ~ok][:4]}")
        explained |= where
        seen[bug.name] = int((where & differ & same(model, y)).sum())
    bad = differ & ~explained
    assert not bad.any(), (f"{cfg} ({spec.describe()}): {int(bad.sum())} values differ "
                           f"from the peer, e.g. x={x[bad][:4]} mactile={mine[bad][:4]} "
                           f"peer={y[bad][:4]}")
    if codes is not None:  # torchao: the stored bits too, outside the bugs' blocks
        bs = spec.block_size
        blk = explained.reshape(q.scales.shape + (bs,)).any(-1)
        assert np.array_equal(q.codes.reshape(x.shape)[~pb.per_element(blk, bs).reshape(x.shape)],
                              codes[~pb.per_element(blk, bs).reshape(x.shape)]), f"{cfg}: FP4 codes"
        assert np.array_equal(q.scales.reshape(scales.shape)[~blk.reshape(scales.shape)],
                              scales[~blk.reshape(scales.shape)]), f"{cfg}: scale bytes"
    return seen


@pytest.mark.parametrize("file, cfg", CONFIGS, ids=[c for _, c in CONFIGS])
def test_bit_exact_with_peer_vectors(file, cfg):
    meta, a = VECTORS[file]
    seen = {}
    for case in meta["cases"]:
        for name, n in compare(cfg, a[f"x.{case}"], a[f"y.{cfg}.{case}"],
                               a.get(f"codes.{cfg}.{case}"), a.get(f"scales.{cfg}.{case}")).items():
            seen[name] = seen.get(name, 0) + n
    # Every bug named for this configuration shows in the committed vectors, but one whose
    # input case they predate (test_bugs_show_in_their_case covers it until regenerated).
    for bug in PEER_BUGS.get(cfg, []):
        if bug.case is None or bug.case in meta["cases"]:
            assert seen.get(bug.name), f"{cfg}: no vector shows '{bug.name}'"


BUGS_WITH_CASES = [(cfg, bug) for cfg, bugs in PEER_BUGS.items() for bug in bugs if bug.case]


@pytest.mark.parametrize("cfg, bug", BUGS_WITH_CASES, ids=[b.name for _, b in BUGS_WITH_CASES])
def test_bugs_show_in_their_case(cfg, bug):
    """A bug modelled after the committed vectors were made names the input case of
    ``peer_vectors.cases`` that shows it (the live test and the next regeneration run the
    peer on it): there the bug touches elements and its model differs from mactile."""
    x = pv.cases(np.random.default_rng(0))[bug.case]
    q = spec_of(cfg).quantize(x)
    where = bug.where(x, q)
    assert where.any(), f"case {bug.case} does not trigger '{bug.name}'"
    assert (~same(bug.model(x, q), q.dequantize()) & where).any()


def test_vectors_record_the_peers():
    meta_t, _ = VECTORS["torchao.npz"]
    meta_m, _ = VECTORS["microxcaling.npz"]
    assert meta_t["version"] == "0.18.0" and meta_t["torch"].startswith("2.13.0")
    assert meta_m["version"].startswith("git 7bc41952")
    assert set(meta_t["configs"]) | set(meta_m["configs"]) == set(pv.MACTILE)
    for meta in (meta_t, meta_m):
        for c in meta["configs"].values():
            assert c["call"] and c["source"]
    size = sum((DATA / f).stat().st_size for f in VECTORS)
    assert size < 400_000, f"committed vectors grew to {size} bytes"


def test_default_convention_disagrees_where_the_preset_agrees():
    """The options matter: with the default (ocp) convention the same vectors differ."""
    for file, cfg in CONFIGS:
        meta, a = VECTORS[file]
        if pv.MACTILE[cfg][1:] == ("torchao", {"mx_scale_rule": "floor"}):
            continue  # torchao's FLOOR is the OCP rule
        spec = get_format(pv.MACTILE[cfg][0])
        differ = sum(int((~same(spec.roundtrip(a[f"x.{c}"]), a[f"y.{cfg}.{c}"])).sum())
                     for c in meta["cases"])
        assert differ > 100, cfg


# --------------------------------------------------------------------------- options
def test_presets_and_their_differences():
    assert NVFP4().convention.is_default and MXFP4().is_default_convention()
    t = convention_for("nvfp4", "torchao")
    assert t.differences() == {"block_scale_floor": 2.0 ** -6, "scale_argument": "sequential",
                               "element_scaling": "reciprocal", "dequantize": "fp32"}
    assert convention_for("mxfp4", "torchao").differences() == {"mx_scale_rule": "rceil"}
    assert convention_for("mxfp4", "microxcaling").differences() == {
        "element_ties": "away", "negative_zero": "positive-after-scaling"}
    assert convention_for("mxfp4", "ocp", mx_scale_rule="ceil").label("mxfp4") == \
        "ocp+mx_scale_rule=ceil"
    assert NVFP4(convention=t).describe() == "nvfp4(block_size=16, convention='torchao')"


@pytest.mark.parametrize("call, message", [
    (lambda: convention_for("nvfp4", "microxcaling"),
     "the microxcaling convention has no nvfp4 quantizer (microxcaling implements mxfp4 only)"),
    (lambda: convention_for("mxfp4", "tf"), "unknown convention 'tf'; choose ocp, torchao, microxcaling"),
    (lambda: convention_for("mxfp4", tensor_scale=False),
     "mxfp4: convention option tensor_scale does not apply (only nvfp4 takes it)"),
    (lambda: convention_for("nvfp4", mx_scale_rule="rceil"),
     "nvfp4: convention option mx_scale_rule does not apply (only mxfp4 takes it)"),
    (lambda: convention_for("nvfp4", element_ties="odd"), "unknown element_ties 'odd'; choose even, away"),
    (lambda: convention_for("nvfp4", block_scale_floor=0.02),
     "block_scale_floor must be an E4M3 value in [0, 448]"),
    (lambda: convention_for("razer", "torchao"), "razer has no convention options"),
    (lambda: get_format("dialectfp4", element_ties="away"), "dialectfp4 has no convention options"),
    (lambda: MXFP4(convention=Convention(tensor_scale=False)),
     "mxfp4: convention option tensor_scale=False does not apply (only nvfp4 takes it)"),
    (lambda: convention_for("nvfp4", rounding="even"), "nvfp4: unknown option(s) rounding"),
])
def test_bad_options_are_refused(call, message):
    with pytest.raises(ValueError, match=None) as e:
        call()
    assert message in str(e.value)


def test_require_default_convention():
    require_default_convention(NVFP4(), "the W4A4 packer")  # passes
    fmt = get_format("mxfp4", convention="microxcaling")
    with pytest.raises(ValueError) as e:
        require_default_convention(fmt, "the RTL tensor core")
    assert str(e.value) == (
        "the RTL tensor core implements mxfp4 with the default (ocp) convention only; this "
        "mxfp4 uses convention 'microxcaling' (element_ties=away, "
        "negative_zero=positive-after-scaling). "
        "Quantize with the default convention for it.")


def test_tensor_core_refuses_non_default_conventions():
    from mactile.golden.tensorcore import operand_for
    operand_for(NVFP4())
    with pytest.raises(ValueError, match="tensor core implements nvfp4 with the default"):
        operand_for(get_format("nvfp4", convention="torchao"))


def test_options_named_one_at_a_time():
    """Each option alone changes what it says, on a handcrafted block."""
    # Ties: 2.5 and -0.75 scaled by 1 (block max 4: MX scale 2**0).
    x = np.zeros(32, np.float32)
    x[:4] = [4.0, 2.5, -0.75, -0.0]
    even = MXFP4().roundtrip(x)
    away = get_format("mxfp4", element_ties="away").roundtrip(x)
    pos0 = get_format("mxfp4", negative_zero="positive").roundtrip(x)
    assert list(even[:3]) == [4.0, 2.0, -1.0] and list(away[:3]) == [4.0, 3.0, -1.0]
    assert np.signbit(even[3]) and np.signbit(away[3]) and not np.signbit(pos0[3])
    # Scale rules on a block max of 7 (FLOOR: 2**0, saturates; CEIL/EVEN: 2**1; RCEIL:
    # ceil(log2(7/6)) = 1).
    x[0] = 7.0
    for rule, code in (("floor", 127), ("ceil", 128), ("even", 128), ("rceil", 128)):
        assert get_format("mxfp4", mx_scale_rule=rule).quantize(x).scales[0] == code, rule
    x[0] = 6.5  # EVEN: 6.5 = 1.625 * 4 rounds to 1.5 * 4, stays in its binade
    assert get_format("mxfp4", mx_scale_rule="even").quantize(x).scales[0] == 127
    # NVFP4: no tensor scale, block-scale floor, reciprocal scaling, FP32 dequantization.
    b = np.full(16, 0.001, np.float32)
    q = get_format("nvfp4", tensor_scale=False).quantize(b)
    assert q.tensor_scale is None and q.scales[0] < 8  # a subnormal E4M3 scale
    q = get_format("nvfp4", tensor_scale=False, block_scale_floor=2.0 ** -6).quantize(b)
    assert q.scales[0] == 8  # 2**-6
    t = np.array([6 * 3.75, 2.5 * 3.75] + [0.0] * 14, np.float32)  # a tie at scale 3.75
    div = get_format("nvfp4", tensor_scale=False).roundtrip(t)
    rec = get_format("nvfp4", tensor_scale=False, element_scaling="reciprocal").roundtrip(t)
    assert div[1] == 2.0 * 3.75 and rec[1] == 3.0 * 3.75  # 9.375 * fl32(1/3.75) > 2.5


def test_dequantize_fp32_rounds_twice():
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    exact = get_format("nvfp4", convention="torchao", dequantize="exact").quantize(x)
    fp32 = get_format("nvfp4", convention="torchao").quantize(x)
    assert np.array_equal(exact.codes, fp32.codes) and np.array_equal(exact.scales, fp32.scales)
    s32 = (fp32.format.scale_format.values[fp32.scales].astype(np.float32) * fp32.tensor_scale)
    want = (FP4_E2M1.values[fp32.codes].astype(np.float32) * s32[..., None]).reshape(x.shape)
    assert np.array_equal(fp32.dequantize(), want.astype(np.float64))
    assert not np.array_equal(exact.dequantize(), fp32.dequantize())


def test_tensor_scale_underflow_edge():
    """A non-zero tensor whose amax / 2688 underflows FP32 gets tensor scale 1, and every
    block scale rounds to 0: all outputs are zeros (docs/formats.md)."""
    x = np.zeros(16, np.float32)
    x[:2] = [1e-45, -3e-45]
    q = NVFP4().quantize(x)
    assert q.tensor_scale == 1.0 and not q.dequantize().any()


# --------------------------------------------------------------------------- live
def _have_torchao() -> bool:
    try:
        import torch  # noqa: F401
        import torchao  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _have_torchao(),
                    reason="torch and torchao not importable (the peers are never a "
                           "dependency; see tests/data/interop/peer_vectors.py)")
def test_live_against_installed_peers():
    rng = np.random.default_rng()
    xs = pv.cases(rng)
    for case, x in xs.items():
        for cfg, (y, codes, scales) in pv.torchao_configs(x).items():
            compare(cfg, x, y, codes, scales)
        if os.environ.get("MICROXCALING"):
            compare("microxcaling-mxfp4", x, pv.microxcaling_run(x, os.environ["MICROXCALING"]))


# --------------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=lambda d: d.__name__)
@pytest.mark.parametrize("conv", ["ocp", "microxcaling"])
def test_mx_elements_either_side_of_every_fp4_midpoint(conv, dtype):
    """Block max 4 (scale 2**0): the next value of the input dtype below and above each FP4
    midpoint rounds to the nearer neighbour under every preset (float64 input once gave
    0.5 for ``nextafter(0.25, 0)`` with ties away, where ``ocp`` gives 0). Exact ties
    follow the preset: to even (ocp) or away (microxcaling)."""
    mags = FP4_E2M1.finite_magnitudes
    mids = (mags[:-1] + mags[1:]) / 2
    below = np.nextafter(mids.astype(dtype), dtype(0))
    above = np.nextafter(mids.astype(dtype), dtype(np.inf))
    x = np.zeros((3, 32), dtype)
    x[:, 0] = 4.0
    x[0, 1:1 + len(mids)], x[1, 1:1 + len(mids)], x[2, 1:1 + len(mids)] = below, mids, above
    x[:, 16:16 + len(mids)] = -x[:, 1:1 + len(mids)]
    y = get_format("mxfp4", convention=conv).roundtrip(x)
    away = conv == "microxcaling"
    want_at = mags[1:] if away else np.where(np.arange(1, len(mags)) % 2 == 0, mags[1:], mags[:-1])
    for row, want in ((0, mags[:-1]), (1, want_at), (2, mags[1:])):
        assert np.array_equal(y[row, 1:1 + len(mids)], want), (conv, row)
        assert np.array_equal(y[row, 16:16 + len(mids)], -want), (conv, row)
    # The block: [4.0, nextafter(0.25, 0), 0, ...] gives 0 like ocp.
    b = np.zeros(32, dtype)
    b[:2] = [4.0, np.nextafter(dtype(0.25), dtype(0))]
    assert get_format("mxfp4", convention=conv).roundtrip(b)[1] == 0.0


def test_torchao_reciprocal_overflow_keeps_zeros():
    """torchao NVFP4 with a tensor scale ``0 < T < 2**-128``: ``1 / T`` overflows FP32, so
    ``x * ((1 / T) / s)`` saturates every non-zero element at +-6 (the preset reproduces
    that arithmetic) and makes ``0 * inf = NaN`` of the zeros, which torchao stores as code
    0b1011 (peer bug ``reciprocal overflow gives NaN``); the preset keeps each zero's sign
    (it once stored +0 as 0b1000, -0)."""
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [1e-37, -3e-40, 0.0, -0.0]
    x[0, 16] = 1e-45  # a second block: its scale clamps at torchao's floor 2**-6
    spec = get_format("nvfp4", convention="torchao")
    q = spec.quantize(x)
    assert 0 < q.tensor_scale < 2.0 ** -128
    with np.errstate(over="ignore"):
        assert np.isinf(np.float32(1.0) / q.tensor_scale)
    codes = q.codes.reshape(-1)
    assert list(codes[:4]) == [7, 15, 0, 8] and list(codes[17:]) == [0] * 15 and codes[16] == 7
    y = q.dequantize().reshape(-1)
    assert not np.signbit(y[2]) and np.signbit(y[3]) and y[2] == y[3] == 0
    # The bug's model: torchao's values where it differs (the zeros), codes 0b1011.
    bug = next(b for b in PEER_BUGS["torchao-nvfp4-tensor-scale"]
               if b.name == "reciprocal overflow gives NaN")
    where = bug.where(x, q)
    assert np.array_equal(where.reshape(-1), x.reshape(-1) == 0)
    s32 = spec.scale_format.values[q.scales.reshape(-1)].astype(np.float32) * q.tensor_scale
    want = np.repeat(s32 * np.float32(-1.5), 16)
    assert same(bug.model(x, q).reshape(-1)[where.reshape(-1)], want[where.reshape(-1)]).all()
    # The default convention divides by T * s (finite): no overflow, nearest values.
    assert list(get_format("nvfp4").quantize(x).codes.reshape(-1)[:4]) == [7, 8, 0, 8]


def test_microxcaling_scaled_underflow_gives_positive_zero():
    """microxcaling's element cast sees ``x / 2**e`` in FP32: a negative element that
    underflows there is a zero, and ``torch.sign`` of a zero is +0, so it comes back +0
    like a -0.0 input (``negative_zero=positive-after-scaling``, the preset's value); a
    negative element that merely rounds to FP4 zero keeps its sign. ``positive`` changes
    only -0.0 input; float64 input scales in float64, where these do not underflow."""
    x = np.zeros((1, 32), np.float32)
    x[0, :6] = [2.0 ** 100, -1e-45, -1e-20, -0.0, -2.0 ** 97, 1e-30]
    pos = get_format("mxfp4", convention="microxcaling").roundtrip(x)[0]
    assert list(pos[:6]) == [2.0 ** 100, 0.0, 0.0, 0.0, -2.0 ** 97, 0.0]
    assert not np.signbit(pos[1:4]).any() and np.signbit(pos[4])
    only_minus0 = get_format("mxfp4", convention="microxcaling",
                             negative_zero="positive").roundtrip(x)[0]
    assert list(np.signbit(only_minus0[1:4])) == [True, True, False]
    assert np.signbit(MXFP4().roundtrip(x)[0, 1:4]).all()  # ocp keeps every sign
    y = np.zeros((1, 32), np.float32)
    y[0, :3] = [4.0, -0.1, -0.0]  # -0.1 rounds to FP4 -0 without underflowing
    pos = get_format("mxfp4", convention="microxcaling").roundtrip(y)[0]
    assert list(np.signbit(pos[1:3])) == [True, False]
    x64 = get_format("mxfp4", convention="microxcaling").roundtrip(x.astype(np.float64))[0]
    assert list(np.signbit(x64[1:4])) == [True, True, False]
