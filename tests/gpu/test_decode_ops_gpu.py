"""The decoder ops' CUDA kernels against their reference (the decoder's eager torch code, run
on the same GPU) and the fused decoder against the eager one.

Bounds (FP16 activations; the kernels compute each elementwise op in FP32 and round once, as
torch's FP16 kernels do):

* residual add, rotary without q/k norm, cache writes, SwiGLU: bit for bit;
* RMSNorm: the statistic is an FP32 sum in another order (relative error ~1e-7), so each of
  the two FP16 roundings after it may land one ulp away: ``|d| <= 2^-9 |ref| + 2^-24``;
  rotary after Qwen3's q/k norm: those ulps times ``|cos|, |sin| <= 1`` through the sum:
  ``|d| <= 2^-9 (|x_d| + |x_partner|) + 2^-10 |ref| + 2^-24`` (``x`` the normed head);
* attention against an FP64 reference: FP32 scores and sums (``S 2^-24`` of the value scale)
  and the output's FP16 rounding: ``|d| <= 2^-10 max|v| + 2^-10 |ref|``;
* fused decoder against eager (tiny configurations, teacher-forced steps): logits relative L2
  error <= 1e-2 (the FP16 roundings above through two layers; measured ~1e-3), and a CUDA
  graph of the fused step gives the eager fused step's tokens bit for bit.
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
    from mactile.gpu import runtime
    why = runtime.gpu_skip_reason()
    if why:
        pytest.skip(f"GPU kernels not runnable here: {why}")
    return torch.device("cuda")


def _gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def _randn(shape, seed, scale=1.0):
    return (torch.randn(shape, device="cuda", generator=_gen(seed)) * scale).half()


@pytest.mark.parametrize("D", [512, 4096, 5120, 8192])
def test_add_rmsnorm(cuda, D):
    from mactile.torch.decode_ops import rmsnorm_ref
    x, r, w = _randn((7, D), 1, 3.0), _randn((7, D), 2), _randn((D,), 3)
    h, y = torch.ops.mactile.add_rmsnorm(x, r, w, 1e-5)
    href = x + r
    assert torch.equal(h, href)
    ref = rmsnorm_ref(href, w, 1e-5).double()
    d = (y.double() - ref).abs()
    assert (d <= 2.0 ** -9 * ref.abs() + 2.0 ** -24).all(), float(d.max())
    h0, y0 = torch.ops.mactile.add_rmsnorm(x, x.new_empty(0), w, 1e-5)
    assert torch.equal(h0, x)
    ref0 = rmsnorm_ref(x, w, 1e-5).double()
    assert ((y0.double() - ref0).abs() <= 2.0 ** -9 * ref0.abs() + 2.0 ** -24).all()


@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("B,T,H,Hkv,D", [(1, 1, 32, 8, 128), (3, 5, 8, 2, 64), (2, 1, 64, 8, 128)])
def test_rope_kv(cuda, B, T, H, Hkv, D, qk_norm):
    from mactile.torch.decode_ops import _rope_kv_body, rmsnorm_ref
    S, P = 96, 4096
    n = (H + 2 * Hkv) * D
    qkv = _randn((B, T, n), 4, 2.0)  # one fused projection: q, k, v as strided views
    q, k, v = qkv[..., :H * D], qkv[..., H * D:(H + Hkv) * D], qkv[..., (H + Hkv) * D:]
    f = torch.outer(torch.arange(P, device="cuda").float(), 1.0 / (5e5 ** (torch.arange(0, D, 2, device="cuda").float() / D)))
    cos, sin = torch.cat((f, f), -1).cos(), torch.cat((f, f), -1).sin()
    pos = torch.tensor([40 + 7 * t for t in range(T)], device="cuda")
    qn = _randn((D,), 5) if qk_norm else q.new_empty(0)
    kn = _randn((D,), 6) if qk_norm else q.new_empty(0)
    caches = [torch.zeros((B + 1, Hkv, S, D), dtype=torch.float16, device="cuda") for _ in range(4)]
    got = torch.ops.mactile.rope_kv(q, k, v, cos, sin, pos, caches[0], caches[1], qn, kn, 1e-6)
    ref = _rope_kv_body(q, k, v, cos, sin, pos, caches[2], caches[3], qn, kn, 1e-6)
    assert torch.equal(caches[1], caches[3])  # v copied
    if not qk_norm:
        assert torch.equal(got, ref) and torch.equal(caches[0], caches[2])
        return
    half = D // 2

    def bound(x, r):  # x: the normed head [.., D] in the output layout, r: the reference
        partner = torch.cat((x[..., half:], x[..., :half]), -1)
        return 2.0 ** -9 * (x.abs() + partner.abs()) + 2.0 ** -10 * r.abs() + 2.0 ** -24

    xq = rmsnorm_ref(q.reshape(B, T, H, D), qn, 1e-6).transpose(1, 2).double()
    assert ((got.double() - ref.double()).abs() <= bound(xq, ref.double())).all()
    xk = rmsnorm_ref(k.reshape(B, T, Hkv, D), kn, 1e-6).transpose(1, 2).double()
    gk, rk = caches[0][:B, :, pos].double(), caches[2][:B, :, pos].double()
    assert ((gk - rk).abs() <= bound(xk, rk)).all()


def _attention64(q, kc, vc, pos):
    B, H, T, D = q.shape
    Hkv = kc.shape[1]
    G = H // Hkv
    k = kc[:B].double().repeat_interleave(G, 1)
    v = vc[:B].double().repeat_interleave(G, 1)
    s = q.double() @ k.transpose(-1, -2) / D ** 0.5
    j = torch.arange(kc.shape[2], device=q.device)
    s = s.masked_fill(j[None, None, None, :] > pos[None, None, :, None], float("-inf"))
    return (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)


@pytest.mark.parametrize("B,H,Hkv,T,D,p0", [(1, 32, 8, 1, 128, 1024), (1, 32, 8, 1, 128, 0),
                                             (4, 32, 8, 1, 128, 517), (3, 64, 8, 2, 128, 100),
                                             (2, 8, 8, 3, 64, 31), (64, 32, 8, 1, 128, 1100)])
def test_decode_attention(cuda, B, H, Hkv, T, D, p0):
    S = 1152
    q = _randn((B, H, T, D), 7)
    kc, vc = _randn((B + 1, Hkv, S, D), 8, 2.0), _randn((B + 1, Hkv, S, D), 9)
    pos = torch.tensor([p0 + t for t in range(T)], device="cuda")
    got = torch.ops.mactile.decode_attention(q, kc, vc, pos)
    ref = _attention64(q, kc, vc, pos)
    vmax = vc[:B].double().abs().max()
    d = (got.double() - ref).abs()
    assert (d <= 2.0 ** -10 * vmax + 2.0 ** -10 * ref.abs()).all(), float(d.max())


def test_decode_attention_bound_catches_a_wrong_mask(cuda):
    """A deliberately broken attention (queries see 200 future keys) fails the bound that
    the kernel meets, at every split count."""
    from mactile.gpu import decode_ops
    from mactile.torch._bridge import on_torch_stream, view
    B, H, Hkv, T, D, S = 1, 32, 8, 1, 128, 1152
    q = _randn((B, H, T, D), 7)
    kc, vc = _randn((B, Hkv, S, D), 8, 2.0), _randn((B, Hkv, S, D), 9)
    pos = torch.tensor([900], device="cuda")
    ref = _attention64(q, kc, vc, pos)
    bound = 2.0 ** -10 * vc.double().abs().max() + 2.0 ** -10 * ref.abs()
    for splits in (1, 3, 8, 18):
        for p, good in ((pos, True), (pos + 200, False)):
            y = torch.empty((B, T, H, D), dtype=torch.float16, device="cuda")
            with on_torch_stream(q.device) as cp:
                decode_ops.decode_attention(view(cp, q), view(cp, kc), view(cp, vc), view(cp, p), T=T,
                                            out=view(cp, y), splits=splits)
            within = bool(((y.reshape(B, T, H * D).double() - ref).abs() <= bound).all())
            assert within == good, (splits, good)


@pytest.mark.parametrize("rows,n", [(1, 14336), (16, 1000)])
def test_silu_mul_bit_exact(cuda, rows, n):
    gu = _randn((rows, 2 * n), 10, 3.0)
    g, u = gu[:, :n], gu[:, n:]
    assert torch.equal(torch.ops.mactile.silu_mul(g, u), torch.nn.functional.silu(g) * u)


def _tiny(name, fuse):
    from mactile.torch.decoder import Decoder, get_config
    m = Decoder.random(get_config(name), device="cuda", dtype=torch.float16, std=0.05)
    return m.fuse_projections() if fuse else m


@pytest.mark.parametrize("fuse", [False, True])
@pytest.mark.parametrize("name", ["tiny", "tiny-qwen3"])
def test_fused_decoder_matches_eager(cuda, name, fuse):
    m = _tiny(name, fuse)
    B, T0, steps = 3, 17, 12
    toks = torch.randint(0, m.config.vocab_size, (B, T0 + steps), device="cuda", generator=_gen(11))
    outs = []
    for fused in (False, True):
        m.clear_caches()
        m.setup_caches(B, T0 + steps + 1)
        m.use_fused_ops(fused)
        with torch.no_grad():
            lg = [m(toks[:, :T0], torch.arange(T0, device="cuda"))[:, -1]]
            for i in range(steps):
                lg.append(m(toks[:, T0 + i:T0 + i + 1], torch.tensor([T0 + i], device="cuda"))[:, -1])
        outs.append(torch.stack(lg).double())
    err = (outs[1] - outs[0]).norm() / outs[0].norm()
    assert err <= 1e-2, float(err)


def test_fused_graph_decode_equals_fused_eager(cuda):
    from mactile.torch.generate import generate
    m = _tiny("tiny", True).use_fused_ops()
    p = torch.randint(0, 1024, (4, 9), device="cuda", generator=_gen(0))
    a = generate(m, p, 40, decode="graph")
    b = generate(copy.deepcopy(m), p, 40, decode="eager")
    assert torch.equal(a, b)
