"""Shared helpers of the GPU tests (imported by test modules; no tests here)."""
import numpy as np
import pytest

from mactile.gpu.runtime import gpu_skip_reason

_WHY = gpu_skip_reason()
#: Apply to every GPU test module: marked `gpu`, skipped with the reason when there is no GPU.
GPU = [pytest.mark.gpu, pytest.mark.skipif(bool(_WHY), reason=f"no GPU: {_WHY}")]


def cupy():
    import cupy as cp
    return cp


def poisoned(shape, dtype):
    """A device buffer full of NaN (unwritten outputs stay NaN and are caught)."""
    cp = cupy()
    return cp.full(shape, np.nan, dtype=dtype)


def replay_in_graph(run, outputs, times: int = 2) -> None:
    """Capture ``run()`` ``times`` times into a CUDA graph on a fresh stream (after one eager warm-up
    run that sizes workspaces and loads kernels), poison ``outputs`` with NaN, replay it
    once and wait: what ``outputs`` then hold came from the graph."""
    cp = cupy()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        run()
        stream.begin_capture()
        for _ in range(times):
            run()
        g = stream.end_capture()
        for y in outputs:
            y.fill(np.nan)
        g.launch(stream)
        stream.synchronize()
