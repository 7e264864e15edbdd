"""FlexQ (003): INT6 group quantization, W6A6/W6A8 GEMM on binary tensor cores.

:mod:`.layout` (NumPy packers, schedule, emulator) needs no GPU; :mod:`.kernels` needs CuPy.
"""
from .layout import (ACT_TILE, GROUP, WEIGHT_TILE, PackedPlanes, emulate_gemm_int,
                     pack_planes, pack_quantized, plane_schedule, unpack_planes)

__all__ = ["ACT_TILE", "GROUP", "WEIGHT_TILE", "PackedPlanes", "emulate_gemm_int",
           "pack_planes", "pack_quantized", "plane_schedule", "unpack_planes"]
