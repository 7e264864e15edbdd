// W4A16 tensor-core GEMM: Y[M,N] = X[M,K] (fp16) x W[N,K]^T (nvfp4 | razer | razer-g128).
//
// Marlin-style structure on Hopper's mma.sync.m16n8k16 (f16 in, f32 accumulate), with the
// roles swapped for decoding: the weight tile is the A operand (16 output features x 16 k),
// the activations are B (16 k x 8 tokens), so M = 1..8 fills an n8 tile without padding
// to 16 tokens.
//   * weights in the "frag" layout (gpu/packing.py): one 32-bit word = the 8 codes of one
//     lane's A fragment; a 16-byte shared load serves four k-steps;
//   * decode in registers: prmt lookup (special value folded in) -> f16 magic word ->
//     one HFMA2 that removes the offset and applies the block scale (exact for nvfp4 and
//     razer); razer-g128's FP16 scale is applied in FP32 per 128-block instead;
//   * cp.async multi-stage pipeline of (64-row tile x KT) units, activations staged with
//     a 16-byte XOR swizzle and read with ldmatrix;
//   * stripe partitioning over n_ctas CTAs (<= #SMs; fewer for small matrices, RaZeR
//     App. E) with a deterministic last-arriver reduction (fp4_common.cuh).
#include "fp4_common.cuh"

