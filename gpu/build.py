"""Kernel instantiation: one combined source (generated golden constants + the ``.cu``
templates), compiled per instantiation with NVRTC, or loaded from a cubin prebuilt with
the local ``nvcc`` (``python -m mactile.gpu.build --prebuild DIR``; set
``MACTILE_CUBIN_DIR=DIR`` to use it). A prebuilt cubin is used only when its recorded
source hash equals the current source's, so a stale build can never be picked up.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import sys
from pathlib import Path

from .formats import prelude, reset_header
from .runtime import compile_module, load_source, nvcc_check, require_cupy

__all__ = ["FAMILIES", "full_source", "source_key", "kernel", "prebuild", "default_instances"]

#: family -> (C++ name template, kernel source file); template args by keyword.
FAMILIES = {
    "w4a16_tc": "mt::w4a16_tc<{F}, {MT}, {KT}, {S}>",
    "w4a16_cc": "mt::w4a16_cc<{F}, {MT}, {S}>",
    "w4a4_gemv": "mt::w4a4_gemv<{MT}, {S}>",
    "nvfp4_quantize_act": "nvfp4_quantize_act",  # extern "C", global namespace
    "reset_temperature_step": "mt::reset_temperature_step<{CL}, {R}>",
}
_ARGS = {"w4a16_tc": ("F", "MT", "KT", "S"), "w4a16_cc": ("F", "MT", "S"), "w4a4_gemv": ("MT", "S"),
         "nvfp4_quantize_act": (), "reset_temperature_step": ("CL", "R")}
_FILES = ("w4a16_tc.cu", "w4a16_cc.cu", "w4a4.cu", "reset_temperature.cu")


@functools.lru_cache(maxsize=1)
def full_source() -> str:
    return load_source(*_FILES, prelude=prelude() + reset_header())


def source_key() -> str:
    return hashlib.sha256(full_source().encode()).hexdigest()[:16]


def _expr(family: str, targs: dict) -> str:
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}")
    want = _ARGS[family]
    if set(targs) != set(want):
        raise ValueError(f"{family} takes template arguments {want}, got {sorted(targs)}")
    return FAMILIES[family].format(**targs)


def _mangled_key(name: str) -> tuple[str, tuple[int, ...]] | None:
    """(family, template args) of a mangled kernel name from nvcc's log."""
    if name in FAMILIES:
        return name, ()
    m = re.match(r"_ZN2mt(\d+)(\w+?)I((?:Li-?\d+E)+)E", name)
    if not m:
        return None
    fam = m.group(2)[: int(m.group(1))]
    args = tuple(int(a) for a in re.findall(r"Li(-?\d+)E", m.group(3)))
    return fam, args


@functools.lru_cache(maxsize=8)
def _prebuilt(dirpath: str, key: str):
    d = Path(dirpath)
    man = d / f"{key}.json"
    cub = d / f"{key}.cubin"
    if not (man.exists() and cub.exists()):
        return None
    cp = require_cupy()
    names = json.loads(man.read_text())["kernels"]
    return cp.RawModule(path=str(cub)), names


_KERNELS: dict = {}
_SMEM_SET: dict = {}


def kernel(family: str, *, smem: int = 0, **targs):
    """The CuPy kernel function of one instantiation (cached); ``smem`` raises its dynamic
    shared-memory limit once (not per launch: launches may be inside a graph capture)."""
    k = _kernel(family, **targs)
    if smem > 48 * 1024 and _SMEM_SET.get(id(k), 0) < smem:
        k.max_dynamic_shared_size_bytes = int(smem)
        _SMEM_SET[id(k)] = int(smem)
    return k


def _kernel(family: str, **targs):
    expr = _expr(family, targs)
    k = _KERNELS.get(expr)
    if k is not None:
        return k
    pre = os.environ.get("MACTILE_CUBIN_DIR")
    if pre:
        got = _prebuilt(pre, source_key())
        if got is not None:
            mod, names = got
            key = f"{family}|{','.join(str(targs[a]) for a in _ARGS[family])}"
            if key in names:
                k = mod.get_function(names[key])
    if k is None:
        mod = compile_module(full_source(), name_expressions=(expr,))
        k = mod.get_function(expr)
    _KERNELS[expr] = k
    return k


