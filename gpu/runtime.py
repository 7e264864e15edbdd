"""Runtime helpers shared by every mactile GPU kernel (CuPy RawModule based).

What lives here, so that each kernel module stays short and so that other kernel
families (FlexQ, NestedFP) reuse the same plumbing:

* :func:`require_cupy` / :func:`gpu_available` -- import CuPy lazily, with one clear
  message naming what is missing (CuPy, a driver, a GPU);
* :func:`load_source` / :func:`compile_module` -- read ``.cu`` templates next to this
  file, prepend generated constants, compile once per (source, options, names) with
  NVRTC to a cubin (exactly our options, none of CuPy's: its build flushed denormals) and
  keep the module in a process cache and on disk;
* :data:`NVRTC_OPTIONS` -- the options known to work on the lent Hopper machines
  (``-arch=sm_90a -std=c++17``; no jitify, no nvcc backend);
* :func:`check_launch` -- synchronise-free error check after a launch (CUDA reports a
  bad launch configuration at launch time and an illegal address at the next sync;
  :func:`check_launch` with ``sync=True`` catches both and names the kernel);
* :func:`device_info` / :func:`versions` -- what every benchmark record must carry;
* :func:`nvcc_check` -- compile a source with the local ``nvcc`` for sm_90a and return
  the ptxas resource report (registers, spills, shared memory), for the
  "compile and inspect locally before spending device time" workflow.

Nothing here imports CuPy at module import time.
"""
from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GpuUnavailable", "require_cupy", "gpu_available", "gpu_skip_reason",
    "NVRTC_OPTIONS", "KERNEL_DIR", "load_source", "compile_module", "get_function", "nvrtc_cache_dir",
    "check_launch", "device_info", "sm_count", "l2_bytes", "versions", "nvcc_check", "NvccReport", "ceil_div",
]

#: Folder of the ``.cu`` templates.
KERNEL_DIR = Path(__file__).resolve().parent / "kernels"

#: NVRTC options verified on the lent H100/H200 (TOOLCHAIN.md): sm_90a enables wgmma and
#: setmaxnreg; ``-std=c++17`` for ``if constexpr``. Fast-math stays off on purpose: the
#: quantizers must reproduce the golden FP32 op order bit for bit.
NVRTC_OPTIONS: tuple[str, ...] = ("-arch=sm_90a", "-std=c++17")


class GpuUnavailable(RuntimeError):
    """CuPy, the CUDA driver or a GPU is missing (the message says which)."""


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[object | None, str]:
    try:
        import cupy  # noqa: F401
    except Exception as e:  # ImportError, or a broken CUDA install raising at import
        return None, f"CuPy is not importable ({type(e).__name__}: {e}); install mactile[gpu]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return None, f"CuPy found no usable CUDA driver/GPU ({type(e).__name__}: {e})"
    if n < 1:
        return None, "CuPy sees no CUDA device"
    return cupy, ""


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    return _probe()[0] is not None


def gpu_skip_reason() -> str:
    """Why GPU work cannot run here ('' when it can); used for pytest skips."""
    return _probe()[1]


def require_cupy():
    """Return the ``cupy`` module or raise :class:`GpuUnavailable` naming the problem."""
    cp, why = _probe()
    if cp is None:
        raise GpuUnavailable(why)
    return cp


# --------------------------------------------------------------------------- compile
def load_source(*names: "str | os.PathLike", prelude: str = "") -> str:
    """Concatenate ``prelude`` and the named ``.cu``/``.cuh`` files.

    A plain name is a file of :data:`KERNEL_DIR`; a path (``Path``) is read as given (the
    FlexQ and NestedFP sources live beside their Python modules). ``#include "x.cuh"``
    lines are inlined from :data:`KERNEL_DIR` (NVRTC gets no include path for our folder,
    and the same inlined text is what nvcc builds), once each.
    """
    seen: set[Path] = set()

    def read(name: "str | os.PathLike") -> str:
        path = Path(name) if isinstance(name, os.PathLike) else KERNEL_DIR / name
        if path in seen:
            return ""
        seen.add(path)
        if not path.exists():
            raise FileNotFoundError(f"kernel source {str(name)!r} not found"
                                    + ("" if isinstance(name, os.PathLike) else f" in {KERNEL_DIR}"))
        text = path.read_text()
        return re.sub(r'^#include\s+"([^"]+)"[^\n]*$', lambda m: read(m.group(1)), text, flags=re.M)

    return prelude + "\n" + "".join(read(n) for n in names)


