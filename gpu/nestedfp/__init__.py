"""NestedFP (004): FP16 weights as two byte planes; FP16 or FP8 GEMM per call.

:mod:`.kernels` needs CuPy; importing this package does not.
"""
