"""benchmarks/flexq_ab.py without a GPU: --dump writes the tree's flexq.cu, sources are
checked before any device work, and the committed A/B result holds what docs/gpu.md says."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fp4_gpu_util import load_benchmark_script

ROOT = Path(__file__).resolve().parents[2]


def test_dump_writes_the_tree_source(tmp_path):
    mod = load_benchmark_script("flexq_ab")
    out = tmp_path / "base.cu"
    assert mod.main(["--dump", str(out)]) == 0
    assert out.read_text() == (ROOT / "gpu" / "flexq" / "flexq.cu").read_text()
    assert "constexpr bool PEEL = MT != 4;" in out.read_text()  # the line the docs' sed edits


@pytest.mark.parametrize("specs,msg", [
    (["a=tree"], "at least two"),
    (["a=tree", "a=tree"], "given twice"),
    (["a=tree", "b"], "expected NAME=PATH"),
    (["a=tree", "b=/no/such/file.cu"], "no such file"),
])
def test_bad_sources_refused(specs, msg):
    mod = load_benchmark_script("flexq_ab")
    with pytest.raises(SystemExit, match=msg):
        mod._sources(specs)


def test_not_a_flexq_source(tmp_path):
    mod = load_benchmark_script("flexq_ab")
    p = tmp_path / "x.cu"
    p.write_text("__global__ void k() {}\n")
    with pytest.raises(SystemExit, match="not a FlexQ source"):
        mod._sources(["a=tree", f"b={p}"])


def test_committed_peel_ab():
    """The committed rule (PEEL but at M = 32) against both alternatives, as docs/gpu.md
    reports it: the plain loop slower at M = 1, 16 and 64; peeling M = 32 slower there."""
    recs = json.loads((ROOT / "docs" / "results" / "gpu_flexq_peel_ab_h100.json").read_text())["records"]
    t = {(r["K"], r["N"], r["M"], r["source"]): r["time_us"] for r in recs}
    layers = {(k, n) for k, n, _, _ in t}
    assert len(layers) == 9

    def geo(m, a, b):
        return math.exp(sum(math.log(t[(k, n, m, a)] / t[(k, n, m, b)]) for k, n in layers) / 9)

    for m in (1, 16, 64):
        assert geo(m, "plain", "tree") > 1.02
    assert geo(32, "peel_all", "tree") > 1.02
