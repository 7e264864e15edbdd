"""Checkpoint weights on the GPU engine: the peers' NVFP4 files and a gpt-oss MXFP4 expert,
read into golden Quantized (no float detour), packed and run against the golden GEMM."""
from pathlib import Path

import numpy as np
import pytest

from fp4_gpu_util import GPU, cupy, poisoned
from mactile.golden import MXFP4, NVFP4
from mactile.golden import checkpoints as C
from mactile.gpu.check import check_close, reference
from mactile.gpu.packing import pack_w4a16

pytestmark = GPU
DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoints"


def _run(q, M, rng):
    from mactile.gpu import gemm_tc

    cp = cupy()
    pw = pack_w4a16(q).to(cp)
    K = q.shape[-1]
    x = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
    y = poisoned((M, q.shape[0]), np.float32)
    gemm_tc(cp.asarray(x), pw, out=y, sync=True)
    y_ref, abs_sum = reference(x, q.dequantize())
    check_close(y.get(), y_ref, abs_sum, K, what=f"checkpoint/{q.format.name}")


@pytest.mark.parametrize("folder", ["ct_nvfp4", "modelopt_nvfp4"])
@pytest.mark.parametrize("M", [1, 16])
def test_peer_nvfp4_layers_on_the_engine(folder, M, rng):
    ck = C.Checkpoint(DATA / folder)
    for w in ck.items(ck.layout()):
        if isinstance(w, C.LayerWeight):
            _run(w.quantized, M, rng)


@pytest.mark.parametrize("layout", ["compressed-tensors-nvfp4", "gpt-oss-mxfp4"])
def test_written_then_read_layers_on_the_engine(layout, tmp_path, rng):
    fmt = NVFP4() if "nvfp4" in layout else MXFP4()
    shape = (203, 1152) if layout.startswith("compressed") else (2, 203, 1152)
    q = fmt.quantize(rng.standard_normal(shape).astype(np.float32))
    w = C.layer_from_quantized("l.experts.w" if len(shape) == 3 else "l", q, C.LAYOUTS[layout])
    p = tmp_path / "m.safetensors"
    C.write_safetensors(p, C.layer_tensors(w))
    ck = C.Checkpoint(p)
    (back,) = [it for it in ck.items(ck.layout()) if isinstance(it, C.LayerWeight)]
    for m in (1, 37):
        _run(back.quantized if len(shape) == 2 else back.select(1), m, rng)
