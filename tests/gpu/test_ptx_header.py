"""Inline PTX lives in gpu/kernels/ptx.cuh alone (issue 15): every kernel family includes it,
and its loader inlines it, so NVRTC and nvcc compile the same wrappers."""
import re
import shutil
from pathlib import Path

import pytest

from mactile.gpu import runtime
from mactile.gpu.flexq.kernels import _source as flexq_source
from mactile.gpu.nestedfp.kernels import _source as nestedfp_source

GPU = Path(runtime.KERNEL_DIR).parent
ASM = re.compile(r"\basm\s*(volatile\s*)?\(")


@pytest.mark.parametrize("path", sorted(p.relative_to(GPU).as_posix()
                                        for p in GPU.rglob("*.cu*") if p.name != "ptx.cuh"))
def test_no_inline_ptx_outside_ptx_cuh(path):
    text = (GPU / path).read_text()
    hits = [ln.strip() for ln in text.splitlines() if ASM.search(ln.split("//")[0])]
    assert hits == [], f"{path} defines inline PTX; add the wrapper to kernels/ptx.cuh: {hits}"


@pytest.mark.parametrize("source", [lambda: flexq_source("k128"), nestedfp_source],
                         ids=["flexq", "nestedfp"])
def test_family_source_inlines_ptx_header(source):
    text = source()
    assert text.count("namespace ptx {") == 1
    assert not re.search(r'^#include\s+"', text, flags=re.M)


def _pdl_cases():
    from mactile.gpu import build, engine
    from mactile.gpu.flexq import kernels as fk
    from mactile.gpu.nestedfp import kernels as nfp_kernels
    from mactile.gpu.w4a4 import ROWS_MT, ROWS_NW
    [(fsrc, _)] = fk.prebuilt_jobs()[:1]
    fnames = [fk._gemm_name(q, c, "float16") for q in fk.ACT_BITS
              for c in (fk.SMALL_M_CONFIG, fk.SMALL_M_NARROW_CONFIG)]
    # the activation quantizer is PDL-launched too (QUANT_PDL_MAX_M): it must wait as well
    fnames += [f"flexq::flexq_quantize_pack<{q}, {fk.ACT_TILE}>" for q in fk.ACT_BITS]
    return [("w4a4", build.full_source(), ["mt::w4a4_gemv<1, 3>", "mt::w4a4_gemv<8, 4>", "nvfp4_quantize_act",
                                           "nvfp4_quantize_act_solo"]),
            ("w4a4_rows", build.full_source(), [build.FAMILIES["w4a4_gemv_rows"].format(MT=MT, NW=NW)
                                                for MT in ROWS_MT for NW in ROWS_NW]
             + ["nvfp4_quantize_act", "nvfp4_quantize_act_solo"]),  # extern "C": always in the module
            ("engine", engine.engine_source(), [engine.engine_name("nvfp4", engine.config_for("nvfp4", 1))]),
            ("flexq", fsrc, fnames),
            ("nestedfp", nfp_kernels._source(), ["nfp::nestedfp_quant_e4m3"]),
            ("engine_fp8", engine.engine_source(), [engine.engine_name("nestedfp8", engine.config_for("nestedfp8", 1))])]


def _compile_case(case, **out):
    """nvcc-compile one case's kernels (kept by address); returns the kernel names."""
    [(_, src, names)] = [c for c in _pdl_cases() if c[0] == case]
    keep = ", ".join(f"(void*)&{n}" for n in names)
    runtime.nvcc_check(src + f"\nnamespace {{ void* keep_[] = {{ {keep} }}; }}\n",
                       extra=("-diag-suppress", "177"), **out)
    return names


#: Loads a case may issue before the wait (PTX pattern, SASS pattern, the kernels they
#: apply to: a pattern of the mangled name; the case's other kernels load nothing there):
#: FlexQ's GEMM
#: requests its first weights and weight scales there (``const __restrict__``, read
#: through the non-coherent path: 16-byte streaming loads and FP16 scale loads), never its
#: activations (plain loads: v2/v4 planes without ``L1::no_allocate``, 32-bit scale pairs).
PREFETCH = {"flexq": (r"ld\.global\.nc\.L1::no_allocate\.v4\.u32|ld\.global\.nc\.u16\b",
                      r"LDG\.E\.NA\.128\.CONSTANT|LDG\.E\.U16\.CONSTANT", "flexq_gemm"),
            # the row-streaming W4A4 GEMV: its first item's weight codes and scales (16-byte
            # streaming loads); activations and the tensor scale are L2 loads (ld.global.cg)
            "w4a4_rows": (r"ld\.global\.nc\.L1::no_allocate\.v4\.u32", r"LDG\.E\.NA\.128\.CONSTANT",
                          "w4a4_gemv_rows")}


