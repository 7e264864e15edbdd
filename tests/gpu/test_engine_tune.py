"""The engine's tuning sweep (``mactile bench tune``): its table entries, the merge into a
tuning table, the markdown; on the GPU a small sweep whose entries ``linear`` then uses."""
import numpy as np
import pytest

from fp4_gpu_util import GPU
from mactile.gpu import engine as e
from mactile.gpu.bench.engine_tune import config_list, merge_engine_entries, tune_table
from mactile.gpu.tuning import engine_choice


def _entry(fmt, K, N, M, cfg, t=10.0, d=10.0):
    return {"format": fmt, "K": K, "N": N, "M": M, "config": cfg, "time_us": t, "default_us": d,
            "cublas_fp16_us": 20.0}


def test_merge_keeps_crossover_and_other_entries():
    old = {"crossover": [{"format": "nvfp4", "N": 1, "K": 1, "crossover_m": 0}],
           "engine": [_entry("nvfp4", 4096, 4096, 16, [16, 12, 4, 0, 1]),
                      _entry("razer", 4096, 4096, 16, [16, 12, 4, 0, 1])]}
    new = [_entry("nvfp4", 4096, 4096, 16, [16, 12, 2, 0, 0], 9.0), _entry("nvfp4", 4096, 4096, 64, [64, 12, 2, 0, 1])]
    m = merge_engine_entries(old, new)
    assert m["crossover"] == old["crossover"]
    assert len(m["engine"]) == 3
    assert engine_choice(m, "nvfp4", 4096, 4096, 16)[0] == e.EngineConfig(16, 12, 2, 0, 0)  # replaced
    assert engine_choice(m, "razer", 4096, 4096, 16)[0] == e.EngineConfig(16, 12, 4, 0, 1)  # kept
    assert engine_choice(m, "nvfp4", 4096, 4096, 65)[0] is None  # above every measured M
    assert merge_engine_entries(None, new)["engine"] == sorted(new, key=lambda x: x["M"])
    assert old["engine"][0]["config"] == [16, 12, 4, 0, 1]  # the input is not changed


def test_default_entries_follow_the_engine_default():
    """An entry where no candidate beat the default names the default measured then; the
    lookup takes the engine's current default for it (a later config_for change shows) and
    it is not prebuilt as a table configuration."""
    t = {"engine": [{**_entry("nvfp4", 4096, 4096, 64, [64, 11, 4, 0, 0]), "default": True},
                    {**_entry("nvfp4", 4096, 4096, 256, [128, 9, 2, 0, 0]), "default": False}]}
    cfg, why = engine_choice(t, "nvfp4", 4096, 4096, 64)
    assert cfg is None and "default was fastest" in why
    assert engine_choice(t, "nvfp4", 4096, 4096, 256)[0] == e.EngineConfig(128, 9, 2, 0, 0)


def test_config_list_round_trips():
    cands = e.tuning_candidates("nvfp4", 64, 9 << 20, sms=132)
    assert {len(config_list(c)) for c in cands} == {5, 6}  # early written only where set
    for c in cands:
        assert e.EngineConfig(*config_list(c)) == e.EngineConfig(c.bn, c.stages, c.wgs, c.n_ctas, c.schedule, c.early)


def test_tune_table_reports_gain():
    res = {"engine": [{**_entry("nvfp4", 4096, 4096, 16, [16, 12, 4, 0, 1]), "default": True},
                      {**_entry("nvfp4", 8192, 8192, 16, [16, 12, 2, 0, 0], t=8.0, d=10.0), "sweep_us": 7.9}]}
    md = tune_table(res)
    assert "| nvfp4 | 4096x4096 | 16 | 10.0 | default | 10.0 | 1.000 | 2.00x |" in md, md
    assert "| nvfp4 | 8192x8192 | 16 | 10.0 | [16, 12, 2, 0, 0] | 8.0 | 1.250 | 2.50x |" in md
    assert "| nvfp4 | 1.118 |" in md  # geometric mean of 1.0 and 1.25


