"""The GEMM engine (kernels/engine.cu) on the GPU: every format and tile configuration
against the golden float64 GEMM (the FP32-accumulation bound of mactile.gpu.check), exact
cases (atol=0) for every CTA partition, poisoned outputs, odd shapes, a broken decode."""
from dataclasses import replace

import numpy as np
import pytest

from fp4_gpu_util import GPU, cupy, exact_case_weight, poisoned, replay_in_graph
from mactile.golden import MXFP4, NVFP4, RaZeR, RaZeRG128
from mactile.gpu.check import check_close, reference
from mactile.gpu.packing import pack_w4a16, quantized_from_arrays

pytestmark = GPU

FORMATS = [NVFP4(), MXFP4(), RaZeR(), RaZeRG128(special_values=(5.0, 7.5))]
FIDS = ["nvfp4", "mxfp4", "razer", "razer-g128"]


def _engine():
    from mactile.gpu import engine
    return engine


def _weight(fmt, N, K, rng):
    w = rng.standard_normal((N, K)).astype(np.float32) * rng.uniform(0.05, 2.0, (N, 1)).astype(np.float32)
    w[:, ::29] *= 7.0
    w[:3, :64] = 0.0  # whole zero blocks (mxfp4: scale code 0)
    return fmt.quantize(w)


def _configs(fmt_name):
    """Every configuration instance() prebuilds for the format, plus 1-warpgroup shapes."""
    e = _engine()
    return [c for f, c in e.instances() if f == fmt_name]


@pytest.mark.parametrize("fmt", FORMATS, ids=FIDS)
@pytest.mark.parametrize("NK", [(203, 1152), (384, 2048)], ids=["N203-K1152", "N384-K2048"])
@pytest.mark.parametrize("M", [1, 5, 16, 37, 130, 300])
@pytest.mark.parametrize("out_dtype", [np.float16, np.float32], ids=["f16", "f32"])
def test_against_golden(fmt, NK, M, out_dtype, rng):
    cp = cupy()
    N, K = NK
    q = _weight(fmt, N, K, rng)
    pw = pack_w4a16(q, layouts=("frag",)).to(cp)
    x = (rng.standard_normal((M, K)) * rng.uniform(0.2, 3.0, (M, 1))).astype(np.float16)
    y = poisoned((M, N), out_dtype)
    _engine().gemm_fp4(cp.asarray(x), pw, out=y)
    y_ref, abs_sum = reference(x, q.dequantize())
    check_close(y.get(), y_ref, abs_sum, K, what=f"engine/{fmt.name}/M{M}")


@pytest.mark.parametrize("fmt", FORMATS, ids=FIDS)
def test_every_tile_configuration(fmt, rng):
    """Each prebuilt (BN, stages) of the format, at an M that fills the tile and one that
    does not, with the default and a forced 3-CTA partition (shared tiles)."""
    cp = cupy()
    e = _engine()
    N, K = 256, 1152
    q = _weight(fmt, N, K, rng)
    pw = pack_w4a16(q, layouts=("frag",)).to(cp)
    for cfg in _configs(fmt.name):
        for M in (cfg.bn, max(1, cfg.bn - 3)):
            x = rng.standard_normal((M, K)).astype(np.float16)
            y_ref, abs_sum = reference(x, q.dequantize())
            for n_ctas in (0, 3):
                c = replace(cfg, n_ctas=n_ctas)
                y = poisoned((M, N), np.float32)
                e.gemm_fp4(cp.asarray(x), pw, cfg=c, out=y)
                check_close(y.get(), y_ref, abs_sum, K, what=f"engine/{fmt.name}/{c}/M{M}")


