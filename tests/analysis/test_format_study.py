"""The format study reproduces the papers' trends and writes its outputs."""
import json

import numpy as np
import pytest

from mactile.analysis import format_study as fs


@pytest.fixture(scope="module")
def small_study():
    data = fs.synthetic_datasets(128, 2048, seed=3)
    return fs.run_study(data)


def test_papers_claims_hold_on_synthetic_data(small_study):
    failed = [c for c in small_study.claims if not c["holds"]]
    assert small_study.claims and not failed, failed


def test_sweep_is_exactly_nvfp4_where_v_is_already_an_fp4_value(small_study):
    # +-3, +-4, +-6 exist in FP4; a tie between v and an FP4 value goes to FP4, so the
    # special value is never used and the error equals NVFP4's exactly.
    for r in small_study.sweep_single:
        if r["v"] in (3.0, 4.0, 6.0):
            assert r["rel_nvfp4"] == 1.0


def test_dialect_usage_is_a_distribution(small_study):
    for r in small_study.dialect_usage:
        assert np.isclose(sum(r["share"]), 1.0)
        assert 0.0 <= r["agree_with_mse"] <= 1.0


def test_outputs_written(small_study, tmp_path):
    pytest.importorskip("matplotlib")
    paths = fs.write_outputs(small_study, tmp_path)
    assert {p.name for p in paths} == {"study.json", "study.md", "study.png"}
    data = json.loads((tmp_path / "study.json").read_text())
    assert set(data["datasets"]) == set(small_study.datasets)
    assert (tmp_path / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "RaZeR Fig. 3" in (tmp_path / "study.md").read_text()


def test_real_weight_loader_reads_linear_weights(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(0)
    path = tmp_path / "model.safetensors"
    st.save_file({
        "encoder.layer.0.attention.self.query.weight": rng.standard_normal((8, 64)).astype(np.float32),
        "encoder.layer.0.attention.self.query.bias": rng.standard_normal(64).astype(np.float32),
        "embeddings.word_embeddings.weight": rng.standard_normal((10, 64)).astype(np.float32),
        "encoder.layer.0.output.dense.weight": rng.standard_normal((4, 96)).astype(np.float16),
    }, str(path))
    out = fs.load_linear_weights(path, st.load_file)
    assert [t.shape for t in out] == [(8, 64)]  # bias, embeddings and 96-wide dropped
    assert out[0].dtype == np.float32
