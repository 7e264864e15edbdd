"""RaZeR-G128: the RaZeR paper's GPU weight format (000_49819f78d38da0d0.txt Sec. 4.3).

128-element blocks of FP4 E2M1 and one FP16 block scale per block. The FP16 scale's
sign bit and exponent MSB are redundant for a positive scale below 2, so they carry
RaZeR's two metadata bits (Sec. 4.3: "we exploit redundancy in the FP16 block scale by
using its sign bit and most significant exponent bit to store the 2-bit metadata")::

    bit 15      sign of the special value (1: negative)
    bit 14      which special magnitude (0: special_values[0], 1: special_values[1])
    bits 13..0  the FP16 block scale with bits 15 and 14 cleared, so 0 <= scale < 2

The element conventions are those of :class:`~mactile.golden.fp4blocks.RaZeR`: FP4 code
0b0000 (+0) is the block's special value, real zeros are stored as 0b1000 (-0);
candidates per block in tie-break order ``+a, -a, +b, -b``, the block scale maps the
block maximum to ``max(6, |v|)``, elements round to the nearest of FP4 and ``v`` (ties to
FP4), lowest squared error wins (ties keep the earlier candidate).

Keeping |scale| < 2 needs a tensor-wide FP32 scale ``D32``; the convention is an explicit
option, :class:`G128TensorScale`:

``amax`` (default)
    ``D32 = amax / (S_MAX * 6)`` in FP32, ``S_MAX`` = 0x3FFF = 1.9990234375, the largest
    FP16 value whose exponent MSB is clear. The block holding the tensor maximum gets
    the largest legal scale (the NVFP4 recipe ``amax / (448 * 6)`` with 448 -> S_MAX).
``pow2``
    ``D32 = 2**ceil(log2(amax / (S_MAX * 6)))``: a power of two, so the tensor scale adds
    no rounding (the block scales then span ``(S_MAX/2, S_MAX]`` at the top).
``unit``
    ``D32 = 1`` (the authors' kernels keep no tensor scale): valid only when every block
    scale stays below 2, i.e. ``amax <= 6 * S_MAX``; larger inputs raise
    :class:`~mactile.golden.block.InputError` naming the limit.

Arithmetic is the FP32 op order of :mod:`.fp4blocks` (RNE, one operation at a time):
``arg = amax_i / (D32 * max(6,|v|))``, ``s = FP16(arg)`` (RNE), ``q = FP4(x / (D32 * s))``.
"""
from __future__ import annotations

import dataclasses

import enum
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .block import InputError, tensor_amax
from .elements import FloatFormat
from . import validate
from .fp4blocks import _TwoLevelFP4, special_pair
from .storage import STORAGES, BlockStorage

__all__ = ["RaZeRG128", "G128TensorScale", "G128_SCALE_MAX", "G128_SCALE_MAX_CODE",
           "G128_SIGN_BIT", "G128_SELECT_BIT", "G128_SCALE_MASK"]

_F32 = np.float32
_WORD = STORAGES["razer-g128"].word
#: Bit of the FP16 scale word holding the special value's sign (from the storage spec).
G128_SIGN_BIT = _WORD.sign_bit
#: Bit of the FP16 scale word choosing the special magnitude (the exponent MSB).
G128_SELECT_BIT = _WORD.select_bit
#: Mask of the bits that hold the block scale itself.
G128_SCALE_MASK = _WORD.scale_mask
#: Largest FP16 code with bits 15 and 14 clear (0x3FFF), and its value 1.9990234375: with
#: the exponent MSB clear the exponent field is at most 15, i.e. the value is below 2.
G128_SCALE_MAX_CODE = G128_SCALE_MASK
G128_SCALE_MAX = float(_WORD.scale_format.values[G128_SCALE_MAX_CODE])


class G128TensorScale(enum.Enum):
    """How RaZeR-G128 chooses the FP32 tensor scale that keeps every block scale < 2."""

    AMAX = "amax"
    POW2 = "pow2"
    UNIT = "unit"


@dataclass(frozen=True, kw_only=True)
class RaZeRG128(_TwoLevelFP4):
    """RaZeR's GPU variant: block 128, FP16 scale with the 2 metadata bits inside it.

    Examples
    --------
    >>> import numpy as np
    >>> from mactile.golden import RaZeRG128
    >>> q = RaZeRG128().quantize(np.linspace(-1, 1, 256, dtype=np.float32))
    >>> q.codes.shape, q.scales.dtype, q.format.bits_per_element
    ((2, 128), dtype('uint16'), 4.125)
    >>> float(q.format.scale_format.values[q.format.storage.unpack_scale(q.scales)[0].max()])
    1.9990234375
    """

    block_size: int = 128
    special_values: tuple[float, float] = (5.0, 8.0)
    tensor_scale: G128TensorScale = G128TensorScale.AMAX

    name: ClassVar[str] = "razer-g128"
    reference: ClassVar[str] = "RaZeR (000) Sec. 4.3 (GPU kernels: block 128, FP16 scale + 2 meta bits)"
    storage: ClassVar[BlockStorage] = STORAGES["razer-g128"]
    scale_format: ClassVar[FloatFormat] = STORAGES["razer-g128"].word.scale_format
    scale_dtype: ClassVar[np.dtype] = STORAGES["razer-g128"].word.dtype
    allowed_block_sizes: ClassVar[tuple[int, ...]] = (128,)

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "special_values", special_pair(self.name, self.special_values))
        object.__setattr__(self, "tensor_scale", validate.choice(
            self.name, "tensor_scale", self.tensor_scale, G128TensorScale))

    def _candidates(self):
        a, b = self.special_values
        return (a, -a, b, -b)

    def _tensor_params(self, flat):
        amax = tensor_amax(flat)
        denom = _F32(G128_SCALE_MAX * 6.0)  # exact in FP32
        mode = self.tensor_scale
        if mode is G128TensorScale.UNIT:
            if amax > denom:
                raise InputError(
                    f"{self.name}: tensor_scale='unit' keeps no tensor scale, so block scales "
                    f"stay below 2 only for |x| <= {float(denom)} (6 * {G128_SCALE_MAX}); the "
                    f"input's largest magnitude is {float(amax)}; use tensor_scale='amax'")
            return {"tensor_scale": _F32(1.0)}
        if amax == 0:
            return {"tensor_scale": _F32(1.0)}
        if mode is G128TensorScale.AMAX:
            return {"tensor_scale": _F32(amax / denom)}
        ratio = float(amax) / float(denom)  # exact enough: only its binade matters
        m, e = np.frexp(ratio)
        e = int(e) - 1 if m == 0.5 else int(e)  # ceil(log2(ratio)), exact powers kept
        return {"tensor_scale": _F32(np.ldexp(1.0, e))}

    @property
    def special_magnitudes(self):
        return self.special_values

    def with_special_magnitudes(self, magnitudes):
        return dataclasses.replace(self, special_values=tuple(magnitudes))

    def _pack_scale(self, s_code, cand_index):
        if (np.asarray(s_code) > G128_SCALE_MAX_CODE).any():  # cannot happen (conventions above)
            raise AssertionError("razer-g128: a block scale reached 2.0")
        return super()._pack_scale(s_code, cand_index)

    @property
    def bits_per_element(self) -> float:
        return 4 + 16 / self.block_size
