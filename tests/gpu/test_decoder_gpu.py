"""The decoder on the GPU: CUDA-graph decode against eager decode, the samplers, the peers'
layers, and quantized models against their golden-dequantized reference.

Bounds (FP16 activations, FP32 accumulation):

* graph vs eager: tokens identical (the replay runs the kernels the eager step launches);
* ReSET sampler: tokens and entropy bits identical between the torch port, the GPU op and golden;
* tinygemm vs the FP32 product with its dequantized weights: 2e-2 of the largest output (BF16
  activations, 2**-8 relative per element); FP8: 8e-2 (E4M3 activations, 2**-4 relative);
* quantized model vs the model with golden-dequantized weights, both FP16 (weight-only modes),
  or vs the same layers' golden CPU path in FP32 (modes that quantize activations: W4A4,
  NestedFP8, FlexQ W6A6): 3e-2 of the largest logit (FP16 rounding of every activation, the
  kernels' summation order).
"""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch.device("cuda")


def _tiny(cuda, name="tiny", std=0.05):
    from mactile.torch.decoder import Decoder, get_config
    return Decoder.random(get_config(name), device=cuda, dtype=torch.float16, std=std)


@pytest.mark.parametrize("name", ["tiny", "tiny-qwen3"])
def test_graph_decode_equals_eager(cuda, name):
    from mactile.torch.generate import generate
    m = _tiny(cuda, name)
    p = torch.randint(0, 1024, (4, 9), device=cuda, generator=torch.Generator(cuda).manual_seed(0))
    a = generate(m, p, 48, decode="graph")
    b = generate(copy.deepcopy(m), p, 48, decode="eager")
    assert torch.equal(a, b)
    assert len(set(a[0, 9:].tolist())) > 4


@pytest.mark.slow
def test_compiled_decode_equals_eager(cuda):
    from mactile.torch.generate import generate
    m = _tiny(cuda)
    p = torch.randint(0, 1024, (2, 5), device=cuda, generator=torch.Generator(cuda).manual_seed(1))
    assert torch.equal(generate(m, p, 16, decode="compile"), generate(copy.deepcopy(m), p, 16, decode="eager"))


def test_reset_sampler_torch_op_golden_on_gpu(cuda):
    from mactile.golden.reset_temperature import StepAwareTemperature
    from mactile.torch.sampling import StepAwareTemperatureSampler
    rng = np.random.default_rng(0)
    V, B = 151936, 3
    mask = np.zeros(V, bool)
    mask[rng.choice(V, 2000, replace=False)] = True
    mk = torch.from_numpy(mask).to(cuda)
    port = StepAwareTemperatureSampler(B, mk, seed=9, window=8, backend="torch")
    gold = StepAwareTemperature(seed=9, window=8)
    try:
        op = StepAwareTemperatureSampler(B, mk, seed=9, window=8, backend="op")
    except RuntimeError as e:
        op = None
        why = str(e)
    for i in range(6):
        z = (rng.standard_normal((B, V)) * (0.5, 6.0)[i % 2]).astype(np.float32)
        zt = torch.from_numpy(z).to(cuda)
        r = gold.step(z, mask)
        assert np.array_equal(port(zt).cpu().numpy(), r.tokens)
        assert np.array_equal(port.last["entropy"].cpu().numpy().view(np.uint32), r.entropy.view(np.uint32))
        if op is not None:
            assert np.array_equal(op(zt).cpu().numpy(), r.tokens)
            assert np.array_equal(op.last["entropy"].cpu().numpy().view(np.uint32), r.entropy.view(np.uint32))
    if op is None:
        pytest.skip(f"torch port checked; the op backend is not available: {why}")


@pytest.mark.parametrize("backend", ["torch", "op"])
def test_reset_sampler_inside_graph_equals_eager(cuda, backend):
    from mactile.torch.generate import generate
    from mactile.torch.sampling import StepAwareTemperatureSampler
    m = _tiny(cuda, std=0.2)
    mask = torch.zeros(1024, dtype=torch.bool, device=cuda)
    mask[::5] = True
    p = torch.randint(0, 1024, (2, 4), device=cuda, generator=torch.Generator(cuda).manual_seed(2))
    try:
        sa = StepAwareTemperatureSampler(2, mask, seed=4, backend=backend)
    except RuntimeError as e:
        pytest.skip(str(e))
    sb = StepAwareTemperatureSampler(2, mask, seed=4, backend=backend)
    a = generate(m, p, 32, sampler=sa, decode="graph")
    b = generate(copy.deepcopy(m), p, 32, sampler=sb, decode="eager")
    assert torch.equal(a, b)
    assert torch.equal(sa.count, sb.count) and torch.equal(sa.ring, sb.ring)


