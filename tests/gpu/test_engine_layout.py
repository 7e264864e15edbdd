"""The GEMM engine's host side, checked on the CPU: generated wgmma wrappers and traits,
configuration choice, shared-memory budget, grid sizes, the tuning-table lookup, and the
instantiations compile with the local nvcc (sm_90a) without spills where it is on PATH."""
import shutil
from dataclasses import replace

import pytest

from mactile.gpu import engine as e
from mactile.gpu.codegen import wgmma_source
from mactile.gpu.formats import ENGINE_FORMATS, engine_traits, engine_traits_header
from mactile.gpu.tuning import engine_choice


def test_wgmma_source_shapes():
    src = wgmma_source((8, 256))
    assert "m64n8k16.f32.f16.f16" in src and "m64n256k32.f32.e4m3.e4m3" in src
    assert "m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0" in src  # ss_f16
    assert src.count('"+f"(d[') == 3 * (4 + 128)
    with pytest.raises(ValueError, match="multiple of 8"):
        wgmma_source((12,))


def test_traits_generated_for_every_format():
    h = engine_traits_header()
    for i, name in enumerate(ENGINE_FORMATS):
        cid = "FMT_" + name.upper().replace("-", "_")
        assert f"constexpr int {cid} = {i};" in h and f"struct EngineFmt<{cid}>" in h
    assert engine_traits("nvfp4")["SCALE_KIND"] == "SCALE_E4M3"
    assert engine_traits("mxfp4")["SCALE_KIND"] == "SCALE_POW2_F16"
    assert engine_traits("razer")["SCALE_KIND"] == "SCALE_BITS_F16"
    g128 = engine_traits("razer-g128")
    assert g128["RESCALE"] and not g128["PROMOTE"] and g128["BK"] == 128
    assert engine_traits("nestedfp8")["PROMOTE"] and engine_traits("nestedfp8")["FP8"]


@pytest.mark.parametrize("fmt", ENGINE_FORMATS)
def test_configurations_fit(fmt):
    for M in (1, 8, 16, 33, 64, 100, 256, 1024, 4096):
        c = e.config_for(fmt, M)
        assert c.bn >= min(M, c.bn) and e.smem_bytes(fmt, c) <= e.SMEM_LIMIT
        assert c.stages >= 3
    for f, c in e.instances():
        assert e.smem_bytes(f, c) <= e.SMEM_LIMIT, (f, c)
    with pytest.raises(ValueError, match="wgs"):
        e.EngineConfig(128, 4, 4)
    with pytest.raises(ValueError, match="bn"):
        e.EngineConfig(24, 4, 2)