@GPU[0]
@GPU[1]
def test_small_sweep_on_the_gpu():
    """A sweep of one small shape: an entry per format and M, every candidate checked before
    timing, the chosen configuration one of the candidates, and ``linear`` with the merged
    table runs it (bitwise the same as the engine launched with that configuration)."""
    from fp4_gpu_util import cupy
    cp = cupy()
    from mactile.gpu import gemm_tc, linear
    from mactile.gpu.bench.engine_tune import tune_engine
    from mactile.gpu.bench.gemm_bench import FORMATS, random_quantized
    from mactile.gpu.packing import pack_w4a16
    logs = []
    res = tune_engine(shapes=[("test", "t", 1024, 512)], Ms=[16, 40], kinds=["nvfp4", "nestedfp16"], log=logs.append)
    assert {(x["format"], x["M"]) for x in res["engine"]} == {(f, m) for f in ("nvfp4", "nestedfp16") for m in (16, 40)}
    for x in res["engine"]:
        nb = None if x["format"] == "nestedfp16" else 1 << 20  # a small layer, as the packed one
        cands = [config_list(c) for c in e.tuning_candidates(x["format"], x["M"], nb, sms=res["meta"]["sms"])]
        assert x["config"] in cands and x["candidates"] == len(cands)
        assert x["default"] == (x["config"] == cands[0])
    assert all(r["time_us"] and r["check"] and not r["error"] for r in res["records"]), logs
    table = merge_engine_entries(None, res["engine"])
    rng = np.random.default_rng(3)
    pw = pack_w4a16(random_quantized(FORMATS["nvfp4"], 512, 1024, rng)).to(cp)
    x = cp.asarray(rng.standard_normal((40, 1024)).astype(np.float16))
    cfg = engine_choice(table, "nvfp4", 1024, 512, 40)[0]
    np.testing.assert_array_equal(linear(x, pw, table=table).get(), gemm_tc(x, pw, cfg=cfg).get())


def _fake_timing(monkeypatch, retimes):
    """``time_launches`` replaced by the next of ``retimes`` (us) for each re-timing."""
    import mactile.gpu.bench.engine_tune as et
    from mactile.gpu.bench.harness import Timing
    it = iter(retimes)
    monkeypatch.setattr(et, "time_launches", lambda fn, n_sets: Timing(next(it), 0, 0, 1, 1, n_sets, "graph"))


@pytest.mark.parametrize("sweep, again, kept", [
    ((10.0, 9.5), None, False),          # 5% faster in the sweep ... below a 6% margin: not re-timed
    ((10.0, 9.0), (9.6, 10.0), False),  # 10% in the sweep, 4% again: not confirmed
    ((10.0, 9.0), (9.3, 10.0), True),   # 10% and 7%: kept
])
def test_choice_needs_the_margin_twice(monkeypatch, sweep, again, kept):
    """The winner's-curse rule: a candidate replaces the default only when it beat it by the
    margin in the sweep and again when both are re-timed (best first, then the default)."""
    from mactile.gpu.bench.engine_tune import _choose
    d, alt = e.config_for("nvfp4", 64), e.EngineConfig(64, 12, 2, 0, 1)
    _fake_timing(monkeypatch, again or ())
    logs = []
    entry = _choose("nvfp4", 4096, 4096, 64, d, [(sweep[0], d, None), (sweep[1], alt, None)], 0.06, 2, logs.append)
    assert entry["default"] is not kept
    assert entry["config"] == config_list(alt if kept else d)
    assert bool(logs) == (again is not None)  # re-timed only when the sweep showed the margin
    if kept:
        assert (entry["time_us"], entry["default_us"], entry["sweep_us"]) == (9.3, 10.0, 9.0)


