// Shared pieces of the CUDA-core kernels that read the "rowmajor" weight layout
// (gpu/packing.py): units of 64 rows x KC=512 k, thread (warp w, lane l) owns rows
// 8w..8w+7 of the unit and the 16-wide block l (ReSET's multi-accumulator threading:
// 8 rows x M tokens of independent accumulators per thread).
#pragma once
#include "fp4_common.cuh"

namespace mt {

constexpr int RM_ROWS = 64;
constexpr int RM_KC = 512;
constexpr int RM_THREADS = 256;
constexpr int RM_CODE_BYTES = RM_ROWS * RM_KC / 2;  // 16 KB
constexpr int RM_RED_LD = 68;

template <int F>
struct RmScales {
    static constexpr int NB = RM_KC / Fmt<F>::BLOCK;                  // block columns per unit
    static constexpr int BYTES = 8 * NB * 8 * Fmt<F>::SCALE_BYTES;     // [8 rg][NB][8 rows]
};

// Weight part of a unit: codes (64 rows x klen/2 bytes, global row stride K_pad/2) and
// scales (8 row groups x klen/B columns x 8 rows). Compile-time trip counts and shifts;
// a partial last unit (klen < 512) only adds guards.
template <int F>
__device__ __forceinline__ void rm_load_weights(unsigned char* s_codes, unsigned char* s_scales, int rt,
                                                int k0, int klen, int K_pad,
                                                const unsigned char* __restrict__ codes,
                                                const unsigned char* __restrict__ scales) {
    const unsigned tid = threadIdx.x;
    {
        constexpr unsigned CPR = RM_KC / 32;  // 16-byte chunks per row (16)
        const unsigned cpr = (unsigned)klen / 32;
        const unsigned stride = (unsigned)K_pad / 2;
        const unsigned char* src = codes + (size_t)rt * RM_ROWS * stride + (unsigned)k0 / 2;
        const u32 dst = smem_u32(s_codes);
#pragma unroll
        for (unsigned j = 0; j < RM_ROWS * CPR / RM_THREADS; ++j) {
            const unsigned i = tid + j * RM_THREADS;
            const unsigned r = i / CPR, ch = i % CPR;
            if (ch < cpr) cp_async16(dst + r * (RM_KC / 2) + ch * 16, src + (size_t)r * stride + ch * 16, 16);
        }
    }
    {
        constexpr unsigned B = Fmt<F>::BLOCK, SB = Fmt<F>::SCALE_BYTES, NB = RmScales<F>::NB;
        constexpr unsigned CPG = NB * 8 * SB / 16;  // chunks per row group, full unit (16 or 4)
        const unsigned cpg = ((unsigned)klen / B) * 8 * SB / 16;
        const u32 dst = smem_u32(s_scales);
        if (tid < 8 * CPG) {
            const unsigned rg = tid / CPG, ch = tid % CPG;
            const unsigned char* src =
                scales + (((size_t)(rt * 8 + rg) * ((unsigned)K_pad / B) + (unsigned)k0 / B) * 8) * SB + ch * 16;
            if (ch < cpg) cp_async16(dst + rg * NB * 8 * SB + ch * 16, src, 16);
        }
    }
}

// Sum v[0..V) over the 32 lanes with V-1 shuffles ("transposing" reduction). Afterwards
// lane L holds, for V >= 32, the sums of values R*L + j (j < R = V/32) in v[0..R); for
// V < 32 every lane holds the sum of value L >> log2(32/V) in v[0].
template <int N, int O>
__device__ __forceinline__ void tr_step(float* v, int lane) {
    if constexpr (N >= 2) {
        const bool up = (lane & O) != 0;
#pragma unroll
        for (int i = 0; i < N / 2; ++i) {
            const float send = up ? v[i] : v[i + N / 2];
            const float keep = up ? v[i + N / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
        }
    } else {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
    }
}
template <int V>
__device__ __forceinline__ void warp_transpose_reduce(float (&v)[V], int lane) {
    tr_step<V, 16>(v, lane);
    tr_step<(V >> 1 > 1 ? V >> 1 : 1), 8>(v, lane);
    tr_step<(V >> 2 > 1 ? V >> 2 : 1), 4>(v, lane);
    tr_step<(V >> 3 > 1 ? V >> 3 : 1), 2>(v, lane);
    tr_step<(V >> 4 > 1 ? V >> 4 : 1), 1>(v, lane);
}

// acc[8 rows][MT tokens] of every thread -> part[tok][row] (shared, LD = RM_RED_LD) with
// the 32 lanes (k blocks) of each warp summed; warp w owns rows 8w..8w+7.
template <int MT>
__device__ __forceinline__ void rm_reduce_to_part(float (&acc)[8][MT], float* part) {
    constexpr int V = 8 * MT;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float v[V];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int m = 0; m < MT; ++m) v[i * MT + m] = acc[i][m];
    warp_transpose_reduce<V>(v, lane);
    if constexpr (V >= 32) {
        constexpr int R = V / 32;
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const int idx = R * lane + j, i = idx / MT, m = idx % MT;
            part[m * RM_RED_LD + warp * 8 + i] = v[j];
        }
    } else {
        constexpr int SH = (V == 16) ? 1 : (V == 8) ? 2 : 3;
        if ((lane & ((1 << SH) - 1)) == 0) {
            const int idx = lane >> SH, i = idx / MT, m = idx % MT;
            part[m * RM_RED_LD + warp * 8 + i] = v[0];
        }
    }
}

}  // namespace mt
