"""A Llama / Qwen3 decoder in plain PyTorch, in the style of gpt-fast, for end-to-end runs.

What it is
----------
* :class:`DecoderConfig` with the shapes of Llama-3.1-8B, Qwen3-8B, Qwen3-32B and two tiny
  configurations for CI (:data:`CONFIGS`, :func:`get_config`).
* :class:`Decoder`: RMSNorm, rotary position embedding (Llama-3.1's frequency scaling as an
  option), grouped-query attention through ``torch.nn.functional.scaled_dot_product_attention``
  without copying the key/value heads, a SwiGLU MLP and Qwen3's per-head RMSNorm of queries and
  keys. Module and parameter names are those of Hugging Face's ``LlamaForCausalLM`` /
  ``Qwen3ForCausalLM`` (``model.layers.0.self_attn.q_proj.weight`` ...), so their
  ``state_dict`` loads as it is (:func:`from_hf`), and every projection is an ``nn.Linear``
  that ``mactile.torch.quantize_model`` can replace.
* A static key/value cache (:class:`KVCache`, :meth:`Decoder.setup_caches`): fixed
  ``[batch, kv_heads, max_seq, head_dim]`` buffers written at the positions given as a
  tensor, so that a decode step has fixed shapes and can be captured in a CUDA graph.

Weights are random (:meth:`Decoder.init_random`); nothing is downloaded.

Conventions (named, as Hugging Face's implementation does them)
---------------------------------------------------------------
* Rotary embedding in the "rotate half" layout (the two halves of a head are the pairs), cos
  and sin computed in FP32 from FP32 inverse frequencies and cast to the activations' dtype.
* RMSNorm in FP32, the result cast back to the input dtype before the weight is applied.
* Every sequence of a batch is at the same positions (prompts of one length, as gpt-fast's
  batched generation); the attention mask is causal over the cache.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from . import decode_ops as _decode_ops  # noqa: F401 (registers the torch.ops.mactile decoder ops)
from .decode_ops import attention_ref, rmsnorm_ref, rope_ref
from .decode_ops import attention_rows_max as _attention_rows_max

__all__ = ["RopeScaling", "DecoderConfig", "CONFIGS", "get_config", "RMSNorm", "KVCache",
           "Attention", "MLP", "DecoderLayer", "Decoder", "rope_inv_freq", "from_hf", "hf_config"]


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3.1's rotary frequency scaling (``rope_type="llama3"`` in Hugging Face)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclass(frozen=True)
class DecoderConfig:
    """Shapes and options of a decoder (keyword-only, validated).

    ``head_dim`` defaults to ``dim // n_heads``; ``qk_norm`` is Qwen3's RMSNorm of each query
    and key head before the rotary embedding.
    """

    name: str
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    intermediate: int
    head_dim: int = 0
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    norm_eps: float = 1e-5
    qk_norm: bool = False
    tie_embeddings: bool = False
    max_position: int = 8192

    def __post_init__(self):
        for f in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "intermediate", "max_position"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"DecoderConfig: {f} must be a positive integer, got {v!r}")
        if self.head_dim == 0:
            if self.dim % self.n_heads:
                raise ValueError(f"DecoderConfig: dim {self.dim} is not a multiple of n_heads {self.n_heads}")
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        if self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"DecoderConfig: head_dim must be even, got {self.head_dim}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"DecoderConfig: n_heads {self.n_heads} is not a multiple of "
                             f"n_kv_heads {self.n_kv_heads}")

    @property
    def n_params(self) -> int:
        """Parameter count (embedding and head counted once each unless tied)."""
        attn = self.dim * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        mlp = 3 * self.dim * self.intermediate
        norms = 2 * self.dim + (2 * self.head_dim if self.qk_norm else 0)
        emb = self.vocab_size * self.dim * (1 if self.tie_embeddings else 2)
        return self.n_layers * (attn + mlp + norms) + emb + self.dim

    def linear_shapes(self) -> list[tuple[str, int, int]]:
        """``(name, N, K)`` of one layer's projections, then the head."""
        hd, d = self.head_dim, self.dim
        return [("q_proj", self.n_heads * hd, d), ("k_proj", self.n_kv_heads * hd, d),
                ("v_proj", self.n_kv_heads * hd, d), ("o_proj", d, self.n_heads * hd),
                ("gate_proj", self.intermediate, d), ("up_proj", self.intermediate, d),
                ("down_proj", d, self.intermediate), ("lm_head", self.vocab_size, d)]


#: Positions of the rotary tables built with the model (longer with :meth:`Decoder.setup_caches`).
ROPE_TABLE = 8192