def default_instances() -> list[tuple[str, dict]]:
    """Every instantiation the Python wrappers and the benchmark use."""
    from .w4a16 import CC_STAGES, TC_CONFIGS, TC_STAGE_SWEEP
    from .w4a4 import W4A4_M1_STAGES, w4a4_stages
    from .temperature import CLUSTERS, R_CHOICES

    out = []
    for F in (0, 1, 2):
        for (MT, KT, S) in sorted(set(TC_CONFIGS.values())):
            out.append(("w4a16_tc", {"F": F, "MT": MT, "KT": KT, "S": S}))
        for MT in (1, 2, 4, 8):
            out.append(("w4a16_cc", {"F": F, "MT": MT, "S": CC_STAGES}))
    have = {(a["F"], a["MT"], a["KT"], a["S"]) for f, a in out if f == "w4a16_tc"}
    for MT, stages in TC_STAGE_SWEEP.items():
        KT = next(kt for (mt, kt, s) in TC_CONFIGS.values() if mt == MT)
        for S in stages:
            if (0, MT, KT, S) not in have:
                out.append(("w4a16_tc", {"F": 0, "MT": MT, "KT": KT, "S": S}))
    for MT in (1, 2, 4, 8):
        out.append(("w4a4_gemv", {"MT": MT, "S": w4a4_stages(MT)}))
    for S in W4A4_M1_STAGES:
        if S != w4a4_stages(1):
            out.append(("w4a4_gemv", {"MT": 1, "S": S}))
    out.append(("nvfp4_quantize_act", {}))
    for CL in CLUSTERS:
        for R in R_CHOICES:
            out.append(("reset_temperature_step", {"CL": CL, "R": R}))
    return out


def prebuild(outdir, instances=None, *, report: bool = True) -> Path:
    """Compile every instance with the local nvcc (sm_90a) into ``outdir/<key>.cubin`` plus
    a manifest; print the ptxas resource table."""
    instances = instances or default_instances()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    src = full_source()
    refs = ",\n    ".join(f"(void*)&{_expr(f, a)}" for f, a in instances if _ARGS[f])
    refs_c = ",\n    ".join(f"(void*)&{FAMILIES[f]}" for f, a in instances if not _ARGS[f])
    inst = (f"\n// force instantiation (host references)\nstatic void* mactile_instances[] = {{\n    "
            f"{refs}{',' if refs_c else ''}\n    {refs_c}\n}};\n"
            "void* mactile_instances_keep() { return mactile_instances; }\n")
    key = source_key()
    rep = nvcc_check(src + inst, cubin_out=outdir / f"{key}.cubin")
    names = {}
    for mangled in rep.kernels:
        mk = _mangled_key(mangled)
        if mk:
            fam, args = mk
            names[f"{fam}|{','.join(map(str, args))}"] = mangled
    missing = [f"{f}|{','.join(str(a[x]) for x in _ARGS[f])}" for f, a in instances
               if f"{f}|{','.join(str(a[x]) for x in _ARGS[f])}" not in names]
    if missing:
        raise RuntimeError(f"prebuild: no kernel found for {missing}")
    (outdir / f"{key}.json").write_text(json.dumps({"key": key, "kernels": names,
                                                    "resources": rep.kernels}, indent=1))
    if report:
        print(rep.table())
    return outdir / f"{key}.cubin"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prebuild", metavar="DIR", help="compile every instance with nvcc into DIR")
    ap.add_argument("--key", action="store_true", help="print the source key")
    a = ap.parse_args(argv)
    if a.key:
        print(source_key())
    if a.prebuild:
        print(prebuild(a.prebuild))
    return 0


if __name__ == "__main__":
    sys.exit(main())
