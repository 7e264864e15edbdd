"""Generated ``wgmma`` wrappers (one per token-tile width N) for the NestedFP kernels.

``Wgmma<N>::rs_f16(d, a, bdesc)``: ``wgmma.mma_async m64nNk16 .f32.f16.f16`` with A (four
f16x2 registers per thread) from registers and B (K-major, 128-byte swizzle) from shared
memory. ``Wgmma<N>::ss_f16(d, adesc, bdesc)``: the same with A from shared memory too
(K-major, 128-byte swizzle). ``Wgmma<N>::ss_e4m3(d, adesc, bdesc)``: ``m64nNk32 .f32.e4m3.e4m3`` with both
operands in shared memory. Both accumulate (scale-d = 1) into ``d[N/2]`` FP32 registers.
"""
from __future__ import annotations

__all__ = ["wgmma_source", "TOKEN_TILES"]

#: Token-tile widths the kernels are instantiated for (wgmma N: a multiple of 8, <= 256).
TOKEN_TILES = (8, 16, 32, 64, 128, 256)


def _struct(n: int) -> str:
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma N must be a multiple of 8 in [8, 256], got {n}")
    nd = n // 2
    dlist = ", ".join(f"%{i}" for i in range(nd))
    douts = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
    rs = (f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 5}, 0;\\n"\n'
          f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{dlist}}}, '
          f'{{%{nd}, %{nd + 1}, %{nd + 2}, %{nd + 3}}}, %{nd + 4}, p, 1, 1, 0;\\n}}\\n"\n'
          f'        : {douts}\n'
          f'        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(1));\n')
    ss = (f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 2}, 0;\\n"\n'
          f'        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{dlist}}}, '
          f'%{nd}, %{nd + 1}, p, 1, 1;\\n}}\\n"\n'
          f'        : {douts}\n'
          f'        : "l"(adesc), "l"(bdesc), "n"(1));\n')
    ssh = (f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 2}, 0;\\n"\n'
           f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{dlist}}}, '
           f'%{nd}, %{nd + 1}, p, 1, 1, 0, 0;\\n}}\\n"\n'
           f'        : {douts}\n'
           f'        : "l"(adesc), "l"(bdesc), "n"(1));\n')
    return (f"template <> struct Wgmma<{n}> {{\n"
            f"  static __device__ __forceinline__ void rs_f16(float (&d)[{nd}], "
            f"const uint32_t (&a)[4], uint64_t bdesc) {{\n{rs}  }}\n"
            f"  static __device__ __forceinline__ void ss_e4m3(float (&d)[{nd}], "
            f"uint64_t adesc, uint64_t bdesc) {{\n{ss}  }}\n"
            f"  static __device__ __forceinline__ void ss_f16(float (&d)[{nd}], "
            f"uint64_t adesc, uint64_t bdesc) {{\n{ssh}  }}\n}};\n")


def wgmma_source(tiles=TOKEN_TILES) -> str:
    """``namespace nfp { template <int N> struct Wgmma; ... }`` for the given widths."""
    return ("namespace nfp {\ntemplate <int N> struct Wgmma;\n"
            + "".join(_struct(n) for n in tiles) + "}  // namespace nfp\n")
