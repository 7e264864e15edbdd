"""The mactile torch ops on the CPU: each equals the golden model's dequantized matmul
(atol 0: the same float32 matmul of the same golden values), fake implementations pass
``torch.library.opcheck``, and a model traces under ``torch.compile(fullgraph=True)``."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mactile.golden import (FP8_E4M3, NVFP4, IntGroup, StepAwareTemperature, get_format,  # noqa: E402
                            nestedfp_split)
from mactile.golden.fp8token import nestedfp8_matmul_reference, per_token_e4m3  # noqa: E402
from mactile.gpu.temperature import KERNEL_LAYOUT  # noqa: E402
from mactile.torch import QuantLinear, ops  # noqa: E402

FP4 = ("nvfp4", "mxfp4", "razer", "razer-g128")
N, K = 80, 256  # N not a multiple of the 64-row tiles: padding rows exercised


def _weight(rng, n=N, k=K, scale=1.0):
    w = (rng.standard_normal((n, k)) * scale).astype(np.float32)
    w[3, :128] = 0.0  # whole zero blocks: scale-0 blocks (razer-g128), zero-code blocks (mxfp4)
    return w


def _linear(w, bias=False):
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w))
    return lin


def _x(rng, m=5, k=K):
    return torch.from_numpy(rng.standard_normal((m, k)).astype(np.float16))


def _ref(x, w32):
    """The CPU ops' definition: float32 matmul of FP16 activations and float32 weights."""
    return torch.matmul(x.to(torch.float16).float(), torch.as_tensor(w32, dtype=torch.float32).t())


@pytest.mark.parametrize("layouts", [None, ("frag",)], ids=["all-layouts", "frag-only"])
@pytest.mark.parametrize("name", FP4)
def test_w4a16_equals_golden(rng, name, layouts):
    fmt = get_format(name)
    w = _weight(rng)
    q = fmt.quantize(w)
    layer = QuantLinear.from_linear(_linear(w), name, layouts=layouts)
    # the stored weight is the golden Quantized bit for bit (scales where a block has a value)
    back = layer.quantized()
    np.testing.assert_array_equal(back.codes.reshape(N, K) & 7, q.codes.reshape(N, K) & 7)
    np.testing.assert_array_equal(back.dequantize(), q.dequantize())
    x = _x(rng)
    y = layer(x)
    assert y.dtype == torch.float16 and y.shape == (5, N)
    assert torch.equal(y, _ref(x, q.dequantize().astype(np.float32)).to(torch.float16))
    x32 = x.float()
    assert torch.equal(layer(x32), _ref(x32, q.dequantize().astype(np.float32)))


def test_broken_decode_is_caught(rng):
    """A decode that drops one scale bit changes the result: the comparison above is not vacuous."""
    w = _weight(rng)
    layer = QuantLinear.from_linear(_linear(w), "nvfp4")
    x = _x(rng)
    good = layer(x)
    with torch.no_grad():
        layer.rm_scales ^= 1  # the rowmajor scales are what the CPU path decodes
    assert not torch.equal(layer(x), good)  # the in-place change invalidated the cached weight


def test_w4a4_equals_golden(rng):
    w = _weight(rng)
    q = NVFP4().quantize(w)
    layer = QuantLinear.from_linear(_linear(w), "nvfp4", mode="w4a4")
    x = _x(rng, 7)
    a = NVFP4().quantize(x.numpy()).dequantize().astype(np.float32)
    ref = torch.matmul(torch.from_numpy(a), torch.from_numpy(q.dequantize().astype(np.float32)).t())
    assert torch.equal(layer(x), ref.to(torch.float16))
    with pytest.raises(ValueError, match="w4a4"):
        QuantLinear.from_linear(_linear(w), "razer", mode="w4a4")