def test_one_cta_per_sm_follows_the_device(monkeypatch):
    """A choice of one CTA per SM is stored as such (``ctas_per_sm``) and looked up as the
    current device's SM count (an H100 PCIe has 114, the sweep's H100 SXM 132)."""
    import mactile.gpu.runtime as rt
    from mactile.gpu.bench.engine_tune import _choose
    d, alt = e.config_for("nvfp4", 8), e.EngineConfig(8, 12, 4, 132, 1)
    _fake_timing(monkeypatch, (9.0, 10.0))
    entry = _choose("nvfp4", 4096, 4096, 8, d, [(10.0, d, None), (9.0, alt, None)], 0.03, 2, lambda s: None, sms=132)
    assert entry["ctas_per_sm"] and entry["config"][3] == 132
    monkeypatch.setattr(rt, "sm_count", lambda device=None: 114)
    assert engine_choice({"engine": [entry]}, "nvfp4", 4096, 4096, 1)[0] == e.EngineConfig(8, 12, 4, 114, 1)
    fixed = {**entry, "ctas_per_sm": False}
    assert engine_choice({"engine": [fixed]}, "nvfp4", 4096, 4096, 1)[0].n_ctas == 132


def test_sweep_record_is_lean():
    """A sweep record carries the candidate and its timing; the device, date and versions
    are the sweep's meta (2000-odd records per sweep)."""
    from mactile.gpu.bench.engine_tune import sweep_record
    from mactile.gpu.bench.harness import Timing
    c = e.EngineConfig(64, 12, 2, 132, 1)
    r = sweep_record("nvfp4", 4096, 4096, 64, "m", "l", c, False, Timing(9.0, 8.9, 9.2, 200, 15, 8, "graph"),
                     {"fp16": 20.0, "fp8": 12.0}, {"max_ratio_to_bound": 0.3}, "")
    assert r["config"] == [64, 12, 2, 132, 1] and (r["time_us"], r["p10_us"], r["p90_us"]) == (9.0, 8.9, 9.2)
    assert r["cublas_fp16_us"] == 20.0 and not {"device", "versions", "date"} & r.keys()
    failed = sweep_record("nvfp4", 4096, 4096, 64, "m", "l", c, False, None, {}, {}, "AssertionError: x")
    assert failed["time_us"] is None and failed["error"]


def test_failed_default_gives_no_entry():
    from mactile.gpu.bench.engine_tune import _choose
    alt = e.EngineConfig(64, 12, 2, 0, 1)
    assert _choose("nvfp4", 4096, 4096, 64, e.config_for("nvfp4", 64), [(9.0, alt, None)], 0.03, 2, lambda s: None) is None


@GPU[0]
@GPU[1]
def test_a_wrong_candidate_is_never_chosen(monkeypatch):
    """A candidate whose output is wrong (here: the one-CTA-per-SM candidate with 1 added to
    every output) fails its check, is recorded with the error and no time, and is not chosen."""
    import mactile.gpu.bench.engine_tune as et
    real = et._launcher

    def broken(kind, sets, xs, ys, cfg):
        fn = real(kind, sets, xs, ys, cfg)
        if not cfg.n_ctas:
            return fn

        def wrong(i):
            fn(i)
            ys[i] += 1
        return wrong
    monkeypatch.setattr(et, "_launcher", broken)
    logs = []
    res = et.tune_engine(shapes=[("test", "t", 1024, 512)], Ms=[16], kinds=["nvfp4"], log=logs.append)
    bad = [r for r in res["records"] if r["config"][3]]
    assert len(bad) == 1 and bad[0]["time_us"] is None and "exceeds" in bad[0]["error"], bad
    assert any("FAILED" in s for s in logs)
    assert [x["config"][3] for x in res["engine"]] == [0]


def test_device_without_table_reads_nearest_or_defaults(tmp_path):
    """An H200 with no h200.json reads h100.json (same chip) and says so; an unknown device
    runs the defaults and says how to measure a table; a device's own table wins."""
    from mactile.gpu.tuning import resolve_table

    (tmp_path / "h100.json").write_text("{}")
    path, why = resolve_table("NVIDIA H200", tmp_path)
    assert path == tmp_path / "h100.json" and "no table measured on NVIDIA H200" in why
    assert "bench tune --tuning-out gpu/tuning/h200.json" in why
    path, why = resolve_table("NVIDIA B300", tmp_path)
    assert path is None and "engine's defaults run" in why
    (tmp_path / "h200.json").write_text("{}")
    path, why = resolve_table("NVIDIA H200", tmp_path)
    assert path == tmp_path / "h200.json" and "measured on this device kind" in why
