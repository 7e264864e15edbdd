// W4A16 CUDA-core GEMV / small GEMM (M = 1..8): Y[M,N] = X[M,K] (fp16) x W[N,K]^T, FP32
// accumulation, for nvfp4 | razer | razer-g128 (one template, the decode step per format).
//
//   * rowmajor weight layout; cp.async multi-stage pipeline of 64-row x 512-k units;
//   * multi-token CTA fusion: every CTA serves all MT tokens from one weight stream;
//   * thread = 8 rows x one 16-wide block: 8*MT independent FP32 accumulators;
//   * register-only decode: prmt lookup (special value folded in) -> FP32 magic word
//     (192 + 4v) -> one FFMA that removes the offset and applies the block scale
//     (v * s, exact) -> FFMA with the activation;
//   * stripes over n_ctas CTAs with the deterministic last-arriver reduction.
#include "rowmajor_common.cuh"

namespace mt {

template <int F, int MT, int STAGES>
struct CcCfg {
    static constexpr int X_BYTES = MT * RM_KC * 2;
    static constexpr int STAGE_BYTES = RM_CODE_BYTES + RmScales<F>::BYTES + X_BYTES;
    static constexpr int RED_BYTES = MT * RM_RED_LD * 4;
    static constexpr int SMEM = STAGES * STAGE_BYTES + RED_BYTES + 16;
};

template <int F, int MT, int STAGES>
__device__ __forceinline__ void cc_load_unit(unsigned char* st, int rt, int k0, int klen, int K_pad, int K, int M,
                                             const unsigned char* __restrict__ codes,
                                             const unsigned char* __restrict__ scales,
                                             const __half* __restrict__ x) {
    rm_load_weights<F>(st, st + RM_CODE_BYTES, rt, k0, klen, K_pad, codes, scales);
    // activations: chunk ch (8 halves) of token m goes to [hk = ch & 1][m][lane = ch >> 1], so
    // that a warp reading one 16-byte chunk per lane reads 512 contiguous bytes
    const u32 dst = smem_u32(st + RM_CODE_BYTES + RmScales<F>::BYTES);
    constexpr unsigned CPR = RM_KC / 8;  // 64 chunks per token
    constexpr unsigned TOTAL = MT * CPR;
#pragma unroll
    for (unsigned j = 0; j < (TOTAL + RM_THREADS - 1) / RM_THREADS; ++j) {
        const unsigned i = threadIdx.x + j * RM_THREADS;
        if (TOTAL % RM_THREADS == 0 || i < TOTAL) {
            const unsigned m = i / CPR, ch = i % CPR;
            const int k = k0 + (int)ch * 8;
            const bool ok = ((int)m < M) && (k < K);
            cp_async16(dst + (((ch & 1u) * MT + m) * 32 + (ch >> 1)) * 16, ok ? x + (size_t)m * (unsigned)K + (unsigned)k : x,
                       ok ? 16 : 0);
        }
    }
}

template <int F, int MT, int STAGES>
__global__ void __launch_bounds__(256, (MT <= 2 ? 2 : 1))
w4a16_cc(const unsigned char* __restrict__ codes, const unsigned char* __restrict__ scales,
         const __half* __restrict__ x, void* __restrict__ y, float* __restrict__ ws,
         int* __restrict__ counters, int M, int N, int K, int K_pad, int RT, int n_ctas,
         float out_scale, int out_f32, u32 l0, u32 l1, u32 l2, u32 l3, u32 lsp) {
    using C = CcCfg<F, MT, STAGES>;
    extern __shared__ __align__(128) unsigned char smem[];
    float* red = reinterpret_cast<float*>(smem + STAGES * C::STAGE_BYTES);
    int* s_flag = reinterpret_cast<int*>(smem + STAGES * C::STAGE_BYTES + C::RED_BYTES);
    const Lut L{l0, l1, l2, l3, lsp};
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int KU = (K_pad + RM_KC - 1) / RM_KC;
    const int U = RT * KU;
    const int c = blockIdx.x;
    const int ubeg = stripe_begin(c, U, n_ctas), uend = stripe_begin(c + 1, U, n_ctas);
    const int my_first_tile = ubeg / KU;

    float acc[8][MT];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int m = 0; m < MT; ++m) acc[i][m] = 0.f;