namespace mt {

template <int F, int MT, int KT, int STAGES>
struct TcCfg {
    static constexpr int THREADS = 256;
    static constexpr int CODE_BYTES = KT * 32;                              // 64 rows x KT / 2
    static constexpr int SCALE_BYTES = (KT / Fmt<F>::BLOCK) * 64 * Fmt<F>::SCALE_BYTES;
    static constexpr int X_BYTES = MT * KT * 2;
    static constexpr int STAGE_BYTES = CODE_BYTES + ((SCALE_BYTES + 127) / 128) * 128 + X_BYTES;
    static constexpr int RED_LD = 68;                                       // floats, conflict-free
    static constexpr int RED_BYTES = MT * RED_LD * 4;
    static constexpr int SMEM = STAGES * STAGE_BYTES + RED_BYTES + 16;
    // Two CTAs per SM where registers (<= 128) and shared memory allow: twice the warps to
    // hide the decode chains' latency (profiled: 2 warps/scheduler left 57% of issue slots idle).
    static constexpr int MINB = (MT <= 32 || (MT == 64 && F != 2)) ? 2 : 1;
    static_assert(KT % 64 == 0 && KT / 8 >= 8, "KT must be a multiple of 64");
    static_assert(MT % 8 == 0 && MT >= 8 && MT <= 128, "MT in 8..128, multiple of 8");
    static_assert(F != 2 || KT % 128 == 0, "razer-g128 needs KT multiple of 128");
};

__device__ __forceinline__ void mma16816(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(u32 addr, u32& r0, u32& r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(addr));
}

// One unit (row tile rt, k-chunk starting at k0, klen <= KT valid k) into a stage. Trip
// counts and index splits are compile-time (the profiled first version spent most of its
// instructions on runtime divisions here); a partial last unit only adds guards.
template <int F, int MT, int KT, int STAGES>
__device__ __forceinline__ void tc_load_unit(unsigned char* stage, int rt, int k0, int klen, int K_pad, int K,
                                             int M, int tok0, const u32* __restrict__ codes,
                                             const unsigned char* __restrict__ scales,
                                             const __half* __restrict__ x) {
    using C = TcCfg<F, MT, KT, STAGES>;
    const int tid = threadIdx.x;
    {  // codes: contiguous, klen * 32 bytes
        const unsigned char* src = reinterpret_cast<const unsigned char*>(codes) +
                                   ((size_t)rt * (K_pad / 64) + k0 / 64) * 2048;
        const u32 dst = smem_u32(stage);
#pragma unroll
        for (int j = 0; j < KT * 2 / C::THREADS; ++j) {
            const int i = tid + j * C::THREADS;
            if (i < klen * 2) cp_async16(dst + i * 16, src + (size_t)i * 16, 16);
        }
    }
    {  // scales: (klen / B) block columns x 64 rows x SB bytes, contiguous
        constexpr int B = Fmt<F>::BLOCK, SB = Fmt<F>::SCALE_BYTES;
        constexpr int N16 = (KT / B) * 64 * SB / 16;
        const unsigned char* src = scales + ((size_t)rt * (K_pad / B) + k0 / B) * 64 * SB;
        const u32 dst = smem_u32(stage + C::CODE_BYTES);
        const int n16 = (klen / B) * 64 * SB / 16;
#pragma unroll
        for (int j = 0; j < (N16 + C::THREADS - 1) / C::THREADS; ++j) {
            const int i = tid + j * C::THREADS;
            if (i < n16) cp_async16(dst + i * 16, src + (size_t)i * 16, 16);
        }
    }
    {  // activations: MT tokens x KT halves, 16-byte chunks XOR-swizzled by token & 7
        constexpr int CPR = KT / 8;  // power of two
        constexpr int TOTAL = MT * CPR;
        const u32 dst = smem_u32(stage + C::STAGE_BYTES - C::X_BYTES);
#pragma unroll
        for (int j = 0; j < (TOTAL + C::THREADS - 1) / C::THREADS; ++j) {
            const int i = tid + j * C::THREADS;
            if (TOTAL % C::THREADS == 0 || i < TOTAL) {
                const int r = i / CPR, ch = i % CPR;
                const int tok = tok0 + r, k = k0 + ch * 8;
                const bool ok = (tok < M) && (k < K) && (ch * 8 < klen);
                cp_async16(dst + r * (KT * 2) + ((ch ^ (r & 7)) << 4), ok ? x + (size_t)tok * K + k : x, ok ? 16 : 0);
            }
        }
    }
}

template <int F, int MT, int KT, int STAGES>
__global__ void __launch_bounds__(256, TcCfg<F, MT, KT, STAGES>::MINB)
w4a16_tc(const u32* __restrict__ codes, const unsigned char* __restrict__ scales,
         const __half* __restrict__ x, void* __restrict__ y, float* __restrict__ ws,
         int* __restrict__ counters, int M, int N, int K, int K_pad, int RT, int n_ctas,
         float out_scale, int out_f32, u32 l0, u32 l1, u32 l2, u32 l3, u32 lsp) {
    using C = TcCfg<F, MT, KT, STAGES>;
    constexpr int NT8 = MT / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    float* red = reinterpret_cast<float*>(smem + STAGES * C::STAGE_BYTES);
    int* s_flag = reinterpret_cast<int*>(smem + STAGES * C::STAGE_BYTES + C::RED_BYTES);

    const Lut L{l0, l1, l2, l3, lsp};
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mtile = warp & 3, kq = warp >> 2;
    const int g = lane >> 2, t = lane & 3;
    const int ttile = blockIdx.y, tok0 = ttile * MT;
    const int KU = (K_pad + KT - 1) / KT;
    const int U = RT * KU;
    const int c = blockIdx.x;
    const int ubeg = stripe_begin(c, U, n_ctas), uend = stripe_begin(c + 1, U, n_ctas);
    const int my_first_tile = ubeg / KU;

    // f16x2 constants: the LUT offset, and 2^(15-bias-prescale) for scale decoding
    const u32 off2 = f2h2u(-F16_OFFSET, -F16_OFFSET);
    const u32 smul2 = f2h2u(Fmt<F>::F16_MUL, Fmt<F>::F16_MUL);
    const u32 one2 = f2h2u(1.f, 1.f);

    float acc[NT8][4];
#pragma unroll
    for (int n = 0; n < NT8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;

    // prologue; (prt, pkc) walks the units being prefetched
    int prt = ubeg / KU, pkc = ubeg % KU;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (ubeg + s < uend)
            tc_load_unit<F, MT, KT, STAGES>(smem + s * C::STAGE_BYTES, prt, pkc * KT, min(KT, K_pad - pkc * KT),
                                            K_pad, K, M, tok0, codes, scales, x);
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
                tc_load_unit<F, MT, KT, STAGES>(smem + ((stage + STAGES - 1) % STAGES) * C::STAGE_BYTES, prt,
                                                pkc * KT, min(KT, K_pad - pkc * KT), K_pad, K, M, tok0, codes,
                                                scales, x);
            cp_async_commit();
            if (++pkc == KU) { pkc = 0; ++prt; }
        }
        const unsigned char* st = smem + stage * C::STAGE_BYTES;
        const unsigned char* sc = st + C::CODE_BYTES;
        const u32 xs = smem_u32(st + C::STAGE_BYTES - C::X_BYTES);
        const int klen = min(KT, K_pad - ckc * KT);
        const int groups = klen / 64;

        for (int g4 = kq; g4 < groups; g4 += 2) {
            const uint4 wv = *reinterpret_cast<const uint4*>(st + ((g4 * 4 + mtile) * 32 + lane) * 16);
            const u32 wk[4] = {wv.x, wv.y, wv.z, wv.w};
            float tmp[NT8][4];
            if constexpr (F == 2) {
#pragma unroll
                for (int n = 0; n < NT8; ++n)
#pragma unroll
                    for (int i = 0; i < 4; ++i) tmp[n][i] = 0.f;
            }
            u32 p0g = L.p0, p0h = L.p0;
            uint2 sv8 = make_uint2(0u, 0u);
            if constexpr (F != 2) {  // the 8 scale codes (4 k-steps x rows g, g+8) of this group
                sv8 = *reinterpret_cast<const uint2*>(sc + ((g4 * 4 + mtile) * 8 + g) * 8);
            } else {  // one FP16 scale per 128 k: both halves of the 128-block share it
                const u32 sw = *reinterpret_cast<const u32*>(sc + (((g4 >> 1) * 4 + mtile) * 8 + g) * 4);
                p0g = special_p0(L, (sw & 0xFFFFu) >> Fmt<F>::META_SHIFT);
                p0h = special_p0(L, (sw >> 16) >> Fmt<F>::META_SHIFT);
            }
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                const int kk = g4 * 4 + ks;  // k-step within the unit
                u32 s2g = one2, s2h = one2, c2g = off2, c2h = off2;
                if constexpr (F != 2) {
                    const u32 sb = ((ks < 2 ? sv8.x : sv8.y) >> (16 * (ks & 1))) & 0xFFFFu;  // (row g, row g+8)
                    if constexpr (Fmt<F>::SPECIAL) {
                        p0g = special_p0(L, (sb & 0xFFu) >> Fmt<F>::META_SHIFT);
                        p0h = special_p0(L, (sb >> 8) >> Fmt<F>::META_SHIFT);
                    }
                    const u32 s2 = scale_pair_f16<F>(sb);  // (s_g, s_g8) * 2^-prescale, exact
                    const u32 c2 = hmul2u(s2, off2);
                    s2g = prmt(s2, 0, 0x1010u);
                    s2h = prmt(s2, 0, 0x3232u);
                    c2g = prmt(c2, 0, 0x1010u);
                    c2h = prmt(c2, 0, 0x3232u);
                }
                u32 blo, bhi;
                lut8(wk[ks], p0g, p0h, L, blo, bhi);
                const u32 a0 = hfma2u(f16pair<0>(blo), s2g, c2g);  // row g,   k 2t..2t+1
                const u32 a2 = hfma2u(f16pair<2>(blo), s2g, c2g);  // row g,   k 2t+8..2t+9
                const u32 a1 = hfma2u(f16pair<0>(bhi), s2h, c2h);  // row g+8, k 2t..2t+1
                const u32 a3 = hfma2u(f16pair<2>(bhi), s2h, c2h);  // row g+8, k 2t+8..2t+9
                if constexpr (NT8 == 1) {
                    const int j = lane & 7, ch = kk * 2 + ((lane >> 3) & 1);
                    u32 b0, b1;
                    ldsm_x2(xs + j * (KT * 2) + ((ch ^ (j & 7)) << 4), b0, b1);
                    if constexpr (F == 2) mma16816(tmp[0], a0, a1, a2, a3, b0, b1);
                    else mma16816(acc[0], a0, a1, a2, a3, b0, b1);
                } else {
#pragma unroll
                    for (int np = 0; np < NT8 / 2; ++np) {
                        const int q = lane >> 3;
                        const int j = np * 16 + (q >> 1) * 8 + (lane & 7), ch = kk * 2 + (q & 1);
                        u32 b0, b1, b2, b3;
                        ldsm_x4(xs + j * (KT * 2) + ((ch ^ (j & 7)) << 4), b0, b1, b2, b3);
                        if constexpr (F == 2) {
                            mma16816(tmp[2 * np], a0, a1, a2, a3, b0, b1);
                            mma16816(tmp[2 * np + 1], a0, a1, a2, a3, b2, b3);
                        } else {
                            mma16816(acc[2 * np], a0, a1, a2, a3, b0, b1);
                            mma16816(acc[2 * np + 1], a0, a1, a2, a3, b2, b3);
                        }
                    }
                }
            }
            if constexpr (F == 2) {
                const u32 sw = *reinterpret_cast<const u32*>(sc + (((g4 >> 1) * 4 + mtile) * 8 + g) * 4);
                const float sg = scale_f32<F>(sw & 0xFFFFu), sh = scale_f32<F>(sw >> 16);  // exact
#pragma unroll
                for (int n = 0; n < NT8; ++n) {
                    acc[n][0] = fmaf(tmp[n][0], sg, acc[n][0]);
                    acc[n][1] = fmaf(tmp[n][1], sg, acc[n][1]);
                    acc[n][2] = fmaf(tmp[n][2], sh, acc[n][2]);
                    acc[n][3] = fmaf(tmp[n][3], sh, acc[n][3]);
                }
            }
        }

