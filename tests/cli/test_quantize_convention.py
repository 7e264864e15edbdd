"""`mactile quantize --convention NAME` and the per-option flags."""
import numpy as np
import pytest

from mactile.cli.main import main
from mactile.golden import get_format


@pytest.mark.parametrize("args, name, kw", [
    (["--format", "mxfp4", "--convention", "microxcaling"], "mxfp4", {"convention": "microxcaling"}),
    (["--format", "mxfp4", "--convention", "torchao", "--mx-scale-rule", "even"], "mxfp4",
     {"convention": "torchao", "mx_scale_rule": "even"}),
    (["--format", "nvfp4", "--convention", "torchao", "--tensor-scale", "off"], "nvfp4",
     {"convention": "torchao", "tensor_scale": False}),
    (["--format", "mxfp4", "--negative-zero", "positive-after-scaling"], "mxfp4",
     {"negative_zero": "positive-after-scaling"}),
    (["--format", "nvfp4", "--ties", "away", "--negative-zero", "positive", "--scale-argument",
      "sequential", "--element-scaling", "reciprocal", "--dequantize", "fp32",
      "--block-scale-floor", "0.015625"], "nvfp4",
     {"element_ties": "away", "negative_zero": "positive", "scale_argument": "sequential",
      "element_scaling": "reciprocal", "dequantize": "fp32", "block_scale_floor": 2.0 ** -6}),
])
def test_quantize_with_a_convention(tmp_path, rng, args, name, kw):
    x = rng.standard_normal((4, 128)).astype(np.float32)
    x[0, :5] = -0.0
    np.save(tmp_path / "x.npy", x)
    assert main(["quantize", *args, str(tmp_path / "x.npy"), str(tmp_path / "y.npy"),
                 "--codes", str(tmp_path / "c.npz")]) == 0
    fmt = get_format(name, **kw)
    assert not fmt.is_default_convention()
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), fmt.roundtrip(x))
    assert str(np.load(tmp_path / "c.npz")["format"]) == fmt.describe()


@pytest.mark.parametrize("argv_tail, message", [
    (["--format", "nvfp4", "--convention", "microxcaling"],
     "the microxcaling convention has no nvfp4 quantizer"),
    (["--format", "mxfp4", "--tensor-scale", "off"],
     "mxfp4: convention option tensor_scale does not apply (only nvfp4 takes it)"),
    (["--format", "nvfp4", "--mx-scale-rule", "rceil"],
     "nvfp4: convention option mx_scale_rule does not apply (only mxfp4 takes it)"),
    (["--format", "razer", "--ties", "away"], "razer has no convention options"),
    (["--format", "int-group", "--convention", "torchao"], "int-group has no convention options"),
    (["--format", "nvfp4", "--block-scale-floor", "0.3"], "block_scale_floor must be an E4M3 value"),
])
def test_convention_errors(tmp_path, capsys, argv_tail, message):
    np.save(tmp_path / "x.npy", np.zeros((2, 64), np.float32))
    rc = main(["quantize", *argv_tail, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")])
    err = capsys.readouterr().err
    assert rc == 2 and "mactile: error:" in err and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


def test_unknown_preset_is_a_usage_error(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((2, 64), np.float32))
    with pytest.raises(SystemExit) as e:
        main(["quantize", "--format", "mxfp4", "--convention", "tf", str(tmp_path / "x.npy"),
              str(tmp_path / "y.npy")])
    assert e.value.code == 2 and "invalid choice: 'tf'" in capsys.readouterr().err
