"""benchmarks/merge_gpu_bench.py on the committed H100 result split in two (no GPU needed):
the merged records are the parts' records, the shapes in the benchmark's order, and runs of
different devices or overlapping shapes are refused by name."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from fp4_gpu_util import load_benchmark_script

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "docs" / "results" / "gpu_gemm_h100.json"


def _merge_module():
    return load_benchmark_script("merge_gpu_bench")


def _split():
    d = json.loads(RESULT.read_text())
    meta, recs = d["meta"], d["records"]
    shapes = [tuple(s) for s in meta["shapes"]]
    parts = []
    for half in (shapes[4:], shapes[:4]):  # out of order on purpose
        keys = {(K, N) for _, _, K, N in half}
        m = copy.deepcopy(meta)
        m["shapes"] = [list(s) for s in half]
        m["seconds"] = 10.0
        m.pop("runs", None)
        parts.append((m, [r for r in recs if (r["K"], r["N"]) in keys]))
    return meta, recs, parts


def test_merge_keeps_every_record_in_the_benchmark_order():
    mod = _merge_module()
    meta, recs, parts = _split()
    got_meta, got = mod.merge(parts)
    assert len(got) == len(recs) and sorted(map(json.dumps, got)) == sorted(map(json.dumps, recs))
    assert got_meta["shapes"] == meta["shapes"] and got_meta["seconds"] == 20.0
    assert len(got_meta["runs"]) == 2 and "2 runs" in got_meta["note"]


def test_merge_refuses_mixed_runs():
    mod = _merge_module()
    _, _, parts = _split()
    other = copy.deepcopy(parts[1])
    other[0]["device"]["name"] = "NVIDIA H200"
    with pytest.raises(SystemExit, match="different devices"):
        mod.merge([parts[0], other])
    with pytest.raises(SystemExit, match="more than one run"):
        mod.merge([parts[0], parts[0]])
    fewer = copy.deepcopy(parts[1])
    fewer[0]["M"] = fewer[0]["M"][:3]
    with pytest.raises(SystemExit, match="differ in 'M'"):
        mod.merge([parts[0], fewer])


def test_merge_writes_the_tables(tmp_path):
    mod = _merge_module()
    _, _, parts = _split()
    paths = []
    for i, (m, r) in enumerate(parts):
        p = tmp_path / f"part{i}.json"
        p.write_text(json.dumps({"meta": m, "records": r}))
        paths.append(str(p))
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"engine": [{"format": "nvfp4"}]}))
    assert mod.main(paths + ["-o", str(tmp_path / "out" / "gemm"), "--tuning-out", str(table)]) == 0
    md = (tmp_path / "out" / "gemm.md").read_text()
    assert "Geometric mean" in md and "| nvfp4 |" in md
    assert (tmp_path / "out" / "gemm.png").stat().st_size > 10_000
    t = json.loads(table.read_text())
    assert t["engine"] == [{"format": "nvfp4"}] and t["crossover"]  # engine entries kept