_MODULES: dict[str, object] = {}
_LOCK = threading.Lock()


def compile_module(source: str, *, name_expressions: tuple[str, ...] = (),
                   options: tuple[str, ...] = NVRTC_OPTIONS):
    """Compile ``source`` with NVRTC to a cubin and load it, cached per process and on disk.

    Not through ``cupy.RawModule(code=...)``: CuPy adds its own options after the caller's
    (``-ftz=true``, ``--device-as-default-execution-space``, an ``-arch``), and on the lent
    H100 (NVRTC 13.0, CuPy 14.2) that build flushes FP32 denormals to zero (``FMUL.FTZ`` in
    the cubin). Our scale decoders place an E4M3 subnormal scale into an FP32 denormal
    before one exact multiply (``scale_f32``), so those scales decoded to 0 and the NVRTC
    build differed from the nvcc cubins. Here NVRTC gets exactly ``options`` (plus the CUDA
    header folder), so the NVRTC and nvcc builds are the same program. The cubin and its
    name map are kept in :func:`nvrtc_cache_dir` (keyed by source, names, options and the
    NVRTC version), so a second process pays no compile time.

    The module's kernels are fetched with :func:`get_function` by their name expressions.
    """
    cp = require_cupy()
    names = tuple(name_expressions)
    key = hashlib.sha256("\0".join((source,) + names + tuple(options)).encode()).hexdigest()
    with _LOCK:
        mod = _MODULES.get(key)
        if mod is None:
            mod = _MODULES[key] = _load_nvrtc_module(cp, source, names, tuple(options), key)
    return mod


class _NvrtcModule:
    """A CuPy module loaded from our NVRTC cubin, looked up by name expression."""

    def __init__(self, raw, lowered: dict):
        self._raw, self._lowered = raw, lowered

    def get_function(self, name: str):
        return self._raw.get_function(self._lowered.get(name, name))


def nvrtc_cache_dir() -> Path:
    """Where NVRTC cubins are kept: ``$MACTILE_NVRTC_CACHE``, else ``~/.cache/mactile/nvrtc``."""
    d = os.environ.get("MACTILE_NVRTC_CACHE")
    return Path(d) if d else Path.home() / ".cache" / "mactile" / "nvrtc"


def _load_nvrtc_module(cp, source: str, names: tuple, options: tuple, key: str):
    import json

    from cupy_backends.cuda.libs import nvrtc

    ver = ".".join(map(str, nvrtc.getVersion()))
    tag = hashlib.sha256(f"{key}\0{ver}".encode()).hexdigest()[:24]
    cache = nvrtc_cache_dir()
    cubin, table = cache / f"{tag}.cubin", cache / f"{tag}.json"
    if not (cubin.exists() and table.exists()):
        binary, lowered = _nvrtc_compile(nvrtc, source, names, options)
        try:  # atomic: a reader sees a whole cubin or none
            cache.mkdir(parents=True, exist_ok=True)
            for path, data in ((cubin, binary), (table, json.dumps(lowered).encode())):
                tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, path)
        except OSError:  # no writable cache: load from a private temporary file
            with tempfile.TemporaryDirectory() as td:
                (Path(td) / "m.cubin").write_bytes(binary)
                return _NvrtcModule(cp.RawModule(path=str(Path(td) / "m.cubin")), lowered)
    return _NvrtcModule(cp.RawModule(path=str(cubin)), json.loads(table.read_text()))


