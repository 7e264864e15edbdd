"""Generic GPU timing harness: CUDA-graph replay, L2 rotation, streaming-read peak,
library baselines and benchmark records. Kernel-agnostic: it times *callables*.

The contract
------------
A timed operation is a callable ``launch(i)`` that enqueues work for rotation set ``i``
(``0 <= i < n_sets``) on the *current* stream and returns without synchronising. It
must not allocate device memory (graphs cannot capture allocations): build every
buffer of every set before timing. :func:`rotation_count` says how many sets keep the
total footprint at least ``4 x L2`` so that no set is served from cache.

:func:`time_launches` then

1. runs every set once (warm-up: compiles kernels, creates library handles),
2. captures a CUDA graph of ``L`` back-to-back launches cycling through the sets
   (CuPy stream capture, or ``torch.cuda.graph`` with ``backend="torch"``; CuPy
   kernels launched inside a torch capture follow torch's capture stream),
3. replays it ``replays`` times between CUDA events and reports the median, p10 and
   p90 of the per-launch time. If capture fails the same loop is timed with events
   around eager launches (``Timing.method == "events"``) and the record says so.

Times are microseconds. Nothing here asserts on a time: benchmarks print and record.

Other pieces: :func:`streaming_read_peak` (a read-only 16-byte-per-thread reduction
kernel, rotated like any kernel, giving the bandwidth ceiling of the same run),
:func:`torch_baselines` (cuBLAS FP16 ``torch.matmul``, FP8 ``torch._scaled_mm``, INT8
``torch._int_mm`` as launch callables), :func:`make_record` / :func:`write_json`
(one JSON record per measurement, with device and versions) and :func:`plot_records`;
for the benchmark scripts, :func:`geomean`, :func:`parse_shapes` (``KxN`` arguments) and
:func:`ab_sources` (the ``--source NAME=PATH`` arguments of the same-process A/B scripts).
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..runtime import device_info, require_cupy

__all__ = [
    "Timing", "time_launches", "rotation_count", "streaming_read_peak", "torch_available",
    "torch_baselines", "BaselineResult", "make_record", "write_json", "read_json",
    "plot_records", "L2_ROTATION_FACTOR", "geomean", "parse_shapes", "ab_sources",
]

#: Weight sets are rotated over at least this many times the L2 size.
L2_ROTATION_FACTOR = 4


@dataclass(frozen=True)
class Timing:
    """Per-launch time statistics in microseconds."""

    median_us: float
    p10_us: float
    p90_us: float
    launches: int          # launches per replay (graph length)
    replays: int
    n_sets: int            # rotation sets cycled through
    method: str            # "graph" or "events"

    def as_dict(self) -> dict:
        return asdict(self)


def rotation_count(bytes_per_set: int, *, l2_bytes: int | None = None,
                   factor: int = L2_ROTATION_FACTOR, minimum: int = 2,
                   maximum: int = 64) -> int:
    """Sets needed so that ``n * bytes_per_set >= factor * L2`` (at least ``minimum``)."""
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set must be positive, got {bytes_per_set}")
    if l2_bytes is None:
        l2_bytes = device_info()["l2_bytes"]
    return int(min(maximum, max(minimum, math.ceil(factor * l2_bytes / bytes_per_set))))


def _capture_cupy(cp, launch, n_sets, n_launch):
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            for j in range(n_launch):
                launch(j % n_sets)
        finally:
            graph = stream.end_capture()
    return stream, (lambda: graph.launch(stream)), graph


def _capture_torch(cp, launch, n_sets, n_launch):
    import torch

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        # CuPy kernels inside the capture must follow torch's capture stream.
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            for j in range(n_launch):
                launch(j % n_sets)
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    return stream, g.replay, g


def time_launches(launch: Callable[[int], None], *, n_sets: int = 1, backend: str = "cupy",
                  replays: int = 15, target_replay_us: float = 2000.0,
                  max_launches: int = 400, min_launches: int | None = None) -> Timing:
    """Time ``launch(i)`` by CUDA-graph replay; see the module docstring.

    Parameters
    ----------
    launch : callable
        Enqueues one operation for rotation set ``i`` on the current stream.
    n_sets : int
        Rotation sets (``launch`` is called with ``i % n_sets``).
    backend : {"cupy", "torch"}
        Which graph API captures (``"torch"`` for torch ops, e.g. cuBLAS baselines).
    replays : int
        Timed graph replays (the median over them is reported).
    target_replay_us : float
        Graph length is chosen so one replay lasts about this long.
    """
    if backend not in ("cupy", "torch"):
        raise ValueError(f"backend must be 'cupy' or 'torch', got {backend!r}")
    if n_sets < 1:
        raise ValueError(f"n_sets must be >= 1, got {n_sets}")
    cp = require_cupy()
    capture = _capture_cupy if backend == "cupy" else _capture_torch
    if backend == "torch":
        import torch
        sync = torch.cuda.synchronize
    else:
        sync = cp.cuda.Device().synchronize

    # Warm-up, eager: compiles, creates handles, touches every set.
    for i in range(n_sets):
        launch(i)
    sync()

    def timed(run, stream, reps):
        out = []
        for _ in range(reps):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(stream)
            run()
            e1.record(stream)
            e1.synchronize()
            out.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
        return out

    method = "graph"
    try:
        stream, run, _keep = capture(cp, launch, n_sets, n_sets)
        run()
        sync()
        probe = min(timed(run, stream, 3)) / n_sets
        n_launch = int(max(n_sets, min(max_launches, math.ceil(target_replay_us / max(probe, 0.5)))))
        if min_launches:
            n_launch = max(n_launch, min_launches)
        n_launch = n_sets * math.ceil(n_launch / n_sets)
        stream, run, _keep = capture(cp, launch, n_sets, n_launch)
        run()
        sync()
    except Exception:
        method = "events"
        stream = cp.cuda.get_current_stream()
        n_launch = max(n_sets, 50)

        def run():
            for j in range(n_launch):
                launch(j % n_sets)
    per = sorted(t / n_launch for t in timed(run, stream, replays))
    sync()
    q = lambda f: per[min(len(per) - 1, max(0, int(round(f * (len(per) - 1)))))]
    return Timing(median_us=statistics.median(per), p10_us=q(0.1), p90_us=q(0.9),
                  launches=n_launch, replays=replays, n_sets=n_sets, method=method)


# --------------------------------------------------------------------------- read peak
_READ_SRC = r"""
extern "C" __global__ void mactile_stream_read(const uint4* __restrict__ src, size_t n16,
                                               unsigned int* __restrict__ sink) {
    // 16-byte loads, 4 in flight per thread per iteration, grid-stride.
    unsigned int acc = 0u;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = __ldcs(src + i), b = __ldcs(src + i + stride);
        uint4 c = __ldcs(src + i + 2 * stride), d = __ldcs(src + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
        acc ^= c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n16; i += stride) { uint4 a = __ldcs(src + i); acc ^= a.x ^ a.y ^ a.z ^ a.w; }
    if (acc == 0x9E3779B9u) sink[0] = acc;  // keeps the loads alive; practically never taken
}
"""
_READ_CACHE: dict[int, float] = {}


def streaming_read_peak(nbytes: int, *, replays: int = 15) -> dict:
    """Measured read bandwidth (TB/s, 1e12 B/s) of a plain streaming read of ``nbytes``,
    rotated over ``4 x L2`` like the kernels. Cached per size within the process."""
    cp = require_cupy()
    nbytes = int(max(1 << 16, (nbytes // 16) * 16))
    if nbytes in _READ_CACHE:
        return {"bytes": nbytes, "tbps": _READ_CACHE[nbytes]}
    info = device_info()
    n_sets = rotation_count(nbytes, l2_bytes=info["l2_bytes"])
    bufs = [cp.random.randint(0, 2**31 - 1, size=nbytes // 4, dtype=cp.int32) for _ in range(n_sets)]
    sink = cp.zeros(1, dtype=cp.uint32)
    kern = cp.RawKernel(_READ_SRC, "mactile_stream_read")
    n16 = nbytes // 16
    threads = 512
    blocks = info["sm_count"] * 4

    def launch(i):
        kern((blocks,), (threads,), (bufs[i], cp.uint64(n16), sink))

    t = time_launches(launch, n_sets=n_sets, replays=replays)
    tbps = nbytes / (t.median_us * 1e-6) / 1e12
    _READ_CACHE[nbytes] = tbps
    del bufs
    return {"bytes": nbytes, "tbps": tbps, "timing": t.as_dict()}


# --------------------------------------------------------------------------- baselines
def torch_available() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


@dataclass
class BaselineResult:
    kind: str
    timing: Timing | None = None
    error: str = ""
    note: str = ""


def torch_baselines(M: int, N: int, K: int, *, kinds: Iterable[str] = ("fp16", "fp8"),
                    l2_bytes: int | None = None, replays: int = 15) -> dict[str, BaselineResult]:
    """Library baselines for ``Y[M,N] = X[M,K] @ W[N,K]^T`` as :class:`BaselineResult`.

    ``fp16``: ``torch.matmul`` in FP16 (cuBLAS). ``fp8``: ``torch._scaled_mm`` with E4M3
    operands, per-tensor FP32 scales, FP16 output (M padded to a multiple of 16, which
    the API requires; the note says so). ``int8``: ``torch._int_mm`` (M padded to at
    least 17 and a multiple of 8). Weights are rotated over ``4 x L2``; inputs are random.
    """
    out: dict[str, BaselineResult] = {}
    if not torch_available():
        for k in kinds:
            out[k] = BaselineResult(k, error="torch with CUDA is not available")
        return out
    import torch

    dev = torch.device("cuda")
    if l2_bytes is None:
        l2_bytes = device_info()["l2_bytes"]
    g = torch.Generator(device=dev)
    g.manual_seed(1234 + M * 7 + N * 13 + K)
    for kind in kinds:
        try:
            if kind == "fp16":
                n = rotation_count(N * K * 2, l2_bytes=l2_bytes)
                ws = [torch.randn(N, K, device=dev, dtype=torch.float16, generator=g) * 0.02 for _ in range(n)]
                xs = [torch.randn(M, K, device=dev, dtype=torch.float16, generator=g) for _ in range(n)]
                ys = [torch.empty(M, N, device=dev, dtype=torch.float16) for _ in range(n)]

                def launch(i, ws=ws, xs=xs, ys=ys):
                    torch.matmul(xs[i], ws[i].t(), out=ys[i])
                note = ""
            elif kind == "fp8":
                Mp = max(16, -(-M // 16) * 16)
                n = rotation_count(N * K, l2_bytes=l2_bytes)
                ws = [(torch.randn(N, K, device=dev, generator=g) * 0.02).to(torch.float8_e4m3fn) for _ in range(n)]
                xs = [torch.randn(Mp, K, device=dev, generator=g).to(torch.float8_e4m3fn) for _ in range(n)]
                sa = torch.ones((), device=dev)
                sb = torch.ones((), device=dev)

                def launch(i, ws=ws, xs=xs, sa=sa, sb=sb):
                    torch._scaled_mm(xs[i], ws[i].t(), scale_a=sa, scale_b=sb, out_dtype=torch.float16)
                note = f"M padded to {Mp}" if Mp != M else ""
            elif kind == "int8":
                Mp = max(17, -(-M // 8) * 8)
                n = rotation_count(N * K, l2_bytes=l2_bytes)
                ws = [torch.randint(-127, 127, (N, K), device=dev, dtype=torch.int8, generator=g) for _ in range(n)]
                xs = [torch.randint(-127, 127, (Mp, K), device=dev, dtype=torch.int8, generator=g) for _ in range(n)]

                def launch(i, ws=ws, xs=xs):
                    torch._int_mm(xs[i], ws[i].t())
                note = f"M padded to {Mp}" if Mp != M else ""
            else:
                raise ValueError(f"unknown baseline kind {kind!r}")
            t = time_launches(launch, n_sets=n, backend="torch", replays=replays)
            out[kind] = BaselineResult(kind, timing=t, note=note)
        except Exception as e:  # record, never hide: unsupported shapes are data too
            out[kind] = BaselineResult(kind, error=f"{type(e).__name__}: {e}"[:300])
        finally:
            ws = xs = ys = None
            torch.cuda.empty_cache()
    return out


# --------------------------------------------------------------------------- records
def make_record(*, kernel: str, format: str, K: int, N: int, M: int, timing: Timing | None,
                bytes_moved: int, baseline_fp16_us: float | None, read_peak_tbps: float | None,
                device: dict, extra: dict | None = None) -> dict:
    """One benchmark record (the schema of docs/gpu.md)."""
    t = timing.median_us if timing is not None else None
    rec = {
        "kernel": kernel, "format": format, "K": int(K), "N": int(N), "M": int(M),
        "time_us": t,
        "baseline_fp16_us": baseline_fp16_us,
        "speedup_vs_fp16": (baseline_fp16_us / t) if (t and baseline_fp16_us) else None,
        "bytes_moved": int(bytes_moved),
        "achieved_tbps": (bytes_moved / (t * 1e-6) / 1e12) if t else None,
        "read_peak_tbps": read_peak_tbps,
        "fraction_of_read_peak": ((bytes_moved / (t * 1e-6) / 1e12) / read_peak_tbps)
        if (t and read_peak_tbps) else None,
        "timing": timing.as_dict() if timing is not None else None,
        "device": device.get("name"),
        "date": device.get("date"),
        "versions": device.get("versions", {}),
    }
    if extra:
        rec.update(extra)
    return rec


def write_json(records: Sequence[dict], path, *, meta: dict | None = None) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"meta": meta or {}, "records": list(records)}, indent=1, default=float))


def read_json(path) -> tuple[dict, list[dict]]:
    d = json.loads(Path(path).read_text())
    return d.get("meta", {}), d.get("records", [])


def plot_records(records: Sequence[dict], path, *, x: str = "M", y: str = "speedup_vs_fp16",
                 panel: Callable[[dict], str] = lambda r: f"K={r['K']} N={r['N']}",
                 series: Callable[[dict], str] = lambda r: f"{r['kernel']}/{r['format']}",
                 title: str = "", hline: float | None = 1.0, logx: bool = True,
                 extra_line: dict | None = None, extra_label: str = "cuBLAS FP8") -> None:
    """Small-multiple line plot: one panel per ``panel(record)``, one line per
    ``series(record)``; ``extra_line`` ({x: y}) is drawn dashed in every panel. Needs
    matplotlib (the ``[plot]`` extra)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in records if r.get(y) is not None]
    panels = sorted({panel(r) for r in recs})
    if not panels:
        raise ValueError(f"no record has a value for {y!r}")
    ncol = min(3, len(panels))
    nrow = math.ceil(len(panels) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 3.6 * nrow), squeeze=False)
    names = sorted({series(r) for r in recs})
    cmap = plt.cm.tab20 if len(names) > 10 else plt.cm.tab10
    colors = {n: cmap(i % cmap.N) for i, n in enumerate(names)}
    markers = "os^vD<>pxh*"
    for ax, pn in zip(axes.flat, panels):
        for n in names:
            pts = sorted((r[x], r[y]) for r in recs if panel(r) == pn and series(r) == n)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[names.index(n) % len(markers)],
                        ms=3, lw=1.2, label=n, color=colors[n])
        if hline is not None:
            ax.axhline(hline, color="k", lw=0.7, ls="--")
        if extra_line:
            xs_ = sorted(extra_line)
            ax.plot(xs_, [extra_line[v] for v in xs_], color="k", lw=1.4, ls=":", label=extra_label)
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_title(pn, fontsize=9)
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    seen = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    labels = sorted(seen)
    handles = [seen[k] for k in labels]
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 + 0.02 * math.ceil(len(labels) / 4), 1, 0.97))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive ``values``."""
    v = list(values)
    return math.exp(sum(math.log(x) for x in v) / len(v))


def parse_shapes(specs: Sequence[str] | None, default: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Layer shapes from ``KxN`` strings (``default`` when ``specs`` is empty or None); a bad
    string stops with a message naming it."""
    if not specs:
        return [tuple(s) for s in default]
    out = []
    for t in specs:
        parts = t.lower().split("x")
        if len(parts) != 2 or not all(q.isdigit() and int(q) > 0 for q in parts):
            raise SystemExit(f"--shapes {t!r}: expected K x N as two positive integers, e.g. 4096x4096")
        out.append((int(parts[0]), int(parts[1])))
    return out


def ab_sources(specs: Sequence[str], *, tool: str, marker: str, what: str) -> dict[str, Path | None]:
    """The ``--source NAME=PATH`` arguments of a same-process A/B script (``tool``):
    ``{name: path}``, ``None`` for ``NAME=tree`` (the package's own source). Every file must
    contain ``marker`` (else it is not ``what``, e.g. "an engine source"); at least two
    sources, names unique. Bad arguments stop with a message naming the problem."""
    out: dict[str, Path | None] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"{tool}: --source {spec!r}: expected NAME=PATH or NAME=tree")
        if name in out:
            raise SystemExit(f"{tool}: --source name {name!r} given twice")
        if path == "tree":
            out[name] = None
            continue
        p = Path(path)
        if not p.is_file():
            raise SystemExit(f"{tool}: --source {name}={path}: no such file")
        if marker not in p.read_text(encoding="utf-8"):
            raise SystemExit(f"{tool}: --source {name}={path}: not {what} (no {marker})")
        out[name] = p
    if len(out) < 2:
        raise SystemExit(f"{tool}: give at least two --source NAME=PATH (or NAME=tree)")
    return out