def test_default_ctas(monkeypatch):
    assert e.default_ctas(16, 16 * 64, sms=132) == 16 * 8  # equal splits of each tile
    assert e.default_ctas(128, 128 * 64, sms=132) == 128  # one whole tile per CTA
    assert e.default_ctas(264, 264 * 64, sms=132) == 132  # two whole tiles per CTA
    assert e.default_ctas(224, 224 * 64, sms=132) == 132  # 112 CTAs would idle 15%: stream-K
    assert e.default_ctas(190, 190 * 64, sms=132) == 132  # no divisor near 132: stream-K
    assert e.default_ctas(3, 5, sms=132) == 5  # capped by the work
    assert e.default_ctas(100, 100 * 80, sms=132) == 132  # 100 CTAs would idle 24%: stream-K
    assert e.default_ctas(112, 112 * 64, sms=132) == 112  # 15% idle: whole tiles
    # one tile: as many parts as SMs and k-blocks when the parts sum the tile together ...
    assert e.default_ctas(1, 64, sms=132, tile_bytes=256 * 4096 * 9 // 16) == 64
    assert e.default_ctas(1, 224, sms=132, tile_bytes=256 * 14336 * 9 // 16) == 132
    assert e.default_ctas(40, 40 * 64, sms=132, tile_bytes=256 * 4096 * 9 // 16) == 120  # 3 parts
    # ... else the last arriver's square-root rule
    monkeypatch.setattr(e, "PARTS_REDUCE", False)
    assert e.default_ctas(1, 64, sms=132, tile_bytes=256 * 4096 * 9 // 16) == 12
    assert e.default_ctas(1, 224, sms=132, tile_bytes=256 * 14336 * 9 // 16) == 22
    assert e.default_ctas(16, 16 * 64, sms=132, tile_bytes=256 * 4096 * 9 // 16) == 16 * 8  # sms // tiles
    assert e.weight_bytes_per_element("nvfp4") == 0.5 + 1 / 16
    assert e.weight_bytes_per_element("nestedfp16") == 2.0
    assert e.use_pdl(1) and e.use_pdl(e.PDL_MAX_M) and not e.use_pdl(e.PDL_MAX_M + 1)


def test_small_layer_defaults():
    """nvfp4 and mxfp4: two warpgroups at 64 tokens up to 48 MB of weights; they and
    razer-g128 128-token tiles at 128 < M <= 256 up to 16 MB; the other formats, larger M
    and large layers unchanged."""
    mb = 1 << 20
    assert e.config_for("nvfp4", 64).wgs == 4 and e.config_for("nvfp4", 64, 100 * mb).wgs == 4
    assert e.config_for("nvfp4", 64, 9 * mb).wgs == 2 and e.config_for("mxfp4", 40, 48 * mb).wgs == 2
    assert e.config_for("nvfp4", 256).bn == 256 and e.config_for("nvfp4", 200, 17 * mb).bn == 256
    assert e.config_for("nvfp4", 256, 9 * mb).bn == 128 and e.config_for("mxfp4", 129, 16 * mb).bn == 128
    assert e.config_for("nvfp4", 512, 9 * mb).bn == 256 and e.config_for("nvfp4", 4096, 1 * mb).bn == 256
    assert e.config_for("nvfp4", 16, 1 * mb) == e.config_for("nvfp4", 16)
    for f in ("razer", "razer-g128", "nestedfp16", "nestedfp8"):
        for M in (64, 256):
            if not (f == "razer-g128" and M == 256):
                assert e.config_for(f, M, 1 * mb) == e.config_for(f, M)
    assert e.config_for("razer-g128", 256, 9 * mb).bn == 128 and e.config_for("razer-g128", 256, 17 * mb).bn == 256
    assert e.config_for("razer-g128", 512, 9 * mb).bn == 256 and e.config_for("razer-g128", 64, 9 * mb).wgs == 2
    assert all(e.smem_bytes(f, c) <= e.SMEM_LIMIT for f, c in e.instances())
    # the batched schedule at 64 tokens for nvfp4/mxfp4 with two warpgroups only
    assert e.config_for("nvfp4", 64, 9 * mb).schedule == 1 and e.config_for("mxfp4", 64, 9 * mb).schedule == 1
    assert e.config_for("nvfp4", 64).schedule == 0 and e.config_for("razer", 64, 9 * mb).schedule == 0
    assert e.config_for("nvfp4", 128, 9 * mb).schedule == 0
    # NestedFP8: 128-token tiles up to M = 512, 256 (two promotion passes, batched) from 2048,
    # and at 1024 on layers of at least PROMOTE_256_MIN_BYTES (or of unknown size)
    assert e.config_for("nestedfp8", 512).bn == 128 and e.config_for("nestedfp8", 2048, 1 * mb).bn == 256
    assert e.config_for("nestedfp8", 1024, 25 * mb).bn == 128 and e.config_for("nestedfp8", 1024, 67 * mb).bn == 256
    assert e.config_for("nestedfp8", 4096).schedule == 1 and e.config_for("nestedfp8", 4096).stages == 4


def test_early_units_rule_and_override():
    """The early weight copies: the format's rule (NestedFP's planes up to 64 tokens, every
    stage; razer-g128's 8-token tiles, 4; none elsewhere), ``EngineConfig.early`` over it,
    and the resolved count in the kernel's name (one kernel, one name)."""
    rule = {(f, bn): e.early_units(f, e.config_for(f, bn)) for f in ENGINE_FORMATS for bn in (8, 16, 64, 128)}
    for f in ("nestedfp16", "nestedfp8"):
        assert [rule[(f, bn)] for bn in (8, 16, 64, 128)] == [e.EARLY_UNITS_PLANES] * 3 + [0]
    assert [rule[("razer-g128", bn)] for bn in (8, 16, 64, 128)] == [e.EARLY_UNITS_RESCALE, 0, 0, 0]
    assert not any(rule[(f, bn)] for f in ("nvfp4", "mxfp4", "razer") for bn in (8, 16, 64, 128))
    c = e.config_for("nvfp4", 8)
    assert e.early_units("nvfp4", replace(c, early=4)) == 4
    assert e.early_units("razer-g128", replace(e.config_for("razer-g128", 8), early=0)) == 0
    assert e.engine_name("nvfp4", c).endswith(", 0>") and e.engine_name("nvfp4", replace(c, early=4)).endswith(", 4>")
    # the rule's value spelled out names the same kernel
    g = e.config_for("razer-g128", 8)
    assert e.engine_name("razer-g128", g) == e.engine_name("razer-g128", replace(g, early=e.EARLY_UNITS_RESCALE))
    with pytest.raises(ValueError, match="early"):
        e.EngineConfig(8, 12, 2, early=17)
    # a table entry with a sixth field sets them; five fields take the rule
    t = {"engine": [{"format": "nvfp4", "K": 4096, "N": 4096, "M": 8, "config": [8, 12, 4, 0, 1, 4]},
                    {"format": "nvfp4", "K": 4096, "N": 4096, "M": 16, "config": [16, 12, 2, 0, 1]}]}
    assert engine_choice(t, "nvfp4", 4096, 4096, 5)[0] == e.EngineConfig(8, 12, 4, 0, 1, 4)
    assert engine_choice(t, "nvfp4", 4096, 4096, 16)[0].early == -1


def test_engine_choice():
    t = {"engine": [{"format": "nvfp4", "K": 4096, "N": 4096, "M": 16, "config": [16, 12, 4, 0, 1]},
                    {"format": "nvfp4", "K": 4096, "N": 4096, "M": 256, "config": [256, 5, 2, 0, 0]},
                    {"format": "nvfp4", "K": 8192, "N": 8192, "M": 256, "config": [128, 9, 2, 0, 0]}]}
    assert engine_choice(t, "nvfp4", 4096, 4096, 9)[0] == e.EngineConfig(16, 12, 4, 0, 1)
    assert engine_choice(t, "nvfp4", 4096, 4096, 8)[0] is None  # another token tile: the default
    assert engine_choice(t, "nvfp4", 4096, 4096, 3)[0] is None
    assert engine_choice(t, "nvfp4", 4096, 4096, 17)[0] is None
    assert engine_choice(t, "nvfp4", 4096, 4096, 129)[0] == e.EngineConfig(256, 5, 2, 0, 0)
    assert engine_choice(t, "nvfp4", 4096, 4096, 9999)[0] is None  # above every measured M: the default
    assert engine_choice(t, "nvfp4", 7000, 9000, 200)[0] == e.EngineConfig(128, 9, 2, 0, 0)
    assert engine_choice(t, "razer", 4096, 4096, 16)[0] is None
    assert engine_choice(None, "nvfp4", 4096, 4096, 16)[0] is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.slow
def test_default_instances_compile_without_spills():
    """The default configuration of every format and token tile: no local memory, no
    serialised-wgmma warning (C7512/C7513/C7515/C7517)."""
    from mactile.gpu.runtime import nvcc_check
    names = sorted({e.engine_name(f, e.config_for(f, bn, nb), h) for f in ENGINE_FORMATS for bn in (8, 16, 64, 128, 256)
                    for nb in (None, 0) for h in (0, 1, 2, 3) if h != 1 or bn >= e.HYB_MIN_BN
                    if h != 3 or e.config_for(f, bn, nb).bn >= e.CLUSTER_MIN_BN
                    if not (bn > 128 and engine_traits(f)["PROMOTE"])})
    keep = ",\n".join(f"  (void*)&{n}" for n in names)
    rep = nvcc_check(e.engine_source() + "\nnamespace { void* keep_[] = {\n" + keep + "\n}; }\n",
                     extra=("-diag-suppress", "177"))
    assert "C751" not in rep.log, [ln for ln in rep.log.splitlines() if "C751" in ln]
    # Known exceptions, read in the SASS: no local access inside the k-loop (between the
    # main loop's wgmmas), only at entry and in the finish of a tile. NestedFP16 at 128
    # tokens: two 64-bit values stored at entry, reloaded once per tile, 20-24 bytes. The
    # 4-warpgroup FP4 kernels of 64 tokens (96 registers): 8-12 bytes in the finish since
    # the hybrid stream-K change (U0 in the stripe-owner arithmetic). The kernels of parts
    # summed together (partition 2) have none.
    allowed = {e.engine_name("nestedfp16", e.config_for("nestedfp16", 128), h): 32 for h in (0, 1, 2)}
    allowed.update({e.engine_name(f, e.config_for(f, 64), h): 16 for f in ("nvfp4", "mxfp4", "razer")
                    for h in (0, 1, 2)})
    for k, r in rep.kernels.items():
        name = next((n for n in names if _mangled(n) == k), k)
        assert r.get("spill_stores", 0) <= allowed.get(name, 0), (name, r)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.slow
def test_tuning_candidates_compile_without_spills():
    """Every configuration a tuning sweep may choose (the candidates that are not
    defaults; stream-K stripes, the same code as the other partitions around the loop): no
    local memory, no serialised wgmma. The variants that spilled (four warpgroups batched
    at 64 tokens, four for razer-g128, NestedFP beyond its four-warpgroup tile, NestedFP16
    batched at 128) are not candidates (``engine._variants``)."""
    from mactile.gpu.runtime import nvcc_check
    defaults = {e.engine_name(f, e.config_for(f, bn, nb)) for f in ENGINE_FORMATS for bn in (8, 16, 32, 64, 128, 256)
                for nb in (None, 0)}
    names = sorted({e.engine_name(f, c) for f, c in e.instances()} - defaults)
    assert len(names) >= 30
    keep = ",\n".join(f"  (void*)&{n}" for n in names)
    rep = nvcc_check(e.engine_source() + "\nnamespace { void* keep_[] = {\n" + keep + "\n}; }\n",
                     extra=("-diag-suppress", "177"))
    assert "C751" not in rep.log, [ln for ln in rep.log.splitlines() if "C751" in ln]
    for k, r in rep.kernels.items():
        assert r.get("spill_stores", 0) == 0, (next((n for n in names if _mangled(n) == k), k), r)


def test_tuning_candidates():
    """The default first, no duplicates, every candidate prebuilt, the CTA-count candidate
    only with ``sms``; none of the variants that spilled; one warpgroup only in FP8 mode."""
    built = {(f, e.engine_name(f, c)) for f, c in e.instances()}
    for f in ENGINE_FORMATS:
        for M in (16, 32, 64, 128, 256, 512):
            for nb in (None, 9 << 20, 80 << 20):
                cands = e.tuning_candidates(f, M, nb, sms=132)
                assert cands[0] == e.config_for(f, M, nb)
                keys = [(c.bn, c.stages, c.wgs, c.n_ctas, c.schedule, e.early_units(f, c)) for c in cands]
                assert len(set(keys)) == len(keys) >= 3
                assert all((f, e.engine_name(f, c)) in built for c in cands)
                assert sum(c.n_ctas == 132 for c in cands) == 1
                assert not any(c.n_ctas for c in e.tuning_candidates(f, M, nb))
                for c in cands:
                    if c.wgs == 1:  # one warpgroup: FP8 mode only (nothing to decode), up to 64 tokens
                        assert f == "nestedfp8" and c.bn <= e.ONE_WG_MAX_BN
                        continue
                    assert c.wgs == 2 or c.bn <= {"razer-g128": 0, "nestedfp16": 16, "nestedfp8": 32}.get(f, 64)
                    assert not (c.wgs == 4 and c.schedule == 1 and c.bn > 32)
    # half the token tile is a candidate: NestedFP16 at M = 256 may run 128-token tiles
    assert any(c.bn == 128 for c in e.tuning_candidates("nestedfp16", 256))
    assert any(c.wgs == 1 for c in e.tuning_candidates("nestedfp8", 16))


def _mangled(expr):
    """Itanium mangling of ``mt::engine_gemm<a, b, c, d, e, f, g>`` (the kernel's fixed signature)."""
    args = expr[expr.index("<") + 1:-1].split(",")
    return ("_ZN2mt11engine_gemmIL" + "".join(f"i{int(a)}EL" for a in args)[:-1] + "EEvN3ptx9TensorMapES2_S2_PKhS4_"
            "PKfPvPfPiiiiiiiiifijjjjjPy")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_every_kernel_family_compiles():
    """Each prebuilt family's source (engine, CUDA-core/W4A4/ReSET, FlexQ, NestedFP) builds
    with nvcc with one of its instances kept: non-template kernels and every non-dependent
    name are compiled (a generated id used outside its namespace once broke only the
    prebuild of w4a4.cu)."""
    from mactile.gpu.prebuilt import _jobs
    from mactile.gpu.runtime import nvcc_check
    for source, names in _jobs():
        first = sorted(set(names))[0]
        rep = nvcc_check(source + f"\nnamespace {{ void* keep_[] = {{ (void*)&{first} }}; }}\n",
                         extra=("-diag-suppress", "177"))  # raises with the log on an error
        assert rep.kernels, first


def test_split_parts_rule():
    """Parts summed by all of a tile's CTAs only when every tile has the same number of
    parts, at least PARTS_MIN, without whole-tile rounds, and every CTA can be resident at
    once."""
    assert e.split_parts(16, 128, sms=132) == 8
    assert e.split_parts(40, 120, sms=132) == 0     # 3 parts: fewer than PARTS_MIN
    assert e.split_parts(16, 120, sms=132) == 0     # 7.5 parts per tile: stream-K's last arriver
    assert e.split_parts(16, 16, sms=132) == 0      # one part per tile: nothing to sum
    assert e.split_parts(4, 8, nf=1, sms=132) == 0  # whole-tile rounds first
    assert e.split_parts(1, 140, sms=132) == 0      # more CTAs than SMs: they could not all wait


def test_whole_rounds_rule(monkeypatch):
    """Hybrid stream-K: whole-tile rounds only when the tiles do not divide evenly over the
    CTAs (even division: the stripes are whole tiles already), the rest can be striped with
    at least one k-block per CTA, and the activations are at least a quarter of the L2."""
    L2, big = 50 << 20, 52 << 20                        # Qwen3-32B down at M = 1024: 52 MB of activations
    assert e.whole_rounds(160, 400, 132, big, L2) == 1  # 132 whole + 28 striped
    assert e.whole_rounds(320, 400, 132, big, L2) == 2
    assert e.whole_rounds(160, 400, 132, 5 << 20, L2) == 0  # small activations: stream-K's order
    assert e.whole_rounds(512, 128, 128, big, L2) == 0  # divides: pure stream-K = whole tiles
    assert e.whole_rounds(100, 64, 132, big, L2) == 0   # fewer tiles than CTAs: split tiles
    assert e.whole_rounds(133, 64, 132, big, L2) == 0   # 1 tile x 64 k-blocks < 132 CTAs
    assert e.whole_rounds(136, 64, 132, big, L2) == 1   # 4 x 64 >= 132
    monkeypatch.setattr(e, "HYBRID", False)
    assert e.whole_rounds(160, 400, 132, big, L2) == 0


def test_set_source_switches_and_restores():
    """engine.set_source (benchmarks' A/B): the next launches compile from the given source,
    the trace define still in front, and None returns to the package's."""
    own = e.engine_source()
    other = "// variant\n" + own
    try:
        e.set_source(other)
        assert e._active_source() == other
        assert e._active_source(traced=True) == "#define MT_ENGINE_TRACE 1\n" + other
    finally:
        e.set_source(None)
    assert e._active_source() == own
    for bad in (b"bytes", "int main() {}", 3):
        with pytest.raises(TypeError, match="complete engine source"):
            e.set_source(bad)
    assert e._active_source() == own


def _engine_ab():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_ab.py"
    spec = importlib.util.spec_from_file_location("engine_ab", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_engine_ab_dump_and_bad_sources(tmp_path):
    """benchmarks/engine_ab.py: --dump writes this tree's source; bad --source arguments
    stop with a message naming the problem, before any GPU work."""
    ab = _engine_ab()
    out = tmp_path / "old.cu"
    assert ab.main(["--dump", str(out)]) == 0
    assert out.read_text() == e.engine_source()
    (tmp_path / "junk.cu").write_text("int main() {}\n")
    cases = {("--source", "a=tree"): "at least two",
             ("--source", "a=tree", "--source", "a=tree"): "given twice",
             ("--source", "a=tree", "--source", "b"): "NAME=PATH",
             ("--source", "a=tree", "--source", f"b={tmp_path / 'missing.cu'}"): "no such file",
             ("--source", "a=tree", "--source", f"b={tmp_path / 'junk.cu'}"): "not an engine source"}
    for argv, why in cases.items():
        with pytest.raises(SystemExit, match=why):
            ab.main(list(argv))


def test_ab_script_helpers(tmp_path):
    """The benchmark scripts' shared argument helpers (gpu/bench/harness.py): KxN shapes,
    the geometric mean, and flexq_ab.py's --source arguments through the same parser as
    engine_ab.py's (paths kept for FlexQ, whose kernels load a source file)."""
    import importlib.util
    from pathlib import Path

    from mactile.gpu.bench.harness import geomean, parse_shapes
    assert parse_shapes(None, [(1, 2)]) == [(1, 2)]
    assert parse_shapes(["4096x6144", "8X16"], [(1, 2)]) == [(4096, 6144), (8, 16)]
    for bad in ("4096", "4096x", "ax2", "0x8", "1x2x3"):
        with pytest.raises(SystemExit, match="expected K x N"):
            parse_shapes([bad], [])
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "flexq_ab.py"
    spec = importlib.util.spec_from_file_location("flexq_ab", path)
    fq = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fq)
    good = tmp_path / "v.cu"
    good.write_text("__global__ void flexq_gemm() {}\n")
    assert fq._sources(["a=tree", f"b={good}"]) == {"a": None, "b": good}
    (tmp_path / "junk.cu").write_text("int main() {}\n")
    with pytest.raises(SystemExit, match="flexq_ab: .*not a FlexQ source"):
        fq._sources(["a=tree", f"b={tmp_path / 'junk.cu'}"])


def test_engine_ab_settings():
    """engine_ab.py --set NAME:CONST=VALUE: parsed as the engine constant's own type, set only
    while that source runs and put back after; a bad setting stops with a clear message."""
    ab = _engine_ab()
    got = ab._settings(["p2:PARTS_MIN=2", "p2:HYBRID=false", "p2:STREAMK_IDLE=0.5"], ["p4", "p2"], e)
    assert got == {"p4": {}, "p2": {"PARTS_MIN": 2, "HYBRID": False, "STREAMK_IDLE": 0.5}}
    before = e.PARTS_MIN
    with ab._Constants(e, {"PARTS_MIN": before + 3}):
        assert e.PARTS_MIN == before + 3
    assert e.PARTS_MIN == before
    cases = {"p2PARTS_MIN=2": "NAME:CONST=VALUE", "p2:PARTS_MIN": "NAME:CONST=VALUE",
             "p9:PARTS_MIN=2": "no --source named", "p2:NOT_THERE=1": "not a numeric or boolean",
             "p2:engine_source=1": "not a numeric or boolean", "p2:PARTS_MIN=two": "not a valid int",
             "p2:HYBRID=maybe": "not a valid bool"}
    for spec, why in cases.items():
        with pytest.raises(SystemExit, match=why):
            ab._settings([spec], ["p4", "p2"], e)
    with pytest.raises(SystemExit, match="no --source named"):  # through main, before GPU work
        ab.main(["--source", "a=tree", "--source", "b=tree", "--set", "c:PARTS_MIN=2"])


def test_cluster_parts_rule(monkeypatch):
    """Which launches sum their parts in a cluster: 2..CLUSTER_MAX_P equal parts per tile,
    one stripe per CTA, token tiles from CLUSTER_MIN_BN with a whole epilogue pass per CTA,
    at most one CTA per SM."""
    assert e.cluster_parts(64, 128, 0, 256, sms=132) == 2   # 8192 features, M = 256
    assert e.cluster_parts(40, 120, 0, 256, sms=132) == 3   # 5120
    assert e.cluster_parts(32, 128, 0, 256, sms=132) == 4   # 4096
    assert e.cluster_parts(64, 128, 0, 128, sms=132) == 2
    assert e.cluster_parts(32, 128, 0, 128, sms=132) == 0   # 4 parts of 128 tokens: half a pass each
    assert e.cluster_parts(64, 128, 0, 64, sms=132) == 0    # below CLUSTER_MIN_BN
    assert e.cluster_parts(64, 128, 1, 256, sms=132) == 0   # whole-tile rounds
    assert e.cluster_parts(60, 130, 0, 256, sms=132) == 0   # unequal parts
    assert e.cluster_parts(16, 128, 0, 256, sms=132) == 0   # 8 parts: beyond CLUSTER_MAX_P
    assert e.cluster_parts(64, 128, 0, 256, sms=114) == 0   # more CTAs than SMs
    assert e.cluster_parts(66, 66, 0, 256, sms=132) == 0    # one part
    monkeypatch.setattr(e, "CLUSTER_PARTS", False)
    assert e.cluster_parts(64, 128, 0, 256, sms=132) == 0


def test_cluster_tiles_rule(monkeypatch):
    """At 128 < M <= 256 with N given, the token tile whose tiles split in two parts summed in
    a cluster wins over the other (the benchmark's 4096x6144 and 14336x4096 change, the
    rest do not); without N, NestedFP8 and outside the range nothing changes."""
    mb = 1 << 20
    assert e.config_for("nvfp4", 256, 14 * mb, N=6144, sms=132).bn == 256    # 48 tiles x 2
    assert e.config_for("nvfp4", 256, 14 * mb).bn == 128                     # the small-layer rule
    assert e.config_for("nvfp4", 200, 33 * mb, N=4096, sms=132).bn == 128   # 64 tiles x 2
    assert e.config_for("razer", 256, 9 * mb, N=4096, sms=132).bn == 128           # K = 4096
    assert e.config_for("nestedfp16", 256, 32 * mb, N=4096, sms=132).bn == 128
    assert e.config_for("razer", 256, 33 * mb, N=4096, sms=132).bn == 256          # K = 14336:
    assert e.config_for("nestedfp16", 256, 117 * mb, N=4096, sms=132).bn == 256    # a second decode
    assert e.config_for("razer-g128", 256, 31 * mb, N=4096, sms=132).bn == 128
    for f, N in (("nvfp4", 8192), ("nvfp4", 5120), ("razer-g128", 10240), ("nestedfp16", 28672)):
        assert e.config_for(f, 256, 40 * mb, N=N, sms=132) == e.config_for(f, 256, 40 * mb)
    assert e.config_for("nestedfp8", 256, 58 * mb, N=4096, sms=132) == e.config_for("nestedfp8", 256, 58 * mb)
    assert e.config_for("nvfp4", 512, 33 * mb, N=4096, sms=132) == e.config_for("nvfp4", 512, 33 * mb)
    # K = 64 (one k-block: a tile cannot split) and no nbytes: no pairs, nothing changes
    assert e.config_for("nvfp4", 256, 4096 * 36, N=4096, sms=132) == e.config_for("nvfp4", 256, 4096 * 36)
    assert e.config_for("nvfp4", 256, None, N=4096, sms=132) == e.config_for("nvfp4", 256)
    assert e.config_for("nvfp4", 128, 33 * mb, N=4096, sms=132) == e.config_for("nvfp4", 128, 33 * mb)
    c = e.config_for("nvfp4", 256, 33 * mb, N=4096, sms=132)
    assert c == e.config_for("nvfp4", 128)  # a prebuilt default (stages, schedule of its tile)
    assert e.config_for("nvfp4", 256, 33 * mb) in e.tuning_candidates("nvfp4", 256, 33 * mb, sms=132, N=4096)
    monkeypatch.setattr(e, "CLUSTER_TILES", False)
    assert e.config_for("nvfp4", 256, 33 * mb, N=4096, sms=132).bn == 256


def test_rounds_any_activations_rule(monkeypatch):
    """Whole-tile rounds whatever the activations' size: one 256-token tile of a light-decode
    format only (not NestedFP16 or razer, not two token tiles, not 128-token tiles); and
    whole_rounds then takes them as soon as the tiles outnumber the CTAs unevenly."""
    assert e.rounds_any_activations("nvfp4", 256, 1) and e.rounds_any_activations("razer-g128", 256, 1)
    assert e.rounds_any_activations("mxfp4", 256, 1)
    assert not e.rounds_any_activations("nestedfp16", 256, 1) and not e.rounds_any_activations("razer", 256, 1)
    assert not e.rounds_any_activations("nvfp4", 256, 2) and not e.rounds_any_activations("nvfp4", 128, 1)
    assert not e.rounds_any_activations("nestedfp8", 256, 1)
    # 4096x28672 at M = 256: 224 tiles of 64 k-blocks on 132 CTAs, 2.6 MB of activations
    assert e.whole_rounds(224, 64, 132, 2 << 20, 0) == 1
    assert e.whole_rounds(224, 64, 132, 2 << 20, 50 << 20) == 0
    monkeypatch.setattr(e, "HYB_ONE_TOKEN_TILE", False)
    assert not e.rounds_any_activations("nvfp4", 256, 1)


def test_cluster_launch_checks_the_grid():
    """launch(..., cluster=P): a grid that is not whole clusters is refused by name before
    any driver call (no GPU needed)."""
    from mactile.gpu.launch import launch
    with pytest.raises(ValueError, match="not a multiple of the cluster size 2"):
        launch(None, (3,), (128,), [], cluster=2)
    with pytest.raises(ValueError, match="cluster size 0"):
        launch(None, (4,), (128,), [], cluster=0)
