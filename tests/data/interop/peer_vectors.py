"""Test vectors made by the peers themselves: torchao's and microxcaling's FP4 quantizers.

Run where the peers are installed (never a project dependency)::

    python -m venv .peers-venv && .peers-venv/bin/pip install torch torchao packaging numpy
    # microxcaling is not on PyPI: a checkout of github.com/microsoft/microxcaling
    MICROXCALING=/path/to/microxcaling .peers-venv/bin/python tests/data/interop/peer_vectors.py

It writes ``torchao.npz`` and ``microxcaling.npz`` beside itself (each peer optional: a peer
that is not importable is skipped with a note). Each file holds

``x.<case>``
    the float32 input of one case (shape ``(8, 64)``: blocks along the last axis);
``y.<config>.<case>``
    the peer's dequantized output, float32, exactly as the peer returns it;
``codes.<config>.<case>``, ``scales.<config>.<case>``
    torchao only: its FP4 codes (one per byte, unpacked) and its scale bytes (E4M3 or E8M0);
``meta``
    JSON: the peers' versions (microxcaling: its git commit), and per config the call made
    and where the peer implements it.

``tests/golden/test_interop.py`` checks mactile's conventions against these files bit for
bit in CI (no torch needed), and calls :func:`torchao_configs` / :func:`microxcaling_run`
on fresh random data where the peers are importable.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SHAPE = (8, 64)


# --------------------------------------------------------------------------- inputs
def _next(v, k, toward):
    v = np.float32(v)
    for _ in range(k):
        v = np.nextafter(v, np.float32(toward))
    return v


def _e4m3_values() -> np.ndarray:
    vals = [m / 8 * 2.0 ** -6 for m in range(8)]
    vals += [2.0 ** e * (1 + m / 8) for e in range(-6, 9) for m in range(8)]
    return np.array(sorted(v for v in vals if v <= 448))


def _two_level_order(rng, shape):
    """NVFP4 with a tensor scale ``T``: block maxima whose scale arguments ``amax/(T*6)``
    and ``(amax/6)/T`` fall on different sides of an E4M3 midpoint, and elements at FP4
    ties of ``T * s`` (where ``x/(T*s)`` and ``x*((1/T)/s)`` part)."""
    f = np.float32
    x = rng.uniform(-1, 1, shape) * 0.25
    r, c = shape
    big = f(rng.uniform(1500, 2500))
    t = big / f(2688)
    vals = _e4m3_values()
    fp4_ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    for b in range(1, r * c // 16):
        row, col = divmod(b * 16, c)
        for _ in range(200):  # a midpoint and a block max a few ulps around mid * T * 6
            i = int(rng.integers(24, len(vals) - 2))
            lo, hi = vals[i], vals[i + 1]
            mid = (lo + hi) / 2
            a = _next(mid * 6 * float(t), int(rng.integers(0, 8)), 0.0 if rng.random() < .5 else np.inf)
            s1, s2 = a / (t * f(6)), (a / f(6)) / t
            if (s1 - mid) * (s2 - mid) < 0 or (s1 == mid) != (s2 == mid):
                break
        x[row, col:col + 16] *= float(a)
        x[row, col] = float(a)
        x[row, col + 1:col + 8] = fp4_ties * float(f(float(t) * lo))  # ties of either scale
        x[row, col + 8:col + 15] = fp4_ties * float(f(float(t) * hi))
    x[0, 0] = big
    return x


def cases(rng: np.random.Generator, shape=SHAPE) -> dict[str, np.ndarray]:
    """The named kinds of input, float32 ``shape`` each (rows of 64 = 4 NVFP4 blocks or 2 MX
    blocks). The first ten are ordinary data; the rest aim at one convention or one edge."""
    r, c = shape

    def blocks_of(v, size):  # one value per block, repeated over it
        return np.repeat(np.asarray(v, np.float64).reshape(r, c // size), size, axis=1)

    out = {
        "normal": rng.standard_normal(shape),
        "uniform": rng.uniform(-1, 1, shape),
        "heavy-tailed": rng.standard_t(2, shape),
        "laplace": rng.laplace(0, 1, shape),
        "wide-range": rng.standard_normal(shape) * blocks_of(np.exp2(rng.uniform(-24, 24, r * c // 16)), 16),
        "outliers": np.where(rng.random(shape) < 0.02, 200.0, 1.0) * rng.standard_normal(shape),
        "small": rng.standard_normal(shape) * 1e-3,  # torchao's E4M3 scale floor bites
        "large": rng.standard_normal(shape) * 1e30,
        "activations": np.maximum(rng.standard_normal(shape), 0) * 3,  # ReLU-like, many zeros
        "weights-fp16": (rng.standard_normal(shape) * 0.02).astype(np.float16),
    }
    # Exact ties of FP4 after scaling, for power-of-two scales (MX) and for E4M3 scales that
    # are not powers of two (NVFP4 without a tensor scale: x / s is exact, x * (1/s) is not).
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0])
    signs = rng.choice([-1.0, 1.0], shape)
    pick = mids[rng.integers(0, len(mids), shape)]
    pick[:, ::16] = 6.0  # each 16-block's max maps to 6, so 6 * s is the block max
    s_e4m3 = np.array([1.125, 1.375, 0.625, 0.8125, 2.25, 3.75, 1.0, 0.5])[rng.integers(0, 8, (r, c // 16))]
    out["ties-e4m3-scale"] = signs * pick * np.repeat(s_e4m3, 16, axis=1)
    pick_mx = pick.copy()
    pick_mx[:, ::32] = 4.0  # 32-block max 4 * 2**k: scale 2**k exactly (floor rule)
    out["ties-pow2-scale"] = signs * pick_mx * blocks_of(np.exp2(rng.integers(-10, 10, r * c // 32)), 32)
    # Signed zeros: -0.0 input, negatives that round to zero, all-zero blocks.
    z = rng.standard_normal(shape)
    z[rng.random(shape) < 0.3] = -0.0
    z[rng.random(shape) < 0.1] = 0.0
    z[rng.random(shape) < 0.1] *= -1e-6
    z[0] = -0.0
    z[1, :32] = 0.0
    out["signed-zeros"] = z
    # FP32 subnormals, and blocks near the bottom of E8M0 (2**-127) and of FP32 normals.
    sub = rng.standard_normal(shape) * 1e-40
    sub[:4] = rng.standard_normal((4, c)) * blocks_of(np.exp2(rng.integers(-130, -118, r * c // 32)), 32)[:4]
    out["tiny"] = sub
    # Block maxima a few ulps below and above powers of two (the peers' float32 log2), and
    # NVFP4 scale arguments just past E4M3 midpoints.
    edge = rng.uniform(-1, 1, shape)
    ks = rng.integers(-60, 60, r * c // 32)
    for b, k in enumerate(ks):
        row, col = divmod(b * 32, c)
        sign = 1 if b % 2 else -1
        below = b % 4 < 2
        ulps = int(rng.integers(0, 24))  # 0: exactly 2**k (CEIL vs FLOOR)
        v = _next(2.0 ** k, ulps, 0.0 if below else np.inf) if below else \
            _next(6 * 2.0 ** k, ulps, np.inf)  # RCEIL: amax / 6 just above 2**k
        edge[row, col:col + 32] *= float(v) * 0.25
        edge[row, col + int(rng.integers(0, 32))] = sign * float(v)
    out["pow2-edges"] = edge
    # A few ulps either side of the FP4 ties, power-of-two block scales (rounding by
    # adding 0.5 in FP32, as microxcaling's floor(|x| + 0.5), misses some of them).
    near = np.empty(shape)
    for b in range(r * c // 32):
        row, col = divmod(b * 32, c)
        k = int(rng.integers(-20, 20))
        vals = [_next(m, int(rng.integers(1, 4)), np.inf if rng.random() < 0.5 else 0.0)
                for m in mids[rng.integers(0, 7, 31)]]
        near[row, col:col + 32] = np.ldexp(np.array([4.0] + [float(v) for v in vals]), k)
    out["near-ties"] = near * rng.choice([-1.0, 1.0], shape)
    out["two-level-order"] = _two_level_order(rng, shape)
    res = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}
    # Whole tensors at the edges (the tensor scale): all zeros; amax / 2688 below FP32.
    res["all-zero"] = np.zeros(shape, np.float32)
    t = np.zeros(shape, np.float32)
    t[0, :3] = [1e-45, -3e-45, 2e-45]  # FP32 subnormals: amax / 2688 underflows to 0
    res["tensor-underflow"] = t
    # NVFP4 tensor scale 0 < T < 2**-128: 1 / T overflows FP32 (torchao's zeros become NaN).
    t = np.zeros(shape, np.float32)
    t[0, :4] = [1e-37, -3e-40, 0.0, -0.0]
    t[1, ::3] = -1e-45
    t[2] = -0.0
    res["reciprocal-overflow"] = t
    # Negatives that underflow FP32 when scaled by a large MX scale (microxcaling: +0).
    t = np.zeros(shape, np.float32)
    t[:, ::32] = 2.0 ** 100
    t[:, 1:6] = [-1e-45, -1e-20, -0.0, -2.0 ** 97, 1e-30]
    t[:, 33:36] = [-3e-38, -1e-40, -2.0 ** 90]
    res["scaled-underflow"] = t
    assert all(v.shape == shape for v in res.values())
    return res


# --------------------------------------------------------------------------- torchao
#: torchao configurations: name -> (what it calls, where in torchao).
TORCHAO = {
    "torchao-nvfp4": (
        "NVFP4Tensor.to_nvfp4(x).dequantize(torch.float32)",
        "torchao/prototype/mx_formats/nvfp4_tensor.py: nvfp4_quantize (per_tensor_scale=None)"),
    "torchao-nvfp4-tensor-scale": (
        "NVFP4Tensor.to_nvfp4(x, per_tensor_scale=per_tensor_amax_to_scale(x.abs().max()))"
        ".dequantize(torch.float32)",
        "torchao/prototype/mx_formats/nvfp4_tensor.py: nvfp4_quantize, per_tensor_amax_to_scale, "
        "NVFP4Tensor.get_hp_scales"),
    "torchao-mx-floor": (
        "MXTensor.to_mx(x, torch.float4_e2m1fn_x2, 32, ScaleCalculationMode.FLOOR)"
        ".dequantize(torch.float32)",
        "torchao/prototype/mx_formats/mx_tensor.py: to_mx, to_dtype"),
    "torchao-mx-rceil": (
        "MXTensor.to_mx(x, torch.float4_e2m1fn_x2, 32, ScaleCalculationMode.RCEIL)"
        ".dequantize(torch.float32)",
        "torchao/prototype/mx_formats/mx_tensor.py: _to_mx_rceil (eager fallback), to_dtype"),
    "torchao-mx-ceil": (
        "MXTensor.to_mx(x, torch.float4_e2m1fn_x2, 32, ScaleCalculationMode.CEIL)"
        ".dequantize(torch.float32)",
        "torchao/prototype/mx_formats/mx_tensor.py: to_mx, to_dtype"),
    "torchao-mx-even": (
        "MXTensor.to_mx(x, torch.float4_e2m1fn_x2, 32, ScaleCalculationMode.EVEN)"
        ".dequantize(torch.float32)",
        "torchao/prototype/mx_formats/mx_tensor.py: to_mx, to_dtype"),
}

MICROXCALING = {
    "microxcaling-mxfp4": (
        "mx.mx_ops.quantize_mx_op(x, MxSpecs(), elem_format='fp4_e2m1', block_size=32, "
        "axes=[-1], round='nearest')",
        "mx/mx_ops.py: _quantize_mx, _shared_exponents; mx/elemwise_ops.py: "
        "_quantize_elemwise_core, _round_mantissa"),
}


#: The mactile spec that follows each configuration: (format, convention, option overrides),
#: arguments of :func:`mactile.golden.get_format`.
MACTILE = {
    "torchao-nvfp4": ("nvfp4", "torchao", {"tensor_scale": False}),
    "torchao-nvfp4-tensor-scale": ("nvfp4", "torchao", {}),
    "torchao-mx-floor": ("mxfp4", "torchao", {"mx_scale_rule": "floor"}),
    "torchao-mx-rceil": ("mxfp4", "torchao", {}),
    "torchao-mx-ceil": ("mxfp4", "torchao", {"mx_scale_rule": "ceil"}),
    "torchao-mx-even": ("mxfp4", "torchao", {"mx_scale_rule": "even"}),
    "microxcaling-mxfp4": ("mxfp4", "microxcaling", {}),
}


def _unpack_fp4(packed, shape):
    """torchao packs two FP4 codes per byte, the first element in the low nibble."""
    p = np.asarray(packed, dtype=np.uint8).reshape(shape[0], -1)
    out = np.empty(shape, np.uint8)
    out[:, 0::2] = p & 0xF
    out[:, 1::2] = p >> 4
    return out


def torchao_configs(x: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every :data:`TORCHAO` configuration on the float32 matrix ``x``:
    ``{config: (dequantized float32, FP4 codes uint8, scale bytes uint8)}``."""
    import torch
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    out = {}
    q = NVFP4Tensor.to_nvfp4(t)
    out["torchao-nvfp4"] = q
    q = NVFP4Tensor.to_nvfp4(t, per_tensor_scale=per_tensor_amax_to_scale(t.abs().max()))
    out["torchao-nvfp4-tensor-scale"] = q
    for mode in ("floor", "rceil", "ceil", "even"):
        out[f"torchao-mx-{mode}"] = MXTensor.to_mx(
            t, torch.float4_e2m1fn_x2, 32, ScaleCalculationMode[mode.upper()])
    res = {}
    for name, q in out.items():
        y = q.dequantize(torch.float32).numpy()
        codes = _unpack_fp4(q.qdata.view(torch.uint8).numpy(), x.shape)
        scales = q.scale.view(torch.uint8).numpy().reshape(x.shape[0], -1)
        res[name] = (y.astype(np.float32), codes, scales.astype(np.uint8))
    return res


