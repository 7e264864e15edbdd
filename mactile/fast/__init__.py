"""Fast paths that reproduce the golden models bit for bit (the golden code stays the
reference; the tests compare the two with ``array_equal``).

:mod:`.blockquant`
    NVFP4/MXFP4 quantization of float32 arrays (:func:`quantize`), every convention.
:mod:`.recode`
    ``mactile convert``'s re-encoding of a checkpoint layer between NVFP4/MXFP4 formats of
    the same block size, from its code bytes through tables the golden pipeline computes
    (:func:`~.recode.recode_layer`).
"""
from .blockquant import quantize, supports

__all__ = ["quantize", "supports"]