def _assert_no_load_before_wait(bodies, name_of, wait, is_load, n_kernels, prefetch=None, prefetchers=None):
    """In every function body that contains ``wait``, no line before it is a load (other
    than ``prefetch`` matches in the kernels whose name matches ``prefetchers``, which must
    then be there); and ``n_kernels`` bodies wait (every kernel of the case is PDL-ready)."""
    waited = 0
    for body in bodies:
        if wait not in body:
            continue
        waited += 1
        loads = [ln.strip() for ln in body.split(wait, 1)[0].splitlines() if is_load(ln)]
        if prefetch is not None and re.search(prefetchers, name_of(body)):
            early = [ln for ln in loads if re.search(prefetch, ln)]
            assert early, f"{name_of(body)}: no weight load before {wait} (the prefetch is gone)"
            loads = [ln for ln in loads if ln not in early]
        assert loads == [], f"{name_of(body)}: loads before {wait}: {loads[:3]}"
    assert waited == n_kernels


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("case", ["w4a4", "w4a4_rows", "engine", "flexq", "nestedfp", "engine_fp8"])
def test_no_global_load_before_griddepcontrol_wait(case, tmp_path):
    """Programmatic dependent launch: a kernel may start while the previous one still writes
    its inputs, so no global load may precede ``griddepcontrol.wait`` in the PTX (weights
    go by cp.async / bulk copies, which may, or by the loads of :data:`PREFETCH`). NVVM
    hoists loads it deems invariant
    (``const __restrict__``, ``__ldg``) above the wait: the W4A4 GEMV's tensor-scale load
    did, and read the previous layer's (caught by the PDL chain test on the GPU)."""
    ptx = tmp_path / "k.ptx"
    names = _compile_case(case, keep_ptx=ptx)
    _assert_no_load_before_wait(re.split(r"^\.(?:visible )?\.entry ", ptx.read_text(), flags=re.M)[1:],
                                lambda body: body.split("(", 1)[0], "griddepcontrol.wait",
                                lambda ln: re.match(r"\s*(@%p\d+\s+)?ld\.global", ln), len(names),
                                *PREFETCH.get(case, (None, None, None))[::2])


def _cuobjdump():
    """cuobjdump from PATH or from the optional ``nvidia-cuda-cuobjdump`` wheel (with
    ``nvidia-cuda-nvdisasm``); None when neither is installed."""
    exe = shutil.which("cuobjdump")
    if exe:
        return exe, None
    try:
        import nvidia  # noqa: PLC0415
    except ImportError:
        return None, None
    for root in getattr(nvidia, "__path__", []):
        for b in Path(root).glob("cu*/bin"):
            if (b / "cuobjdump").exists() and (b / "nvdisasm").exists():
                return str(b / "cuobjdump"), str(b)
    return None, None


@pytest.mark.skipif(shutil.which("nvcc") is None or _cuobjdump()[0] is None,
                    reason="needs nvcc and cuobjdump (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("case", ["w4a4", "w4a4_rows", "engine", "flexq", "nestedfp", "engine_fp8"])
def test_sass_no_global_load_before_acqbulk(case, tmp_path):
    """The same rule in the SASS: ptxas moves non-coherent loads (``ld.global.nc``) above
    ``griddepcontrol.wait`` (ACQBULK) even where the PTX has them after it -- the W4A4
    GEMV's ``__ldg`` of the tensor scale did. These kernels bring weights by LDGSTS /
    bulk copies, so no LDG may come before ACQBULK at all; FlexQ's GEMM and the
    row-streaming W4A4 GEMV only the weight loads of :data:`PREFETCH` (and some must)."""
    import os
    import subprocess
    cubin = tmp_path / "k.cubin"
    names = _compile_case(case, cubin_out=cubin)
    exe, bindir = _cuobjdump()
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}") if bindir else None
    sass = subprocess.run([exe, "-sass", str(cubin)], capture_output=True, text=True, check=True,
                          env=env).stdout
    _assert_no_load_before_wait(re.split(r"^\s*Function : ", sass, flags=re.M)[1:],
                                lambda body: body.split("\n", 1)[0].strip(), "ACQBULK",
                                lambda ln: re.search(r"\bLDG\.", ln), len(names),
                                *PREFETCH.get(case, (None, None, None))[1:])
