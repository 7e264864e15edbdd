"""`mactile convert` and `mactile inspect`: the happy paths on the peers' files, and bad
input refused with one line naming the tensor and the problem, exit 2, nothing written."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from mactile.cli.main import main
from mactile.golden import NVFP4
from mactile.golden import checkpoints as C

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoints"


def run_cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------ happy paths
def test_convert_nvfp4_to_razer_loads_back(tmp_path, capsys):
    out = tmp_path / "razer"
    rc, so, se = run_cli(["convert", str(DATA / "ct_nvfp4"), str(out), "--to", "razer"], capsys)
    assert rc == 0, se
    assert "[5/5]" in se and "re-encoding error" in se  # progress, per layer
    assert "converted 5 layers" in so and "MB/s" in so
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (DATA / "ct_nvfp4").iterdir())
    ck = C.Checkpoint(out)
    assert ck.layout().name == "mactile"
    layers = [w for w in ck.items(ck.layout()) if isinstance(w, C.LayerWeight)]
    assert len(layers) == 5 and all(w.format.name == "razer" for w in layers)
    src = {w.base: C.model_values(C.dequantize_layer(w), C.ModelDtype.BF16)
           for w in C.Checkpoint(DATA / "ct_nvfp4").items(C.LAYOUTS["compressed-tensors-nvfp4"])
           if isinstance(w, C.LayerWeight)}
    for w in layers:  # what was written is mactile's razer quantization of the source
        from mactile.golden import get_format
        q = get_format("razer").quantize(src[w.base])
        np.testing.assert_array_equal(w.quantized.codes, q.codes)
        np.testing.assert_array_equal(w.quantized.scales, q.scales)
    # the unquantized tensor is copied as it was
    assert ck.files[0].read("model.embed_tokens.weight").tobytes() == \
        C.Checkpoint(DATA / "ct_nvfp4").files[0].read("model.embed_tokens.weight").tobytes() \
        if "model.embed_tokens.weight" in ck.files[0].entries else True
    rc, so, _ = run_cli(["inspect", str(out)], capsys)
    assert rc == 0 and "razer [mactile]" in so


@pytest.mark.parametrize("src, to, layout", [
    ("gptoss_mxfp4/model.safetensors", "nvfp4", "compressed-tensors-nvfp4"),
    ("modelopt_nvfp4", "mxfp4", "compressed-tensors-mxfp4"),
    ("ct_mxfp4", "nvfp4", "modelopt-nvfp4"),
    ("ct_nvfp4", "mxfp4", "gpt-oss-mxfp4"),
    ("modelopt_nvfp4", "nvfp4", "modelopt-nvfp4"),
    ("ct_nvfp4", "mxfp4", "mactile"),
])
def test_convert_between_layouts(tmp_path, capsys, src, to, layout):
    out = tmp_path / ("o.safetensors" if src.endswith(".safetensors") else "o")
    rc, so, se = run_cli(["convert", str(DATA / src), str(out), "--to", to, "--layout", layout,
                          "--quiet"], capsys)
    assert rc == 0, se
    ck = C.Checkpoint(out)
    assert ck.layout().name == layout
    layers = [w for w in ck.items(ck.layout()) if isinstance(w, C.LayerWeight)]
    assert layers and all(w.format.name == to for w in layers)
    rc, so, se = run_cli(["inspect", str(out)], capsys)
    assert rc == 0 and so.count(f"{to} [{layout}]") == len(layers), se
    if layout == "modelopt-nvfp4" and src.startswith("modelopt"):  # same layout: carried along
        assert all(w.carried for w in layers)
        assert (out / "hf_quant_config.json").read_bytes() == \
            (DATA / src / "hf_quant_config.json").read_bytes()


def test_inspect_lists_every_tensor(tmp_path, capsys):
    js = tmp_path / "t.json"
    rc, so, se = run_cli(["inspect", str(DATA / "ct_nvfp4"), "--json", str(js)], capsys)
    assert rc == 0, se
    rows = json.loads(js.read_text())["tensors"]
    assert len(rows) == 6
    q = [r for r in rows if r["layout"]]
    assert len(q) == 5 and all(r["format"] == "nvfp4" for r in q)
    up = next(r for r in q if r["tensor"].endswith("up_proj"))
    assert up["shape"] == [32, 64] and up["bytes"] == 32 * 32 + 32 * 4 + 4
    assert up["requant_code_match"] == 1.0  # mactile's quantizer reproduces the peer's codes
    assert "compressed-tensors-nvfp4" in so


# ------------------------------------------------------------------ bad input
def _ct_layer(base="model.l.proj", n=4, k=32, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32)
    q = NVFP4().quantize(x)
    w = C.layer_from_quantized(base, q, C.LAYOUTS["compressed-tensors-nvfp4"])
    return {t[0]: (t[1], t[2], t[3]()) for t in C.layer_tensors(w)}


def _save(path, tensors: dict, metadata=None):
    C.write_safetensors(path, [(n, d, s, (lambda a=a: a)) for n, (d, s, a) in tensors.items()],
                        metadata)
    return path


def _retype(t, name, dtype, arr=None):
    d, s, a = t[name]
    a = a if arr is None else arr
    t[name] = (dtype, tuple(a.shape), a)
    return t


def case_missing(tmp):
    return tmp / "nope.safetensors"


def case_truncated(tmp):
    p = _save(tmp / "m.safetensors", _ct_layer())
    p.write_bytes(p.read_bytes()[:-10])
    return p


def case_header_too_long(tmp):
    p = _save(tmp / "m.safetensors", _ct_layer())
    b = bytearray(p.read_bytes())
    b[:8] = struct.pack("<Q", len(b) * 3)
    p.write_bytes(bytes(b))
    return p


def case_not_json(tmp):
    p = tmp / "m.safetensors"
    p.write_bytes(struct.pack("<Q", 8) + b"{oops   ")
    return p


def case_unknown_dtype(tmp):
    p = _save(tmp / "m.safetensors", _ct_layer())
    b = p.read_bytes().replace(b'"F32"', b'"F99"', 1)
    p.write_bytes(b)
    return p


def case_codes_dtype(tmp):
    t = _ct_layer()
    return _save(tmp / "m.safetensors", _retype(t, "model.l.proj.weight_packed", "I8",
                                                t["model.l.proj.weight_packed"][2].view(np.int8)))


def case_scale_dtype(tmp):
    t = _ct_layer()
    return _save(tmp / "m.safetensors", _retype(t, "model.l.proj.weight_scale", "U8"))


def case_scale_shape(tmp):
    t = _ct_layer()
    return _save(tmp / "m.safetensors", _retype(t, "model.l.proj.weight_scale", "F8_E4M3",
                                                t["model.l.proj.weight_scale"][2][:, :1].copy()))


def case_missing_global(tmp):
    t = _ct_layer()
    del t["model.l.proj.weight_global_scale"]
    return _save(tmp / "m.safetensors", t)


def _global(tmp, value, dtype="F32"):
    t = _ct_layer()
    arr = np.array([value], dtype="<f4" if dtype == "F32" else "<f2")
    return _save(tmp / "m.safetensors", _retype(t, "model.l.proj.weight_global_scale", dtype, arr))


def case_global_zero(tmp):
    return _global(tmp, 0.0)


def case_global_nan(tmp):
    return _global(tmp, np.nan)


def case_global_dtype(tmp):
    return _global(tmp, 2.0, "F16")


def case_scale_nan_code(tmp):
    t = _ct_layer()
    s = t["model.l.proj.weight_scale"][2].copy()
    s[2, 1] = 0x7F
    return _save(tmp / "m.safetensors", _retype(t, "model.l.proj.weight_scale", "F8_E4M3", s))


def case_scale_negative(tmp):
    t = _ct_layer()
    s = t["model.l.proj.weight_scale"][2].copy()
    s[1, 0] |= 0x80
    return _save(tmp / "m.safetensors", _retype(t, "model.l.proj.weight_scale", "F8_E4M3", s))


def case_e8m0_nan(tmp):
    d = tmp / "g"
    shutil.copytree(DATA / "gptoss_mxfp4", d)
    ck = C.Checkpoint(d)
    f = ck.files[0]
    t = {n: (e.dtype, e.shape, f.read(n).copy()) for n, e in f.entries.items()}
    t["model.layers.0.mlp.experts.down_proj_scales"][2][1, 2, 0] = 0xFF
    _save(d / "model.safetensors", t, f.metadata)
    return d


def case_grouped_shape(tmp):
    t = {"e.w_blocks": ("U8", (2, 4, 1, 8), np.zeros((2, 4, 1, 8), np.uint8)),
         "e.w_scales": ("U8", (2, 4, 1), np.full((2, 4, 1), 127, np.uint8))}
    return _save(tmp / "m.safetensors", t)


def case_modelopt_partial(tmp):
    t = {"l.weight": ("U8", (4, 12), np.zeros((4, 12), np.uint8)),
         "l.weight_scale": ("F8_E4M3", (4, 2), np.full((4, 2), 0x38, np.uint8)),
         "l.weight_scale_2": ("F32", (), np.array(1.0, "<f4"))}
    return _save(tmp / "m.safetensors", t)


def case_unknown_config(tmp):
    d = tmp / "c"
    shutil.copytree(DATA / "ct_mxfp4", d)
    (d / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "awq"}}))
    return d


def case_unknown_names(tmp):
    return _save(tmp / "m.safetensors", {"l.qweight": ("U8", (4, 8), np.zeros((4, 8), np.uint8))})


def case_not_quantized(tmp):
    return _save(tmp / "m.safetensors", {"l.weight": ("BF16", (4, 8), np.zeros((4, 8), np.uint16))})


def _sharded(tmp):
    d = tmp / "s"
    shutil.copytree(DATA / "ct_nvfp4", d)
    return d


def case_index_missing_shard(tmp):
    d = _sharded(tmp)
    (d / "model-00002-of-00002.safetensors").unlink()
    return d


def case_index_wrong_shard(tmp):
    d = _sharded(tmp)
    idx = json.loads((d / C.INDEX_NAME).read_text())
    idx["weight_map"]["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors"
    (d / C.INDEX_NAME).write_text(json.dumps(idx))
    return d


def case_index_unlisted(tmp):
    d = _sharded(tmp)
    idx = json.loads((d / C.INDEX_NAME).read_text())
    del idx["weight_map"]["model.embed_tokens.weight"]
    (d / C.INDEX_NAME).write_text(json.dumps(idx))
    return d


def case_index_not_json(tmp):
    d = _sharded(tmp)
    (d / C.INDEX_NAME).write_text("{\"weight_map\": ")
    return d


def case_duplicate_tensor(tmp):
    d = tmp / "dup"
    d.mkdir()
    _save(d / "a.safetensors", _ct_layer())
    _save(d / "b.safetensors", _ct_layer())
    return d


def case_overlap(tmp):
    p = _save(tmp / "m.safetensors", _ct_layer())
    b = p.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    first = next(k for k in h if k != "__metadata__")
    names = [k for k in h if k != "__metadata__"]
    # a scale's span moved onto the codes' (same length): overlap
    src = h[names[-1]]["data_offsets"]
    size = src[1] - src[0]
    h[names[-2]]["data_offsets"] = [src[0], src[0] + size] if h[names[-2]]["data_offsets"][1] - \
        h[names[-2]]["data_offsets"][0] == size else h[names[-2]]["data_offsets"]
    h[names[-1]]["data_offsets"] = [src[0] - 1, src[1] - 1]
    raw = json.dumps(h).encode()
    p.write_bytes(struct.pack("<Q", len(raw)) + raw + b[8 + n:])
    del first
    return p


def case_json_given(tmp):
    d = _sharded(tmp)
    return d / "config.json"


CASES = [
    (case_json_given, "a JSON file, not a checkpoint", None),
    (case_missing, "does not exist", None),
    (case_truncated, "truncated", None),
    (case_header_too_long, "the header claims", None),
    (case_not_json, "not valid JSON", None),
    (case_unknown_dtype, "unknown or unsupported dtype 'F99'", "weight_global_scale"),
    (case_codes_dtype, "dtype I8", "model.l.proj.weight_packed"),
    (case_scale_dtype, "dtype U8", "model.l.proj.weight_scale"),
    (case_scale_shape, "disagrees with", "model.l.proj.weight_scale"),
    (case_missing_global, "has no tensor", "model.l.proj.weight_global_scale"),
    (case_global_zero, "must be finite and positive", "model.l.proj.weight_global_scale"),
    (case_global_nan, "must be finite and positive", "model.l.proj.weight_global_scale"),
    (case_global_dtype, "one F32 value", "model.l.proj.weight_global_scale"),
    (case_scale_nan_code, "E4M3 NaN code", "model.l.proj.weight_scale"),
    (case_scale_negative, "negative E4M3 block scale", "model.l.proj.weight_scale"),
    (case_e8m0_nan, "E8M0 NaN code 0xff", "down_proj_scales"),
    (case_grouped_shape, "[..., K/32, 16]", "e.w_blocks"),
    (case_modelopt_partial, "not a multiple of the block size 16", "l.weight"),
    (case_unknown_config, "no known layout", None),
    (case_unknown_names, "match no known layout", "l.qweight"),
    (case_not_quantized, "no quantized layer", None),
    (case_index_missing_shard, "does not exist", "model-00002-of-00002.safetensors"),
    (case_index_wrong_shard, "is listed in", "model.embed_tokens.weight"),
    (case_index_unlisted, "is not in the index", "model.embed_tokens.weight"),
    (case_index_not_json, "not valid JSON", None),
    (case_duplicate_tensor, "is also in", "model.l.proj"),
    (case_overlap, "overlap", None),
]


@pytest.mark.parametrize("make, message, tensor", CASES, ids=[c[0].__name__[5:] for c in CASES])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, make, message, tensor):
    src = make(tmp_path)
    out_root = tmp_path / "out"
    out_root.mkdir()
    out = out_root / ("o.safetensors" if src.suffix == ".safetensors" else "o")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    rc, so, se = run_cli(["convert", str(src), str(out), "--to", "razer"], capsys)
    assert rc == 2, se
    lines = se.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mactile: error: "), se
    assert message in lines[0], lines[0]
    if tensor:
        assert tensor in lines[0], lines[0]
    assert list(out_root.iterdir()) == []  # nothing written, no temporary left
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    if make is not case_not_quantized:  # inspect refuses the same files the same way
        rc, so, se = run_cli(["inspect", str(src)], capsys)
        assert rc == 2 and se.startswith("mactile: error: ") and message in se


@pytest.mark.parametrize("argv, message", [
    (["--to", "nestedfp"], "convert writes FP4 block formats"),
    (["--to", "fp5"], "unknown format 'fp5'"),
    (["--to", "razer", "--layout", "modelopt-nvfp4"], "needs --layout mactile"),
    (["--to", "nvfp4", "--layout", "gpt-oss-mxfp4"], "stores mxfp4"),
    (["--to", "razer", "--special-values", "5,x"], "--special-values must be numbers"),
])
def test_bad_options(tmp_path, capsys, argv, message):
    out = tmp_path / "o"
    rc, so, se = run_cli(["convert", str(DATA / "ct_nvfp4"), str(out)] + argv, capsys)
    assert rc == 2 and se.startswith("mactile: error: ") and message in se, se
    assert not out.exists()


def test_output_folder_exists_or_inside_input(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    rc, _, se = run_cli(["convert", str(DATA / "ct_nvfp4"), str(out), "--to", "razer"], capsys)
    assert rc == 2 and "exists and is not empty" in se
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    src = tmp_path / "src"
    shutil.copytree(DATA / "ct_mxfp4", src)
    rc, _, se = run_cli(["convert", str(src), str(src / "sub"), "--to", "razer"], capsys)
    assert rc == 2 and "inside it" in se and not (src / "sub").exists()
    f = src / "model.safetensors"
    rc, _, se = run_cli(["convert", str(f), str(f), "--to", "mxfp4"], capsys)
    assert rc == 2 and "is the input" in se


def test_failure_midway_leaves_nothing(tmp_path, capsys):
    """A layer that fails after earlier shards were written (its BF16 weight overflows to
    inf: scale code 253 with a code of 6) removes the half-built folder."""
    src = tmp_path / "src"
    src.mkdir()
    good = {"a.mlp.experts.w_blocks": ("U8", (2, 4, 1, 16), np.full((2, 4, 1, 16), 0x11, np.uint8)),
            "a.mlp.experts.w_scales": ("U8", (2, 4, 1), np.full((2, 4, 1), 127, np.uint8))}
    bad_scales = np.full((2, 4, 1), 127, np.uint8)
    bad_scales[1, 3, 0] = 253
    bad = {"b.mlp.experts.w_blocks": ("U8", (2, 4, 1, 16), np.full((2, 4, 1, 16), 0x77, np.uint8)),
           "b.mlp.experts.w_scales": ("U8", (2, 4, 1), bad_scales)}
    _save(src / "model-00001-of-00002.safetensors", good)
    _save(src / "model-00002-of-00002.safetensors", bad)
    wm = {n: "model-00001-of-00002.safetensors" for n in good}
    wm.update({n: "model-00002-of-00002.safetensors" for n in bad})
    (src / C.INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    out_root = tmp_path / "out"
    out_root.mkdir()
    rc, so, se = run_cli(["convert", str(src), str(out_root / "o"), "--to", "razer"], capsys)
    assert rc == 2
    last = se.strip().splitlines()[-1]
    assert last.startswith("mactile: error: ") and "'b.mlp.experts.w'" in last and "inf" in last
    assert "[1/2]" in se  # the first layer had been converted
    assert list(out_root.iterdir()) == []


def test_index_json_opens_its_folder(tmp_path, capsys):
    rc, so, se = run_cli(["inspect", str(DATA / "ct_nvfp4" / C.INDEX_NAME)], capsys)
    assert rc == 0 and so.count("nvfp4 [compressed-tensors-nvfp4]") == 5, se


def test_entry_point_subprocess(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "mactile", "convert", str(tmp_path / "none"),
                        str(tmp_path / "o"), "--to", "razer"], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"mactile: error: checkpoint {str(tmp_path / 'none')!r} does not exist"]
    assert not (tmp_path / "o").exists()
