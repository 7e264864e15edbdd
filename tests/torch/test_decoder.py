"""The decoder, the generator and the samplers on the CPU.

Bounds: FP64 runs (greedy tokens compared exactly, so no near-tie can flip between the cached
and the recomputed path on another CPU); logits of the cached path agree with the full
recompute to 1e-10 in FP64 (the summation order over the padded cache differs). Against
Hugging Face (FP32): 1e-4 absolute on logits of magnitude ~2 (measured ~1e-6; both
implementations round the same operations, the attention kernels differ).
"""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny shapes: threads only contend on a shared CI machine

from mactile.golden.reset_temperature import ReductionLayout, StepAwareTemperature  # noqa: E402
from mactile.torch.decoder import CONFIGS, Decoder, DecoderConfig, from_hf, get_config, hf_config  # noqa: E402
from mactile.torch.generate import Generator, NestedFPPolicy, generate  # noqa: E402
from mactile.torch.sampling import Greedy, StepAwareTemperatureSampler, TemperatureSampler  # noqa: E402


def _model(name="tiny", dtype=torch.float64, seed=0, std=0.05):
    return Decoder.random(get_config(name), dtype=dtype, seed=seed, std=std)


def _reference_greedy(model, prompt, n):
    """No cache: the whole sequence recomputed for every new token."""
    ref = copy.deepcopy(model)
    ref.clear_caches()
    seq = prompt.clone()
    with torch.no_grad():
        for _ in range(n):
            logits = ref(seq, torch.arange(seq.shape[1]))
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq


@pytest.mark.parametrize("name", ["tiny", "tiny-qwen3"])
def test_greedy_cache_equals_full_recompute_64_tokens(name):
    m = _model(name)
    prompt = torch.randint(0, m.config.vocab_size, (1, 7), generator=torch.Generator().manual_seed(1))
    out = generate(m, prompt, 64)
    ref = _reference_greedy(m, prompt, 64)
    assert out.shape == (1, 71)
    assert torch.equal(out, ref)
    assert len(set(out[0, 7:].tolist())) > 4  # not one repeated token: the test has teeth


def test_cached_logits_match_recompute_bound():
    m = _model()
    toks = torch.randint(0, 1024, (2, 24), generator=torch.Generator().manual_seed(2))
    ref = copy.deepcopy(m)(toks, torch.arange(24))
    m.setup_caches(2, 40)
    with torch.no_grad():
        parts = [m(toks[:, :10], torch.arange(10))] + [m(toks[:, i:i + 1], torch.tensor([i])) for i in range(10, 24)]
    assert (torch.cat(parts, 1) - ref).abs().max().item() < 1e-10


def test_static_cache_batch_equals_single_sequences():
    m = _model("tiny-qwen3")
    prompts = torch.randint(0, 1024, (3, 5), generator=torch.Generator().manual_seed(3))
    batched = generate(m, prompts, 20)
    for b in range(3):
        single = generate(copy.deepcopy(m), prompts[b], 20)
        assert torch.equal(batched[b], single), b


def test_generator_smaller_batch_in_larger_cache_and_reuse():
    m = _model()
    m.setup_caches(4, 64)
    p = torch.randint(0, 1024, (2, 6), generator=torch.Generator().manual_seed(4))
    g = Generator(m, batch=2, max_seq=30)
    a = g.generate(p, 10)
    b = g.generate(p, 10)  # a second run over the same buffers
    assert torch.equal(a, b) and torch.equal(a, _reference_greedy(m, p, 10))
    assert m.max_batch == 4  # the larger cache was kept


def test_eos_masks_the_tail():
    m = _model()
    p = torch.tensor([[5, 6, 7]])
    out = generate(m, p, 12)
    eos = int(out[0, 5])
    masked = generate(m, p, 12, eos_id=eos)
    first = 3 + out[0, 3:].tolist().index(eos)
    assert torch.equal(masked[0, :first + 1], out[0, :first + 1])
    assert (masked[0, first:] == eos).all()