def test_nestedfp_fp16_and_fp8(rng):
    w = _weight(rng, scale=0.3).astype(np.float16).astype(np.float32)
    layer = QuantLinear.from_linear(_linear(w), "nestedfp")
    assert layer.eligible and layer.mode == "fp16"
    x = _x(rng, 6)
    assert torch.equal(layer(x), _ref(x, w).to(torch.float16))  # FP16 mode: lossless weights
    layer.mode = "fp8"
    codes, sc = per_token_e4m3(x.numpy())
    upper, _ = nestedfp_split(w.astype(np.float16))
    acc = torch.matmul(torch.from_numpy(FP8_E4M3.values[codes].astype(np.float32)),
                       torch.from_numpy(FP8_E4M3.values[upper].astype(np.float32)).t())
    y8 = layer(x)
    assert torch.equal(y8, (acc * torch.from_numpy(sc * np.float32(2.0 ** -8))[:, None]).to(torch.float16))
    # against the golden float64 reference: float32 accumulation (K terms) and FP16 output rounding
    ref64 = nestedfp8_matmul_reference(codes, sc, upper)
    mag = np.abs(FP8_E4M3.values[codes]) @ np.abs(FP8_E4M3.values[upper]).T * sc[:, None] * 2.0 ** -8
    bound = K * 2.0 ** -24 * mag + 2.0 ** -11 * np.abs(ref64) + 2.0 ** -24
    assert (np.abs(y8.double().numpy() - ref64) <= bound).all()
    with pytest.raises(ValueError, match="mode"):
        layer.mode = "fp4"


def test_nestedfp_exception_layer(rng):
    """A layer with |w| > threshold keeps its FP16 weights and runs FP16 in both modes."""
    w = _weight(rng, scale=1.0)
    w[0, 0] = 3.0
    layer = QuantLinear.from_linear(_linear(w), "nestedfp8")
    assert not layer.eligible and layer.mode == "fp8" and "exception layer" in repr(layer)
    x = _x(rng)
    ref = _ref(x, w.astype(np.float16).astype(np.float32)).to(torch.float16)
    assert torch.equal(layer(x), ref)
    layer.mode = "fp16"
    assert torch.equal(layer(x), ref)


@pytest.mark.parametrize("mode,bits", [("w6a6", 6), ("w6a8", 8)])
def test_flexq_equals_golden(rng, mode, bits):
    w = _weight(rng)
    qw = IntGroup(bits=6).quantize(w)
    layer = QuantLinear.from_linear(_linear(w), "int-group", mode=mode)
    x = _x(rng, 9)
    a = IntGroup(bits=bits).quantize(x.numpy()).dequantize().astype(np.float32)
    ref = torch.matmul(torch.from_numpy(a), torch.from_numpy(qw.dequantize().astype(np.float32)).t())
    assert torch.equal(layer(x), ref.to(torch.float16))


def _sampler_state(B, window):
    return dict(count=torch.zeros(B, dtype=torch.int64), sum_all=torch.zeros(B, dtype=torch.float64),
                t0=torch.zeros(B, dtype=torch.int64), step_sum=torch.zeros(B, dtype=torch.float64),
                step_n=torch.zeros(B, dtype=torch.int64), prev_end=torch.zeros(B, dtype=torch.int32),
                ring=torch.zeros((B, window), dtype=torch.float64))


def test_reset_temperature_step_equals_golden(rng):
    B, V, window = 3, 300, 4
    mask = np.zeros(V, bool)
    mask[:40] = True  # step ends are frequent enough to be hit
    st = _sampler_state(B, window)
    ids = torch.tensor([5, 0, 9], dtype=torch.int64)
    g = StepAwareTemperature(tau0=0.6, t_low=0.1, t_high=1.0, window=window, seed=7, layout=KERNEL_LAYOUT)
    for _ in range(12):
        z = (rng.standard_normal((B, V)) * 3).astype(np.float32)
        got = torch.ops.mactile.reset_temperature_step(torch.from_numpy(z), torch.from_numpy(mask.astype(np.uint8)),
                                                       ids, *st.values(), 0.6, 0.1, 1.0, 7)
        want = g.step(z, mask, seq_ids=ids.numpy())
        for a, b in zip(got, (want.tokens, want.temperature, want.entropy, want.h_step, want.h_bar, want.tau)):
            np.testing.assert_array_equal(a.numpy(), b)
    for b, sid in enumerate(ids.tolist()):
        assert int(st["count"][b]) == g.state[sid]["count"] == 12
        np.testing.assert_array_equal(st["ring"][b].numpy(), g.state[sid]["ring"])


def _layer_args(layer, x):
    N, K = layer.out_features, layer.in_features
    if layer.kind == "fp4":
        op = torch.ops.mactile.w4a4 if layer.mode == "w4a4" else torch.ops.mactile.w4a16
        return op, (x, layer.codes, layer.scales, layer.rm_codes, layer.rm_scales, layer.spec, N, K,
                    layer._ts, layer._has_ts, layer._out_log2)
    if layer.kind == "nestedfp":
        return torch.ops.mactile.nestedfp, (x, layer.upper, layer.lower, layer.fp16_weight, N, K, layer.mode)
    return torch.ops.mactile.flexq, (x, layer.planes, layer.wscales, N, K, int(layer.mode[-1]))