def test_tinygemm_layer_bound(cuda):
    from mactile.torch.baselines import Int4TinyGemmLinear, int4_group_quantize
    torch.manual_seed(0)
    lin = torch.nn.Linear(4096, 1024, bias=False, device=cuda, dtype=torch.float16)
    x = torch.randn(16, 4096, device=cuda, dtype=torch.float16)
    q, s, mn = int4_group_quantize(lin.weight)
    deq = (q.float().reshape(1024, 32, 128) * s[..., None] + mn[..., None]).reshape(1024, 4096)
    ref = x.float() @ deq.t()
    y = Int4TinyGemmLinear.from_linear(lin)(x).float()
    assert (y - ref).abs().max() <= 2e-2 * ref.abs().max()
    # the bound has teeth: the zero point without tinygemm's "- 8" offset is far outside it
    bad = x.float() @ (deq + 8 * s.repeat_interleave(128, 1)).t()
    assert (y - bad).abs().max() > 2e-2 * ref.abs().max()


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_fp8_layer_bound(cuda, scaling):
    """E4M3 activations (2**-4 relative rounding) on top of the weight's own dequantized values:
    8e-2 of the largest output, 5 tokens (the path that pads M to 16)."""
    from mactile.torch.baselines import Fp8Linear
    torch.manual_seed(0)
    lin = torch.nn.Linear(4096, 1024, bias=False, device=cuda, dtype=torch.float16)
    x = torch.randn(5, 4096, device=cuda, dtype=torch.float16)
    try:
        f = Fp8Linear.from_linear(lin, scaling=scaling)
        y = f(x).float()
    except RuntimeError as e:  # per-row scales with an FP16 output need a recent cuBLASLt/torch
        pytest.skip(f"torch._scaled_mm with {scaling} scales: {e}"[:300])
    wd = f.weight_t.t().float() * (f.w_scale.reshape(-1, 1) if scaling == "row" else f.w_scale)
    ref = x.float() @ wd.t()
    assert y.shape == (5, 1024)
    assert (y - ref).abs().max() <= 8e-2 * ref.abs().max()


def _quantize_model():
    try:
        from mactile.torch import quantize_model
    except ImportError as e:
        pytest.skip(f"mactile.torch.quantize_model is not in this checkout: {e}")
    return quantize_model


def _llama2(cuda):
    from mactile.torch.decoder import Decoder, get_config
    cfg = get_config("llama-3.1-8b", n_layers=2, vocab_size=8192)
    return Decoder.random(cfg, device=cuda, dtype=torch.float16, std=0.02)


def _logits(m, toks):
    with torch.no_grad():
        return m(toks, torch.arange(toks.shape[1], device=toks.device)).float()


@pytest.mark.parametrize("fmt,mode", [("nvfp4", None), ("mxfp4", None), ("razer", None), ("razer-g128", None),
                                      ("nestedfp", "fp16")])
def test_quantized_model_logits_vs_golden_dequantized(cuda, fmt, mode):
    """Weight-only modes, Llama-3.1-8B's layer shapes (2 layers): the quantized model vs an
    FP16 model holding its golden-dequantized weights."""
    quantize_model = _quantize_model()
    from mactile.torch import dequantized_model
    m = _llama2(cuda)
    kw = {"mode": mode} if mode else {}
    quantize_model(m, format=fmt, progress=False, **kw)
    ref = dequantized_model(copy.deepcopy(m)).to(torch.float16)
    toks = torch.randint(0, 8192, (2, 32), device=cuda, generator=torch.Generator(cuda).manual_seed(3))
    a, b = _logits(m, toks), _logits(ref, toks)
    assert (a - b).abs().max() <= 3e-2 * b.abs().max()


@pytest.mark.parametrize("fmt,mode", [("nvfp4", "w4a4"), ("nestedfp", "fp8"), ("flexq", "w6a6"), ("nvfp4", None)])
def test_quantized_model_gpu_vs_golden_cpu_path(cuda, fmt, mode):
    """Modes that quantize activations too: the GPU model vs the same layers on the CPU,
    where every op is the golden model (activations quantized by golden as well), FP32."""
    quantize_model = _quantize_model()
    m = _llama2(cuda)
    kw = {"mode": mode} if mode else {}
    quantize_model(m, format=fmt, progress=False, **kw)
    toks = torch.randint(0, 8192, (1, 8), device=cuda, generator=torch.Generator(cuda).manual_seed(4))
    a = _logits(m, toks)
    from mactile.torch import QuantLinear
    cpu = copy.deepcopy(m).to("cpu")
    for mod in cpu.modules():  # FP32 around the quantized layers; their buffers as packed
        if not isinstance(mod, QuantLinear):
            for prm in mod.parameters(recurse=False):
                prm.data = prm.data.float()
    b = _logits(cpu, toks.cpu()).to(cuda)
    assert (a - b).abs().max() <= 3e-2 * b.abs().max()


def test_nestedfp_policy_switches_per_step(cuda):
    quantize_model = _quantize_model()
    from mactile.torch.generate import Generator, NestedFPPolicy, precision_modules
    m = _tiny(cuda, std=0.02)
    quantize_model(m, format="nestedfp", mode="fp16", progress=False)
    assert precision_modules(m)
    pol = NestedFPPolicy(fp8_min_tokens=8)
    g = Generator(m, batch=2, max_seq=40, nestedfp_policy=pol)
    g.generate(torch.randint(0, 1024, (2, 6), device=cuda), 10)  # prefill 12 tokens: fp8; decode 2: fp16
    assert g.modes_used[0] == "fp8" and set(g.modes_used[1:]) == {"fp16"}
    assert set(g.graphs) == {"fp16"}


def test_bench_e2e_tiny_on_gpu(cuda, tmp_path):
    import json

    from mactile.cli.main import main
    rc = main(["bench", "e2e", "--tiny", "-o", str(tmp_path), "--formats", "fp16,fp8,int4-tinygemm,nvfp4"])
    assert rc == 0
    res = json.loads((tmp_path / "e2e.json").read_text())
    dec = [r for r in res["records"] if r["measure"] == "decode" and r["variant"] == "fp16"]
    assert [r["batch"] for r in dec] == [1, 4] and all(r["tokens_per_s"] > 0 for r in dec)
    assert (tmp_path / "e2e.png").stat().st_size > 1000
