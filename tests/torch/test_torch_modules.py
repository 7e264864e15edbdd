"""QuantLinear (state_dict, safetensors round trips, repr, bias) and quantize_model (a plain
MLP; Hugging Face Llama and Qwen3 built from tiny configs with random weights)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from mactile.torch import (QuantLinear, dequantized_model, load_quantized, quantize_model,  # noqa: E402
                           read_quantized, save_quantized)

LAYERS = [("nvfp4", None), ("nvfp4", "w4a4"), ("mxfp4", None), ("razer", None), ("razer-g128", None),
          ("nestedfp", "fp8"), ("int-group", "w6a8")]


def _lin(rng, n, k, bias=True, scale=0.3):
    lin = torch.nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy((rng.standard_normal((n, k)) * scale).astype(np.float32)))
        if bias:
            lin.bias.copy_(torch.from_numpy(rng.standard_normal(n).astype(np.float32)))
    return lin


@pytest.mark.parametrize("name,mode", LAYERS, ids=[f"{n}-{m}" for n, m in LAYERS])
def test_save_load_round_trip(tmp_path, rng, name, mode):
    lin = _lin(rng, 64, 256)
    layer = QuantLinear.from_linear(lin, name, mode=mode)
    assert f"format={layer.fmt.describe()}" in repr(layer) and f"mode={layer.mode}" in repr(layer)
    x = torch.from_numpy(rng.standard_normal((2, 3, 256)).astype(np.float32))
    y = layer(x)
    assert y.shape == (2, 3, 64)
    # bias added after the product
    no_bias = QuantLinear.from_linear(_lin(rng, 64, 256, bias=False), name, mode=mode)
    assert no_bias.bias is None
    path = tmp_path / "layer.safetensors"
    layer.save(path)
    back = QuantLinear.load(path)
    assert torch.equal(back(x), y) and back.mode == layer.mode and back.spec == layer.spec
    sd, sd2 = layer.state_dict(), back.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    # a layer built empty from the same configuration loads the plain state_dict too
    empty = QuantLinear(256, 64, True, format=name, mode=mode, dtype=lin.bias.dtype)
    assert not torch.equal(empty(x), y)
    empty.load_state_dict(sd)
    assert torch.equal(empty(x), y)


@pytest.mark.parametrize("name,mode", LAYERS, ids=[f"{n}-{m}" for n, m in LAYERS])
def test_dtype_casts_keep_the_packed_bits(rng, name, mode):
    """model.half() / .to(bfloat16) cast floating buffers: none of QuantLinear's is one."""
    w = _lin(rng, 64, 256, bias=False, scale=3.0 if name == "nestedfp" else 0.3)  # nestedfp: exception layer
    layer = QuantLinear.from_linear(w, name, mode=mode)
    sd = {k: v.clone() for k, v in layer.state_dict().items()}
    x = torch.from_numpy(rng.standard_normal((2, 256)).astype(np.float16))
    y = layer(x)
    layer.to(torch.bfloat16).half()
    assert all(torch.equal(v, layer.state_dict()[k]) for k, v in sd.items())
    assert torch.equal(layer(x), y)


def test_torch_save_and_deepcopy(tmp_path, rng):
    import copy
    layer = QuantLinear.from_linear(_lin(rng, 64, 256), "razer")
    x = torch.randn(3, 256)
    y = layer(x)
    torch.save(layer, tmp_path / "layer.pt")
    assert torch.equal(torch.load(tmp_path / "layer.pt", weights_only=False)(x), y)
    assert torch.equal(copy.deepcopy(layer)(x), y)


def test_state_dict_holds_packed_tensors(rng):
    layer = QuantLinear.from_linear(_lin(rng, 64, 256), "nvfp4")
    keys = set(layer.state_dict())
    assert keys == {"codes", "scales", "rm_codes", "rm_scales", "tensor_scale", "out_log2", "bias"}
    assert layer.codes.dtype == torch.int32 and layer.rm_codes.dtype == torch.uint8
    assert layer.nbytes == sum(v.numel() * v.element_size() for k, v in layer.state_dict().items() if k != "bias")


def test_unknown_format_and_convention(rng):
    """A format without a GPU path is refused by name; a non-default convention packs the
    same storage and dequantizes with its own golden rule (CPU)."""
    from mactile.golden import IntGroup, get_format
    assert QuantLinear(256, 64, format="flexq", mode="w6a8").fmt == IntGroup(bits=6)  # the scheme's alias
    with pytest.raises(ValueError, match="no torch layer"):
        QuantLinear.from_linear(_lin(rng, 64, 256), "dialectfp4")
    lin = _lin(rng, 64, 256, bias=False)
    fmt = get_format("nvfp4", convention="torchao")
    layer = QuantLinear.from_linear(lin, "nvfp4", convention="torchao")
    assert layer.fmt == fmt and "torchao" in repr(layer)
    ref = fmt.quantize(lin.weight.detach().numpy()).dequantize().astype(np.float32)
    np.testing.assert_array_equal(layer.dequantized_weight().numpy(), ref)


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(128, 256)
        self.down = torch.nn.Linear(256, 128)
        self.odd = torch.nn.Linear(128, 100)  # K fits, N odd: fine
        self.narrow = torch.nn.Linear(100, 8)  # K = 100: no whole blocks of 16
        self.lm_head = torch.nn.Linear(8, 64, bias=False)

    def forward(self, x):
        return self.lm_head(self.narrow(self.odd(self.down(torch.relu(self.up(x))))))