def _import_mx(path: str | None):
    if path:
        sys.path.insert(0, str(path))
    import mx  # noqa: F401  (microxcaling's package)
    return mx


def microxcaling_run(x: np.ndarray, path: str | None = None) -> np.ndarray:
    """microxcaling's MXFP4 fake-quantization of ``x`` (blocks of 32 along the last axis)."""
    import torch
    _import_mx(path)
    from mx.mx_ops import quantize_mx_op
    from mx.specs import MxSpecs

    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    y = quantize_mx_op(t, MxSpecs(), elem_format="fp4_e2m1", block_size=32, axes=[-1],
                       round="nearest")
    return y.numpy().astype(np.float32)


def _git_commit(path) -> str:
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _save(path: Path, arrays: dict, meta: dict) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, meta=np.asarray(json.dumps(meta, indent=1)), **arrays)
    os.replace(tmp, path)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--microxcaling", default=os.environ.get("MICROXCALING"),
                    help="path of a microxcaling checkout (default: $MICROXCALING)")
    ap.add_argument("--seed", type=int, default=20260121)
    ap.add_argument("-o", "--out", default=str(HERE), help="output folder (default: beside this script)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    xs = cases(np.random.default_rng(args.seed))
    inputs = {f"x.{k}": v for k, v in xs.items()}
    import torch

    common = {"seed": args.seed, "shape": list(SHAPE), "cases": list(xs),
              "torch": torch.__version__, "numpy": np.__version__,
              "generator": "tests/data/interop/peer_vectors.py"}
    try:
        import torchao
    except ImportError as e:
        print(f"torchao not importable ({e}); torchao.npz not written")
    else:
        arrays = dict(inputs)
        for case, x in xs.items():
            for name, (y, codes, scales) in torchao_configs(x).items():
                arrays[f"y.{name}.{case}"] = y
                arrays[f"codes.{name}.{case}"] = codes
                arrays[f"scales.{name}.{case}"] = scales
        meta = dict(common, peer="torchao", version=torchao.__version__,
                    configs={k: {"call": c, "source": s} for k, (c, s) in TORCHAO.items()})
        _save(out / "torchao.npz", arrays, meta)
    try:
        _import_mx(args.microxcaling)
    except ImportError as e:
        print(f"microxcaling not importable ({e}; give --microxcaling PATH); "
              "microxcaling.npz not written")
    else:
        arrays = dict(inputs)
        for case, x in xs.items():
            arrays[f"y.microxcaling-mxfp4.{case}"] = microxcaling_run(x)
        import mx
        where = Path(mx.__file__).resolve().parent.parent
        meta = dict(common, peer="microxcaling", version=f"git {_git_commit(where)}",
                    configs={k: {"call": c, "source": s} for k, (c, s) in MICROXCALING.items()})
        _save(out / "microxcaling.npz", arrays, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
