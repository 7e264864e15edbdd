"""Kernels from cubins built ahead of time with the local nvcc, else NVRTC on the device:
the one build module of every kernel family.

NVRTC compiles of the large unrolled instantiations take seconds each, and on a lent GPU
every second counts. ``python -m mactile.gpu.prebuilt OUTDIR`` compiles the
instantiations that the tests and benchmarks use with the local ``nvcc`` (sm_90a) into
chunk files ``OUTDIR/<digest>-<chunk>-<names hash>.cubin`` plus a name map
``OUTDIR/<digest>.json``; :func:`get_kernel` loads from there when the environment
variable ``MACTILE_CUBIN_DIR`` names that folder and the source digest (source text +
NVRTC options) matches, and otherwise compiles the same source with NVRTC through
:func:`mactile.gpu.runtime.compile_module`. Either way the kernel is the same source.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import runtime

__all__ = ["get_kernel", "digest", "build"]

_LOADED: dict[str, object] = {}
#: (source, name, smem) -> function: a lookup costs a dictionary hit, not a digest of the
#: source and a read of the name table (about 1 ms of host time per launch otherwise, which
#: an eager prefill of 224 layers pays in full).
_FUNCS: dict = {}
_TABLES: dict = {}


def digest(source: str) -> str:
    return hashlib.sha256(("\0".join((source,) + tuple(runtime.NVRTC_OPTIONS))).encode()).hexdigest()[:20]


def _norm(name: str) -> str:
    return re.sub(r"\s+", "", name)


def get_kernel(source: str, name: str, *, max_dynamic_smem: int = 0):
    """The kernel ``name`` (a name expression such as ``ns::k<1, 2>``) of ``source``
    (looked up once per process and cached)."""
    d = os.environ.get("MACTILE_CUBIN_DIR")
    key = (source, name, int(max_dynamic_smem), d)
    fn = _FUNCS.get(key)
    if fn is None:
        fn = _FUNCS[key] = _get_kernel(source, name, max_dynamic_smem, d)
    return fn


def _name_table(d: str, dg: str) -> dict | None:
    t = _TABLES.get((d, dg))
    if t is None:
        table_path = Path(d) / f"{dg}.json"
        if not table_path.exists():
            return None
        t = _TABLES[(d, dg)] = json.loads(table_path.read_text())
    return t


def _get_kernel(source: str, name: str, max_dynamic_smem: int, d: str | None):
    cp = runtime.require_cupy()
    if d:
        dg = digest(source)
        table = _name_table(d, dg)
        if table is not None:
            hit = table.get(_norm(name))
            if hit:
                file, lowered = hit
                mod = _LOADED.get(file)
                if mod is None:
                    mod = _LOADED[file] = cp.RawModule(path=str(Path(d) / file))
                fn = mod.get_function(lowered)
                if max_dynamic_smem > 48 * 1024:
                    fn.max_dynamic_shared_size_bytes = int(max_dynamic_smem)
                return fn
    mod = runtime.compile_module(source, name_expressions=(name,))
    return runtime.get_function(mod, name, max_dynamic_smem=max_dynamic_smem)


def _compile_chunk(nvcc, source, names, cubin):
    td = Path(tempfile.mkdtemp(prefix="mactile-cubin-"))
    keep = ",\n".join(f"  (void*)&{n}" for n in names)
    (td / "k.cu").write_text(source + "\nnamespace { void* mactile_keep[] = {\n" + keep + "\n}; }\n")
    if not cubin.exists():  # a chunk's file name carries the source digest
        r = subprocess.run([nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-std=c++17",
                            "-diag-suppress", "177", "-o", str(cubin) + ".tmp", str(td / "k.cu")],
                           capture_output=True, text=True)
        if r.returncode == 0:
            os.replace(str(cubin) + ".tmp", cubin)
    else:
        r = subprocess.CompletedProcess([], 0, "", "")
    if r.returncode:
        raise RuntimeError(f"nvcc failed for {cubin.name}:\n{r.stderr[-4000:]}")
    syms = subprocess.run(["readelf", "-sW", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    mangled = sorted({ln.split()[-1] for ln in syms.splitlines() if " FUNC " in ln and "GLOBAL" in ln})
    dem = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    table = {}
    for m, dm in zip(mangled, dem):
        mm = re.match(r"(?:void )?(.*?)\(", dm)
        table[_norm(mm.group(1) if mm else dm)] = [cubin.name, m]  # extern "C": the plain name
    missing = [n for n in names if _norm(n) not in table]
    if missing:
        raise RuntimeError(f"{cubin.name} lacks {missing}")
    return table


def build(jobs, outdir, *, workers: int = 2, chunk: int = 6) -> list[Path]:
    """Compile ``[(source, [names...]), ...]`` with the local nvcc into ``outdir``."""
    from concurrent.futures import ThreadPoolExecutor
    nvcc = shutil.which("nvcc")
    if not nvcc:
        raise RuntimeError("nvcc is not on PATH")
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = []
    for source, names in jobs:
        names = sorted(set(names))
        dg = digest(source)
        for i in range(0, len(names), chunk):
            part = names[i:i + chunk]
            # the chunk's names are part of its file name: a cubin is reused only for the same
            # source and the same kernels (a changed name list once met an old chunk file)
            nh = hashlib.sha256("\n".join(part).encode()).hexdigest()[:8]
            tasks.append((dg, source, part, out / f"{dg}-{i // chunk}-{nh}.cubin"))
    tables: dict[str, dict] = {}
    with ThreadPoolExecutor(workers) as ex:
        futs = [(dg, ex.submit(_compile_chunk, nvcc, src, nm, cb)) for dg, src, nm, cb in tasks]
        for dg, f in futs:
            tables.setdefault(dg, {}).update(f.result())
    keep = {t[3].name for t in tasks}
    for dg, t in tables.items():
        tmp = out / f"{dg}.json.tmp"
        tmp.write_text(json.dumps(t, indent=0))
        os.replace(tmp, out / f"{dg}.json")
        for old in out.glob(f"{dg}-*.cubin"):  # chunks of this source no table names any more
            if old.name not in keep:
                old.unlink()
    return [t[3] for t in tasks]


def _jobs():
    """Every kernel family's instantiations (engine, CUDA-core/ReSET, FlexQ, NestedFP, the
    decoder's ops)."""
    from .build import prebuilt_jobs as bj
    from .decode_ops import prebuilt_jobs as dj
    from .engine import prebuilt_jobs as ej
    from .flexq.kernels import prebuilt_jobs as fj
    from .nestedfp.kernels import prebuilt_jobs as nj
    return ej() + bj() + fj() + nj() + dj()


if __name__ == "__main__":
    outdir = sys.argv[1] if len(sys.argv) > 1 else "out/cubins"
    for p in build(_jobs(), outdir):
        print(p)