    int prt = ubeg / KU, pkc = ubeg % KU;  // unit being prefetched
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (ubeg + s < uend)
            cc_load_unit<F, MT, STAGES>(smem + s * C::STAGE_BYTES, prt, pkc * RM_KC, min(RM_KC, K_pad - pkc * RM_KC),
                                        K_pad, K, M, codes, scales, x);
        cp_async_commit();
        if (++pkc == KU) { pkc = 0; ++prt; }
    }
    int stage = 0;
    int crt = ubeg / KU, ckc = ubeg % KU;  // unit being computed
    for (int u = ubeg; u < uend; ++u) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            if (u + STAGES - 1 < uend)
                cc_load_unit<F, MT, STAGES>(smem + ((stage + STAGES - 1) % STAGES) * C::STAGE_BYTES, prt,
                                            pkc * RM_KC, min(RM_KC, K_pad - pkc * RM_KC), K_pad, K, M, codes,
                                            scales, x);
            cp_async_commit();
            if (++pkc == KU) { pkc = 0; ++prt; }
        }
        const unsigned char* st = smem + stage * C::STAGE_BYTES;
        const unsigned char* sc = st + RM_CODE_BYTES;
        const unsigned char* xs = sc + RmScales<F>::BYTES;
        const int klen = min(RM_KC, K_pad - ckc * RM_KC);
        if (16 * lane < klen) {
            // block scales (and RaZeR's per-block tables) of the thread's 8 rows
            u32 scode[8];
            if constexpr (Fmt<F>::SCALE_BYTES == 1) {
                const uint2 sv = *reinterpret_cast<const uint2*>(sc + (warp * RmScales<F>::NB + lane) * 8);
#pragma unroll
                for (int i = 0; i < 8; ++i) scode[i] = ((i < 4 ? sv.x : sv.y) >> (8 * (i & 3))) & 0xFFu;
            } else {
                const uint4 sv = *reinterpret_cast<const uint4*>(
                    sc + (warp * RmScales<F>::NB + lane * 16 / Fmt<F>::BLOCK) * 16);
                const u32 w4[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
                for (int i = 0; i < 8; ++i) scode[i] = (w4[i >> 1] >> (16 * (i & 1))) & 0xFFFFu;
            }
            float s4[8], c4[8];
            u32 p0[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                s4[i] = scale_f32<F>(scode[i]) * LUT_INV_SCALE;  // (192 + 4v - 192) * s/4 = v*s
                c4[i] = -F32_OFFSET * s4[i];
                if constexpr (Fmt<F>::SPECIAL) p0[i] = special_p0(L, scode[i] >> Fmt<F>::META_SHIFT);
                else p0[i] = L.p0;
            }
            uint2 wrow[8];  // 16 codes of each row: one conflict-free 8-byte load per row
#pragma unroll
            for (int i = 0; i < 8; ++i)
                wrow[i] = *reinterpret_cast<const uint2*>(st + (warp * 8 + i) * (RM_KC / 2) + 8 * lane);
#pragma unroll
            for (int hk = 0; hk < 2; ++hk) {
                float xf[MT][8];
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    const uint4 xv = *reinterpret_cast<const uint4*>(xs + ((hk * MT + m) * 32 + lane) * 16);
                    const u32 xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&xw[q]));
                        xf[m][2 * q] = f.x;
                        xf[m][2 * q + 1] = f.y;
                    }
                }
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const u32 wd = hk ? wrow[i].y : wrow[i].x;
                    u32 lo, hi;
                    lut8(wd, p0[i], p0[i], L, lo, hi);
                    float wv[8];
                    wv[0] = fmaf(f32word<0>(lo), s4[i], c4[i]);
                    wv[1] = fmaf(f32word<1>(lo), s4[i], c4[i]);
                    wv[2] = fmaf(f32word<2>(lo), s4[i], c4[i]);
                    wv[3] = fmaf(f32word<3>(lo), s4[i], c4[i]);
                    wv[4] = fmaf(f32word<0>(hi), s4[i], c4[i]);
                    wv[5] = fmaf(f32word<1>(hi), s4[i], c4[i]);
                    wv[6] = fmaf(f32word<2>(hi), s4[i], c4[i]);
                    wv[7] = fmaf(f32word<3>(hi), s4[i], c4[i]);
#pragma unroll
                    for (int m = 0; m < MT; ++m)
#pragma unroll
                        for (int k = 0; k < 8; ++k) acc[i][m] = fmaf(wv[k], xf[m][k], acc[i][m]);
                }
            }
        }
        if (u + 1 == uend || ckc + 1 == KU) {
            rm_reduce_to_part<MT>(acc, red);
            __syncthreads();
            finish_tile<MT, RM_RED_LD, RM_THREADS>(red, crt, 0, U, KU, n_ctas, my_first_tile, ws, counters,
                                                   RT, M, N, 0, out_scale, out_f32, y, s_flag);
            __syncthreads();
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int m = 0; m < MT; ++m) acc[i][m] = 0.f;
        }
        stage = (stage + 1) % STAGES;
        if (++ckc == KU) { ckc = 0; ++crt; }
    }
    cp_async_wait<0>();
}

}  // namespace mt
