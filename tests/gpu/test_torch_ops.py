"""mactile.torch's ops on the GPU: each CUDA implementation against its CPU (golden)
implementation within a stated bound, the sampler bit for bit, CUDA-graph capture on a
side stream (a kernel launched on another stream, or a host synchronisation, fails the
capture), torch.compile(fullgraph=True), and CuPy allocating through torch only.

Run on the GPU machine: ``python -m pytest -m gpu tests/gpu/test_torch_ops.py -v``."""
import numpy as np
import pytest

from fp4_gpu_util import GPU

torch = pytest.importorskip("torch")

pytestmark = GPU + [pytest.mark.skipif(not torch.cuda.is_available(), reason="torch has no CUDA device")]

from mactile.torch import QuantLinear  # noqa: E402

LAYERS = [("nvfp4", "w4a16"), ("nvfp4", "w4a4"), ("mxfp4", "w4a16"), ("razer", "w4a16"),
          ("razer-g128", "w4a16"), ("nestedfp", "fp16"), ("nestedfp", "fp8"), ("int-group", "w6a6"),
          ("int-group", "w6a8")]
IDS = [f"{n}-{m}" for n, m in LAYERS]


def _layer(rng, name, mode, n=640, k=1024, bias=True):
    lin = torch.nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy((rng.standard_normal((n, k)) * 0.3).astype(np.float32)))
    return QuantLinear.from_linear(lin, name, mode=mode)


def _activations(layer, x):
    """The activations the op multiplies (float64), for the bound's magnitudes."""
    from mactile.golden import NVFP4, IntGroup
    from mactile.golden.elements import FP8_E4M3
    from mactile.golden.fp8token import per_token_e4m3

    a = x.cpu().numpy()
    if layer.mode == "w4a4":
        return NVFP4().quantize(a).dequantize()
    if layer.mode in ("w6a6", "w6a8"):
        return IntGroup(bits=int(layer.mode[-1])).quantize(a).dequantize()
    if layer.mode == "fp8" and layer.eligible:
        codes, sc = per_token_e4m3(a)
        return FP8_E4M3.values[codes] * sc[:, None].astype(np.float64)
    return a.astype(np.float64)


@pytest.mark.parametrize("m", [1, 5, 64, 300])
@pytest.mark.parametrize("name,mode", LAYERS, ids=IDS)
def test_cuda_matches_cpu(cp, rng, name, mode, m):
    """|GPU - CPU| <= 2 K 2^-24 sum|a w| (two FP32 sums in different orders; FP8 mode:
    2^-8 sum|a w|, Hopper's FP8 wgmma keeps fewer bits) + 2^-9 |y| + 2^-10 |b| (the product
    and the bias sum each rounded to FP16 on both sides; |product| <= |y| + |b|)."""
    layer = _layer(rng, name, mode)
    x = torch.from_numpy(rng.standard_normal((m, layer.in_features)).astype(np.float16))
    ref = layer(x)  # CPU: golden
    got = layer.to("cuda")(x.cuda()).cpu()
    assert got.dtype == torch.float16 and got.shape == ref.shape
    w = layer.cpu().dequantized_weight().double().numpy()  # FP8 mode: E4M3(upper) 2^-8
    mag = np.abs(_activations(layer, x)) @ np.abs(w).T
    k = layer.in_features
    rel = 2.0 ** -8 if mode == "fp8" else 2 * k * 2.0 ** -24
    bias = layer.bias.double().numpy()
    r = ref.double().numpy()
    bound = rel * mag + 2.0 ** -9 * np.abs(r) + 2.0 ** -10 * np.abs(bias) + 2.0 ** -23
    err = np.abs(got.double().numpy() - r)
    assert (err <= bound).all(), float(np.max(err / bound))


def test_bf16_and_fp32_inputs(cp, rng):
    layer = _layer(rng, "nvfp4", "w4a16", bias=False).to("cuda")
    x = torch.from_numpy(rng.standard_normal((4, layer.in_features)).astype(np.float16)).cuda()
    y16 = layer(x)
    for dt in (torch.bfloat16, torch.float32):
        y = layer(x.to(dt))
        assert y.dtype == dt
        if dt == torch.float32:
            assert torch.equal(y.half(), y16)  # the kernels take FP16 activations


def _sampler_state(B, window, device):
    return dict(count=torch.zeros(B, dtype=torch.int64, device=device),
                sum_all=torch.zeros(B, dtype=torch.float64, device=device),
                t0=torch.zeros(B, dtype=torch.int64, device=device),
                step_sum=torch.zeros(B, dtype=torch.float64, device=device),
                step_n=torch.zeros(B, dtype=torch.int64, device=device),
                prev_end=torch.zeros(B, dtype=torch.int32, device=device),
                ring=torch.zeros((B, window), dtype=torch.float64, device=device))