def _nvrtc_compile(nvrtc, source: str, names: tuple, options: tuple) -> tuple[bytes, dict]:
    opts = list(options) + [f"-I{d}" for d in _cuda_include_dirs()]
    prog = nvrtc.createProgram(source, "mactile.cu", (), ())
    try:
        for n in names:
            nvrtc.addNameExpression(prog, n)
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as e:
            raise RuntimeError(f"NVRTC compile failed for a module with kernels {list(names)[:4]}"
                               f"...: {e}\n{nvrtc.getProgramLog(prog)[-4000:]}") from e
        return nvrtc.getCUBIN(prog), {n: nvrtc.getLoweredName(prog, n) for n in names}
    finally:
        nvrtc.destroyProgram(prog)


@functools.lru_cache(maxsize=1)
def _cuda_include_dirs() -> tuple[str, ...]:
    """The folder with ``cuda_fp16.h`` that CuPy itself compiles against."""
    found = []
    try:  # CuPy >= 14 finds the CUDA headers this way
        from cuda.pathfinder import find_nvidia_header_directory
        found.append(find_nvidia_header_directory("cudart"))
    except Exception:
        pass
    roots = [os.environ.get(v) for v in ("CUDA_PATH", "CUDA_HOME")] + ["/usr/local/cuda"]
    try:
        import cupy
        roots.insert(0, cupy.cuda.get_cuda_path())
    except Exception:
        pass
    found += [os.path.join(r, "include") for r in roots if r]
    dirs = tuple(dict.fromkeys(d for d in found if d and os.path.isfile(os.path.join(d, "cuda_fp16.h"))))
    if not dirs:
        raise RuntimeError("NVRTC needs the CUDA headers (cuda_fp16.h) and none were found: install "
                           "cupy with its CUDA toolkit headers (e.g. pip install 'cupy-cuda13x[ctk]') "
                           "or set CUDA_PATH")
    return dirs[:1]


def get_function(module, name: str, *, max_dynamic_smem: int = 0):
    """Fetch a kernel from a compiled module; raise its dynamic shared-memory limit when
    it needs more than the default 48 KB."""
    fn = module.get_function(name)
    if max_dynamic_smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = int(max_dynamic_smem)
    return fn


def check_launch(name: str, *, sync: bool = False) -> None:
    """Raise a ``RuntimeError`` naming ``name`` if the last launch (or, with ``sync``,
    anything before the sync) failed. ``cudaPeekAtLastError`` costs nothing."""
    cp = require_cupy()
    rt = cp.cuda.runtime
    try:
        err = rt.peekAtLastError() if hasattr(rt, "peekAtLastError") else 0
        if err:
            raise RuntimeError(f"{name}: launch failed: {rt.getErrorString(err)}")
        if sync:
            cp.cuda.get_current_stream().synchronize()
    except cp.cuda.runtime.CUDARuntimeError as e:
        raise RuntimeError(f"{name}: CUDA error: {e}") from e


# --------------------------------------------------------------------------- info
@functools.lru_cache(maxsize=1)
def _versions() -> tuple:
    return tuple(_versions_uncached().items())


def versions() -> dict[str, str]:
    """Versions of everything that influences a measured number (missing ones omitted;
    read once per process)."""
    return dict(_versions())


def _versions_uncached() -> dict[str, str]:
    out: dict[str, str] = {"python": platform.python_version()}
    try:
        import numpy
        out["numpy"] = numpy.__version__
    except Exception:
        pass
    try:
        from mactile import __version__
        out["mactile"] = __version__
    except Exception:
        pass
    cp = _probe()[0]
    if cp is not None:
        out["cupy"] = cp.__version__
        rt = cp.cuda.runtime
        out["cuda_runtime"] = _fmt_cuda(rt.runtimeGetVersion())
        out["cuda_driver_api"] = _fmt_cuda(rt.driverGetVersion())
        try:
            out["nvrtc"] = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
        except Exception:
            pass
    try:
        import torch
        out["torch"] = torch.__version__
        if torch.version.cuda:
            out["torch_cuda"] = torch.version.cuda
    except Exception:
        pass
    drv = _nvidia_smi_driver()
    if drv:
        out["driver"] = drv
    return out


