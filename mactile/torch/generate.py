"""Prefill then decode, one CUDA graph per decode step, for :class:`~mactile.torch.decoder.Decoder`.

:class:`Generator` owns the static buffers of a batch (current token ``[B, 1]``, position
``[1]``, generated sequence ``[B, max_seq + 1]``, all int64 on the model's device). One decode
step reads the token at the position, runs the model over the static cache, samples, writes
the next token into the sequence buffer and advances the position -- all on the device, so
replaying a captured step ``n`` times generates ``n`` tokens without the host in the loop.

Decode modes (``decode=``)
--------------------------
``"graph"``
    the step captured once per precision mode with ``torch.cuda.CUDAGraph`` over the static
    buffers (CUDA only; the default there);
``"compile"``
    model and sampler through ``torch.compile(mode="reduce-overhead")`` (torch's own CUDA
    graphs; the cache is the model's buffers), the buffers advanced eagerly after it;
``"eager"``
    the step run as plain torch calls (the default on the CPU; the reference of the others).

NestedFP (FP16 and FP8 from one copy of the weights) switches precision per step with a
:class:`NestedFPPolicy`: the mode of every NestedFP layer is chosen from the step's token count
before the step runs (decode steps of a small batch in FP16, a large batch or a long prefill
in FP8), and each mode gets its own captured graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import Greedy

__all__ = ["NestedFPPolicy", "Generator", "generate", "set_precision_mode", "precision_modules"]

DECODE_MODES = ("graph", "compile", "eager")


@dataclass(frozen=True)
class NestedFPPolicy:
    """NestedFP's dual-precision rule (NestedFP Sec. 3.2): FP16 while the load is low, FP8
    under high load, decided per serving iteration.

    The paper states the rule by load (requests per second against a time-per-output-token
    SLO of 33 ms, Fig. 1) without a number for the switch; in a single batch the load of a
    step is its token count ``M`` (Sec. 5's "M denoting the total token count"). Two
    readings, named:

    ``rule="tokens"`` (default)
        FP8 when the step has ``>= fp8_min_tokens`` tokens (default 32, the smallest batch
        of the paper's end-to-end evaluation, Fig. 8).
    ``rule="slo"``
        FP8 when the FP16 step time predicted for ``M`` tokens (``fp16_step_ms``: a table
        ``{M: ms}`` measured beforehand, interpolated from the nearest measured ``M`` at or
        above) exceeds ``tpot_slo_ms`` (paper: 33 ms); FP16 otherwise.
    """

    rule: str = "tokens"
    fp8_min_tokens: int = 32
    tpot_slo_ms: float = 33.0
    fp16_step_ms: tuple[tuple[int, float], ...] = ()

    def __post_init__(self):
        if self.rule not in ("tokens", "slo"):
            raise ValueError(f"NestedFPPolicy: rule must be 'tokens' or 'slo', got {self.rule!r}")
        if not isinstance(self.fp8_min_tokens, int) or self.fp8_min_tokens < 1:
            raise ValueError(f"NestedFPPolicy: fp8_min_tokens must be a positive integer, got {self.fp8_min_tokens!r}")
        if self.rule == "slo" and not self.fp16_step_ms:
            raise ValueError("NestedFPPolicy: rule 'slo' needs fp16_step_ms, a table of measured FP16 step times")
        object.__setattr__(self, "fp16_step_ms", tuple(sorted((int(m), float(t)) for m, t in
                                                               dict(self.fp16_step_ms).items())))

    def mode_for(self, tokens: int) -> str:
        """``"fp16"`` or ``"fp8"`` for a step of ``tokens`` tokens."""
        if self.rule == "tokens":
            return "fp8" if tokens >= self.fp8_min_tokens else "fp16"
        table = self.fp16_step_ms
        ms = next((t for m, t in table if m >= tokens), table[-1][1] * tokens / table[-1][0])
        return "fp8" if ms > self.tpot_slo_ms else "fp16"


def precision_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules that run in a switchable precision mode: those with a ``mode`` attribute
    of ``"fp16"`` or ``"fp8"`` (mactile's NestedFP ``QuantLinear``)."""
    return [m for m in model.modules() if getattr(m, "mode", None) in ("fp16", "fp8")]


def set_precision_mode(model: torch.nn.Module, mode: str) -> int:
    """Set every NestedFP layer of ``model`` to ``mode`` (via its ``set_mode`` method when it
    has one, else its ``mode`` attribute); returns how many layers were set."""
    if mode not in ("fp16", "fp8"):
        raise ValueError(f"mode must be 'fp16' or 'fp8', got {mode!r}")
    mods = precision_modules(model)
    for m in mods:
        if hasattr(m, "set_mode"):
            m.set_mode(mode)
        else:
            m.mode = mode
    return len(mods)


class Generator:
    """Static-batch generation with one captured decode step.

    Parameters
    ----------
    model : Decoder
        Its caches are (re)allocated for ``batch`` x ``max_seq`` unless they already fit.
    batch, max_seq : int
        Sequences and positions (prompt plus generated tokens) of the static buffers.
    sampler : callable, optional
        ``logits [B, V] -> tokens [B]`` (default :class:`~mactile.torch.sampling.Greedy`).
    decode : {"graph", "compile", "eager"}, optional
        Default ``"graph"`` on CUDA, ``"eager"`` elsewhere.
    nestedfp_policy : NestedFPPolicy, optional
        Per-step FP16/FP8 choice for the model's NestedFP layers (refused when there are none).
    warmup : int
        Eager steps run (and undone) before a capture.
    """

    def __init__(self, model, *, batch: int, max_seq: int, sampler=None, decode: str | None = None,
                 nestedfp_policy: NestedFPPolicy | None = None, warmup: int = 2):
        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a positive integer, got {batch!r}")
        if not isinstance(max_seq, int) or max_seq < 2:
            raise ValueError(f"max_seq must be an integer >= 2, got {max_seq!r}")
        dev = model.model.embed_tokens.weight.device
        decode = decode or ("graph" if dev.type == "cuda" else "eager")
        if decode not in DECODE_MODES:
            raise ValueError(f"decode must be one of {DECODE_MODES}, got {decode!r}")
        if decode != "eager" and dev.type != "cuda":
            raise ValueError(f"decode={decode!r} needs the model on a CUDA device (it is on {dev})")
        if nestedfp_policy is not None and not precision_modules(model):
            raise ValueError("nestedfp_policy given, but the model has no NestedFP layers")
        self.model, self.batch, self.max_seq, self.device = model, batch, max_seq, dev
        self.sampler = sampler if sampler is not None else Greedy()
        self.decode, self.policy, self.warmup = decode, nestedfp_policy, warmup
        if model.max_batch < batch or model.max_seq < max_seq:
            model.setup_caches(batch, max_seq)
        self.tok = torch.zeros(batch, 1, dtype=torch.int64, device=dev)
        self.pos = torch.zeros(1, dtype=torch.int64, device=dev)
        self.seq = torch.zeros(batch, max_seq + 1, dtype=torch.int64, device=dev)
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}
        self._compiled = None
        self.modes_used: list[str] = []  # the precision mode of every step run (with a policy)

    # -- the step ------------------------------------------------------------------------
    def _next(self, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Model and sampler: the next token ``[B]`` after ``tok`` at ``pos``."""
        return self.sampler(self.model(tok, pos)[:, -1]).to(torch.int64)

    def _advance(self, nxt: torch.Tensor) -> None:
        self.tok.copy_(nxt[:, None])
        self.seq.index_copy_(1, self.pos + 1, nxt[:, None])
        self.pos.add_(1)

    def _step(self) -> None:
        self._advance(self._next(self.tok, self.pos))

    def _mode(self, tokens: int) -> str | None:
        if self.policy is None:
            return None
        mode = self.policy.mode_for(tokens)
        set_precision_mode(self.model, mode)
        self.modes_used.append(mode)
        return mode

    def _state(self) -> list[torch.Tensor]:
        return [self.tok, self.pos, self.seq, *getattr(self.sampler, "state_tensors", list)()]

    def capture(self, mode: str | None = None) -> torch.cuda.CUDAGraph:
        """Capture the decode step (in the current precision ``mode``); the step's warm-up
        runs are undone (buffers and sampler state restored; the cache entry they wrote is
        written again by the first real step)."""
        saved = [t.clone() for t in self._state()]
        s = torch.cuda.Stream(device=self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):
            for _ in range(self.warmup):
                self._step()
        torch.cuda.current_stream(self.device).wait_stream(s)
        for t, v in zip(self._state(), saved):
            t.copy_(v)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self._step()
        for t, v in zip(self._state(), saved):  # capture runs nothing, but be exact
            t.copy_(v)
        self.graphs[mode or "-"] = g
        return g

    def step(self) -> None:
        """One decode step (captured on first use in graph mode)."""
        mode = self._mode(self.batch)
        if self.decode == "eager":
            self._step()
        elif self.decode == "graph":
            g = self.graphs.get(mode or "-") or self.capture(mode)
            g.replay()
        else:  # as gpt-fast: the compiled function takes the token and position, returns the next
            if self._compiled is None:
                self._compiled = torch.compile(self._next, mode="reduce-overhead")
            self._advance(self._compiled(self.tok, self.pos))

    # -- prefill and the loop ------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        """Run the prompt ``[B, T]`` (eagerly), sample the first new token; returns it ``[B]``."""
        if prompt.ndim != 2 or prompt.shape[0] != self.batch:
            raise ValueError(f"prompt must be [{self.batch}, T], got {tuple(prompt.shape)}")
        T = int(prompt.shape[1])
        if not 1 <= T < self.max_seq:
            raise ValueError(f"prompt length {T} must be in 1..{self.max_seq - 1} (max_seq)")
        prompt = prompt.to(self.device, torch.int64)
        self._mode(self.batch * T)
        logits = self.model(prompt, torch.arange(T, device=self.device))[:, -1]
        nxt = self.sampler(logits).to(torch.int64)
        self.seq.zero_()
        self.seq[:, :T] = prompt
        self.seq[:, T] = nxt
        self.tok.copy_(nxt[:, None])
        self.pos.fill_(T)
        return nxt

    def start_at(self, position: int, tokens: torch.Tensor | None = None) -> None:
        """Benchmarks: continue from ``position`` without a prefill (the cache holds whatever
        it holds; decode time does not depend on its values)."""
        if not 0 <= position < self.max_seq:
            raise ValueError(f"position must be in 0..{self.max_seq - 1}, got {position}")
        self.pos.fill_(position)
        self.tok.copy_(tokens.view(self.batch, 1) if tokens is not None else torch.zeros_like(self.tok))

    @torch.no_grad()
    def decode_steps(self, n: int) -> None:
        """``n`` decode steps (no host synchronisation in graph mode)."""
        if int(self.pos.item()) + n > self.max_seq:
            raise ValueError(f"{n} steps from position {int(self.pos.item())} exceed max_seq {self.max_seq}")
        for _ in range(n):
            self.step()

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Prompt ``[B, T]`` -> ``[B, T + max_new_tokens]`` (prompt then generated tokens)."""
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        T = int(prompt.shape[-1])
        if T + max_new_tokens > self.max_seq:
            raise ValueError(f"prompt {T} + {max_new_tokens} new tokens exceed max_seq {self.max_seq}")
        self.prefill(prompt)
        self.decode_steps(max_new_tokens - 1)
        return self.seq[:, :T + max_new_tokens].clone()


def generate(model, prompt: torch.Tensor, max_new_tokens: int, *, sampler=None, decode: str | None = None,
             nestedfp_policy: NestedFPPolicy | None = None, eos_id: int | None = None) -> torch.Tensor:
    """Generate ``max_new_tokens`` tokens after ``prompt`` (``[T]`` or ``[B, T]``, every
    prompt of one length); returns ``[B, T + max_new_tokens]`` (``[T + n]`` for a 1-D prompt).

    With ``eos_id`` every token after a sequence's first ``eos_id`` is set to ``eos_id``
    (the steps still run: a static batch has a fixed shape).

    Examples
    --------
    >>> import torch
    >>> from mactile.torch.decoder import Decoder, get_config
    >>> m = Decoder.random(get_config("tiny"))
    >>> generate(m, torch.tensor([1, 2, 3]), 4).shape
    torch.Size([7])
    """
    one = prompt.ndim == 1
    p = prompt[None] if one else prompt
    if p.ndim != 2:
        raise ValueError(f"prompt must be [T] or [B, T], got shape {tuple(prompt.shape)}")
    g = Generator(model, batch=int(p.shape[0]), max_seq=int(p.shape[1]) + max_new_tokens, sampler=sampler,
                  decode=decode, nestedfp_policy=nestedfp_policy)
    out = g.generate(p, max_new_tokens)
    if eos_id is not None:
        gen = out[:, p.shape[1]:]
        seen = torch.cumsum((gen == eos_id).to(torch.int64), dim=1) > 0
        after = torch.cat([torch.zeros_like(seen[:, :1]), seen[:, :-1]], dim=1)
        gen.masked_fill_(after, eos_id)
    return out[0] if one else out