@pytest.mark.parametrize("fmt", FORMATS, ids=FIDS)
@pytest.mark.parametrize("M", [3, 70, 260])
def test_exact_arithmetic_every_partition(fmt, M, rng, monkeypatch):
    cp = cupy()
    e = _engine()
    monkeypatch.setattr(e, "HYB_L2_FRACTION", 0.0)  # whole-tile rounds wherever they apply
    monkeypatch.setattr(e, "PARTS_MIN", 2)  # parts summed together wherever they apply
    N, K = 197, 1152
    q = exact_case_weight(fmt, N, K, rng)
    x = (rng.integers(-8, 9, (M, K)) * 0.125).astype(np.float16)
    y_ref, _ = reference(x, q.dequantize())
    assert np.abs(y_ref).max() < 2 ** 15  # exactness premise
    pw = pack_w4a16(q, layouts=("frag",)).to(cp)
    base = e.config_for(fmt.name, M)
    outs = []
    # M = 260, 3 CTAs: a round of whole tiles, then stripes; M = 3 (one tile) with 2..7 CTAs,
    # M = 70 (two tiles) with 4 and 6, M = 260 (four) with 8: parts summed by all their CTAs
    for n_ctas in (1, 2, 3, 4, 5, 6, 7, 8, 0):
        y = poisoned((M, N), np.float32)
        e.gemm_fp4(cp.asarray(x), pw, cfg=e.EngineConfig(base.bn, base.stages, base.wgs, n_ctas), out=y)
        np.testing.assert_array_equal(y.get(), y_ref.astype(np.float32))
        outs.append(y.get())


def test_rescale_extreme_and_zero_block_scales(rng, monkeypatch):
    """razer-g128 keeps its accumulators in units of the current block scale: block scales
    over the whole FP16 range it stores (subnormals up to 1.999) next to each other and
    blocks of scale 0 stay within the bound on every partition. Without the packer's rule
    for scale 0 (zero codes, scale 1) the kernel divides by zero and the check fails."""
    from mactile.gpu import packing
    cp = cupy()
    e = _engine()
    fmt = FORMATS[3]
    N, K, M = 160, 2048, 40
    nb = K // fmt.block_size
    codes = rng.integers(0, 16, (N, K), dtype=np.uint8)
    sc = rng.integers(1, 0x4000, (N, nb)).astype(np.uint16)  # every payload but 0
    sc[:, ::5] = rng.choice(np.array([1, 2, 0x3FFF, 0x0400], np.uint16), (N, len(range(0, nb, 5))))
    sc[rng.random((N, nb)) < 0.1] = 0
    sc[:, 0] = 0  # a tile's first block
    sc[:, -1] = 0  # and its last
    sc |= (rng.integers(0, 4, (N, nb)) << 14).astype(np.uint16)
    q = quantized_from_arrays(fmt, codes, sc, 1.0)
    x = rng.standard_normal((M, K)).astype(np.float16)
    y_ref, abs_sum = reference(x, q.dequantize())
    pw = pack_w4a16(q, layouts=("frag",)).to(cp)
    for n_ctas in (0, 3, 7):
        c = e.config_for(fmt.name, M)
        c = e.EngineConfig(c.bn, c.stages, c.wgs, n_ctas, c.schedule)
        y = poisoned((M, N), np.float32)
        e.gemm_fp4(cp.asarray(x), pw, cfg=c, out=y)
        check_close(y.get(), y_ref, abs_sum, K, what=f"engine/razer-g128/{c}")
    # (three CTAs: stripes of several blocks each; a CTA of one block never divides)
    monkeypatch.setattr(packing, "nonzero_kernel_scales", lambda kf, c, s, xp=np: (c, s))
    bad = pack_w4a16(q, layouts=("frag",)).to(cp)
    y = poisoned((M, N), np.float32)
    c = e.config_for(fmt.name, M)
    e.gemm_fp4(cp.asarray(x), bad, cfg=e.EngineConfig(c.bn, c.stages, c.wgs, 3, c.schedule), out=y)
    with pytest.raises(AssertionError):
        check_close(y.get(), y_ref, abs_sum, K, what="engine/razer-g128/scale-0 blocks unpacked")


