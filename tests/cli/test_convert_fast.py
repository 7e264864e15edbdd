"""`mactile convert` writes the same bytes on its fast paths as with --golden (the golden
NumPy models only), for every input layout and target format of the peers' files."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from mactile.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoints"


def _convert(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out, out.err


def _files(p: Path) -> dict:
    if p.is_file():
        return {"file": p.read_bytes()}
    return {q.name: q.read_bytes() for q in sorted(p.iterdir())}


@pytest.mark.parametrize("src", ["ct_nvfp4", "ct_mxfp4", "modelopt_nvfp4",
                                 "gptoss_mxfp4/model.safetensors"])
@pytest.mark.parametrize("to", [["nvfp4"], ["mxfp4"], ["razer"],
                                ["nvfp4", "--layout", "mactile"],
                                ["mxfp4", "--layout", "gpt-oss-mxfp4"]],
                         ids=lambda a: "-".join(a))
def test_fast_and_golden_write_the_same_bytes(src, to, tmp_path, capsys):
    name = Path(src).name
    fast, golden = tmp_path / "fast", tmp_path / "golden"
    if name.endswith(".safetensors"):
        fast, golden = fast.with_suffix(".safetensors"), golden.with_suffix(".safetensors")
    so_f, se_f = _convert(["convert", str(DATA / src), str(fast), "--to", *to], capsys)
    so_g, se_g = _convert(["convert", str(DATA / src), str(golden), "--to", *to, "--golden"],
                          capsys)
    a, b = _files(fast), _files(golden)
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), "outputs differ"
    # the same report but the timing (the error sums agree to float64 rounding: 4 digits)
    def strip(text):
        text = text.replace(str(fast), "OUT").replace(str(golden), "OUT")
        return re.sub(r"in [0-9.e+-]+ s \([0-9.e+-]+ MB/s\)", "", text)

    assert strip(so_f) == strip(so_g)
    assert se_f == se_g