@pytest.mark.parametrize("name", ["tiny", "tiny-qwen3"])
def test_logits_equal_hugging_face(name):
    transformers = pytest.importorskip("transformers")
    cfg = get_config(name)
    torch.manual_seed(0)
    hcfg = hf_config(cfg)
    hcfg._attn_implementation = "eager"
    cls = transformers.Qwen3ForCausalLM if cfg.qk_norm else transformers.LlamaForCausalLM
    hf = cls(hcfg).eval()
    with torch.no_grad():
        for n, p in hf.named_parameters():  # HF initialises norms to one: perturb them too
            p.copy_(torch.randn_like(p) * (0.05 if "norm" not in n else 0.2) + (1.0 if "norm" in n else 0.0))
    m = from_hf(hf, name=name)
    assert m.config.rope_scaling == cfg.rope_scaling and m.config.qk_norm == cfg.qk_norm
    toks = torch.randint(0, cfg.vocab_size, (2, 96), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = hf(toks).logits
        got = m(toks, torch.arange(96))
    assert ref.abs().max().item() > 0.5
    assert (got - ref).abs().max().item() < 1e-4
    m.setup_caches(2, 128)  # the cached path too: prefill then single steps
    with torch.no_grad():
        parts = [m(toks[:, :80], torch.arange(80))] + [m(toks[:, i:i + 1], torch.tensor([i])) for i in range(80, 96)]
    assert (torch.cat(parts, 1) - ref).abs().max().item() < 1e-4


def test_llama31_rope_scaling_changes_low_frequencies():
    from mactile.torch.decoder import rope_inv_freq
    cfg = get_config("llama-3.1-8b")
    plain = rope_inv_freq(DecoderConfig(**{**cfg.__dict__, "rope_scaling": None}))
    scaled = rope_inv_freq(cfg)
    assert torch.equal(scaled[:10], plain[:10])  # high frequencies untouched
    assert torch.allclose(scaled[-1], plain[-1] / 8)  # the lowest divided by the factor
    tiny = get_config("tiny")  # its short original context puts frequencies in all three bands
    t_plain = rope_inv_freq(DecoderConfig(**{**tiny.__dict__, "rope_scaling": None}))
    ratio = (rope_inv_freq(tiny) / t_plain).tolist()
    assert 1.0 in ratio and ratio[-1] == pytest.approx(1 / 8)
    assert any(1 / 8 + 1e-6 < r < 1 - 1e-6 for r in ratio)  # the smoothed middle band


def test_configs_published_shapes():
    c = CONFIGS["llama-3.1-8b"]
    assert 8.0e9 < c.n_params < 8.1e9
    assert 8.1e9 < CONFIGS["qwen3-8b"].n_params < 8.3e9
    assert 32.0e9 < CONFIGS["qwen3-32b"].n_params < 33.0e9
    assert ("down_proj", 4096, 14336) in c.linear_shapes()
    with pytest.raises(ValueError, match="n_heads 6 is not a multiple of n_kv_heads 4"):
        DecoderConfig(name="x", vocab_size=8, dim=48, n_layers=1, n_heads=6, n_kv_heads=4, intermediate=8)
    with pytest.raises(ValueError, match="unknown decoder configuration 'nope'"):
        get_config("nope")


def test_generator_argument_errors():
    m = _model()
    with pytest.raises(ValueError, match="needs the model on a CUDA device"):
        Generator(m, batch=1, max_seq=8, decode="graph")
    with pytest.raises(ValueError, match="decode must be one of"):
        Generator(m, batch=1, max_seq=8, decode="fast")
    with pytest.raises(ValueError, match="the model has no NestedFP layers"):
        Generator(m, batch=1, max_seq=8, nestedfp_policy=NestedFPPolicy())
    with pytest.raises(ValueError, match="exceed max_seq"):
        Generator(m, batch=1, max_seq=8).generate(torch.zeros(1, 4, dtype=torch.int64), 5)


def test_nestedfp_policy_rules():
    p = NestedFPPolicy()
    assert [p.mode_for(m) for m in (1, 31, 32, 2048)] == ["fp16", "fp16", "fp8", "fp8"]
    s = NestedFPPolicy(rule="slo", fp16_step_ms={1: 8.0, 64: 20.0, 256: 40.0})
    assert [s.mode_for(m) for m in (1, 64, 65, 256, 1024)] == ["fp16", "fp16", "fp8", "fp8", "fp8"]
    with pytest.raises(ValueError, match="rule 'slo' needs fp16_step_ms"):
        NestedFPPolicy(rule="slo")
    with pytest.raises(ValueError, match="rule must be 'tokens' or 'slo'"):
        NestedFPPolicy(rule="load")


class _Recording:
    """Wraps a sampler and keeps the logits it was given (to replay them into golden)."""

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def __call__(self, logits):
        self.seen.append(logits.detach().clone())
        return self.inner(logits)

    def state_tensors(self):
        return self.inner.state_tensors()


def test_reset_sampler_in_generation_matches_golden():
    m = _model(dtype=torch.float32, std=0.2)  # sharper logits: both temperatures occur
    V = m.config.vocab_size
    mask = torch.zeros(V, dtype=torch.bool)
    mask[::7] = True
    lay = ReductionLayout(cluster=2, threads=64)
    smp = _Recording(StepAwareTemperatureSampler(2, mask, seed=11, window=4, layout=lay, tau0=2.0))
    prompt = torch.randint(0, V, (2, 4), generator=torch.Generator().manual_seed(6))
    out = generate(m, prompt, 24, sampler=smp)
    gold = StepAwareTemperature(seed=11, window=4, layout=lay, tau0=2.0)
    temps = []
    for i, z in enumerate(smp.seen):
        r = gold.step(z.numpy(), mask.numpy())
        assert np.array_equal(r.tokens, out[:, 4 + i].numpy()), i
        temps += r.temperature.tolist()
    assert {0.1, 1.0} <= {round(t, 3) for t in temps}


def test_reset_sampler_bit_exact_kernel_layout_and_state_reset():
    rng = np.random.default_rng(0)
    V = 1000
    mask = np.zeros(V, bool)
    mask[rng.choice(V, 100, replace=False)] = True
    smp = StepAwareTemperatureSampler(3, torch.from_numpy(mask), seed=3, window=8)
    gold = StepAwareTemperature(seed=3, window=8)  # the GPU kernel's layout, 8 x 1024
    zs = [(rng.standard_normal((3, V)) * s).astype(np.float32) for s in (0.5, 8.0, 2.0) * 4]
    for z in zs:
        r = gold.step(z, mask)
        tok = smp(torch.from_numpy(z))
        assert np.array_equal(tok.numpy(), r.tokens)
        assert np.array_equal(smp.last["entropy"].numpy().view(np.uint32), r.entropy.view(np.uint32))
        assert np.array_equal(smp.last["h_step"].numpy(), r.h_step)
        assert np.array_equal(smp.last["tau"].numpy(), r.tau)
    smp.reset()
    gold.reset()
    assert np.array_equal(smp(torch.from_numpy(zs[0])).numpy(), gold.step(zs[0], mask).tokens)


def test_reset_sampler_detects_a_broken_port():
    """The comparisons have teeth: another summation order changes entropy bits, another
    generator seed changes tokens."""
    rng = np.random.default_rng(1)
    V = 1000
    mask = np.zeros(V, bool)
    zs = [(rng.standard_normal((4, V)) * 3).astype(np.float32) for _ in range(6)]
    gold = StepAwareTemperature(seed=5)
    ref = [gold.step(z, mask) for z in zs]
    order = StepAwareTemperatureSampler(4, torch.from_numpy(mask), seed=5,
                                        layout=ReductionLayout(cluster=4, threads=256))
    seed = StepAwareTemperatureSampler(4, torch.from_numpy(mask), seed=6)
    ent_diff = tok_diff = 0
    for z, r in zip(zs, ref):
        order(torch.from_numpy(z))
        ent_diff += int((order.last["entropy"].numpy().view(np.uint32) != r.entropy.view(np.uint32)).sum())
        tok_diff += int((seed(torch.from_numpy(z)).numpy() != r.tokens).sum())
    assert ent_diff > 0 and tok_diff > 0


def test_temperature_sampler_and_greedy():
    z = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 0.0]])
    assert Greedy()(z).tolist() == [1, 0]
    torch.manual_seed(0)
    s = TemperatureSampler(1.0, top_k=1)
    assert s(z).tolist() == [1, 0]
    counts = torch.bincount(TemperatureSampler(1.0)(z[:1].expand(4000, 3)), minlength=3).float()
    p = torch.softmax(z[0], -1)
    assert (counts / counts.sum() - p).abs().max() < 0.03
    with pytest.raises(ValueError, match="temperature must be positive"):
        TemperatureSampler(0.0)