def test_broken_decode_is_caught(rng, monkeypatch):
    """nvfp4's bit-placement decode with a deliberately wrong word layout (the mantissa and
    exponent-LSB bits of one slot swapped) breaks the stated bound; so does razer's lookup
    table with the byte of code 3 changed."""
    import dataclasses
    from mactile.gpu import formats, packing
    cp = cupy()
    e = _engine()
    N, K, M = 128, 1024, 20
    x = rng.standard_normal((M, K)).astype(np.float16)
    # razer: wrong LUT byte
    q = _weight(RaZeR(), N, K, rng)
    pw = pack_w4a16(q, layouts=("frag",)).to(cp)
    bad = list(pw.fmt.lut)
    bad[0] = (bad[0] & 0x00FFFFFF) | (((bad[0] >> 24) + 2) << 24)  # code 3: 1.5 -> 2.0
    pw.fmt = dataclasses.replace(pw.fmt, lut=tuple(bad))
    y_ref, abs_sum = reference(x, q.dequantize())
    y = e.gemm_fp4(cp.asarray(x), pw, out_dtype=np.float32)
    with pytest.raises(AssertionError, match="exceeds"):
        check_close(y.get(), y_ref, abs_sum, K)
    # nvfp4: wrong bit positions
    q = _weight(NVFP4(), N, K, rng)
    good = formats.bp_bit_positions()

    def broken():
        pos = good.copy()
        pos[0, [0, 1]] = pos[0, [1, 0]]
        return pos

    monkeypatch.setattr(packing, "bp_bit_positions", broken)
    pw = pack_w4a16(q, layouts=("frag",)).to(cp)
    y_ref, abs_sum = reference(x, q.dequantize())
    y = e.gemm_fp4(cp.asarray(x), pw, out_dtype=np.float32)
    with pytest.raises(AssertionError, match="exceeds"):
        check_close(y.get(), y_ref, abs_sum, K)


