"""End-to-end decoding benchmark: tokens/s of one decoder in every weight format, same run.

For each *variant* (FP16; FP8 through ``torch._scaled_mm``; every mactile format and mode
through ``mactile.torch.quantize_model``; the peers: PyTorch's int4 tinygemm and GemLite
A16W4), with random weights (nothing downloaded):

* **decode**: at each batch size, a static cache sized for ``context + gen`` positions, the
  first ``context`` taken as filled (no prefill is run: the values do not change a step's time;
  the decoder ops' attention reads positions ``0..pos``, the eager one the whole cache), then
  ``timed_steps`` (default ``min(gen, 32)``) decode steps, each one replay of the captured step
  (CUDA graph: model, sampling, next token and position written on the device), each timed
  between CUDA events; decode tokens/s is ``batch * steps / (sum of step times)`` and the time
  per output token is the median step. ``warmup`` replays before are not timed.
* **prefill**: batch 1, a prompt of each length, eager (compute-bound; no graph), median of
  ``prefill_reps`` after one warm-up; tokens/s = length / time.
* **breakdown** of one decode step at the chosen batch sizes: the step's linear layers alone
  (every projection of every layer and the head on the step's activations, captured as one
  graph), its attention alone (the scaled-dot-product attention of every layer over the
  cache, one graph), and the rest (the step minus both: norms, rotary, cache writes,
  sampling, embedding); with torch.profiler, the sum of the kernel times of one replayed step
  (the step time over it says what launch gaps cost).
* **bandwidth limit**: the weights a decode step must read (bytes held by the layers' and
  head's parameters and buffers) over the measured read bandwidth, as tokens/s
  ``batch / (bytes / bandwidth)``; also with the key/value bytes of the cache added.

Mactile layers are quantized from layer 0's weights once per variant and copied to every
layer (distinct memory, same values; decode time does not depend on weight values): golden
quantization of all 32 layers would cost minutes per format. ``distinct_weights=True``
quantizes every layer.

Results are records (one per variant and measurement) with device, driver, versions and
date; :func:`markdown`, :func:`plot` and :func:`write_outputs` render and write them.
"""
from __future__ import annotations

import copy
import datetime as _dt
import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from .decoder import Decoder, KVCache, get_config
from .generate import Generator, NestedFPPolicy, set_precision_mode

__all__ = ["Variant", "VARIANTS", "DEFAULT_BATCHES", "PREFILL_LENGTHS", "Options", "run_e2e", "markdown", "plot",
           "write_outputs", "environment", "variant_names", "targets", "TARGETS"]

DEFAULT_BATCHES = (1, 4, 8, 16, 32, 64, 128, 256)
PREFILL_LENGTHS = (512, 2048)
#: Projections of a decoder layer replaced in every variant (the head stays FP16 unless asked).
LAYER_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
#: The same after :meth:`Decoder.fuse_projections`.
FUSED_LAYER_LINEARS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


def layer_linears(model: Decoder) -> tuple:
    """The projections of one layer of ``model`` (fused or not)."""
    return FUSED_LAYER_LINEARS if model.projections_fused else LAYER_LINEARS


@dataclass(frozen=True)
class Variant:
    """One column of the benchmark: how the linear layers are built.

    ``kind``: ``fp16`` (the model as built), ``fp8``, ``mactile`` (``quantize_model`` with
    ``format``/``mode``/``convention``), ``tinygemm``, ``gemlite``. ``policy``: NestedFP's
    per-step precision rule (the model's NestedFP layers switched per step).
    """

    name: str
    kind: str
    format: str | None = None
    mode: str | None = None
    convention: str | None = None
    policy: NestedFPPolicy | None = None
    note: str = ""


#: The default variants, in the table's order (baselines and peers first: a run cut short by
#: its time budget keeps what the targets compare against). The mactile entries name the
#: format and mode as ``mactile.torch.quantize_model`` takes them.
VARIANTS: tuple[Variant, ...] = (
    Variant("fp16", "fp16", note="torch.matmul (cuBLAS)"),
    Variant("fp8", "fp8", note="torch._scaled_mm E4M3, per-tensor scales, dynamic activation scale"),
    Variant("int4-tinygemm", "tinygemm", note="torch._weight_int4pack_mm, group 128, BF16 activations"),
    Variant("gemlite-a16w4", "gemlite", note="GemLite A16W4, group 128"),
    Variant("nvfp4", "mactile", format="nvfp4"),
    Variant("mxfp4", "mactile", format="mxfp4"),
    Variant("razer", "mactile", format="razer"),
    Variant("razer-g128", "mactile", format="razer-g128"),
    Variant("nvfp4-w4a4", "mactile", format="nvfp4", mode="w4a4", note="ReSET W4A4"),
    Variant("nestedfp16", "mactile", format="nestedfp", mode="fp16"),
    Variant("nestedfp8", "mactile", format="nestedfp", mode="fp8"),
    Variant("nestedfp-policy", "mactile", format="nestedfp", mode="fp16", policy=NestedFPPolicy(),
            note="FP16 below 32 tokens per step, FP8 from 32"),
    Variant("flexq-w6a6", "mactile", format="flexq", mode="w6a6"),
)


