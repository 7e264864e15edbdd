"""Fast paths that reproduce the golden models bit for bit (the golden code stays the
reference; the tests compare the two with ``array_equal``).

:mod:`.blockquant`
    NVFP4/MXFP4 quantization of float32 arrays (:func:`quantize`).
"""
from .blockquant import quantize, supports

__all__ = ["quantize", "supports"]
