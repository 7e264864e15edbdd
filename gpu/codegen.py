"""Generated ``wgmma`` wrappers, one per token-tile width N (shared by every wgmma kernel).

A ``wgmma.mma_async m64nNkK`` instruction names its N/2 FP32 accumulator registers one by
one, so each width needs its own inline-assembly string; this module writes them.

``ptx::Wgmma<N>`` (namespace ``ptx``, next to ``kernels/ptx.cuh``):

* ``rs_f16(d, a, bdesc, scale_d)``: ``m64nNk16 .f32.f16.f16`` with A (four f16x2 registers
  per thread, the m16n8k16 A-fragment layout per warp) from registers and B (K-major,
  128-byte swizzle) from shared memory;
* ``ss_f16(d, adesc, bdesc, scale_d)``: the same with A from shared memory too;
* ``ss_e4m3(d, adesc, bdesc, scale_d)``: ``m64nNk32 .f32.e4m3.e4m3``, both from shared memory.

``scale_d`` = 0 overwrites the accumulators (D = A B), 1 accumulates (D += A B).
"""
from __future__ import annotations

__all__ = ["wgmma_source", "TOKEN_TILES"]

#: Token-tile widths (wgmma N: a multiple of 8, <= 256) the kernels may instantiate.
TOKEN_TILES = (8, 16, 32, 64, 128, 256)


def _asm(n: int, shape: str, types: str, a_operand: str, tail: str, inputs: str, n_in: int) -> str:
    nd = n // 2
    dlist = ", ".join(f"%{i}" for i in range(nd))
    douts = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
    pred = nd + n_in  # index of the scale_d operand
    return (f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{pred}, 0;\\n"\n'
            f'        "wgmma.mma_async.sync.aligned.{shape}{types} {{{dlist}}}, {a_operand}{tail};\\n}}\\n"\n'
            f'        : {douts}\n'
            f'        : {inputs}, "r"(scale_d));\n')


def _struct(n: int) -> str:
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma N must be a multiple of 8 in [8, 256], got {n}")
    nd = n // 2
    rs = _asm(n, f"m64n{n}k16", ".f32.f16.f16", f"{{%{nd}, %{nd + 1}, %{nd + 2}, %{nd + 3}}}, %{nd + 4}",
              ", p, 1, 1, 0", '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc)', 5)
    ssh = _asm(n, f"m64n{n}k16", ".f32.f16.f16", f"%{nd}, %{nd + 1}", ", p, 1, 1, 0, 0",
               '"l"(adesc), "l"(bdesc)', 2)
    ss8 = _asm(n, f"m64n{n}k32", ".f32.e4m3.e4m3", f"%{nd}, %{nd + 1}", ", p, 1, 1",
               '"l"(adesc), "l"(bdesc)', 2)
    return (f"template <> struct Wgmma<{n}> {{\n"
            f"  static __device__ __forceinline__ void rs_f16(float (&d)[{nd}], const u32 (&a)[4], "
            f"u64 bdesc, int scale_d) {{\n{rs}  }}\n"
            f"  static __device__ __forceinline__ void ss_f16(float (&d)[{nd}], u64 adesc, u64 bdesc, "
            f"int scale_d) {{\n{ssh}  }}\n"
            f"  static __device__ __forceinline__ void ss_e4m3(float (&d)[{nd}], u64 adesc, u64 bdesc, "
            f"int scale_d) {{\n{ss8}  }}\n}};\n")


def wgmma_source(tiles=TOKEN_TILES) -> str:
    """``namespace ptx { template <int N> struct Wgmma; ... }`` for the given widths."""
    return ("namespace ptx {\ntemplate <int N> struct Wgmma;\n"
            + "".join(_struct(n) for n in sorted(set(tiles))) + "}  // namespace ptx\n")
