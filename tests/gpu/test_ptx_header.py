"""Inline PTX lives in gpu/kernels/ptx.cuh alone (issue 15): every kernel family includes it,
and its loader inlines it, so NVRTC and nvcc compile the same wrappers."""
import re
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