def _fmt_cuda(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _nvidia_smi_driver() -> str:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return ""
    try:
        r = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""
    except Exception:
        return ""


@functools.lru_cache(maxsize=16)
def _device_static(dev_id: int) -> tuple:
    cp = require_cupy()
    p = cp.cuda.runtime.getDeviceProperties(dev_id)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    return tuple({
        "name": name,
        "index": dev_id,
        "compute_capability": f"{p['major']}.{p['minor']}",
        "sm_count": int(p["multiProcessorCount"]),
        "l2_bytes": int(p["l2CacheSize"]),
        "smem_per_block_optin": int(p.get("sharedMemPerBlockOptin", 0)),
        "smem_per_sm": int(p.get("sharedMemPerMultiprocessor", 0)),
        "global_mem_bytes": int(p["totalGlobalMem"]),
        "clock_khz": int(p.get("clockRate", 0)),
        "mem_clock_khz": int(p.get("memoryClockRate", 0)),
        "mem_bus_bits": int(p.get("memoryBusWidth", 0)),
    }.items())


def sm_count(device: int | None = None) -> int:
    """Multiprocessors of the current (or given) device (cached)."""
    cp = require_cupy()
    dev = device if device is not None else cp.cuda.Device().id
    return dict(_device_static(dev))["sm_count"]


def l2_bytes(device: int | None = None) -> int:
    """L2 cache size of the current (or given) device in bytes (cached)."""
    cp = require_cupy()
    dev = device if device is not None else cp.cuda.Device().id
    return dict(_device_static(dev))["l2_bytes"]


def device_info(device: int | None = None) -> dict:
    """Name, SM count, L2 size, shared-memory limits, clocks, versions and the date, for
    records (the device part is read once per process)."""
    cp = require_cupy()
    dev = device if device is not None else cp.cuda.Device().id
    out = dict(_device_static(dev))
    out["date"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    out["versions"] = versions()
    return out


# --------------------------------------------------------------------------- nvcc
@dataclass(frozen=True)
class NvccReport:
    """ptxas resource usage of every kernel in a compiled source."""

    kernels: dict[str, dict[str, int]]
    log: str

    def table(self) -> str:
        rows = [f"{'kernel':<70} regs spill_st spill_ld smem stack"]
        for k, v in sorted(self.kernels.items()):
            rows.append(f"{k[:70]:<70} {v.get('registers', 0):>4} {v.get('spill_stores', 0):>8} "
                        f"{v.get('spill_loads', 0):>8} {v.get('smem', 0):>4} {v.get('stack', 0):>5}")
        return "\n".join(rows)


def nvcc_check(source: str, *, arch: str = "90a", extra: tuple[str, ...] = (),
               keep_ptx: str | os.PathLike | None = None,
               cubin_out: str | os.PathLike | None = None) -> NvccReport:
    """Compile ``source`` with the local ``nvcc`` to a cubin for ``sm_<arch>`` and parse
    ``-Xptxas -v`` (the cubin is kept at ``cubin_out`` when given). Raises
    ``RuntimeError`` with the compiler log on failure."""
    exe = shutil.which("nvcc")
    if not exe:
        raise RuntimeError("nvcc is not on PATH")
    with tempfile.TemporaryDirectory() as td:
        src = Path(td) / "k.cu"
        src.write_text(source)
        cmd = [exe, f"-gencode=arch=compute_{arch},code=sm_{arch}", "-cubin", "-std=c++17",
               "-Xptxas", "-v", "-o", str(Path(td) / "k.cubin"), str(src), *extra]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"nvcc failed:\n{r.stderr[-6000:]}")
        if cubin_out:
            shutil.copyfile(Path(td) / "k.cubin", cubin_out)
        if keep_ptx:
            subprocess.run([exe, f"-gencode=arch=compute_{arch},code=compute_{arch}", "-ptx",
                            "-std=c++17", "-o", str(keep_ptx), str(src), *extra], check=True)
    kernels: dict[str, dict[str, int]] = {}
    cur = None
    for line in r.stderr.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = m.group(1)
            kernels[cur] = {}
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            kernels[cur].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            kernels[cur]["registers"] = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            if m2:
                kernels[cur]["smem"] = int(m2.group(1))
    return NvccReport(kernels=kernels, log=r.stderr)
