"""Checkpoint layouts against the files and dequantizations their own libraries made.

The vectors in tests/data/checkpoints were written by compressed-tensors 0.20.1, ModelOpt
0.47.0 and transformers 5.24.0 (generator: tests/data/checkpoints/peer_checkpoints.py);
no torch is needed here. Every layout: read -> write byte-identical, dequantized weights
equal the library's bit for bit, and the reader's golden ``Quantized`` packs for the GPU
engine exactly as the golden quantizer's does.

The ``test_live_*`` tests run the peers themselves on fresh random data where they are
importable (skipped otherwise)::

    .peers-venv/bin/pip install --no-deps -e . pytest
    .peers-venv/bin/python -m pytest -p no:xdist tests/golden/test_checkpoints.py -k live
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from mactile.golden import MXFP4, NVFP4, get_format
from mactile.golden import checkpoints as C

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoints"
FOLDERS = {"ct_nvfp4": "compressed-tensors-nvfp4", "ct_mxfp4": "compressed-tensors-mxfp4",
           "modelopt_nvfp4": "modelopt-nvfp4", "gptoss_mxfp4": "gpt-oss-mxfp4"}


@pytest.fixture(scope="module")
def expected():
    return np.load(DATA / "expected.npz")


def _layers(ck):
    return [it for it in ck.items(ck.layout()) if isinstance(it, C.LayerWeight)]


@pytest.mark.parametrize("folder", list(FOLDERS))
def test_layout_detected(folder):
    ck = C.Checkpoint(DATA / folder)
    assert ck.layout().name == FOLDERS[folder]


@pytest.mark.parametrize("folder", list(FOLDERS))
def test_dequantization_equals_the_library(folder, expected):
    """Every layer, BF16 bits equal to the peer's own dequantized output (atol 0)."""
    ck = C.Checkpoint(DATA / folder)
    layers = _layers(ck)
    keys = sorted(k.split("/", 1)[1] for k in expected.files if k.startswith(folder + "/"))
    assert sorted(w.base for w in layers) == keys
    for w in layers:
        got = C.dequantize_layer(w)
        want = expected[f"{folder}/{w.base}"]
        assert got.shape == want.shape, w.base
        np.testing.assert_array_equal(got, want, err_msg=w.base)


@pytest.mark.parametrize("folder", list(FOLDERS))
def test_read_write_roundtrip_is_byte_identical(folder, tmp_path):
    ck = C.Checkpoint(DATA / folder)
    files = C.roundtrip_files(ck)
    C.write_planned(tmp_path, files, index_metadata=ck.index["metadata"] if ck.index else None)
    for f in ck.files:
        assert (tmp_path / f.path.name).read_bytes() == f.path.read_bytes(), f.path.name
    if ck.index is not None:
        assert (tmp_path / C.INDEX_NAME).read_bytes() == (DATA / folder / C.INDEX_NAME).read_bytes()


def test_sharded_layer_split_across_shards():
    """transformers shards by size: a layer's tensors may lie in two files."""
    ck = C.Checkpoint(DATA / "ct_nvfp4")
    files = {ck.where[n].path.name for n in ck.where if n.startswith("model.layers.1.self_attn.k_proj")}
    assert len(files) == 2
    assert len(_layers(ck)) == 5