def variant_names() -> list[str]:
    return [v.name for v in VARIANTS]


# ----------------------------------------------------------------------------- environment
def environment(device: torch.device) -> dict:
    """Device, driver, versions and date of the run."""
    env = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "torch": torch.__version__, "host": platform.node(),
           "device_type": device.type}
    try:
        import mactile
        env["mactile"] = mactile.__version__
    except Exception:  # noqa: BLE001
        pass
    for mod in ("transformers", "gemlite", "triton", "cupy"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            env[mod] = "not installed"
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(device=p.name, sm_count=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                   capability=f"{p.major}.{p.minor}", cuda=torch.version.cuda)
        try:
            import subprocess
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.memory",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            first = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
            parts = [t.strip() for t in first.split(",")]
            if len(parts) == 3:
                env.update(driver=parts[0], max_sm_clock=parts[1], max_memory_clock=parts[2])
            else:
                env["driver"] = first or out.stderr.strip()[:200]
        except Exception as e:  # noqa: BLE001
            env["driver"] = f"unknown ({type(e).__name__})"
    else:
        env["device"] = platform.processor() or platform.machine()
    return env


def read_bandwidth(device: torch.device, nbytes: int = 4 << 30) -> dict:
    """Measured read bandwidth (bytes/s): mactile's streaming-read kernel when CuPy is there
    (rotated over 4 x L2), else a torch sum over a buffer far larger than L2."""
    if device.type != "cuda":
        return {"bytes_per_s": None, "method": "not measured on the CPU"}
    try:
        from mactile.gpu.bench.harness import streaming_read_peak
        r = streaming_read_peak(min(nbytes, 1 << 30))
        return {"bytes_per_s": r["tbps"] * 1e12, "method": "mactile streaming read (CuPy), 1 GiB x L2 rotation"}
    except Exception as e:  # noqa: BLE001
        why = f"{type(e).__name__}: {e}"[:160]
    buf = torch.empty(nbytes // 2, dtype=torch.float16, device=device).fill_(1.0)
    for _ in range(2):
        buf.sum()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        buf.sum()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    del buf
    return {"bytes_per_s": nbytes / statistics.median(ts), "method": f"torch sum over {nbytes >> 30} GiB ({why})"}


# ----------------------------------------------------------------------------- variants
def _get(mod: nn.Module, path: str) -> nn.Module:
    for p in path.split("."):
        mod = getattr(mod, p)
    return mod


def _set(mod: nn.Module, path: str, new: nn.Module) -> None:
    *head, last = path.split(".")
    for p in head:
        mod = getattr(mod, p)
    setattr(mod, last, new)


def _linear_paths(model: Decoder, head: bool) -> list[str]:
    paths = [f"model.layers.{i}.{n}" for i in range(model.config.n_layers) for n in layer_linears(model)]
    return paths + (["lm_head"] if head else [])


def _quantize_template(linears: dict[str, nn.Module], v: Variant) -> dict[str, nn.Module]:
    """``quantize_model`` over a holder of ``linears`` (named by their role); the replaced
    modules by role."""
    from mactile.torch import quantize_model  # noqa: PLC0415

    holder = nn.Module()
    for k, lin in linears.items():
        setattr(holder, k.replace(".", "_"), lin)
    kw = {k: val for k, val in (("mode", v.mode), ("convention", v.convention)) if val is not None}
    quantize_model(holder, format=v.format, exclude=(), progress=False, **kw)
    return {k: getattr(holder, k.replace(".", "_")) for k in linears}


def _build_one(lin: nn.Linear, v: Variant, fp8_scaling: str) -> nn.Module:
    if v.kind == "fp8":
        from .baselines import Fp8Linear
        return Fp8Linear.from_linear(lin, scaling=fp8_scaling)
    if v.kind == "tinygemm":
        from .baselines import Int4TinyGemmLinear
        return Int4TinyGemmLinear.from_linear(lin)
    if v.kind == "gemlite":
        from .baselines import gemlite_a16w4
        return gemlite_a16w4(lin)
    raise ValueError(f"unknown variant kind {v.kind!r}")


def apply_variant(model: Decoder, v: Variant, *, head: bool = False, distinct_weights: bool = False,
                  fp8_scaling: str = "tensor") -> dict:
    """Replace the model's projections for variant ``v``; returns ``{"restore": {path: old},
    "build_s": seconds, "how": text}`` (call :func:`restore` with it)."""
    paths = _linear_paths(model, head)
    old = {p: _get(model, p) for p in paths}
    t0 = time.perf_counter()
    how = "as built"
    if v.kind == "mactile":
        if distinct_weights:
            new = _quantize_template(old, v)
            how = "every layer quantized from its own weights"
        else:
            roles = {n: old[f"model.layers.0.{n}"] for n in layer_linears(model)}
            if head:
                roles["lm_head"] = old["lm_head"]
            tmpl = _quantize_template(roles, v)
            new = {}
            for p in paths:
                role = p if p == "lm_head" else p.split(".", 3)[3]
                new[p] = tmpl[role] if p.startswith("model.layers.0.") or p == "lm_head" else copy.deepcopy(tmpl[role])
            how = "layer 0 quantized, copied to every layer"
    elif v.kind != "fp16":
        new = {p: _build_one(lin, v, fp8_scaling) for p, lin in old.items()}
        how = "every layer converted from its own weights"
    else:
        new = {}
    for p, m in new.items():
        _set(model, p, m)
    if v.kind == "mactile" and v.mode in ("fp16", "fp8"):
        set_precision_mode(model, v.mode)
    if model.model.embed_tokens.weight.device.type == "cuda":
        torch.cuda.synchronize()
    return {"restore": old, "build_s": time.perf_counter() - t0, "how": how}


def restore(model: Decoder, state: dict) -> None:
    for p, m in state["restore"].items():
        _set(model, p, m)


def _read_bytes(m: nn.Module) -> int | None:
    """Bytes one product reads of a quantized layer's weight: ``N x K x bits / 8`` from its
    golden spec (a layer may store more than one kernel layout; a kernel reads one)."""
    fmt = getattr(m, "fmt", None)
    if getattr(m, "kind", None) == "nestedfp" and getattr(m, "mode", None) == "fp8":
        return int(m.in_features * m.out_features)  # FP8 mode reads the upper byte plane only
    bpe = getattr(fmt, "bits_per_element", None)
    if bpe is None or not hasattr(m, "in_features"):
        return None
    bits = bpe() if callable(bpe) else bpe
    return int(m.in_features * m.out_features * bits / 8)


def weight_bytes(model: Decoder) -> dict:
    """``{"read": bytes a decode step reads of the layers' and head's weights, "stored": bytes
    their parameters and buffers hold}``. A quantized layer with a golden spec counts its
    spec's bits per weight as read; every other module what it holds. The caches, rotary
    tables and mask are excluded, and the embedding (a step reads ``batch`` rows of it)."""
    seen, stored, read = set(), 0, 0
    for top in (model.model.layers, model.lm_head, model.model.norm):
        for m in top.modules():
            own = 0
            for name, t in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]:
                if t is None or t.data_ptr() in seen or isinstance(m, KVCache):
                    continue
                seen.add(t.data_ptr())
                own += t.numel() * t.element_size()
            stored += own
            rb = _read_bytes(m)
            read += own if rb is None else rb
    return {"read": read, "stored": stored}


# ----------------------------------------------------------------------------- timing
class _Clock:
    """CUDA events on the GPU, perf_counter on the CPU (seconds)."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def between(self, a, b) -> float:
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b) * 1e-3
        return b - a

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def _median(xs):
    return statistics.median(xs) if xs else None


def _pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else None


@torch.no_grad()
def make_sampler(kind: str, batch: int, vocab: int, device):
    """``greedy`` (None: the generator's default) or ``reset``: ReSET's step-aware sampler
    (the GPU op where it runs, else the torch port), every 500th token marked as ending a step
    (random weights have no tokenizer; the decisions do not change the time)."""
    if kind == "greedy":
        return None
    if kind != "reset":
        raise ValueError(f"sampler must be 'greedy' or 'reset', got {kind!r}")
    from .sampling import StepAwareTemperatureSampler
    mask = torch.zeros(vocab, dtype=torch.bool, device=device)
    mask[::500] = True
    return StepAwareTemperatureSampler(batch, mask, backend="auto")


def time_decode(model: Decoder, batch: int, *, context: int, gen: int, timed: int, warmup: int, decode: str,
                policy=None, vocab: int, sampler: str = "greedy") -> dict:
    """Decode ``timed`` steps at ``batch`` over a static cache sized for ``context + gen``
    positions (the per-step time of a ``gen``-token run: the attention reads the whole cache)."""
    dev = model.model.embed_tokens.weight.device
    clock = _Clock(dev)
    max_seq = context + max(gen, warmup, timed) + 1
    model.clear_caches()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    model.setup_caches(batch, max_seq)
    smp = make_sampler(sampler, batch, vocab, dev)
    g = Generator(model, batch=batch, max_seq=max_seq, decode=decode, nestedfp_policy=policy, sampler=smp)
    toks = torch.randint(0, vocab, (batch,), device=dev, generator=torch.Generator(device=dev).manual_seed(batch))
    g.start_at(context, toks)
    t0 = time.perf_counter()
    for _ in range(warmup):
        g.step()
    clock.sync()
    first_s = time.perf_counter() - t0
    g.start_at(context, toks)
    marks = [clock.mark()]
    for _ in range(timed):
        g.step()
        marks.append(clock.mark())
    clock.sync()
    steps = [clock.between(a, b) for a, b in zip(marks, marks[1:])]
    total = sum(steps)
    rec = {"batch": batch, "context": context, "gen": gen, "steps": timed, "cache_positions": max_seq,
           "decode": decode,
           "step_s_median": _median(steps), "step_s_p10": _pct(steps, 0.1), "step_s_p90": _pct(steps, 0.9),
           "tokens_per_s": batch * timed / total, "tpot_ms": 1e3 * _median(steps),
           "capture_and_warmup_s": first_s, "sampler": repr(g.sampler), "modes": sorted(set(g.modes_used)) if policy else None,
           "generator": g}
    return rec


@torch.no_grad()
def time_prefill(model: Decoder, length: int, *, reps: int, vocab: int, policy=None) -> dict:
    dev = model.model.embed_tokens.weight.device
    if policy is not None:
        set_precision_mode(model, policy.mode_for(length))
    clock = _Clock(dev)
    model.clear_caches()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    model.setup_caches(1, length)
    prompt = torch.randint(0, vocab, (1, length), device=dev, generator=torch.Generator(device=dev).manual_seed(length))
    pos = torch.arange(length, device=dev)
    model(prompt, pos)
    ts = []
    for _ in range(reps):
        a = clock.mark()
        model(prompt, pos)
        b = clock.mark()
        ts.append(clock.between(a, b))
    t = _median(ts)
    return {"length": length, "time_s": t, "tokens_per_s": length / t, "reps": reps}


def _graph_time(fn, device, reps: int = 10) -> float:
    """Seconds per call of ``fn`` captured as a graph (eager on the CPU)."""
    clock = _Clock(device)
    if device.type == "cuda":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        run = g.replay
    else:
        run = fn
    run()
    clock.sync()
    a = clock.mark()
    for _ in range(reps):
        run()
    b = clock.mark()
    return clock.between(a, b) / reps


@torch.no_grad()
def breakdown(model: Decoder, gen: Generator, step_s: float, *, profile: bool = True,
              position: int | None = None) -> dict:
    """Linear layers / attention / the rest of one decode step (see the module docstring).

    ``position``: where the measured steps started (the context); the profiled steps start
    there again, so that they stay inside the static cache the timed steps were sized for."""
    dev = gen.device
    if position is not None:
        gen.start_at(position, gen.tok.view(-1).clone())
    B, cfg = gen.batch, model.config
    dt = model.model.embed_tokens.weight.dtype
    xin = {}
    names = layer_linears(model)
    for n in names:
        K = _get(model.model.layers[0], n).in_features
        xin[K] = torch.randn(B, 1, K, device=dev, dtype=dt)
    lins = [(_get(layer, n), xin[_get(layer, n).in_features]) for layer in model.model.layers for n in names]
    lins.append((model.lm_head, xin.setdefault(cfg.dim, torch.randn(B, 1, cfg.dim, device=dev, dtype=dt))))

    def linear_only():
        for m, x in lins:
            m(x)

    G = cfg.n_heads // cfg.n_kv_heads
    q = torch.randn(B, cfg.n_kv_heads, G, cfg.head_dim, device=dev, dtype=dt)
    pos = int(gen.pos.item())
    mask = model.attention_mask(model.causal_mask[pos:pos + 1], dt)
    caches = [layer.self_attn.kv_cache for layer in model.model.layers]

    qf = q.reshape(B, cfg.n_heads, 1, cfg.head_dim)
    posv = gen.pos.view(-1)[:1].clone()

    def attention_only():
        for c in caches:
            if model.fused_ops:
                torch.ops.mactile.decode_attention(qf, c.k, c.v, posv)
            else:
                torch.nn.functional.scaled_dot_product_attention(q, c.k[:B], c.v[:B], attn_mask=mask)

    t_lin = _graph_time(linear_only, dev)
    t_att = _graph_time(attention_only, dev)
    out = {"batch": B, "step_s": step_s, "linear_s": t_lin, "attention_s": t_att,
           "rest_s": step_s - t_lin - t_att, "method": "each part captured and timed alone"}
    if profile and dev.type == "cuda":
        out.update(_profile_step(gen, position=pos))
    return out


def _profile_step(gen: Generator, steps: int = 5, *, position: int | None = None) -> dict:
    """Sum of kernel times per replayed decode step (torch.profiler / CUPTI); the steps start
    at ``position`` (default: where the generator is) and must fit its cache."""
    try:
        from torch.profiler import ProfilerActivity, profile
        if position is not None:
            gen.start_at(position, gen.tok.view(-1).clone())
        if int(gen.pos.item()) + steps + 1 > gen.max_seq:
            return {"kernel_sum_s": None, "profile_note": f"{steps + 1} profiled steps do not fit the cache"}
        gen.step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                gen.step()
            torch.cuda.synchronize()
        from torch.autograd import DeviceType
        kern = {}
        for e in prof.events():  # device activity (kernels, copies) of the replays
            if getattr(e, "device_type", None) == DeviceType.CUDA:
                kern[e.name] = kern.get(e.name, 0.0) + e.time_range.elapsed_us() * 1e-6
        if not kern:
            return {"kernel_sum_s": None, "profile_note": "the profiler saw no kernels in the graph replay"}
        top = sorted(kern.items(), key=lambda kv: -kv[1])[:12]
        return {"kernel_sum_s": sum(kern.values()) / steps,
                "top_kernels": [{"name": k[:120], "s_per_step": v / steps} for k, v in top]}
    except Exception as e:  # noqa: BLE001
        return {"kernel_sum_s": None, "profile_note": f"{type(e).__name__}: {e}"[:200]}


# ----------------------------------------------------------------------------- the run
@dataclass
class Options:
    config: str = "llama-3.1-8b"
    batches: tuple = DEFAULT_BATCHES
    context: int = 1024
    gen: int = 128
    timed_steps: int | None = None  # default min(gen, 32)
    warmup: int = 3
    prefill: tuple = PREFILL_LENGTHS
    prefill_reps: int = 3
    variants: tuple = ()
    device: str = "cuda"
    decode: str | None = None
    breakdown_batches: tuple = (1, 64)
    head: bool = False
    distinct_weights: bool = False
    fp8_scaling: str = "tensor"
    sampler: str = "greedy"
    seed: int = 0
    layers: int | None = None
    fused_ops: bool = True  # the decoder ops (Decoder.use_fused_ops) in every variant
    fuse_projections: bool = True  # q/k/v and gate/up as one product each, in every variant
    budget_s: float | None = None  # stop starting measurements after this many seconds
    extra: dict = field(default_factory=dict)


def run_e2e(opts: Options, *, log=print) -> dict:
    """Run the benchmark; returns ``{"meta": ..., "records": [...]}``."""
    dev = torch.device(opts.device)
    over = {"n_layers": opts.layers} if opts.layers else {}
    cfg = get_config(opts.config, **over)
    dtype = torch.float16 if dev.type == "cuda" else torch.float32
    decode = opts.decode or ("graph" if dev.type == "cuda" else "eager")
    chosen = [v for v in VARIANTS if not opts.variants or v.name in opts.variants]
    timed = opts.timed_steps or min(opts.gen, 32)
    env = environment(dev)
    log(f"e2e: {cfg.name} ({cfg.n_params / 1e9:.2f} B parameters) on {env.get('device')}, {len(chosen)} variants")
    t_start = time.perf_counter()
    model = Decoder.random(cfg, device=dev, dtype=dtype, seed=opts.seed)
    if opts.fuse_projections:
        model.fuse_projections()
    model.use_fused_ops(opts.fused_ops)
    bw = read_bandwidth(dev)
    meta = {"env": env, "config": asdict(cfg), "options": {k: v for k, v in asdict(opts).items() if k != "extra"},
            "dtype": str(dtype).replace("torch.", ""), "decode_mode": decode, "read_bandwidth": bw,
            "sampler": opts.sampler,
            "method": _METHOD.format(warmup=opts.warmup, gen=opts.gen, context=opts.context, timed=timed),
            "quantized_head": opts.head}
    records = []
    ref_logits = None
    probe = torch.randn(1, 16, cfg.dim, device=dev, generator=torch.Generator(device=dev).manual_seed(1)).to(dtype)
    def over_budget() -> bool:
        return opts.budget_s is not None and time.perf_counter() - t_start > opts.budget_s

    skip = f"skipped: the time budget of {opts.budget_s} s was spent"
    for v in chosen:
        base = {"variant": v.name, "kind": v.kind, "format": v.format, "mode": v.mode, "note": v.note}
        if over_budget():
            records.append({**base, "measure": "build", "error": skip})
            log(f"  {v.name}: {skip}")
            continue
        try:
            st = apply_variant(model, v, head=opts.head, distinct_weights=opts.distinct_weights,
                               fp8_scaling=opts.fp8_scaling)
        except Exception as e:  # noqa: BLE001  -- a missing peer or format is a result, not a crash
            msg = f"{type(e).__name__}: {e}"[:300]
            log(f"  {v.name}: not run ({msg})")
            records.append({**base, "measure": "build", "error": msg})
            continue
        wbs = weight_bytes(model)
        wb = wbs["read"]
        records.append({**base, "measure": "build", "build_s": st["build_s"], "weights": st["how"],
                        "weight_bytes": wb, "stored_bytes": wbs["stored"]})
        log(f"  {v.name}: built in {st['build_s']:.1f} s ({st['how']}), weights {wb / 2**30:.2f} GiB read per step, "
            f"{wbs['stored'] / 2**30:.2f} GiB stored")
        try:
            lg = _layer0_probe(model, probe)
            if ref_logits is None and v.kind == "fp16":
                ref_logits = lg
            if ref_logits is not None:
                err = ((lg - ref_logits).norm() / ref_logits.norm()).item()
                records.append({**base, "measure": "accuracy", "layer0_rel_err_vs_fp16": err})
            for L in opts.prefill:
                r = time_prefill(model, L, reps=opts.prefill_reps, vocab=cfg.vocab_size, policy=v.policy)
                records.append({**base, "measure": "prefill", **r})
                log(f"    prefill {L}: {r['tokens_per_s']:.0f} tokens/s")
            for B in opts.batches:
                if over_budget():
                    records.append({**base, "measure": "decode", "batch": B, "error": skip})
                    continue
                r = _decode_point(model, B, opts, timed, decode, v, cfg, base, records, log)
                if r is None:
                    continue
                g = r.pop("generator")
                if B in opts.breakdown_batches:
                    try:
                        records.append({**base, "measure": "breakdown", **breakdown(model, g, r["step_s_median"], position=opts.context)})
                    except Exception as e:  # noqa: BLE001  -- a part that cannot be captured alone
                        records.append({**base, "measure": "breakdown", "batch": B,
                                        "error": f"{type(e).__name__}: {e}"[:300]})
                del g
                kv = _kv_bytes(cfg, B, opts.context + opts.gen // 2, dtype)
                bps = bw["bytes_per_s"]
                r["limit_tokens_per_s"] = B * bps / wb if bps else None
                r["limit_with_kv_tokens_per_s"] = B * bps / (wb + kv) if bps else None
                records.append({**base, "measure": "decode", **r})
                log(f"    decode batch {B}: {r['tokens_per_s']:.0f} tokens/s, {r['tpot_ms']:.2f} ms per step"
                    + ("" if r["decode"] == decode else f" ({r['decode']})"))
        except Exception as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {e}"[:300]
            log(f"  {v.name}: failed ({msg})")
            records.append({**base, "measure": "run", "error": msg})
        finally:
            restore(model, st)
            model.clear_caches()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    _speedups(records)
    meta["wall_s"] = time.perf_counter() - t_start
    result = {"meta": meta, "records": records}
    result["targets"] = targets(result)
    return result


def _decode_point(model, B, opts, timed, decode, v, cfg, base, records, log):
    """One batch size's decode timing; an error is recorded (and a step that cannot be
    captured is timed eagerly, said in the record) instead of ending the variant."""
    kw = dict(context=opts.context, gen=opts.gen, timed=timed, warmup=opts.warmup, policy=v.policy,
              vocab=cfg.vocab_size, sampler=opts.sampler)
    try:
        return time_decode(model, B, decode=decode, **kw)
    except torch.cuda.OutOfMemoryError as e:
        records.append({**base, "measure": "decode", "batch": B, "error": f"out of memory: {e}"[:300]})
        log(f"    decode batch {B}: out of memory")
    except Exception as e:  # noqa: BLE001
        msg = f"{type(e).__name__}: {e}"[:300]
        records.append({**base, "measure": "decode", "batch": B, "decode": decode, "error": msg})
        log(f"    decode batch {B}: failed in {decode} mode ({msg})")
        if decode != "eager":
            try:
                r = time_decode(model, B, decode="eager", **kw)
                r["note"] = f"{decode} mode failed ({msg[:120]}); timed eagerly"
                return r
            except Exception as e2:  # noqa: BLE001
                records.append({**base, "measure": "decode", "batch": B, "decode": "eager",
                                "error": f"{type(e2).__name__}: {e2}"[:300]})
    finally:
        if model.model.embed_tokens.weight.device.type == "cuda":
            torch.cuda.synchronize()
    return None


@torch.no_grad()
def _layer0_probe(model: Decoder, x: torch.Tensor) -> torch.Tensor:
    """Layer 0's output for hidden states ``x [1, T, dim]`` without a cache (a check that a
    variant computes what the FP16 layer does; layer 0, because the other layers of a copied
    variant hold layer 0's weights)."""
    model.clear_caches()
    T = x.shape[1]
    pos = torch.arange(T, device=x.device)
    cos, sin = model.rope_cos[pos].to(x.dtype), model.rope_sin[pos].to(x.dtype)
    mask = model.attention_mask(pos[:, None] >= pos[None, :], x.dtype)
    return model.model.layers[0](x, cos, sin, mask, pos).float()


def _kv_bytes(cfg, batch: int, positions: int, dtype) -> int:
    """Key and value bytes an attention step must read for ``positions`` cached tokens."""
    return 2 * batch * cfg.n_layers * cfg.n_kv_heads * positions * cfg.head_dim * torch.finfo(dtype).bits // 8


def _speedups(records: list) -> None:
    fp16 = {("decode", r["batch"]): r["tokens_per_s"] for r in records
            if r["variant"] == "fp16" and r["measure"] == "decode" and "error" not in r}
    fp16.update({("prefill", r["length"]): r["tokens_per_s"] for r in records
                 if r["variant"] == "fp16" and r["measure"] == "prefill"})
    for r in records:
        key = ("decode", r.get("batch")) if r["measure"] == "decode" else ("prefill", r.get("length"))
        if r["measure"] in ("decode", "prefill") and "error" not in r and key in fp16:
            r["speedup_vs_fp16"] = r["tokens_per_s"] / fp16[key]


_METHOD = ("Random weights. Decode: a static cache sized for {context} context + {gen} generated tokens, "
           "positions 0..{context}-1 taken as filled (no prefill run; values do not change a step's time; the "
           "decoder ops' attention reads positions 0..pos, the eager attention the whole static cache: the "
           "steady-state step of a {gen}-token generation); {warmup} untimed steps (capture and warm-up), then {timed} steps from "
           "position {context}, each one graph replay timed between CUDA events; tokens/s = batch x steps / sum "
           "of step times; time per output token = median step. "
           "Prefill: batch 1, eager, median of the timed repetitions after one warm-up. Bandwidth limit: "
           "bytes of the layers' and head's weights a step reads (a quantized layer: its format's bits per weight) over the measured read bandwidth (and with the key/value "
           "bytes of context + gen/2 positions). mactile variants: layer 0 quantized and copied to every layer.")


# ----------------------------------------------------------------------------- reports
def _by(records, measure):
    return [r for r in records if r["measure"] == measure]


def markdown(result: dict) -> str:
    """The tables of a run: decode tokens/s per batch (speed-up over FP16), prefill,
    time per output token at batch 1, breakdown, errors, and how it was measured."""
    meta, recs = result["meta"], result["records"]
    env = meta["env"]
    names = list(dict.fromkeys(r["variant"] for r in recs))
    batches = sorted({r["batch"] for r in _by(recs, "decode")})
    lengths = sorted({r["length"] for r in _by(recs, "prefill")})
    cfg = meta["config"]
    lines = [f"## End-to-end decoding: {cfg['name']} ({env.get('device')})", "",
             f"{env.get('date')}; torch {env.get('torch')}, CUDA {env.get('cuda', '-')}, driver {env.get('driver', '-')}; "
             f"gemlite {env.get('gemlite')}; {meta['dtype']} activations; decode mode {meta['decode_mode']}; "
             f"{meta.get('sampler', 'greedy')} sampling; "
             f"read bandwidth {_fmt_bw(meta['read_bandwidth'])}.", "",
             "### Decode tokens/s (speed-up over FP16)", "",
             "| variant | weights GB read / step | " + " | ".join(f"B={b}" for b in batches) + " |",
             "|---|---:|" + "---:|" * len(batches)]
    dec = {(r["variant"], r.get("batch")): r for r in _by(recs, "decode")}
    build = {r["variant"]: r for r in _by(recs, "build")}
    for n in names:
        wb = build.get(n, {}).get("weight_bytes")
        cells = []
        for b in batches:
            r = dec.get((n, b))
            if r is None:
                cells.append("-")
            elif "error" in r:
                cells.append("OOM" if "memory" in r["error"] else "error")
            else:
                sp = r.get("speedup_vs_fp16")
                cells.append(f"{r['tokens_per_s']:.0f}" + (f" ({sp:.2f}x)" if sp else "")
                             + ("" if r.get("decode") == meta["decode_mode"] else f" [{r.get('decode')}]"))
        lines.append(f"| {n} | {wb / 1e9:.3g} | " if wb else f"| {n} | - | ")
        lines[-1] += " | ".join(cells) + " |"
    lim = [(n, dec.get((n, 1))) for n in names]
    lines += ["", "### Batch 1: time per output token and the bandwidth limit", "",
              "| variant | ms / token | tokens/s | limit tokens/s (weights) | fraction of limit |", "|---|---:|---:|---:|---:|"]
    for n, r in lim:
        if r and "error" not in r:
            limt = r.get("limit_tokens_per_s")
            lines.append(f"| {n} | {r['tpot_ms']:.3f} | {r['tokens_per_s']:.1f} | "
                         f"{limt:.0f} | {r['tokens_per_s'] / limt:.2f} |" if limt else
                         f"| {n} | {r['tpot_ms']:.3f} | {r['tokens_per_s']:.1f} | - | - |")
    if lengths:
        pre = {(r["variant"], r["length"]): r for r in _by(recs, "prefill")}
        lines += ["", "### Prefill tokens/s, batch 1 (speed-up over FP16)", "",
                  "| variant | " + " | ".join(f"{L} tokens" for L in lengths) + " |", "|---|" + "---:|" * len(lengths)]
        for n in names:
            cells = []
            for L in lengths:
                r = pre.get((n, L))
                sp = r.get("speedup_vs_fp16") if r else None
                cells.append(f"{r['tokens_per_s']:.0f}" + (f" ({sp:.2f}x)" if sp else "") if r else "-")
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    bd = _by(recs, "breakdown")
    if bd:
        lines += ["", "### One decode step: linear layers / attention / the rest (ms)", "",
                  "| variant | batch | step | linear | attention | rest | kernel sum (profiler) | step / kernel sum |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in bd:
            ks = r.get("kernel_sum_s")
            lines.append(f"| {r['variant']} | {r['batch']} | {1e3 * r['step_s']:.3f} | {1e3 * r['linear_s']:.3f} | "
                         f"{1e3 * r['attention_s']:.3f} | {1e3 * r['rest_s']:.3f} | "
                         + (f"{1e3 * ks:.3f} | {r['step_s'] / ks:.3f} |" if ks else "- | - |"))
    tg = targets(result)
    if tg:
        lines += ["", "### Targets", "", "| target | variant | measured | met |", "|---|---|---:|---|"]
        lines += [f"| {t['target']} | {t['variant']} | {t['measured']:.3g} | {'yes' if t['met'] else 'no'} |" for t in tg]
    acc = _by(recs, "accuracy")
    if acc:
        lines += ["", "Layer 0's output for 16 random hidden states against the FP16 layer (relative L2 error): "
                  + ", ".join(f"{r['variant']} {r['layer0_rel_err_vs_fp16']:.3g}" for r in acc) + "."]
    errs = [r for r in recs if "error" in r]
    if errs:
        lines += ["", "### Not measured", ""] + [f"- {r['variant']} ({r['measure']}"
                                                   + (f", batch {r['batch']}" if r.get("batch") else "")
                                                   + f"): {r['error']}" for r in errs]
    lines += ["", "### How it was measured", "", meta["method"], ""]
    return "\n".join(lines)


#: mactile variants whose weights alone are quantized (FP16 activations).
W4A16 = ("nvfp4", "mxfp4", "razer", "razer-g128")
MACTILE = tuple(v.name for v in VARIANTS if v.kind == "mactile")
#: The targets the run is judged by: (what, variants, measure, batch or length, bound); bounds
#: are speed-ups over FP16, or over the best peer ("peer"), or absolute tokens/s ("tps").
TARGETS = (
    ("batch 1 >= 2.6x FP16", ("nvfp4", "mxfp4"), "decode", 1, ("fp16", 2.6)),
    ("batch 1 >= 600 tokens/s", ("nvfp4", "mxfp4"), "decode", 1, ("tps", 600.0)),
    ("batch 1 >= 2.3x FP16", ("razer", "razer-g128"), "decode", 1, ("fp16", 2.3)),
    ("batch 1 >= 2.4x FP16", ("nvfp4-w4a4",), "decode", 1, ("fp16", 2.4)),
    ("batch 1 >= 1.25x the best of tinygemm and GemLite", W4A16, "decode", 1, ("peer", 1.25)),
    ("batch 16 >= 2.3x FP16", MACTILE, "decode", 16, ("fp16", 2.3)),
    ("batch 64 >= 1.7x FP16", MACTILE, "decode", 64, ("fp16", 1.7)),
    ("batch 256 >= 1.0x FP16", MACTILE, "decode", 256, ("fp16", 1.0)),
    ("prefill 2048 >= 0.95x FP16", MACTILE, "prefill", 2048, ("fp16", 0.95)),
)


def targets(result: dict) -> list[dict]:
    """Every target of :data:`TARGETS` that the run measured: variant, measured value, met."""
    recs = result["records"]
    key = lambda r: r.get("batch") if r["measure"] == "decode" else r.get("length")  # noqa: E731
    val = {(r["variant"], r["measure"], key(r)): r for r in recs
           if r["measure"] in ("decode", "prefill") and "error" not in r}
    rows = []
    for what, names, measure, at, (kind, bound) in TARGETS:
        for n in names:
            r = val.get((n, measure, at))
            if r is None:
                continue
            if kind == "tps":
                got = r["tokens_per_s"]
            elif kind == "fp16":
                got = r.get("speedup_vs_fp16")
            else:
                peers = [val[(p, measure, at)]["tokens_per_s"] for p in ("int4-tinygemm", "gemlite-a16w4")
                         if (p, measure, at) in val]
                got = r["tokens_per_s"] / max(peers) if peers else None
            if got is not None:
                rows.append({"target": what, "variant": n, "measured": got, "met": got >= bound})
    for r in _by(recs, "breakdown"):
        if r.get("kernel_sum_s"):
            got = r["step_s"] / r["kernel_sum_s"]
            rows.append({"target": f"decode step <= 1.15x its kernels' sum (batch {r['batch']})",
                         "variant": r["variant"], "measured": got, "met": got <= 1.15})
    return rows


def _fmt_bw(bw: dict) -> str:
    v = bw.get("bytes_per_s")
    return f"{v / 1e12:.2f} TB/s ({bw['method']})" if v else bw.get("method", "-")


def plot(result: dict, path) -> None:
    """Decode tokens/s against batch per variant (log-log), each variant's weight-bandwidth
    limit dashed in its colour (RaZeR Fig. 5 style). Needs matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in _by(result["records"], "decode") if "error" not in r]
    names = list(dict.fromkeys(r["variant"] for r in recs))
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for i, n in enumerate(names):
        rs = sorted((r for r in recs if r["variant"] == n), key=lambda r: r["batch"])
        c = f"C{i % 10}"
        ax.plot([r["batch"] for r in rs], [r["tokens_per_s"] for r in rs], "o-", color=c, label=n, lw=1.6, ms=4)
        if rs and rs[0].get("limit_tokens_per_s"):
            ax.plot([r["batch"] for r in rs], [r["limit_tokens_per_s"] for r in rs], "--", color=c, lw=0.8, alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("decode tokens/s")
    m = result["meta"]
    ax.set_title(f"{m['config']['name']} decode, context {m['options']['context']}, {m['env'].get('device')}\n"
                 "dashed: weight bytes / measured read bandwidth", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130, format="png")
    plt.close(fig)


def write_outputs(result: dict, out_dir, name: str = "e2e") -> list:
    """Write ``NAME.json``, ``NAME.md`` and (with matplotlib) ``NAME.png`` into ``out_dir``,
    all or none (atomically); returns the paths written."""
    from pathlib import Path

    from mactile.golden.fileio import atomic_outputs

    out = Path(out_dir)
    files = [out / f"{name}.json", out / f"{name}.md"]
    try:
        import matplotlib  # noqa: F401
        files.append(out / f"{name}.png")
    except ImportError:
        pass
    with atomic_outputs(*files, make_parents=True) as tmps:
        tmps[0].write_text(json.dumps(result, indent=1, default=str))
        tmps[1].write_text(markdown(result))
        if len(tmps) > 2:
            plot(result, tmps[2])
    return files


def main(argv=None) -> int:
    """``python -m mactile.torch.e2e_bench`` (the options of ``mactile bench e2e``)."""
    from mactile.cli.main import main as cli_main
    return cli_main(["bench", "e2e", *(argv or [])])


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
