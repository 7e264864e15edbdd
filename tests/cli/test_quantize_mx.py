"""`mactile quantize --format <MX format>` for every OCP MX storage entry (from the registry)."""
import numpy as np
import pytest

from mactile.cli.main import main
from mactile.golden import get_format
from mactile.golden.storage import MX_FAMILY


@pytest.mark.parametrize("name", MX_FAMILY)
def test_quantize_mx(tmp_path, rng, name):
    x = (rng.standard_normal((3, 64)) * 5).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["quantize", "--format", name, str(tmp_path / "x.npy"), str(tmp_path / "y.npy"),
                 "--codes", str(tmp_path / "c.npz")]) == 0
    q = get_format(name).quantize(x)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), q.dequantize())
    c = np.load(tmp_path / "c.npz")
    np.testing.assert_array_equal(c["codes"], q.codes)
    np.testing.assert_array_equal(c["scales"], q.scales)


def test_mx_takes_no_convention(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((1, 32), np.float32))
    rc = main(["quantize", "--format", MX_FAMILY[0], "--ties", "away", str(tmp_path / "x.npy"),
               str(tmp_path / "y.npy")])
    assert rc == 2 and "no convention options" in capsys.readouterr().err
    assert not (tmp_path / "y.npy").exists()