def test_named_options_matter(expected):
    """Each named choice, set the other way, breaks bit-exactness somewhere (so the test
    above would catch an implementation that ignored it)."""
    ct = {w.base: w for w in _layers(C.Checkpoint(DATA / "ct_nvfp4"))}
    mo = {w.base: w for w in _layers(C.Checkpoint(DATA / "modelopt_nvfp4"))}
    go = {w.base: w for w in _layers(C.Checkpoint(DATA / "gptoss_mxfp4"))}

    def differs(ws, folder, **kw):
        return any(not np.array_equal(C.dequantize_layer(w, **kw), expected[f"{folder}/{b}"])
                   for b, w in ws.items())

    # The two scale orders differ by an FP32 ulp of s/g vs s*T; the BF16 rounding hides it
    # on these files (no value lies near a BF16 tie), so compare them in FP32.
    f32 = C.ModelDtype.F32
    for ws in (ct, mo):
        assert any(not np.array_equal(C.dequantize_layer(w, order=C.DequantOrder.SCALE_MUL_FIRST, dtype=f32),
                                      C.dequantize_layer(w, order=C.DequantOrder.SCALE_DIV_FIRST, dtype=f32))
                   for w in ws.values())
    assert differs(ct, "ct_nvfp4", dtype=C.ModelDtype.F16)
    assert differs(go, "gptoss_mxfp4", transpose=False)
    import dataclasses
    mo_neg = {b: dataclasses.replace(w, layout=dataclasses.replace(
        w.layout, negative_zero=C.NegativeZeroCode.NEGATIVE)) for b, w in mo.items()}
    assert differs(mo_neg, "modelopt_nvfp4")
    hi = {b: dataclasses.replace(w, layout=dataclasses.replace(
        w.layout, nibble_order=C.NibbleOrder.HIGH_FIRST)) for b, w in ct.items()}
    assert any(not np.array_equal(np.concatenate([t[3]().reshape(-1) for t in C.layer_tensors(w)
                                                  if t[1] == "U8"]),
                                  np.concatenate([t[3]().reshape(-1) for t in C.layer_tensors(ct[b])
                                                  if t[1] == "U8"])) for b, w in hi.items())


def test_global_scale_direction():
    """compressed-tensors stores g = 1/T; ModelOpt stores T: the golden tensor scale is T."""
    w = _layers(C.Checkpoint(DATA / "ct_nvfp4"))[0]
    assert w.quantized.tensor_scale == np.float32(np.float32(1) / w.stored_global)
    assert w.stored_global > 1  # 2688 / amax of weights below 1
    m = _layers(C.Checkpoint(DATA / "modelopt_nvfp4"))[0]
    assert m.quantized.tensor_scale == m.stored_global < 1


def test_golden_dequantization_is_the_exact_product():
    """The reader forms no float: golden's dequantization of its Quantized is q * s * T."""
    for folder in FOLDERS:
        for w in _layers(C.Checkpoint(DATA / folder)):
            q = w.quantized
            assert isinstance(q.format, NVFP4 if q.format.name == "nvfp4" else MXFP4)
            y = q.dequantize()
            codes = q.codes
            vals = get_format(q.format.name).storage.element.values[codes]
            if q.format.name == "nvfp4":
                s = C.FP8_E4M3.values[q.scales] * float(q.tensor_scale)
            else:
                s = np.ldexp(1.0, q.scales.astype(int) - 127)
            np.testing.assert_array_equal(y, (vals * s[..., None]).reshape(q.shape))


@pytest.mark.parametrize("fmt_name, layout", [("nvfp4", "compressed-tensors-nvfp4"),
                                              ("nvfp4", "modelopt-nvfp4"),
                                              ("mxfp4", "compressed-tensors-mxfp4"),
                                              ("mxfp4", "gpt-oss-mxfp4"),
                                              ("razer", "mactile"), ("razer-g128", "mactile"),
                                              ("mxfp4", "mactile"), ("nvfp4", "mactile")])
def test_golden_quantized_write_read(fmt_name, layout, tmp_path):
    """A golden Quantized written in a layout reads back with the same codes, scales and
    tensor scale (the DIVIDE direction keeps T where fl32(1/fl32(1/T)) == T)."""
    rng = np.random.default_rng(3)
    shape = (2, 6, 256) if layout == "gpt-oss-mxfp4" else (6, 256)
    x = rng.standard_normal(shape).astype(np.float32)
    x[..., :32] = 0
    fmt = get_format(fmt_name)
    q = fmt.quantize(x)
    lay = C.LAYOUTS[layout]
    w = C.layer_from_quantized("model.l0.proj", q, lay)
    meta = None
    if layout == "mactile":
        d = {"format": fmt.name, "block_size": fmt.block_size}
        if getattr(fmt, "special_magnitudes", ()):
            d["special_values"] = list(fmt.special_magnitudes)
        meta = {C.MACTILE_META_KEY: json.dumps({"model.l0.proj": d})}
    path = tmp_path / "m.safetensors"
    C.write_safetensors(path, C.layer_tensors(w), meta)
    (back,) = _layers(C.Checkpoint(path))
    np.testing.assert_array_equal(back.quantized.codes, q.codes)
    np.testing.assert_array_equal(back.quantized.scales, q.scales)
    if q.tensor_scale is not None and lay.global_scale is not C.GlobalScale.DIVIDE:
        assert back.quantized.tensor_scale == q.tensor_scale
    np.testing.assert_array_equal(back.quantized.dequantize(), q.dequantize()) if (
        q.tensor_scale is None or back.quantized.tensor_scale == q.tensor_scale) else None