def test_sampler_bit_exact(cp, rng):
    """The CUDA sampler (the ReSET kernel) and the CPU op (golden, the kernel's summation
    layout) draw the same tokens with the same statistics, step after step."""
    B, V, window = 4, 5000, 8
    mask = torch.zeros(V, dtype=torch.uint8)
    mask[:300] = 1
    ids = torch.tensor([3, 1, 4, 1], dtype=torch.int64)
    gpu, cpu = _sampler_state(B, window, "cuda"), _sampler_state(B, window, "cpu")
    for _ in range(20):
        z = torch.from_numpy((rng.standard_normal((B, V)) * 4).astype(np.float32))
        a = torch.ops.mactile.reset_temperature_step(z.cuda(), mask.cuda(), ids.cuda(), *gpu.values(), 0.6, 0.1, 1.0, 11)
        b = torch.ops.mactile.reset_temperature_step(z, mask, ids, *cpu.values(), 0.6, 0.1, 1.0, 11)
        for u, v in zip(a, b):
            assert torch.equal(u.cpu(), v)
    for k in gpu:
        assert torch.equal(gpu[k].cpu(), cpu[k]), k


def _model(rng):
    return torch.nn.Sequential(
        _layer(rng, "nvfp4", "w4a16", 1024, 1024), torch.nn.SiLU(),
        _layer(rng, "nvfp4", "w4a4", 1024, 1024), torch.nn.SiLU(),
        _layer(rng, "razer-g128", "w4a16", 1024, 1024), torch.nn.SiLU(),
        _layer(rng, "nestedfp", "fp8", 1024, 1024), torch.nn.SiLU(),
        _layer(rng, "int-group", "w6a8", 512, 1024)).to("cuda")


@pytest.mark.parametrize("m", [1, 16, 128])
def test_cuda_graph_capture(cp, rng, m):
    """Captured on a side stream after a warm-up (which sizes mactile.gpu's workspaces),
    replayed on new inputs: the eager result bit for bit."""
    model = _model(rng)
    x = torch.randn(m, 1024, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    for _ in range(2):
        x2 = torch.randn(m, 1024, device="cuda", dtype=torch.float16)
        x.copy_(x2)
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, model(x2))


def test_cupy_allocates_through_torch(cp, rng):
    """No CuPy pool memory is taken by the ops: every buffer mactile.gpu makes comes from
    torch's caching allocator."""
    model = _model(rng)
    pool = cp.get_default_memory_pool()
    used = pool.used_bytes()
    before = torch.cuda.memory_allocated()
    for m in (1, 7, 200):
        model(torch.randn(m, 1024, device="cuda", dtype=torch.float16))
    torch.cuda.synchronize()
    assert pool.used_bytes() == used
    assert torch.cuda.memory_allocated() >= before


COMPILE = [(n, m, None) for n, m in LAYERS] + [("nvfp4", "w4a16", "reduce-overhead"),
                                               ("nestedfp", "fp8", "reduce-overhead"),
                                               ("int-group", "w6a6", "reduce-overhead")]


@pytest.mark.parametrize("name,lmode,mode", COMPILE, ids=[f"{n}-{m}-{c or 'default'}" for n, m, c in COMPILE])
def test_compile_fullgraph_layer(cp, rng, name, lmode, mode):
    """torch.compile(fullgraph=True) (Inductor; with CUDA graphs in reduce-overhead) of one
    layer: the eager result bit for bit (the op is opaque to Inductor)."""
    torch._dynamo.reset()
    layer = _layer(rng, name, lmode, 1024, 1024, bias=False).to("cuda")
    x = torch.randn(8, 1024, device="cuda", dtype=torch.float16)
    eager = layer(x)
    fn = torch.compile(layer, fullgraph=True, mode=mode)
    for _ in range(3):
        y = fn(x).clone()
    assert torch.equal(y, eager)


def test_compile_fullgraph_model(cp, rng):
    """A model of several formats with bias and SiLU between the layers traces without a
    graph break; Inductor fuses the bias add and SiLU without the intermediate FP16 rounding
    of eager mode, so the result is compared within 1e-2 (W16 layers only: an activation
    quantizer could turn such a difference into a different code)."""
    torch._dynamo.reset()
    model = torch.nn.Sequential(
        _layer(rng, "nvfp4", "w4a16", 1024, 1024), torch.nn.SiLU(),
        _layer(rng, "razer-g128", "w4a16", 1024, 1024), torch.nn.SiLU(),
        _layer(rng, "nestedfp", "fp16", 512, 1024)).to("cuda")
    x = torch.randn(8, 1024, device="cuda", dtype=torch.float16)
    eager = model(x)
    y = torch.compile(model, fullgraph=True)(x)
    torch.testing.assert_close(y, eager, rtol=1e-2, atol=1e-2)