_LLAMA31 = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192)

#: Configurations by name: the published shapes (config.json of each model) and two tiny
#: ones for tests (K a multiple of 512, the GPU kernels' widest alignment).
CONFIGS: dict[str, DecoderConfig] = {c.name: c for c in (
    DecoderConfig(name="llama-3.1-8b", vocab_size=128256, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                  intermediate=14336, rope_theta=500000.0, rope_scaling=_LLAMA31, norm_eps=1e-5,
                  max_position=131072),
    DecoderConfig(name="qwen3-8b", vocab_size=151936, dim=4096, n_layers=36, n_heads=32, n_kv_heads=8,
                  head_dim=128, intermediate=12288, rope_theta=1000000.0, norm_eps=1e-6, qk_norm=True,
                  max_position=40960),
    DecoderConfig(name="qwen3-32b", vocab_size=151936, dim=5120, n_layers=64, n_heads=64, n_kv_heads=8,
                  head_dim=128, intermediate=25600, rope_theta=1000000.0, norm_eps=1e-6, qk_norm=True,
                  max_position=40960),
    DecoderConfig(name="tiny", vocab_size=1024, dim=512, n_layers=2, n_heads=8, n_kv_heads=2,
                  intermediate=1024, rope_theta=500000.0,
                  rope_scaling=RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                           original_max_position=64),
                  norm_eps=1e-5, max_position=4096),
    DecoderConfig(name="tiny-qwen3", vocab_size=1024, dim=512, n_layers=2, n_heads=8, n_kv_heads=2,
                  head_dim=64, intermediate=1024, rope_theta=1000000.0, norm_eps=1e-6, qk_norm=True,
                  tie_embeddings=True, max_position=4096),
)}


def get_config(name: str, **overrides) -> DecoderConfig:
    """A configuration of :data:`CONFIGS` by name, fields optionally overridden
    (``get_config("llama-3.1-8b", n_layers=4)``)."""
    try:
        cfg = CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown decoder configuration {name!r}; choose from {', '.join(CONFIGS)}") from None
    return replace(cfg, **overrides) if overrides else cfg


def rope_inv_freq(cfg: DecoderConfig) -> torch.Tensor:
    """FP32 inverse frequencies ``[head_dim/2]`` with the configuration's scaling (the
    formula of Hugging Face's ``_compute_llama3_parameters``)."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = cfg.rope_scaling
    if s is None:
        return inv
    low_wl = s.original_max_position / s.low_freq_factor
    high_wl = s.original_max_position / s.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wl, inv / s.factor, inv)
    smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return torch.where(medium, smoothed, scaled)


class RMSNorm(nn.Module):
    """``w * (x / sqrt(mean(x^2) + eps))``, the statistic in FP32."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm_ref(x, self.weight, self.eps)