LAYERS = [("nvfp4", None), ("nvfp4", "w4a4"), ("mxfp4", None), ("razer", None), ("razer-g128", None),
          ("nestedfp", "fp16"), ("nestedfp", "fp8"), ("int-group", "w6a6"), ("int-group", "w6a8")]


@pytest.mark.parametrize("name,mode", LAYERS, ids=[f"{n}-{m}" for n, m in LAYERS])
def test_opcheck(rng, name, mode):
    """Schema, fake tensor and AOT-dispatch checks of every linear op."""
    w = _weight(rng, 64, 128, scale=0.3)
    layer = QuantLinear.from_linear(_linear(w), name, mode=mode)
    op, args = _layer_args(layer, _x(rng, 3, 128))
    torch.library.opcheck(op, args)


def test_opcheck_sampler(rng):
    st = _sampler_state(2, 4)
    args = (torch.from_numpy(rng.standard_normal((2, 50)).astype(np.float32)), torch.zeros(50, dtype=torch.uint8),
            torch.arange(2, dtype=torch.int64), *st.values(), 0.6, 0.1, 1.0, 3)
    torch.library.opcheck(torch.ops.mactile.reset_temperature_step, args)


def test_fake_shapes_under_fake_mode(rng):
    from torch._subclasses.fake_tensor import FakeTensorMode

    layers = [QuantLinear.from_linear(_linear(_weight(rng, 64, 128, 0.3)), n, mode=m) for n, m in LAYERS]
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(_x(rng, 4, 128).to(torch.bfloat16))
        for layer in layers:
            op, args = _layer_args(layer, x)
            y = op(*args)
            assert y.shape == (4, 64) and y.dtype == torch.bfloat16


def test_compile_fullgraph_mlp(rng):
    """torch.compile(fullgraph=True) traces a model of QuantLinear layers without a graph
    break (aot_eager: the fake implementations; no C++ compiler needed) and gives the eager
    result bit for bit."""
    torch._dynamo.reset()
    mlp = torch.nn.Sequential(
        QuantLinear.from_linear(_linear(_weight(rng, 128, 128, 0.3), bias=True), "nvfp4"), torch.nn.SiLU(),
        QuantLinear.from_linear(_linear(_weight(rng, 128, 128, 0.3)), "nestedfp", mode="fp8"), torch.nn.SiLU(),
        QuantLinear.from_linear(_linear(_weight(rng, 64, 128, 0.3)), "int-group"))
    x = _x(rng, 6, 128).reshape(2, 3, 128)
    eager = mlp(x)
    compiled = torch.compile(mlp, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), eager)
    assert eager.shape == (2, 3, 64)


def test_compile_inductor_layer(rng):
    """Inductor (C++ codegen on the CPU) calls the op as it is: the eager result bit for bit.
    (About 8 s of compilation here; a 3-layer MLP with SiLU took 150 s, hence aot_eager above.)"""
    import shutil
    if shutil.which("g++") is None and shutil.which("clang++") is None:
        pytest.skip("Inductor on the CPU needs a C++ compiler")
    torch._dynamo.reset()
    layer = QuantLinear.from_linear(_linear(_weight(rng, 128, 128, 0.3)), "nvfp4")
    x = _x(rng, 6, 128)
    eager = layer(x)
    assert torch.equal(torch.compile(layer, fullgraph=True)(x), eager)


def test_gpu_view_cache_follows_the_tensors():
    """The per-layer view objects of the CUDA implementations: reused while the tensors'
    memory is the same, rebuilt when it moves, dropped with the tensor (no leak, no stale
    view after an address is reused)."""
    import gc

    from mactile.torch import _bridge
    t = torch.zeros(8)
    built = []
    first = _bridge.cached(t, (t,), lambda: built.append(1) or object())
    assert _bridge.cached(t, (t,), lambda: built.append(1) or object()) is first and len(built) == 1
    t.set_(torch.zeros(16))  # new memory (as load_state_dict with assign, or .to() would give)
    assert _bridge.cached(t, (t,), lambda: built.append(1) or object()) is not first and len(built) == 2
    n = len(_bridge._CACHE)
    del t
    gc.collect()
    assert len(_bridge._CACHE) == n - 1
