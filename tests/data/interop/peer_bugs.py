"""Known bugs of the peers (torchao, microxcaling), each with a model of what the peer computes.

A difference between mactile (with the convention that names a peer's choices) and the
peer is accepted only where one of these bugs explains it, and only if the peer's value
there is the one the bug's model predicts (``tests/golden/test_interop.py``).
docs/formats.md gives each bug's minimal reproducer. NumPy and mactile only.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from mactile.golden import FP4_E2M1, Rounding


def same(a, b):
    """Elementwise equal values: float64 bit patterns (so -0 != +0), or both NaN."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a64.view(np.uint64) == b64.view(np.uint64)) | (np.isnan(a64) & np.isnan(b64))


# --------------------------------------------------------------------------- peer bugs
def per_element(mask_per_block, bs):
    """Spread a per-block mask over the blocks' elements (blocks along the last axis)."""
    return np.repeat(mask_per_block, bs, axis=-1)


def _scale_exp(q):
    return q.scales.astype(np.int64) - 127


def _fp4(v, rounding=Rounding.NEAREST_EVEN):
    return FP4_E2M1.decode(FP4_E2M1.encode(v, rounding=rounding))


@dataclasses.dataclass(frozen=True)
class PeerBug:
    """A difference that is the peer's bug: ``where`` marks the elements it can touch,
    ``model`` gives the peer's values there; ``always``: the peer computes ``model`` on all
    of them (else, where the trigger depends on the peer's float32 ``log2``, on each element
    either ``model`` or the correct value); ``case``: see below."""

    name: str
    where: Callable
    model: Callable
    always: bool = True
    #: The input case of ``peer_vectors.cases`` made to show it, where the committed
    #: vectors predate the bug's model (None: the committed vectors show it).
    case: str | None = None


def _tensor_scale_zero(x, q):
    t = np.float32(np.abs(x).max()) / np.float32(2688.0)
    return np.full(x.shape, t == 0)


def _reciprocal_overflow_zeros(x, q):
    # nvfp4_quantize: reciprocal_scale = (1 / T) / s overflows FP32; 0 * inf is NaN.
    s = q.format.scale_format.values[q.scales].astype(np.float32)
    with np.errstate(over="ignore", divide="ignore"):
        r = (np.float32(1.0) / np.float32(q.tensor_scale)) / s
    return per_element(np.isinf(r), q.format.block_size).reshape(x.shape) & (x == 0)


def _nan_code_1011(x, q):
    # _f32_to_floatx_unpacked turns the NaN 0xFFC00000 (x86's 0 * inf) into code 0b1011,
    # -1.5; NVFP4Tensor.dequantize gives fl32(fl32(T * s) * -1.5).
    s = q.format.scale_format.values[q.scales].astype(np.float32) * np.float32(q.tensor_scale)
    return per_element(s * np.float32(-1.5), q.format.block_size).reshape(x.shape)


def _code0(x, q):
    return per_element((q.scales == 0) & (np.abs(x).reshape(q.scales.shape + (-1,)).max(-1) > 0),
                   q.format.block_size).reshape(x.shape)


def _code0_div_min_normal(x, q):
    # to_mx clamps the FP32 scale at 2**-126 before dividing, but stores code 0 (2**-127).
    with np.errstate(over="ignore"):  # blocks of other scales overflow: not used
        return _fp4(x.astype(np.float32) * np.float32(2.0 ** 126)) * 2.0 ** -127


def _code0_unscaled(x, q):
    # _to_mx_rceil: exponent 0 gives the reciprocal 1.0 (not 2**127).
    return _fp4(x) * 2.0 ** -127


def _descale_above_pow2(x, q):
    a = np.abs(x).reshape(q.scales.shape + (-1,)).max(-1).astype(np.float32)
    d = (a / np.float32(6)).astype(np.float64)
    m, _ = np.frexp(d)
    return per_element((m > 0.5) & (m < 0.5 * (1 + 2.0 ** -18)), q.format.block_size).reshape(x.shape)


def _rceil_one_binade_low(x, q):
    e = per_element(_scale_exp(q) - 1, q.format.block_size).reshape(x.shape)
    return _fp4(np.ldexp(x.astype(np.float64), -e)) * np.exp2(e)


def _amax_below_pow2(x, q):
    a = np.abs(x).reshape(q.scales.shape + (-1,)).max(-1).astype(np.float64)
    m, _ = np.frexp(a)
    return per_element((m > 1 - 2.0 ** -18) & (m < 1), q.format.block_size).reshape(x.shape)


def _mx_one_binade_high(x, q):
    # A / 2**e in FP32 (exact but where it underflows); a zero there comes back +0.
    e = per_element(_scale_exp(q) + 1, q.format.block_size).reshape(x.shape)
    scaled = x.astype(np.float32) * np.exp2(-e).astype(np.float32)
    y = _fp4(scaled, Rounding.NEAREST_AWAY) * np.exp2(e)
    return np.where(scaled == 0, 0.0, y)


def _just_below_quarter(x, q):
    e = per_element(_scale_exp(q), q.format.block_size).reshape(x.shape)
    s = np.abs(np.ldexp(x.astype(np.float64), -e))
    return (s < 0.25) & (s > 0.25 - 2.0 ** -22)


def _quarter_rounds_up(x, q):
    e = per_element(_scale_exp(q), q.format.block_size).reshape(x.shape)
    return np.copysign(0.5, x) * np.exp2(e)


#: Known bugs of the peers, per configuration (docs/formats.md has their reproducers).
PEER_BUGS: dict[str, list[PeerBug]] = {
    "torchao-nvfp4-tensor-scale": [
        PeerBug("zero per-tensor scale gives NaN", _tensor_scale_zero,
                lambda x, q: np.full(x.shape, np.nan)),
        PeerBug("reciprocal overflow gives NaN", _reciprocal_overflow_zeros, _nan_code_1011,
                case="reciprocal-overflow"),
    ],
    "torchao-mx-floor": [PeerBug("E8M0 code 0 scales by 2**-126", _code0, _code0_div_min_normal)],
    "torchao-mx-ceil": [PeerBug("E8M0 code 0 scales by 2**-126", _code0, _code0_div_min_normal)],
    "torchao-mx-even": [PeerBug("E8M0 code 0 scales by 2**-126", _code0, _code0_div_min_normal)],
    "torchao-mx-rceil": [
        PeerBug("E8M0 code 0 scales by 1", _code0, _code0_unscaled),
        PeerBug("float32 log2 rounds ceil down", _descale_above_pow2, _rceil_one_binade_low,
                always=False),
    ],
    "microxcaling-mxfp4": [
        PeerBug("float32 log2 rounds floor up", _amax_below_pow2, _mx_one_binade_high,
                always=False),
        PeerBug("floor(|x| + 0.5) rounds in FP32", _just_below_quarter, _quarter_rounds_up,
                always=False),
    ],
}


def explained(cfg: str, x: np.ndarray, q) -> np.ndarray:
    """Elements of input ``x`` (mactile's quantization ``q`` of it) that one of the peer
    configuration ``cfg``'s named bugs can touch."""
    mask = np.zeros(x.shape, bool)
    for bug in PEER_BUGS.get(cfg, []):
        mask |= bug.where(x, q)
    return mask
