"""``mactile bench e2e`` on the CPU: option errors before any work, the tiny run end to end
(records, speed-ups, the three files), and all-or-none writing. The times measured here are
not checked (a benchmark records times; it does not assert them)."""
import json

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from mactile.cli.main import main  # noqa: E402
from mactile.torch import e2e_bench as eb  # noqa: E402

SMALL = ["--tiny", "--device", "cpu", "--batches", "1,2", "--gen", "2", "--context", "8", "--prefill", "16"]


def run_cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("argv,msg", [
    (["--formats", "fp16,int3"], "unknown variants ['int3']"),
    (["--config", "llama-9"], "unknown --config 'llama-9'"),
    (["--context", "5000"], "exceed tiny's 4096 positions"),
    (["--decode", "graph"], "--decode graph needs --device cuda"),
    (["--name", "a/b"], "--name must be a file name stem"),
    (["--device", "tpu"], "--device must be cuda, cuda:N or cpu"),
])
def test_option_errors(argv, msg, capsys, tmp_path):
    rc, _, err = run_cli(["bench", "e2e", *SMALL, "-o", str(tmp_path / "o"), *argv], capsys)
    assert rc == 2 and msg in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_needs_cuda_without_device_flag(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    rc, _, err = run_cli(["bench", "e2e", "--tiny", "-o", str(tmp_path)], capsys)
    assert rc == 2 and "needs a CUDA GPU" in err


def test_list(capsys):
    rc, out, _ = run_cli(["bench", "e2e", "--list"], capsys)
    assert rc == 0
    assert [line.split()[0] for line in out.splitlines()] == eb.variant_names()


def test_tiny_cpu_run_writes_json_md_png(capsys, tmp_path):
    rc, out, _ = run_cli(["bench", "e2e", *SMALL, "-o", str(tmp_path), "--formats", "fp16,fp8,nvfp4"], capsys)
    assert rc == 0
    res = json.loads((tmp_path / "e2e.json").read_text())
    recs = res["records"]
    dec = {(r["variant"], r["batch"]): r for r in recs if r["measure"] == "decode" and "error" not in r}
    assert {b for v, b in dec if v == "fp16"} == {1, 2}
    assert all(dec[("fp16", b)]["speedup_vs_fp16"] == 1.0 for b in (1, 2))
    assert all(r["tokens_per_s"] > 0 and r["steps"] == 2 for r in dec.values())
    build = {r["variant"]: r for r in recs if r["measure"] == "build"}
    assert build["fp8"]["weight_bytes"] < build["fp16"]["weight_bytes"]
    bd = [r for r in recs if r["measure"] == "breakdown"]
    assert bd and all(r["batch"] == 1 and r["linear_s"] > 0 for r in bd)
    pre = [r for r in recs if r["measure"] == "prefill"]
    assert {r["length"] for r in pre} == {16}
    if "nvfp4" in {r["variant"] for r in recs if r["measure"] == "build" and "error" not in r}:
        assert build["nvfp4"]["weight_bytes"] < build["fp8"]["weight_bytes"]
    else:  # without mactile.torch.quantize_model the variant is recorded as not run
        assert "error" in build["nvfp4"]
    meta = res["meta"]
    assert meta["env"]["torch"] == torch.__version__ and meta["config"]["name"] == "tiny"
    md = (tmp_path / "e2e.md").read_text()
    assert "| fp16 |" in md and "B=2" in md and "How it was measured" in md
    assert (tmp_path / "e2e.png").read_bytes()[:4] == b"\x89PNG"
    assert "wrote" in out


def test_outputs_all_or_none(tmp_path, monkeypatch):
    res = eb.run_e2e(eb.Options(config="tiny", batches=(1,), context=4, gen=1, warmup=1, prefill=(),
                                variants=("fp16",), device="cpu", breakdown_batches=()), log=lambda *a: None)

    def broken_plot(result, path):
        raise RuntimeError("plot failed")

    monkeypatch.setattr(eb, "plot", broken_plot)
    with pytest.raises(RuntimeError, match="plot failed"):
        eb.write_outputs(res, tmp_path / "out")
    assert not any((tmp_path / "out").glob("e2e.*"))
    monkeypatch.undo()
    files = eb.write_outputs(res, tmp_path / "out")
    assert sorted(f.name for f in files) == ["e2e.json", "e2e.md", "e2e.png"]


def test_reset_sampler_decode_recorded():
    res = eb.run_e2e(eb.Options(config="tiny", batches=(2,), context=4, gen=2, warmup=1, prefill=(),
                                variants=("fp16",), device="cpu", breakdown_batches=(), sampler="reset"),
                     log=lambda *a: None)
    dec = [r for r in res["records"] if r["measure"] == "decode"]
    assert len(dec) == 1 and "StepAwareTemperatureSampler" in dec[0]["sampler"] and dec[0]["tokens_per_s"] > 0
    assert res["meta"]["sampler"] == "reset"


def test_time_budget_records_the_rest_as_skipped():
    res = eb.run_e2e(eb.Options(config="tiny", batches=(1, 2), context=4, gen=1, warmup=1, prefill=(),
                                variants=("fp16", "fp8"), device="cpu", breakdown_batches=(), budget_s=0.0),
                     log=lambda *a: None)
    errs = [r for r in res["records"] if "error" in r]
    assert errs and all("time budget" in r["error"] for r in errs)
    assert {r["variant"] for r in errs} == {"fp16", "fp8"}