def test_writer_matches_the_safetensors_package(tmp_path):
    """Our writer's bytes equal safetensors' own (the Rust writer) for NumPy dtypes."""
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(0)
    arrays = {"b.u8": rng.integers(0, 255, (3, 5), dtype=np.uint8),
              "a.f32": rng.standard_normal((4,)).astype(np.float32),
              "c.i64": np.arange(6, dtype=np.int64).reshape(2, 3),
              "d.f16": rng.standard_normal((2, 2)).astype(np.float16),
              "e.i8": np.array([-1, 2], dtype=np.int8), "scalar": np.array(1.5, np.float32)}
    ref = tmp_path / "ref.safetensors"
    st.save_file(arrays, str(ref), metadata={"format": "np"})
    dt = {np.uint8: "U8", np.float32: "F32", np.int64: "I64", np.float16: "F16", np.int8: "I8"}
    ours = tmp_path / "ours.safetensors"
    C.write_safetensors(ours, [(k, dt[v.dtype.type], v.shape, (lambda v=v: v))
                               for k, v in arrays.items()], {"format": "np"})
    assert ours.read_bytes() == ref.read_bytes()
    back = st.load_file(str(ours))
    f = C.SafetensorsFile(ours)
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v)
        np.testing.assert_array_equal(f.read(k), v)


def test_gpu_packing_from_checkpoint_equals_golden_path():
    """pack_w4a16 (xp=numpy) of a checkpoint's NVFP4 weight equals that of the golden
    Quantized it was written from, bit for bit: the checkpoint path has no float detour."""
    packing = pytest.importorskip("mactile.gpu.packing")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    q = NVFP4().quantize(x)
    for layout in ("modelopt-nvfp4", "compressed-tensors-nvfp4"):
        w = C.layer_from_quantized("l", q, C.LAYOUTS[layout])
        back = C.read_layer("l", w.layout, _fetcher(C.layer_tensors(w)), "mem")
        a = packing.pack_w4a16(q, xp=np)
        b = packing.pack_w4a16(back.quantized, xp=np)
        for lay in a.layouts:
            for key, arr in a.layouts[lay].items():
                if isinstance(arr, np.ndarray):
                    np.testing.assert_array_equal(arr, b.layouts[lay][key])
        if layout == "modelopt-nvfp4":
            assert a.tensor_scale == b.tensor_scale
    # the peer's own file packs too
    w = _layers(C.Checkpoint(DATA / "ct_nvfp4"))[1]
    assert packing.pack_w4a16(w.quantized, xp=np).N == w.shape[0]


