"""The OCP MX v1.0 family beyond MXFP4: one generic quantizer for every MX storage entry.

An OCP MX format (OCP Microscaling Formats v1.0, Sec. 5-6) is a block of 32 elements of an
element format (FP8 E4M3/E5M2, FP6 E2M3/E3M2, INT8) with one E8M0 scale. Everything the
quantizer needs comes from the block storage (:mod:`.storage`): the element format, its
largest exponent ``emax_elem`` (:attr:`~.storage.BlockStorage.element_emax`), the scale
word. Adding an MX format is one ``_mx(...)`` entry in :data:`~.storage.STORAGES`; the class
here is built for it (:func:`mx_class`) and joins :data:`~.registry.BLOCK_FORMATS`.

The rules (OCP MX v1.0 Sec. 6.3, the default everywhere; microxcaling's ``quantize_mx_op``
with ``round="even"`` computes the same codes):

* the block's shared exponent is ``e = floor(log2 amax) - emax_elem``, clamped below at
  -127 (E8M0 code 0); an all-zero block gets code 0; a block that would need ``e > 127``
  is refused (:meth:`MXFormat.input_range`);
* every element ``x / 2**e`` is rounded to the element format, ties to even, saturating at
  its largest finite magnitude (E5M2's Inf is never produced; -0 keeps its sign);
* MXINT8's element is a two's-complement integer times ``2**-6``: ``round(x / 2**e * 64)``
  clamped to ``[-127, 127]`` (symmetric, as microxcaling's ``max_norm``; code -128, i.e.
  -2.0, decodes but is never produced).

MXFP4 keeps its own class (:class:`~.fp4blocks.MXFP4`): it has quantization conventions.

Examples
--------
>>> from mactile.golden.registry import BLOCK_FORMATS
>>> f = BLOCK_FORMATS["mxfp8-e4m3"]()
>>> q = f.quantize([[1.0, -3.5, 448.0, 0.0] * 8])
>>> int(q.scales[0, 0]) - 127, f.dequantize(q)[0, :4].tolist()
(0, [1.0, -3.5, 448.0, 0.0])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .block import BlockFormat
from .elements import E8M0, IntFormat, Rounding, round_significand
from .storage import MX_FAMILY, STORAGES, BlockStorage

__all__ = ["MXFormat", "mx_class", "MX_CLASSES"]


@dataclass(frozen=True, kw_only=True)
class MXFormat(BlockFormat):
    """An OCP MX block format whose element format is read from its storage entry
    (subclassed per entry by :func:`mx_class`; see the module docstring for the rules)."""

    block_size: int = 32

    name: ClassVar[str] = ""
    reference: ClassVar[str] = "OCP Microscaling Formats (MX) v1.0, Sec. 5-6"
    storage: ClassVar[BlockStorage | None] = None

    def __post_init__(self):
        if self.storage is None:
            raise TypeError("MXFormat is built per storage entry: use mx_class(storage)")
        super().__post_init__()

    @property
    def bits_per_element(self) -> float:
        return self.storage.element.bits + self.storage.word.bits / self.block_size

    def input_range(self):
        emax = self.storage.element_emax
        limit = 2.0 ** (E8M0.bias + 1 + emax)  # floor(log2 amax) - emax <= 127
        return (limit, f"{self.name} takes |x| < 2**{E8M0.bias + 1 + emax}: a larger block "
                       "would need a scale above E8M0's largest, 2**127")

    def shared_exponents(self, amax: np.ndarray) -> np.ndarray:
        """Block exponents ``floor(log2 amax) - emax_elem`` clamped to [-127, 127]; -127 for
        an all-zero block (OCP MX v1.0 Sec. 6.3)."""
        amax = np.asarray(amax, dtype=np.float64)
        _, p = np.frexp(amax)  # amax = m * 2**p, m in [0.5, 1)
        e = p.astype(np.int64) - 1 - self.storage.element_emax
        e = np.where(amax > 0, e, -E8M0.bias)
        return np.clip(e, -E8M0.bias, E8M0.bias)

    def encode_elements(self, scaled: np.ndarray) -> np.ndarray:
        """Element codes of already scaled values (ties to even, saturating)."""
        el = self.storage.element
        if isinstance(el, IntFormat):
            k = np.ldexp(scaled, -self.storage.element_log2)
            r = np.sign(k) * round_significand(np.abs(k), Rounding.NEAREST_EVEN)
            return el.from_int(np.clip(r, -el.max_int, el.max_int))
        return el.encode(scaled, rounding=Rounding.NEAREST_EVEN, saturate=True)

    def _quantize_blocks(self, xb, ctx):
        x = np.asarray(xb, dtype=np.float64)
        e = self.shared_exponents(np.abs(x).max(axis=-1))
        scaled = np.ldexp(x, -e[:, None])  # exact: a power of two, far from float64's limits
        return self.encode_elements(scaled), self.storage.word.pack(e + E8M0.bias), None

    def _dequantize_blocks(self, codes, scales, meta, ctx):
        out = np.empty(codes.shape, dtype=np.float64)
        self._dequantize_into(codes, scales, meta, ctx, out)
        return out

    def _dequantize_into(self, codes, scales, meta, ctx, out):
        np.take(self.storage.element_values(), codes, out=out, mode="clip")
        # exact powers of two; the NaN scale code (0xFF) makes the whole block NaN (OCP MX)
        out *= self.storage.word.scale_values(scales)[:, None]


def mx_class(storage: BlockStorage) -> type[MXFormat]:
    """The quantizer class of one MX storage entry (name, storage and docstring set)."""
    if storage.family != "mx":
        raise ValueError(f"{storage.name} is not an MX-family storage entry")
    el = storage.element
    cls_name = "".join(p.upper() if p.startswith(("mx", "e")) else p.capitalize()
                       for p in storage.name.replace("-", "_").split("_"))
    doc = (f"OCP MX v1.0 {storage.name}: blocks of {storage.block_size} {el.name} elements "
           f"with an E8M0 scale ({MXFormat.__doc__.splitlines()[0].lower()})")
    cls = type(cls_name, (MXFormat,), {"name": storage.name, "storage": storage,
                                       "__doc__": doc, "__module__": __name__,
                                       "__qualname__": cls_name,
                                       "__annotations__": {}})
    return dataclass(frozen=True, kw_only=True)(cls)


#: The quantizer class of every MX storage entry, by name.
MX_CLASSES: dict[str, type[MXFormat]] = {n: mx_class(STORAGES[n]) for n in MX_FAMILY}