def test_quantize_model_summary(rng, capsys):
    torch.manual_seed(0)
    m = _MLP()
    before = {n: p.numel() * p.element_size() for n, p in m.named_parameters()}
    s = quantize_model(m, "razer", progress=True)
    err = capsys.readouterr().err
    assert "mactile: quantizing" in err and "3 linear layers -> razer" in err
    assert [r[0] for r in s.replaced] == ["up", "down", "odd"]
    assert dict(s.skipped)["lm_head"] == "excluded"
    assert "block" in dict(s.skipped)["narrow"] or "multiple" in dict(s.skipped)["narrow"]
    assert s.bytes_before == before["up.weight"] + before["up.bias"] + before["down.weight"] + \
        before["down.bias"] + before["odd.weight"] + before["odd.bias"]
    assert s.bytes_after == sum(getattr(m, n).nbytes + getattr(m, n).bias.numel() * 4 for n in ("up", "down", "odd"))
    assert s.bytes_saved > 0 and s["layers_replaced"] == 3 and s.mode == "w4a16"
    assert "3 linear layers -> razer" in str(s)
    assert isinstance(m.up, QuantLinear) and isinstance(m.narrow, torch.nn.Linear)
    assert m(torch.randn(4, 128)).shape == (4, 64)


def test_quantize_model_include_exclude(rng):
    m = _MLP()
    s = quantize_model(m, "nvfp4", include=["up", "down*"], exclude=["down"], progress=False)
    assert [r[0] for r in s.replaced] == ["up"]
    assert dict(s.skipped)["down"] == "excluded" and dict(s.skipped)["odd"] == "not in include"
    m2 = _MLP()
    assert dict(quantize_model(_MLP(), "nvfp4", exclude=None, progress=False).skipped)["lm_head"] == "excluded"
    s2 = quantize_model(m2, "int-group", mode="w6a8", exclude=(), progress=False)
    assert "lm_head" not in [r[0] for r in s2.replaced]  # K = 8: no group of 128, kept with the reason
    assert isinstance(m2.up, QuantLinear) and m2.up.mode == "w6a8"


def test_model_save_load_and_dequantized_reference(tmp_path, rng):
    torch.manual_seed(1)
    m = _MLP()
    quantize_model(m, "mxfp4", progress=False)
    x = torch.randn(3, 128)
    y = m(x)
    path = tmp_path / "m.safetensors"
    save_quantized(m, path)
    cfgs, tensors = read_quantized(path)
    assert sorted(cfgs) == ["down", "odd", "up"] and "up.codes" in tensors
    fresh = load_quantized(_MLP(), path)
    assert isinstance(fresh.up, QuantLinear) and torch.equal(fresh(x), y)
    ref = dequantized_model(fresh)
    assert isinstance(ref.up, torch.nn.Linear)
    torch.testing.assert_close(ref(x), y, rtol=2e-3, atol=2e-3)  # FP16-rounded activations only


# --------------------------------------------------------------------------- Hugging Face
def _tiny_llama():
    tr = pytest.importorskip("transformers", reason="transformers is not installed (pip install 'mactile[dev]')")
    cfg = tr.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return tr.LlamaForCausalLM(cfg)


def _tiny_qwen3():
    tr = pytest.importorskip("transformers", reason="transformers is not installed (pip install 'mactile[dev]')")
    if not hasattr(tr, "Qwen3ForCausalLM"):
        pytest.skip(f"transformers {tr.__version__} has no Qwen3")
    cfg = tr.Qwen3Config(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=64,
                         tie_word_embeddings=True)
    return tr.Qwen3ForCausalLM(cfg)


@pytest.mark.parametrize("build", [_tiny_llama, _tiny_qwen3], ids=["llama", "qwen3"])
@pytest.mark.parametrize("name,mode,bound", [("nvfp4", None, 2e-3), ("razer-g128", None, 2e-3),
                                             ("nestedfp", "fp8", 0.1), ("int-group", None, 0.1)])
def test_hf_causal_lm(tmp_path, build, name, mode, bound):
    torch.manual_seed(2)
    model = build().eval()
    ids = torch.randint(0, 256, (2, 9))
    with torch.no_grad():
        full = model(ids).logits
    s = quantize_model(model, name, mode=mode, progress=False)
    assert s.layers_replaced == 2 * 7  # q, k, v, o, gate, up, down per block; lm_head kept
    assert dict(s.skipped) == {"lm_head": "excluded"}
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == full.shape and torch.isfinite(logits).all()
    path = tmp_path / "model.safetensors"
    save_quantized(model, path)
    again = load_quantized(build().eval(), path)
    with torch.no_grad():
        assert torch.equal(again(ids).logits, logits)
        ref = dequantized_model(again)(ids).logits
    # the quantized model vs the same model with the golden dequantized weights in float32:
    # W16 modes differ by the FP16 rounding of every linear layer's input (and output cast)
    # only; NestedFP's FP8 mode and FlexQ quantize the activations as well (E4M3 per token,
    # INT6 per group of 128), which the reference does not (measured on Llama: 3.3e-4 nvfp4,
    # 4.4e-2 FP8 mode, 3.3e-2 W6A6 of the largest logit)
    err = float((logits - ref).abs().max() / ref.abs().max())
    assert err <= bound