def test_gpu_packing_of_gpt_oss_experts_equals_golden_path(tmp_path):
    """MXFP4 experts [E, N, K] of the gpt-oss layout: each expert packs (frag layout) as the
    golden quantizer's weight it was written from."""
    packing = pytest.importorskip("mactile.gpu.packing")
    x = np.random.default_rng(6).standard_normal((2, 64, 128)).astype(np.float32)
    q = MXFP4().quantize(x)
    w = C.layer_from_quantized("model.layers.0.mlp.experts.down_proj", q, C.LAYOUTS["gpt-oss-mxfp4"])
    path = tmp_path / "e.safetensors"
    C.write_safetensors(path, C.layer_tensors(w))
    (back,) = _layers(C.Checkpoint(path))
    for e in range(2):
        ref = MXFP4().quantize(x[e])
        a, b = packing.pack_w4a16(ref, xp=np), packing.pack_w4a16(back.select(e), xp=np)
        for key, arr in a.layouts["frag"].items():
            if isinstance(arr, np.ndarray):
                np.testing.assert_array_equal(arr, b.layouts["frag"][key])
    # the peer file's edge scales (2**-127 .. 2**125 in one matrix) exceed what the engine's
    # FP16 operands decode exactly: refused with a message, never packed wrong
    (g, _) = _layers(C.Checkpoint(DATA / "gptoss_mxfp4"))
    with pytest.raises(ValueError, match="binades"):
        packing.pack_w4a16(g.select(1), xp=np)


def _fetcher(tensors):
    arrays = {n: (C.TensorEntry(n, d, tuple(s), 0, 0), p) for n, d, s, p in tensors}
    return lambda name: arrays[name]


def test_partial_last_block_padding(tmp_path):
    """K = 24 with blocks of 16: scales ceil(K/16) = 2, read padded with +0 codes and
    written back cropped (compressed-tensors' shapes)."""
    lay = C.LAYOUTS["compressed-tensors-nvfp4"]
    x = np.random.default_rng(2).standard_normal((3, 32)).astype(np.float32)
    x[:, 24:] = 0
    q = NVFP4().quantize(x)
    w = C.layer_from_quantized("p", q, lay, shape=(3, 24))
    path = tmp_path / "p.safetensors"
    C.write_safetensors(path, C.layer_tensors(w))
    f = C.SafetensorsFile(path)
    assert f.entries["p.weight_packed"].shape == (3, 12)
    assert f.entries["p.weight_scale"].shape == (3, 2)
    (back,) = _layers(C.Checkpoint(path))
    assert back.shape == (3, 24)
    np.testing.assert_array_equal(back.quantized.codes[..., 1, 8:], 0)
    assert C.dequantize_layer(back).shape == (3, 24)


# ------------------------------------------------------------------ bad files
def _write_raw(path, header: dict | bytes, data: bytes = b"", n_override=None):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if n_override is None else n_override
    path.write_bytes(struct.pack("<Q", n) + raw + data)
    return path