def _quantize_model():
    try:
        from mactile.torch import quantize_model
    except ImportError as e:
        pytest.skip(f"mactile.torch.quantize_model is not in this checkout: {e}")
    return quantize_model


def test_quantized_tiny_greedy_cache_equals_recompute():
    quantize_model = _quantize_model()
    m = _model(dtype=torch.float32)
    quantize_model(m, format="nvfp4", progress=False)
    prompt = torch.randint(0, 1024, (2, 5), generator=torch.Generator().manual_seed(7))
    assert torch.equal(generate(m, prompt, 32), _reference_greedy(m, prompt, 32))


def test_quantized_tiny_logits_equal_golden_dequantized_model():
    """CPU path: the quantized model against the same model with golden round-tripped
    weights in FP32. Every layer's weight equals the golden round trip exactly; the logits
    agree to 4e-3 of the largest: the quantized layers round their input activations to FP16
    (as the GPU kernels take them), 2**-11 relative per layer input (measured 8e-4)."""
    quantize_model = _quantize_model()
    from mactile.golden.registry import get_format
    m = _model(dtype=torch.float32)
    ref = copy.deepcopy(m)
    fmt = get_format("nvfp4")
    with torch.no_grad():
        for mod in ref.modules():
            if isinstance(mod, torch.nn.Linear) and mod is not ref.lm_head:
                mod.weight.copy_(torch.from_numpy(np.asarray(fmt.roundtrip(mod.weight.numpy()), np.float32)))
    quantize_model(m, format="nvfp4", exclude=["lm_head"], progress=False)
    for (n, a), (_, b) in zip(m.named_modules(), ref.named_modules()):
        if hasattr(a, "dequantized_weight"):
            assert torch.equal(a.dequantized_weight(), b.weight.detach()), n
    toks = torch.randint(0, 1024, (2, 16), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        a, b = m(toks, torch.arange(16)), ref(toks, torch.arange(16))
    assert (a - b).abs().max().item() <= 4e-3 * b.abs().max().item()


def test_nestedfp_policy_switches_modes_per_step_cpu():
    quantize_model = _quantize_model()
    from mactile.torch.generate import precision_modules
    m = _model(dtype=torch.float32, std=0.02)
    quantize_model(m, format="nestedfp", mode="fp16", progress=False)
    mods = precision_modules(m)
    assert mods and all(x.mode == "fp16" for x in mods)
    g = Generator(m, batch=2, max_seq=24, nestedfp_policy=NestedFPPolicy(fp8_min_tokens=8))
    out = g.generate(torch.randint(0, 1024, (2, 6), generator=torch.Generator().manual_seed(9)), 5)
    assert out.shape == (2, 11)
    assert g.modes_used == ["fp8"] + ["fp16"] * 4  # prefill of 12 tokens, then 2-token steps
    assert all(x.mode == "fp16" for x in mods)


# ------------------------------------------------------------------ decoder ops, fused projections
@pytest.mark.parametrize("name", ["tiny", "tiny-qwen3"])
def test_fused_ops_equal_eager_bit_for_bit_cpu(name):
    """On the CPU the decoder ops are the eager code: prefill and decode logits identical, and
    the fused greedy decode equals the full recompute for 64 tokens."""
    m = _model(name)
    toks = torch.randint(0, m.config.vocab_size, (2, 20), generator=torch.Generator().manual_seed(3))
    outs = []
    for fused in (False, True):
        m.clear_caches()
        m.setup_caches(2, 32)
        m.use_fused_ops(fused)
        with torch.no_grad():
            outs.append(torch.cat([m(toks[:, :12], torch.arange(12))]
                                  + [m(toks[:, i:i + 1], torch.tensor([i])) for i in range(12, 20)], 1))
    assert torch.equal(outs[0], outs[1])
    prompt = toks[:1, :7]
    m.clear_caches()
    assert torch.equal(generate(m, prompt, 64), _reference_greedy(m.use_fused_ops(False), prompt, 64))


def test_fuse_projections_same_model():
    """q/k/v and gate/up as one product each: the same logits within FP64 rounding, state_dict
    names qkv_proj / gate_up_proj, the originals gone; a second call changes nothing."""
    m = _model("tiny-qwen3")
    toks = torch.randint(0, 1024, (2, 9), generator=torch.Generator().manual_seed(4))
    ref = m(toks, torch.arange(9))
    m.fuse_projections().fuse_projections()
    sd = m.state_dict()
    assert "model.layers.0.self_attn.qkv_proj.weight" in sd and "model.layers.1.mlp.gate_up_proj.weight" in sd
    assert not any(k.endswith(("q_proj.weight", "gate_proj.weight")) for k in sd)
    assert m.projections_fused
    assert (m(toks, torch.arange(9)) - ref).abs().max().item() < 1e-12
    m.setup_caches(2, 16)
    m.use_fused_ops()
    assert (m(toks, torch.arange(9)) - ref).abs().max().item() < 1e-12


def test_fused_projections_quantize_and_decode():
    quantize_model = _quantize_model()
    m = _model(dtype=torch.float32).fuse_projections().use_fused_ops()
    quantize_model(m, format="nvfp4", progress=False)
    assert type(m.model.layers[0].self_attn.qkv_proj).__name__ == "QuantLinear"
    prompt = torch.randint(0, 1024, (2, 5), generator=torch.Generator().manual_seed(7))
    assert torch.equal(generate(m, prompt, 16), _reference_greedy(m, prompt, 16))
