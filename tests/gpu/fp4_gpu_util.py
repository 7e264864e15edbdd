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


def exact_case_weight(fmt, N, K, rng):
    """Random codes, scales in a narrow range, unit tensor scale: with small-integer
    activations (multiples of 1/8 up to 1) every product and partial sum is exact in FP32,
    so the kernels must match the float64 reference exactly. razer-g128: power-of-two
    scales 2^-3 .. 1 (the engine moves its accumulators between blocks by the ratio of two
    scales, exact for powers of two) and blocks of scale 0 (a whole row and scattered ones;
    the packer gives them the zero code and scale 1)."""
    from mactile.gpu.packing import quantized_from_arrays

    codes = rng.integers(0, 16, (N, K), dtype=np.uint8)
    nb = K // fmt.block_size
    if fmt.name == "nvfp4":
        sc = (rng.integers(6, 10, (N, nb)) << 3 | rng.integers(0, 8, (N, nb))).astype(np.uint8)
    elif fmt.name == "mxfp4":
        sc = rng.integers(124, 129, (N, nb)).astype(np.uint8)
    elif fmt.name == "razer":
        sc = (rng.integers(2, 6, (N, nb)) << 3 | rng.integers(0, 8, (N, nb))
              | rng.integers(0, 4, (N, nb)) << 6).astype(np.uint8)
    else:
        sc = (rng.integers(12, 16, (N, nb)) << 10).astype(np.uint16)
        sc[rng.random((N, nb)) < 0.1] = 0
        sc[5] = 0
        sc |= (rng.integers(0, 4, (N, nb)) << 14).astype(np.uint16)
    return quantized_from_arrays(fmt, codes, sc, 1.0)


def load_benchmark_script(name: str):
    """The module of ``benchmarks/<name>.py`` (not a package: loaded by path, CPU only)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