        // end of a row tile in this stripe: combine the two k-halves, finish the tile
        if (u + 1 == uend || ckc + 1 == KU) {
            const int rt = crt;
            const int r0 = mtile * 16 + g;
            if (kq == 1) {
#pragma unroll
                for (int n = 0; n < NT8; ++n) {
                    const int m0 = n * 8 + 2 * t;
                    red[m0 * C::RED_LD + r0] = acc[n][0];
                    red[(m0 + 1) * C::RED_LD + r0] = acc[n][1];
                    red[m0 * C::RED_LD + r0 + 8] = acc[n][2];
                    red[(m0 + 1) * C::RED_LD + r0 + 8] = acc[n][3];
                }
            }
            __syncthreads();
            if (kq == 0) {
#pragma unroll
                for (int n = 0; n < NT8; ++n) {
                    const int m0 = n * 8 + 2 * t;
                    red[m0 * C::RED_LD + r0] += acc[n][0];
                    red[(m0 + 1) * C::RED_LD + r0] += acc[n][1];
                    red[m0 * C::RED_LD + r0 + 8] += acc[n][2];
                    red[(m0 + 1) * C::RED_LD + r0 + 8] += acc[n][3];
                }
            }
            __syncthreads();
            finish_tile<MT, C::RED_LD, C::THREADS>(red, rt, ttile, U, KU, n_ctas, my_first_tile, ws,
                                                   counters, RT, M, N, tok0, out_scale, out_f32, y, s_flag);
            __syncthreads();
#pragma unroll
            for (int n = 0; n < NT8; ++n)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
        }
        stage = (stage + 1) % STAGES;
        if (++ckc == KU) { ckc = 0; ++crt; }
    }
    cp_async_wait<0>();
}

}  // namespace mt
