"""The CLI's help, list, table and quantize round trip."""
import numpy as np
import pytest

from mactile.cli.main import main
from mactile.golden import get_format


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("list", "quantize", "formats"):
        assert cmd in out


def test_list_shows_formats_and_designs(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("fp4_e2m1", "e3m3", "nvfp4", "razer", "dialectfp4", "int-group", "nestedfp"):
        assert name in out
    assert "RTL designs" in out


def test_table_prints_every_code(capsys):
    assert main(["formats", "table", "fp4_e2m1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 + 16 and "6" in out[8]


@pytest.mark.parametrize("args, name, kw", [
    (["--format", "razer", "--special-values", "5,7"], "razer", {"special_values": (5, 7)}),
    (["--format", "dialectfp4", "--select", "mse", "--block", "16"], "dialectfp4",
     {"select": "mse", "block_size": 16}),
    (["--format", "int-group", "--bits", "8", "--block", "64"], "int-group",
     {"bits": 8, "block_size": 64}),
])
def test_quantize_matches_library(tmp_path, rng, args, name, kw):
    x = rng.standard_normal((4, 128)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rc = main(["quantize", *args, str(tmp_path / "x.npy"), str(tmp_path / "y.npy"),
               "--codes", str(tmp_path / "c.npz")])
    assert rc == 0
    y = np.load(tmp_path / "y.npy")
    q = get_format(name, **kw).quantize(x)
    assert y.dtype == np.float64 and y.shape == x.shape
    np.testing.assert_array_equal(y, q.dequantize())
    codes = np.load(tmp_path / "c.npz")
    np.testing.assert_array_equal(codes["codes"], q.codes)
    np.testing.assert_array_equal(codes["scales"], q.scales)
