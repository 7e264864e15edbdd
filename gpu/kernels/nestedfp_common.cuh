// NestedFP helpers shared by the GEMM engine (A_PLANES decode, kernels/engine.cu) and the
// NestedFP small-M kernels (gpu/nestedfp/nestedfp.cu); 004_a14d4b71d1ae7c1e.txt Sec. 4.3.
#pragma once
#include "ptx.cuh"

namespace nfp {

// NestedFP16 reconstruction of four weights at once (Sec. 4.3, Figure 6), per byte j:
//   sub = (u & 1) ^ (l >> 7); field = ((u - sub) >> 1) & 0x3F; hi = (u & 0x80) | field
// The byte-wise u - sub borrows from nothing: bit 7 is set first and only bits 1..6 of the
// difference are kept, which equals the golden merge's 32-bit arithmetic on those bits.
__device__ __forceinline__ u32 nested_hi(u32 u, u32 l) {
    const u32 sub = (u ^ (l >> 7)) & 0x01010101u;
    const u32 d = (u | 0x80808080u) - sub;
    return (u & 0x80808080u) | ((d >> 1) & 0x3F3F3F3Fu);
}

}  // namespace nfp