@pytest.mark.parametrize("header, data, n, message", [
    (b"", b"", None, "8-byte header length"),
    ({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"\0\0", None, "truncated"),
    (b"{}", b"", 10_000, "header claims 10000 bytes"),
    (b"{}", b"", 2 ** 40, "more than the 100000000"),
    (b"{not json", b"", None, "not valid JSON"),
    (b"[1, 2]", b"", None, "JSON list, not an object"),
    ({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, b"\0", None, "unknown or unsupported dtype 'Q7'"),
    ({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, b"\0", None, "non-negative integers"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 8, None, "needs 8 bytes"),
    ({"a": {"dtype": "U8", "shape": [2], "data_offsets": [2, 0]}}, b"\0" * 2, None, "0 <= begin <= end"),
    ({"a": {"dtype": "U8", "shape": [2]}}, b"\0" * 2, None, "must hold dtype, shape and data_offsets"),
    ({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
      "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, b"\0" * 6, None, "overlap"),
    ({"__metadata__": {"k": 1}}, b"", None, "__metadata__ must map strings to strings"),
])
def test_bad_safetensors_refused(tmp_path, header, data, n, message):
    p = _write_raw(tmp_path / "bad.safetensors", header, data, n)
    if header == b"":
        p.write_bytes(b"\x01\x02\x03")
    with pytest.raises(C.CheckpointError, match=None) as e:
        C.Checkpoint(p)
    assert message in str(e.value) and "bad.safetensors" in str(e.value)
    assert "\n" not in str(e.value)


def test_modelopt_order_is_torchaos_fp32_dequantization():
    """ModelOpt's fl32(q * fl32(s * T)) is the golden NVFP4 ``Dequantization.FP32``
    (torchao's order): the two implementations agree value for value before BF16."""
    from mactile.golden import Convention, Dequantization, Quantized

    fmt = NVFP4(convention=Convention(dequantize=Dequantization.FP32))
    for w in _layers(C.Checkpoint(DATA / "modelopt_nvfp4")):
        q = w.quantized
        g = Quantized(format=fmt, shape=q.shape, codes=q.codes, scales=q.scales,
                      tensor_scale=q.tensor_scale).dequantize()
        ours = C.dequantize_layer(w, dtype=C.ModelDtype.F32)
        np.testing.assert_array_equal(ours.astype(np.float64), g)  # == compares -0 with +0


# ------------------------------------------------------------------ live peers
def _peer_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("peer_checkpoints", DATA / "peer_checkpoints.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fresh_seed() -> int:
    """A new seed per run (the live tests sample fresh data), named in any failure."""
    return int(np.random.SeedSequence().entropy % 2 ** 32)


@pytest.mark.parametrize("scheme", ["NVFP4A16", "MXFP4A16"])
def test_live_compressed_tensors(scheme, tmp_path):
    """Where compressed-tensors is importable (the .peers-venv of peer_checkpoints.py, with
    mactile installed there): fresh random layers, its file and its dequantization."""
    pytest.importorskip("compressed_tensors")
    from safetensors.torch import save_file

    peer = _peer_module()
    seed = _fresh_seed()
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((256, 1024)) * rng.uniform(1e-3, 1.0, (256, 1))).astype(np.float32)
    w[:3] = 0
    tensors, deq, _ = peer._compress("l", w, scheme)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp_path / "m.safetensors"))
    (layer,) = _layers(C.Checkpoint(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(C.dequantize_layer(layer), peer._bf16_bits(deq),
                                  err_msg=f"seed {seed}")


def test_live_modelopt(tmp_path):
    """Where nvidia-modelopt is importable: NVFP4QTensor on fresh data, odd K padded."""
    pytest.importorskip("modelopt")
    import torch
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
    from safetensors.torch import save_file

    peer = _peer_module()
    seed = _fresh_seed()
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal((128, 1000)).astype(np.float32) * 0.05).to(torch.bfloat16)
    qt, s, s2 = NVFP4QTensor.quantize(x, 16)
    packed = qt._quantized_data
    qt.metadata["shape"] = torch.Size((packed.shape[0], packed.shape[1] * 2))
    deq = qt.dequantize(dtype=torch.bfloat16, scale=s, double_scale=s2, block_sizes={-1: 16})
    save_file({"l.weight": packed.contiguous(), "l.weight_scale": s.contiguous(),
               "l.weight_scale_2": s2.reshape(()).contiguous()}, str(tmp_path / "m.safetensors"))
    (layer,) = _layers(C.Checkpoint(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(C.dequantize_layer(layer), peer._bf16_bits(deq),
                                  err_msg=f"seed {seed}")


def test_live_transformers_gpt_oss(tmp_path):
    """Where transformers is importable: convert_moe_packed_tensors on random bytes."""
    pytest.importorskip("transformers")
    import torch
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    peer = _peer_module()
    seed = _fresh_seed()
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (4, 64, 8, 16), dtype=np.uint8)
    scales = rng.integers(100, 150, (4, 64, 8), dtype=np.uint8)
    deq = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales))
    w = C.layer_from_quantized("e", _quantized_from(blocks, scales), C.LAYOUTS["gpt-oss-mxfp4"])
    np.testing.assert_array_equal(C.dequantize_layer(w), peer._bf16_bits(deq),
                                  err_msg=f"seed {seed}")


def _quantized_from(blocks, scales):
    """gpt-oss bytes as a golden MXFP4 Quantized (low nibble first)."""
    from mactile.golden import Quantized

    lo, hi = blocks & 15, blocks >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(blocks.shape[:-1] + (32,))
    return Quantized(format=MXFP4(), shape=blocks.shape[:-2] + (blocks.shape[-2] * 32,),
                     codes=codes, scales=scales, tensor_scale=None)