class KVCache(nn.Module):
    """Static key/value cache ``[batch, kv_heads, max_seq, head_dim]`` (not in the state_dict)."""

    def __init__(self, batch: int, kv_heads: int, max_seq: int, head_dim: int, *, dtype, device):
        super().__init__()
        shape = (batch, kv_heads, max_seq, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write ``k, v [B, kv_heads, T, D]`` at positions ``input_pos [T]``; return the caches
        (the first ``B`` sequences when the batch is smaller than the cache's)."""
        B = k.shape[0]
        kc, vc = self.k[:B], self.v[:B]
        kc.index_copy_(2, input_pos, k.to(kc.dtype))
        vc.index_copy_(2, input_pos, v.to(vc.dtype))
        return kc, vc


class Attention(nn.Module):
    """Grouped-query self-attention over the static cache (or over the input alone when no
    cache is set up: the full-recompute reference)."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.kv_cache: KVCache | None = None
        self.eps = cfg.norm_eps
        self.qkv_proj: nn.Module | None = None  # set by Decoder.fuse_projections

    def _qkv(self, x):
        if self.qkv_proj is None:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        qkv = self.qkv_proj(x)
        nq, nk = self.n_heads * self.hd, self.n_kv * self.hd
        return qkv[..., :nq], qkv[..., nq:nq + nk], qkv[..., nq + nk:]

    def forward_fused(self, x, cos_table, sin_table, input_pos):
        """The cached forward through the ``torch.ops.mactile`` decoder ops: rotary and
        cache writes in one op, the decode attention kernel where ``G * T`` rows per
        key/value head fit it (else the same attention as :meth:`forward`)."""
        B, T, _ = x.shape
        q, k, v = self._qkv(x)
        none = x.new_empty(0)
        c = self.kv_cache
        qr = torch.ops.mactile.rope_kv(q, k, v, cos_table, sin_table, input_pos, c.k, c.v,
                                       self.q_norm.weight if self.q_norm is not None else none,
                                       self.k_norm.weight if self.k_norm is not None else none, self.eps)
        if (self.n_heads // self.n_kv) * T <= _attention_rows_max():
            y = torch.ops.mactile.decode_attention(qr, c.k, c.v, input_pos)
        else:
            y = attention_ref(qr, c.k[:B], c.v[:B], input_pos)
        return self.o_proj(y)

    def forward(self, x, cos, sin, mask, input_pos):
        B, T, _ = x.shape
        q, k, v = self._qkv(x)
        q = q.reshape(B, T, self.n_heads, self.hd)
        k = k.reshape(B, T, self.n_kv, self.hd)
        v = v.reshape(B, T, self.n_kv, self.hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, T, D]
        q, k = rope_ref(q, cos, sin), rope_ref(k, cos, sin)
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)
        # GQA without copying keys/values: the G query heads of one KV head become G*T rows
        # (the mask comes in with those rows: Decoder.forward builds it once per call).
        G = self.n_heads // self.n_kv
        qg = q.reshape(B, self.n_kv, G * T, self.hd)
        y = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask)
        y = y.reshape(B, self.n_heads, T, self.hd).transpose(1, 2).reshape(B, T, self.n_heads * self.hd)
        return self.o_proj(y)


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.dim, bias=False)
        self.gate_up_proj: nn.Module | None = None  # set by Decoder.fuse_projections
        self.intermediate = cfg.intermediate

    def _gate_up(self, x):
        if self.gate_up_proj is None:
            return self.gate_proj(x), self.up_proj(x)
        gu = self.gate_up_proj(x)
        return gu[..., :self.intermediate], gu[..., self.intermediate:]

    def forward(self, x):
        g, u = self._gate_up(x)
        return self.down_proj(F.silu(g) * u)

    def forward_fused(self, x):
        g, u = self._gate_up(x)
        return self.down_proj(torch.ops.mactile.silu_mul(g, u))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, cos, sin, mask, input_pos):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, input_pos)
        return h + self.mlp(self.post_attention_layernorm(h))


class _Body(nn.Module):
    """``model.*`` of Hugging Face's naming: embedding, layers, final norm."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)


class Decoder(nn.Module):
    """A causal decoder; ``forward(tokens [B, T], input_pos [T]) -> logits [B, T, vocab]``.

    Without :meth:`setup_caches` every call attends over its own input only (positions
    ``input_pos``, causal): the full-recompute reference. With caches, keys and values are
    written at ``input_pos`` and every call attends over the cache (masked causally by
    position), so prefill then one token per decode step.
    """

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.config = cfg
        self.model = _Body(cfg)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.max_batch = self.max_seq = 0
        #: The cached forward through the torch.ops.mactile decoder ops (fused norms, rotary
        #: and cache writes, decode attention, SwiGLU): :meth:`use_fused_ops`.
        self.fused_ops = False
        self.register_buffer("causal_mask", None, persistent=False)
        self._rope(min(cfg.max_position, ROPE_TABLE), device=None)

    @classmethod
    def random(cls, cfg: DecoderConfig, *, device="cpu", dtype=torch.float32, seed: int = 0,
               std: float = 0.02) -> "Decoder":
        """A decoder with random weights built directly on ``device`` in ``dtype`` (through
        the meta device: no full-size FP32 copy in host memory)."""
        with torch.device("meta"):
            m = cls(cfg)
        m = m.to_empty(device=device).to(dtype)
        if cfg.tie_embeddings:
            m.lm_head.weight = m.model.embed_tokens.weight
        m._rope(min(cfg.max_position, ROPE_TABLE), device=device)
        return m.init_random(seed=seed, std=std)

    # -- buffers -----------------------------------------------------------------------
    def _rope(self, n: int, device):
        """FP32 cos/sin tables of positions ``0..n-1`` (non-persistent buffers)."""
        inv = rope_inv_freq(self.config).to(device)
        f = torch.outer(torch.arange(n, device=device, dtype=torch.int64).float(), inv)
        emb = torch.cat((f, f), dim=-1)
        self.register_buffer("rope_cos", emb.cos(), persistent=False)
        self.register_buffer("rope_sin", emb.sin(), persistent=False)

    def setup_caches(self, max_batch: int, max_seq: int, *, dtype=None, device=None) -> None:
        """Allocate the static caches (``dtype``/``device`` default to the embedding's); the
        length is rounded up to a multiple of 16 (the attention kernels' mask alignment, so
        that no step pads its mask)."""
        max_seq = -(-max_seq // 16) * 16
        if max_seq > -(-self.config.max_position // 16) * 16:
            raise ValueError(f"max_seq {max_seq} exceeds the configuration's max_position "
                             f"{self.config.max_position}")
        w = self.model.embed_tokens.weight
        dtype = dtype or w.dtype
        device = device or w.device
        cfg = self.config
        if max_seq > self.rope_cos.shape[0]:
            self._rope(max_seq, device=device)
        for layer in self.model.layers:
            layer.self_attn.kv_cache = KVCache(max_batch, cfg.n_kv_heads, max_seq, cfg.head_dim,
                                               dtype=dtype, device=device)
        self.register_buffer("causal_mask", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool,
                                                                  device=device)), persistent=False)
        self.max_batch, self.max_seq = max_batch, max_seq

    def clear_caches(self) -> None:
        """Drop the caches (back to full-recompute mode) and free their memory."""
        for layer in self.model.layers:
            layer.self_attn.kv_cache = None
        self.causal_mask = None
        self.max_batch = self.max_seq = 0

    @property
    def has_cache(self) -> bool:
        return self.max_seq > 0

    @torch.no_grad()
    def init_random(self, *, seed: int = 0, std: float = 0.02) -> "Decoder":
        """Random weights: N(0, std) for embeddings and projections, ones for the norms
        (drawn on the module's device; the same seed gives the same weights per device)."""
        dev = self.model.embed_tokens.weight.device
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g, device=dev, dtype=torch.float32) * std)
        return self

    # -- inference transforms ----------------------------------------------------------
    def use_fused_ops(self, on: bool = True) -> "Decoder":
        """Run the cached forward through the ``torch.ops.mactile`` decoder ops
        (:mod:`mactile.torch.decode_ops`): per layer one op for each residual add and the
        norm after it, one for the rotary embedding and both cache writes, the decode
        attention kernel, one for SwiGLU. On the CPU the ops are the eager code (the same
        results); on the GPU their FP16 kernels (a decode step of Llama-3.1-8B: about 10
        launches per layer instead of about 25). The full-recompute forward (no cache)
        stays eager."""
        self.fused_ops = bool(on)
        return self

    @torch.no_grad()
    def fuse_projections(self) -> "Decoder":
        """Concatenate every layer's q/k/v projections into one ``qkv_proj`` and gate/up into
        one ``gate_up_proj`` (``nn.Linear`` layers with the rows of the originals in order),
        so that a step launches 4 products per layer instead of 7 (as vLLM's
        ``QKVParallelLinear`` and ``MergedColumnParallelLinear``). Call before
        ``quantize_model``: a quantized fused layer is quantized as one tensor (one NVFP4
        tensor scale over q, k and v). The Hugging Face names of the fused weights are gone
        (``state_dict`` holds ``qkv_proj`` / ``gate_up_proj``); the originals are dropped."""
        for layer in self.model.layers:
            a, m = layer.self_attn, layer.mlp
            if a.qkv_proj is None:
                a.qkv_proj = _cat_linears(a.q_proj, a.k_proj, a.v_proj)
                del a.q_proj, a.k_proj, a.v_proj
                a.q_proj = a.k_proj = a.v_proj = None
            if m.gate_up_proj is None:
                m.gate_up_proj = _cat_linears(m.gate_proj, m.up_proj)
                del m.gate_proj, m.up_proj
                m.gate_proj = m.up_proj = None
        return self

    @property
    def projections_fused(self) -> bool:
        return self.model.layers[0].self_attn.qkv_proj is not None

    # -- forward -----------------------------------------------------------------------
    def attention_mask(self, allowed: torch.Tensor, dtype) -> torch.Tensor:
        """The additive mask ``[1, 1, G*T, S]`` of the attention calls from the boolean
        ``allowed [T, S]``: repeated for the ``G`` query heads that share a key/value head,
        0 where allowed, ``-inf`` elsewhere (built once per forward, not in every layer)."""
        G = self.config.n_heads // self.config.n_kv_heads
        m = allowed.repeat(G, 1) if G > 1 else allowed
        z = torch.zeros((), dtype=dtype, device=m.device)
        return torch.where(m, z, torch.full((), float("-inf"), dtype=dtype, device=m.device))[None, None]

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        if self.fused_ops and self.has_cache:
            return self._forward_fused(tokens, input_pos)
        x = self.model.embed_tokens(tokens)
        cos = self.rope_cos[input_pos].to(x.dtype)
        sin = self.rope_sin[input_pos].to(x.dtype)
        if self.has_cache:
            allowed = self.causal_mask[input_pos]  # [T, max_seq]
        else:
            allowed = input_pos[:, None] >= input_pos[None, :]  # [T, T]
        mask = self.attention_mask(allowed, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask, input_pos)
        return self.lm_head(self.model.norm(x))

    def _forward_fused(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` with caches through the decoder ops: each residual add is fused
        with the norm that follows it (the next layer's input norm, or the final norm)."""
        add_norm = torch.ops.mactile.add_rmsnorm
        eps = self.config.norm_eps
        layers = self.model.layers
        x = self.model.embed_tokens(tokens)
        h, y = add_norm(x, x.new_empty(0), layers[0].input_layernorm.weight, eps)
        for i, layer in enumerate(layers):
            a = layer.self_attn.forward_fused(y, self.rope_cos, self.rope_sin, input_pos)
            h, y = add_norm(h, a, layer.post_attention_layernorm.weight, eps)
            m = layer.mlp.forward_fused(y)
            nxt = layers[i + 1].input_layernorm if i + 1 < len(layers) else self.model.norm
            h, y = add_norm(h, m, nxt.weight, eps)
        return self.lm_head(y)


def _cat_linears(*lins: nn.Linear) -> nn.Linear:
    """One ``nn.Linear`` whose output rows are those of ``lins`` in order (no bias)."""
    if any(lin.bias is not None for lin in lins):
        raise ValueError("fuse_projections: projections with a bias are not fused")
    w = torch.cat([lin.weight for lin in lins], dim=0)
    out = nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
    out.weight.copy_(w)
    return out


def hf_config(cfg: DecoderConfig):
    """The Hugging Face ``LlamaConfig`` / ``Qwen3Config`` of a configuration (needs
    ``transformers``)."""
    import transformers

    common = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.intermediate,
                  num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                  num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim, rope_theta=cfg.rope_theta,
                  rms_norm_eps=cfg.norm_eps, tie_word_embeddings=cfg.tie_embeddings,
                  max_position_embeddings=cfg.max_position, attention_bias=False)
    if cfg.qk_norm:
        if cfg.rope_scaling is not None:
            raise ValueError("Qwen3 configurations take no Llama-3.1 rope scaling here")
        return transformers.Qwen3Config(**common)
    s = cfg.rope_scaling
    scaling = None if s is None else {
        "rope_type": "llama3", "factor": s.factor, "low_freq_factor": s.low_freq_factor,
        "high_freq_factor": s.high_freq_factor, "original_max_position_embeddings": s.original_max_position}
    return transformers.LlamaConfig(**common, rope_scaling=scaling, mlp_bias=False)


def from_hf(hf_model, *, name: str = "hf") -> Decoder:
    """A :class:`Decoder` with the weights of a Hugging Face ``LlamaForCausalLM`` or
    ``Qwen3ForCausalLM`` (its ``state_dict`` loaded strictly: same names, same shapes)."""
    c = hf_model.config
    qk = type(hf_model).__name__.startswith("Qwen3")
    rs = getattr(c, "rope_scaling", None) or None
    if rs and rs.get("rope_type", rs.get("type")) not in ("llama3", "default"):
        raise ValueError(f"from_hf: rope scaling {rs!r} is not supported (llama3 only)")
    scaling = None
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        scaling = RopeScaling(factor=float(rs["factor"]), low_freq_factor=float(rs["low_freq_factor"]),
                              high_freq_factor=float(rs["high_freq_factor"]),
                              original_max_position=int(rs["original_max_position_embeddings"]))
    theta = getattr(c, "rope_theta", None)
    if theta is None:  # newer transformers keep it in rope_parameters
        theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    cfg = DecoderConfig(name=name, vocab_size=c.vocab_size, dim=c.hidden_size, n_layers=c.num_hidden_layers,
                        n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads,
                        head_dim=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                        intermediate=c.intermediate_size, rope_theta=float(theta), rope_scaling=scaling,
                        norm_eps=c.rms_norm_eps, qk_norm=qk, tie_embeddings=bool(c.tie_word_embeddings),
                        max_position=c.max_position_embeddings)
    p = next(hf_model.parameters())
    m = Decoder(cfg).to(device=p.device, dtype=p.dtype)
    sd = {k: v for k, v in hf_model.state_dict().items() if not k.endswith("rotary_emb.inv_freq")}
    m.load_state_dict(sd, strict=True)
    return m
