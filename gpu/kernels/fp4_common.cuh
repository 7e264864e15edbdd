// Shared device helpers of mactile's FP4 kernels (sm_90a, NVRTC or nvcc).
//
// The Fmt<ID> traits and the magic constants are generated from the golden specs by
// mactile.gpu.formats.traits_header() and prepended to this file; nothing here hard-codes
// a format table. See gpu/formats.py for the decode scheme.
#pragma once
#include "ptx.cuh"

namespace mt {

using namespace ptx;  // the PTX wrappers (prmt, cp.async, griddepcontrol, ...) live in one header

// Lookup-table words: bytes (4v+64) of codes 0-3, 4-7, 8-11, 12-15, and the four special
// values of RaZeR in metadata-index order (+a, +b, -a, -b).
struct Lut {
    u32 p0, p1, n0, n1, sp;
};

// Byte 0 of the positive table replaced by the special value of metadata index m (0..3).
__device__ __forceinline__ u32 special_p0(const Lut& L, u32 m) {
    return prmt(L.p0, L.sp, 0x3214u + m);
}

// Eight codes (nibbles of w) -> eight LUT bytes: codes 0-3 in lo, 4-7 in hi. p0_lo/p0_hi
// are the positive tables of the rows the two halves belong to (RaZeR: per block).
// A negative code sign-replicates a byte with MSB 0 in the first prmt (gives 0x00), a
// positive one does so in the second (selector XOR 0x8888); OR merges.
__device__ __forceinline__ void lut8(u32 w, u32 p0_lo, u32 p0_hi, const Lut& L, u32& lo, u32& hi) {
    const u32 x = w ^ 0x88888888u;
    lo = prmt(p0_lo, L.p1, w) | prmt(L.n0, L.n1, x);
    hi = prmt(p0_hi, L.p1, w >> 16) | prmt(L.n0, L.n1, x >> 16);
}

// Two LUT bytes (j, j+1 of `bytes`, j even) -> f16x2 word (0x5C00|b) = 272 + v per half.
template <int J>
__device__ __forceinline__ u32 f16pair(u32 bytes) {
    return prmt(bytes, 0x5C5C5C5Cu, (u32)(J | (4 << 4) | ((J + 1) << 8) | (4 << 12)));
}

// One LUT byte (index J of `bytes`) -> f32 word (0x43000000 | b<<16) = 192 + 4v.
template <int J>
__device__ __forceinline__ float f32word(u32 bytes) {
    return __uint_as_float(prmt(bytes, F32_MAGIC, (u32)(4 | (4 << 4) | (J << 8) | (7 << 12))));
}

// Scale payload (metadata masked off) -> FP32 value by bit placement (exact).
template <int F>
__device__ __forceinline__ float scale_f32(u32 code) {
    return __uint_as_float((code & Fmt<F>::SCALE_MASK) << Fmt<F>::F32_SHIFT) * Fmt<F>::F32_MUL;
}
// ------------------------------------------------------------------ stripes
// Units 0..U-1 (row tile major) split into n_ctas contiguous stripes of equal length
// (+-1), Marlin's partitioning. Requires n_ctas <= U (every stripe non-empty).
__device__ __forceinline__ int stripe_begin(int c, int U, int C) {
    return (int)(((long long)c * U) / C);
}
// The CTA whose stripe holds unit u.
__device__ __forceinline__ int stripe_owner(int u, int U, int C) {
    return (int)((((long long)(u + 1) * C) + U - 1) / U) - 1;
}

// ------------------------------------------------------------------ tile completion
// `part` (shared, floats [tok][row], leading dimension LD) holds this CTA's sum for row
// tile rt over the k-units it owns; tokens tok0 + [0, MT), rows rt*64 + [0, 64).
// If the CTA owns the whole tile it writes Y; otherwise it stores the partial in its
// workspace slot, and the last of the tile's contributors (atomic counter) adds all
// partials in stripe order (deterministic) and writes Y. Counters return to 0.
template <int MT, int LD, int NT>
__device__ void finish_tile(const float* part, int rt, int ttile, int U, int KU, int C,
                            int my_first_tile, float* __restrict__ ws, int* __restrict__ counters,
                            int RT, int M, int N, int tok0, float out_scale, int out_f32,
                            void* __restrict__ y, int* s_flag) {
    const int tid = threadIdx.x;
    const int u0 = rt * KU, u1 = (rt + 1) * KU - 1;
    const int c_first = stripe_owner(u0, U, C), c_last = stripe_owner(u1, U, C);
    const int c = blockIdx.x;
    constexpr int TILE = MT * 64;
    if (c_first == c_last) {  // sole owner: write Y directly
        for (int i = tid; i < TILE; i += NT) {
            const int m = i / 64, r = i % 64;
            const int tok = tok0 + m, row = rt * 64 + r;
            if (tok < M && row < N) {
                const float v = part[m * LD + r] * out_scale;
                if (out_f32) ((float*)y)[(size_t)tok * N + row] = v;
                else ((__half*)y)[(size_t)tok * N + row] = __float2half_rn(v);
            }
        }
        return;
    }
    const size_t slot_stride = (size_t)TILE;
    float* wbase = ws + (size_t)ttile * (2 * (size_t)C) * slot_stride;
    float* mine = wbase + (size_t)(2 * c + (rt == my_first_tile ? 0 : 1)) * slot_stride;
    for (int i = tid; i < TILE; i += NT) mine[i] = part[(i / 64) * LD + (i % 64)];
    __threadfence();
    __syncthreads();
    int* cnt = counters + (size_t)ttile * RT + rt;
    if (tid == 0) {
        const int prev = atomicAdd(cnt, 1);
        *s_flag = (prev == c_last - c_first) ? 1 : 0;
    }
    __syncthreads();
    if (!*s_flag) return;
    __threadfence();
    for (int i = tid; i < TILE; i += NT) {
        float acc = 0.f;
        for (int cc = c_first; cc <= c_last; ++cc) {
            const int first_tile_cc = stripe_begin(cc, U, C) / KU;
            const float* p = wbase + (size_t)(2 * cc + (rt == first_tile_cc ? 0 : 1)) * slot_stride;
            acc += __ldcg(p + i);
        }
        const int m = i / 64, r = i % 64;
        const int tok = tok0 + m, row = rt * 64 + r;
        if (tok < M && row < N) {
            const float v = acc * out_scale;
            if (out_f32) ((float*)y)[(size_t)tok * N + row] = v;
            else ((__half*)y)[(size_t)tok * N + row] = __float2half_rn(v);
        }
    }
    if (tid == 0) *cnt = 0;  // reusable by the next launch (graph replay)
}

}  // namespace mt