def test_deterministic_and_graph_replay(rng, monkeypatch):
    """Bitwise equal results over repeated launches, also replayed from a CUDA graph (the
    tile counters return to zero): stream-K only (9 CTAs, 6 tiles), hybrid (4 CTAs: one
    round of whole tiles, the last two tiles in stripes) and parts summed together (15 CTAs,
    5 tiles)."""
    cp = cupy()
    e = _engine()
    q = _weight(NVFP4(), 640, 2048, rng)
    pw = pack_w4a16(q, layouts=("frag",)).to(cp)
    x = cp.asarray(rng.standard_normal((20, 2048)).astype(np.float16))
    monkeypatch.setattr(e, "HYB_L2_FRACTION", 0.0)
    monkeypatch.setattr(e, "PARTS_MIN", 2)
    hybrid = e.EngineConfig(128, e.max_stages("nvfp4", 128), 2, 4)  # 6 tiles, 4 CTAs
    assert e.whole_rounds(6, 2048 // 64, 4, 1, 1) == 1
    parts = e.EngineConfig(32, 8, 2, 15)  # 5 tiles of 3 parts, summed by their 3 CTAs together
    assert e.split_parts(5, 15, sms=132) == 3
    for cfg in (e.EngineConfig(32, 8, 2, 9), hybrid, parts):  # shared tiles
        a = e.gemm_fp4(x, pw, cfg=cfg, out_dtype=np.float32).get()
        y = cp.empty((20, 640), dtype=cp.float32)
        replay_in_graph(lambda: e.gemm_fp4(x, pw, cfg=cfg, out=y), [y], times=3)
        np.testing.assert_array_equal(a, y.get())
        np.testing.assert_array_equal(a, e.gemm_fp4(x, pw, cfg=cfg, out_dtype=np.float32).get())


@pytest.mark.parametrize("M", [1, 13, 70])
def test_parts_reduce_equals_last_arriver(M, rng, monkeypatch):
    """A split tile summed by all its CTAs (engine_reduce_parts) has the bits of the last
    arriver's sum: FP16 and FP32 outputs, nvfp4 and NestedFP8 (per-token output scales), a
    ragged N, 2, 3 and 5 parts per tile."""
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    cp = cupy()
    e = _engine()
    N, K = 200, 2048
    pw = pack_w4a16(_weight(NVFP4(), N, K, rng), layouts=("frag",)).to(cp)
    x = cp.asarray((rng.standard_normal((M, K)) * rng.uniform(0.2, 3.0, (M, 1))).astype(np.float16))
    layer = NestedFPLinear(cp.asarray((rng.standard_normal((N, K)) * 0.05).astype(np.float16)))
    monkeypatch.setattr(e, "PARTS_MIN", 2)
    runs = 0
    for fmt in ("nvfp4", "nestedfp8"):
        base = e.config_for(fmt, M)
        tiles = -(-M // base.bn) * (-(-N // 64) // base.wgs)
        for parts in (2, 3, 5):
            cfg = e.EngineConfig(base.bn, base.stages, base.wgs, tiles * parts, base.sched)
            assert e.split_parts(tiles, tiles * parts, sms=132) == parts
            for dt in (np.float16, np.float32):
                got = {}
                for on in (False, True):
                    monkeypatch.setattr(e, "PARTS_REDUCE", on)
                    if fmt == "nvfp4":
                        got[on] = e.gemm_fp4(x, pw, cfg=cfg, out_dtype=dt).get()
                    else:
                        got[on] = layer(x, mode="fp8", config=cfg).get()
                assert np.isfinite(got[True]).all()
                np.testing.assert_array_equal(got[True], got[False], err_msg=f"{fmt} {cfg} {dt}")
                runs += 1
    assert runs == 12


@pytest.mark.parametrize("M", [100, 256])
def test_cluster_parts_equal_last_arriver(M, rng, monkeypatch):
    """Parts of a tile summed in a cluster of its CTAs (engine_cluster_parts, distributed
    shared memory) have the bits of the sums through the L2 (the last arriver for 2 and 3
    parts, the parts summed together for 4): FP16 and FP32 outputs, every A source (frag
    codes: nvfp4, RESCALE razer-g128; byte planes: NestedFP16; FP8 with per-token output
    scales: NestedFP8), 128- and 256-token tiles, a ragged N and M, and CUDA-graph replay."""
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    cp = cupy()
    e = _engine()
    N, K = 330, 2048  # 6 row tiles of 64: 3 tiles of two warpgroups, the last one ragged
    x = cp.asarray((rng.standard_normal((M, K)) * rng.uniform(0.2, 3.0, (M, 1))).astype(np.float16))
    packed = {f.name: pack_w4a16(_weight(f, N, K, rng), layouts=("frag",)).to(cp)
              for f in (NVFP4(), RaZeRG128(special_values=(5.0, 7.5)))}
    layer = NestedFPLinear(cp.asarray((rng.standard_normal((N, K)) * 0.05).astype(np.float16)))
    runs = 0
    for fmt in ("nvfp4", "razer-g128", "nestedfp16", "nestedfp8"):
        for base in {e.config_for(fmt, M), e.config_for(fmt, M, nbytes=0)}:
            if base.bn < e.CLUSTER_MIN_BN:
                continue
            tiles = -(-M // base.bn) * (-(-N // 64) // base.wgs)
            for parts in range(2, min(e.CLUSTER_MAX_P, base.bn // 64) + 1):
                cfg = e.EngineConfig(base.bn, base.stages, base.wgs, parts * tiles, base.sched)
                assert e.cluster_parts(tiles, parts * tiles, 0, cfg.bn, sms=132) == parts

                def run(dt, fmt=fmt, cfg=cfg, out=None):
                    if fmt.startswith("nestedfp"):
                        mode = "fp16" if fmt == "nestedfp16" else "fp8"
                        return layer(x, mode=mode, config=cfg, y=out)
                    return e.gemm_fp4(x, packed[fmt], cfg=cfg, out_dtype=dt, out=out)

                dts = (np.float16,) if fmt.startswith("nestedfp") else (np.float16, np.float32)
                ref16 = None
                for dt in dts:
                    got = {}
                    for on in (False, True):
                        monkeypatch.setattr(e, "CLUSTER_PARTS", on)
                        got[on] = run(dt).get()
                    assert np.isfinite(got[True]).all()
                    np.testing.assert_array_equal(got[True], got[False], err_msg=f"{fmt} {cfg} {dt}")
                    ref16 = got[True] if dt == np.float16 else ref16
                    runs += 1
                y = cp.empty((M, N), dtype=cp.float16)  # CLUSTER_PARTS on: captured and replayed
                replay_in_graph(lambda run=run, y=y: run(np.float16, out=y), [y], times=3)
                np.testing.assert_array_equal(y.get(), ref16, err_msg=f"{fmt} {cfg} graph replay")
    assert runs >= (6 if M == 100 else 14)


@pytest.mark.parametrize("fmt", FORMATS, ids=FIDS)
@pytest.mark.parametrize("M", [1, 40])
@pytest.mark.parametrize("toggled", [False, True], ids=["rule", "early-toggled"])
def test_pdl_chain_reads_previous_layer(fmt, M, toggled, rng):
    """Programmatic dependent launch: a chain of layers, each reading the previous layer's
    output (the weights are prefetched before griddepcontrol.wait where the configuration
    says so, the activations after), eager and replayed from a CUDA graph, equals the same
    chain launched without PDL; with the format's rule of early weight copies and with it
    toggled (a tuning candidate: none where the rule has some, else some)."""
    cp = cupy()
    e = _engine()
    K = 1024
    # weights of norm ~1 per output (std 1/32 over K = 1024): the values stay O(1) down the chain
    pws = [pack_w4a16(fmt.quantize((rng.standard_normal((K, K)) / 32).astype(np.float32)),
                      layouts=("frag",)).to(cp) for _ in range(4)]
    x0 = cp.asarray((rng.standard_normal((M, K)) * 0.5).astype(np.float16))
    cfg = e.config_for(fmt.name, M)
    if toggled:  # the first tuning candidate that sets the early copies against the rule
        cfg = next(c for c in e.tuning_candidates(fmt.name, M) if c.early >= 0)
        assert e.early_units(fmt.name, cfg) != e.early_units(fmt.name, replace(cfg, early=-1))

    def chain(pdl, ys):
        x = x0
        for pw, y in zip(pws, ys):
            e.gemm_fp4(x, pw, cfg=cfg, out=y, pdl=pdl)  # engine after engine: they overlap
            x = y
        return ys[-1]

    ref = chain(False, [cp.empty((M, K), dtype=cp.float16) for _ in pws]).get()
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0
    np.testing.assert_array_equal(ref, chain(True, [poisoned((M, K), np.float16) for _ in pws]).get())
    ys = [cp.empty((M, K), dtype=cp.float16) for _ in pws]
    replay_in_graph(lambda: chain(True, ys), ys)
    np.testing.assert_array_equal(ref, ys[-1].get())


@pytest.mark.parametrize("mode", ["fp16", "fp8"])
@pytest.mark.parametrize("M", [1, 40])
def test_nestedfp_pdl_chain_reads_previous_layer(mode, M, rng, monkeypatch):
    """NestedFP under programmatic dependent launch: its plane copies go out before
    griddepcontrol.wait (kernel EARLY), its activations (and in FP8 mode the per-token
    quantizer's output and scales) after. A chain of layers, each reading the previous
    layer's output, eager and replayed from a CUDA graph, equals the chain without PDL."""
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    cp = cupy()
    e = _engine()
    K = 1024
    layers = [NestedFPLinear(cp.asarray((rng.standard_normal((K, K)) / 32).astype(np.float16)))
              for _ in range(4)]
    x0 = cp.asarray((rng.standard_normal((M, K)) * 0.5).astype(np.float16))

    def chain(ys):
        x = x0
        for layer, y in zip(layers, ys):
            layer(x, mode=mode, y=y)
            x = y
        return ys[-1]

    with monkeypatch.context() as mp:
        mp.setattr(e, "use_pdl", lambda m: False)
        ref = chain([cp.empty((M, K), dtype=cp.float16) for _ in layers]).get()
    assert e.use_pdl(M)
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0
    np.testing.assert_array_equal(ref, chain([poisoned((M, K), np.float16) for _ in layers]).get())
    ys = [cp.empty((M, K), dtype=cp.float16) for _ in layers]
    replay_in_graph(lambda: chain(ys), ys)
    np.testing.assert_array_equal(ref, ys[-1].get())


def test_mxfp4_scale_window(rng):
    """MXFP4 weights whose non-zero block scales span more binades than the FP16 decode
    holds are refused by the packer, naming the span; within the window the result is exact."""
    from mactile.gpu.formats import POW2_WINDOW
    fmt = MXFP4()
    N, K = 128, 256
    codes = rng.integers(1, 8, (N, K), dtype=np.uint8)
    sc = np.full((N, K // 32), 127, np.uint8)
    sc[0, 0] = 127 + (POW2_WINDOW[1] - POW2_WINDOW[0]) + 1
    q = quantized_from_arrays(fmt, codes, sc, 1.0)
    with pytest.raises(ValueError, match="binades"):
        pack_w4a16(q, layouts=("frag",))


# ---------------------------------------------------------------- NestedFP on the engine
def _nfp_data(rng, m, n, k):
    w = (rng.standard_normal((n, k)) * 0.3).clip(-1.7, 1.7).astype(np.float16)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.2, 3.0, (m, 1))).astype(np.float16)
    return w, x


@pytest.mark.parametrize("bn", [8, 16, 64, 128, 256])
def test_nestedfp16_reconstruction_exact(cp, bn):
    """X = identity: Y = W^T exactly, for every eligible FP16 pattern (|w| <= 1.75)."""
    from mactile.golden.nestedfp import nestedfp_merge
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    a = np.arange(1 << 16, dtype=np.uint32)
    w = a[(a & 0x4000) == 0].astype(np.uint16).reshape(128, 256).view(np.float16).copy()
    w[np.abs(w.astype(np.float32)) > 1.75] = np.float16(0.5)
    layer = NestedFPLinear(cp.asarray(w))
    e = _engine()
    cfg = e.EngineConfig(bn, e.max_stages("nestedfp16", bn))
    eye = cp.eye(256, dtype=cp.float16)
    y = cp.full((256, 128), np.nan, dtype=cp.float16)
    layer(eye, mode="fp16", config=cfg, y=y)
    assert np.array_equal(y.get().T.astype(np.float32), w.astype(np.float32))
    u, lo = layer.planes()
    assert np.array_equal(nestedfp_merge(u, lo), w.view(np.uint16))


@pytest.mark.parametrize("m,n,k", [(1, 256, 1024), (37, 384, 2048), (300, 256, 1024), (64, 200, 4096)])
def test_nestedfp_modes_against_golden(cp, rng, m, n, k):
    """FP16 mode within the FP32-accumulation bound of the float64 GEMM; FP8 mode within
    the same kind of bound of the golden FP8 reference (promotion every 128 of K)."""
    from mactile.golden.fp8token import nestedfp8_matmul_reference, per_token_e4m3
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    e = _engine()
    w, x = _nfp_data(rng, m, n, k)
    layer = NestedFPLinear(cp.asarray(w))
    for bn in sorted({e.config_for("nestedfp16", m).bn, 16}):
        cfg = e.EngineConfig(bn, e.max_stages("nestedfp16", bn))
        got = layer(cp.asarray(x), mode="fp16", config=cfg).get().astype(np.float64)
        xd, wd = x.astype(np.float64), w.astype(np.float64)
        ref = xd @ wd.T
        bound = (k / 8 + 64) * 2.0 ** -23 * (np.abs(xd) @ np.abs(wd).T) + 2.0 ** -11 * np.abs(ref) + 2.0 ** -24
        assert (np.abs(got - ref) <= bound).all(), f"fp16 mode, bn={bn}"
    codes, scales = per_token_e4m3(x)
    u, _ = layer.planes()
    ref8 = nestedfp8_matmul_reference(codes, scales, u)
    from mactile.golden import FP8_E4M3
    xq = FP8_E4M3.values[codes].astype(np.float64) * scales[:, None].astype(np.float64)
    wq = FP8_E4M3.values[u].astype(np.float64) * 2.0 ** -8
    mag = np.abs(xq) @ np.abs(wq).T
    for bn in sorted({e.config_for("nestedfp8", m).bn, 16}):
        cfg = e.EngineConfig(bn, e.max_stages("nestedfp8", bn))
        got = layer(cp.asarray(x), mode="fp8", config=cfg).get().astype(np.float64)
        # Hopper's FP8 wgmma adds inside a 128-wide k block with about 14 significant bits
        # (the partial sums are promoted to FP32 every 128 of K): 2^-13 of the block's
        # magnitude per block, summed, bounds that; FP32 and FP16 rounding on top.
        bound = 2.0 ** -13 * mag + (k / 8 + 64) * 2.0 ** -23 * mag + 2.0 ** -11 * np.abs(ref8) + 2.0 ** -24
        err = np.abs(got - ref8)
        print(f"fp8 bn={bn} m={m} k={k}: max err/mag {np.max(err / np.maximum(mag, 1e-30)):.3e}")
        assert (err <= bound).all(), f"fp8 mode, bn={bn}"
