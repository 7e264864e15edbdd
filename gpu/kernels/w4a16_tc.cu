// W4A16 tensor-core GEMM: Y[M,N] = X[M,K] (fp16) x W[N,K]^T (nvfp4 | razer | razer-g128).
//
// Marlin-style structure on Hopper's mma.sync.m16n8k16 (f16 in, f32 accumulate), with the
// roles swapped for decoding: the weight tile is the A operand (16 output features x 16 k),
// the activations are B (16 k x 8 tokens), so M = 1..8 fills an n8 tile without padding
// to 16 tokens.
//   * weights in the "frag" layout (gpu/packing.py): one 32-bit word = the 8 codes of one
//     lane's A fragment; a 16-byte shared load serves four k-steps;
//   * decode in registers. nvfp4 (Fmt::BP): bit placement -- rotations and masks put each
//     code's magnitude into FP16 bits [11:9] and its sign into bit 15 (the value is
//     v * 2^-14, subnormals included), one HMUL2 applies the E4M3 scale * 2^7 (exact);
//     razer / razer-g128: prmt lookup (special value folded in) -> f16 magic word -> one
//     HFMA2 that removes the offset and applies the block scale (exact); razer-g128's FP16
//     scale is applied in FP32 per 128-block instead;
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

// Loader of the cp.async pipeline. The units of a stripe are consecutive in the frag
// layout, so code and scale sources are running pointers (advanced by klen*32 and
// klen/B*64*SB bytes per unit); every per-thread index is computed once; trip counts are
// compile-time; a partial last unit only adds guards.
template <int F, int MT, int KT, int STAGES>
struct TcLoader {
    using C = TcCfg<F, MT, KT, STAGES>;
    static constexpr int B = Fmt<F>::BLOCK, SB = Fmt<F>::SCALE_BYTES;
    static constexpr int CPR = KT / 8;  // activation chunks per token (power of two)
    static constexpr int XCH = MT * CPR;
    static constexpr int XJ = (XCH + C::THREADS - 1) / C::THREADS;
    static constexpr int N16 = (KT / B) * 64 * SB / 16;  // scale chunks of a full unit
    const unsigned char* code;   // next unit's codes
    const unsigned char* scale;  // next unit's scales
    const __half* xrow[XJ];      // this thread's activation chunk at k = 0 (null: token >= M)
    int xk[XJ];                  // its k offset within a unit
    u32 xdst[XJ];                // its swizzled shared offset within the activation tile
    int k0;                      // next unit's first k
    int K, K_pad;

    __device__ __forceinline__ void init(const unsigned char* codes, const unsigned char* scales,
                                         const __half* x, int u, int KU, int K_, int K_pad_, int M, int tok0) {
        K = K_;
        K_pad = K_pad_;
        const size_t e = (size_t)(u / KU) * K_pad + (size_t)(u % KU) * KT;  // element offset of unit u
        code = codes + e * 32;
        scale = scales + e / B * 64 * SB;
        k0 = (u % KU) * KT;
#pragma unroll
        for (int j = 0; j < XJ; ++j) {
            const int i = threadIdx.x + j * C::THREADS;
            const int r = i / CPR, ch = i % CPR;
            xk[j] = ch * 8;
            xdst[j] = (u32)(r * (KT * 2) + ((ch ^ (r & 7)) << 4));
            xrow[j] = ((XCH % C::THREADS == 0 || i < XCH) && tok0 + r < M) ? x + (size_t)(tok0 + r) * K + ch * 8 : nullptr;
        }
    }
    // Issue the next unit into the stage at shared address `dst`; advance.
    __device__ __forceinline__ void load(u32 dst, const __half* x) {
        const int tid = threadIdx.x;
        const u32 xd = dst + C::STAGE_BYTES - C::X_BYTES;
        if (k0 + KT <= K) {  // full unit inside K: no guards but the token's
#pragma unroll
            for (int j = 0; j < KT * 2 / C::THREADS; ++j)
                cp_async16(dst + (tid + j * C::THREADS) * 16, code + (tid + j * C::THREADS) * 16, 16);
#pragma unroll
            for (int j = 0; j < (N16 + C::THREADS - 1) / C::THREADS; ++j) {
                const int i = tid + j * C::THREADS;
                if (N16 % C::THREADS == 0 || i < N16) cp_async16(dst + C::CODE_BYTES + i * 16, scale + i * 16, 16);
            }
#pragma unroll
            for (int j = 0; j < XJ; ++j)
                if (XCH % C::THREADS == 0 || tid + j * C::THREADS < XCH)
                    cp_async16(xd + xdst[j], xrow[j] ? xrow[j] + k0 : x, xrow[j] ? 16 : 0);
            code += KT * 32;
            scale += KT / B * 64 * SB;
            k0 += KT;
        } else {
            const int klen = min(KT, K_pad - k0);
#pragma unroll
            for (int j = 0; j < KT * 2 / C::THREADS; ++j) {  // codes: klen * 32 bytes
                const int i = tid + j * C::THREADS;
                if (i < klen * 2) cp_async16(dst + i * 16, code + i * 16, 16);
            }
#pragma unroll
            for (int j = 0; j < (N16 + C::THREADS - 1) / C::THREADS; ++j) {  // scales
                const int i = tid + j * C::THREADS;
                if ((N16 % C::THREADS == 0 || i < N16) && i < (klen / B) * 64 * SB / 16)
                    cp_async16(dst + C::CODE_BYTES + i * 16, scale + i * 16, 16);
            }
#pragma unroll
            for (int j = 0; j < XJ; ++j) {  // activations (zero-filled outside M x K x klen)
                if (XCH % C::THREADS == 0 || tid + j * C::THREADS < XCH) {
                    const bool ok = xrow[j] != nullptr && k0 + xk[j] < K && xk[j] < klen;
                    cp_async16(xd + xdst[j], ok ? xrow[j] + k0 : x, ok ? 16 : 0);
                }
            }
            code += klen * 32;
            scale += klen / B * 64 * SB;
            k0 += klen;
        }
        if (k0 == K_pad) k0 = 0;
    }
};

__device__ __forceinline__ __half2 u2h(u32 v) { return *reinterpret_cast<__half2*>(&v); }
__device__ __forceinline__ u32 h2u(__half2 v) { return *reinterpret_cast<u32*>(&v); }

__device__ __forceinline__ u32 rotl(u32 w, int r) { return r ? __funnelshift_l(w, w, r) : w; }

// Bit-placement decode of one frag word: f16x2 A register with values v * 2^-14. (Plain
// shifts instead of rotations where no needed bit wraps let ptxas use IMAD.SHL, off the
// half-rate ALU pipe, but cost one more LOP3 per word: 196 vs 181 instructions per two
// groups, measured in the SASS; the rotations are kept.)
template <int M_, int S_>
__device__ __forceinline__ u32 bp_reg(u32 w) {
    if constexpr (M_ == S_) return rotl(w, M_) & (BP_MAG_MASK | BP_SIGN_MASK);
    else return (rotl(w, M_) & BP_MAG_MASK) | (rotl(w, S_) & BP_SIGN_MASK);
}

// Per-thread shared-memory offsets of the loop, computed once. They pass through an empty
// asm so that ptxas keeps them in registers instead of recomputing them every unit (seen
// in the SASS: ~36 instructions per unit, 0.56 per weight).
struct TcOffsets {
    u32 w;        // this lane's 16-byte code word in group 0: (mtile * 32 + lane) * 16
    u32 s;        // this lane's scale bytes in group (pair) 0
    u32 xoff[4];  // ldmatrix offsets of the four k-steps of a group
};

// One group of four k-steps (64 k) of one warp's 16-row m-tile: decode + mma.
// `st` points at the stage, `sc` at its scales, `xb` = shared address of the activation
// tile plus the group's k offset (g4 * 128 bytes).
template <int F, int MT, int KT>
__device__ __forceinline__ void tc_group(float (&acc)[MT / 8][4], const unsigned char* st, const unsigned char* sc,
                                         u32 xb, const TcOffsets& o, int g4, const Lut& L) {
    constexpr int NT8 = MT / 8;
    const u32 (&xoff)[4] = o.xoff;
    const uint4 wv = *reinterpret_cast<const uint4*>(st + g4 * (4 * 32 * 16) + o.w);
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
    u32 sw = 0u;
    if constexpr (F != 2) {  // the 8 scale codes (4 k-steps x rows g, g+8) of this group
        sv8 = *reinterpret_cast<const uint2*>(sc + g4 * (4 * 8 * 8) + o.s);
    } else {  // one FP16 scale per 128 k: both halves of the 128-block share it
        sw = *reinterpret_cast<const u32*>(sc + (g4 >> 1) * (4 * 8 * 4) + o.s);
        p0g = special_p0(L, (sw & 0xFFFFu) >> Fmt<F>::META_SHIFT);
        p0h = special_p0(L, (sw >> 16) >> Fmt<F>::META_SHIFT);
    }
    const __half2 off2 = __float2half2_rn(-F16_OFFSET);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        u32 a0, a1, a2, a3;
        const u32 sb = (ks & 1) ? ((ks < 2 ? sv8.x : sv8.y) >> 16) : (ks < 2 ? sv8.x : sv8.y);  // (row g, row g+8)
        if constexpr (Fmt<F>::BP) {
            // E4M3 pair -> f16x2 (s_g, s_g8) in hardware, times 2^7 (exact), broadcast per row
            u32 hs;
            asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hs) : "h"((unsigned short)sb));
            const __half2 s2 = __hmul2_rn(u2h(hs), u2h(BP_SCALE_F16X2));
            const __half2 sg = __low2half2(s2), sh = __high2half2(s2);
            a0 = h2u(__hmul2_rn(u2h(bp_reg<BP_ROT_M0, BP_ROT_S0>(wk[ks])), sg));  // row g,   k 2t..2t+1
            a1 = h2u(__hmul2_rn(u2h(bp_reg<BP_ROT_M1, BP_ROT_S1>(wk[ks])), sh));  // row g+8, k 2t..2t+1
            a2 = h2u(__hmul2_rn(u2h(bp_reg<BP_ROT_M2, BP_ROT_S2>(wk[ks])), sg));  // row g,   k 2t+8..2t+9
            a3 = h2u(__hmul2_rn(u2h(bp_reg<BP_ROT_M3, BP_ROT_S3>(wk[ks])), sh));  // row g+8, k 2t+8..2t+9
        } else {
            __half2 sg = __float2half2_rn(1.f), sh = sg, cg = off2, ch = off2;
            if constexpr (F != 2) {
                if constexpr (Fmt<F>::SPECIAL) {
                    p0g = special_p0(L, (sb & 0xFFu) >> Fmt<F>::META_SHIFT);
                    p0h = special_p0(L, ((sb >> 8) & 0xFFu) >> Fmt<F>::META_SHIFT);
                }
                const __half2 s2 = u2h(scale_pair_f16<F>(sb & 0xFFFFu));  // (s_g, s_g8) * 2^-prescale, exact
                const __half2 c2 = __hmul2_rn(s2, off2);
                sg = __low2half2(s2);
                sh = __high2half2(s2);
                cg = __low2half2(c2);
                ch = __high2half2(c2);
            }
            u32 blo, bhi;
            lut8(wk[ks], p0g, p0h, L, blo, bhi);
            a0 = h2u(__hfma2(u2h(f16pair<0>(blo)), sg, cg));  // row g,   k 2t..2t+1
            a2 = h2u(__hfma2(u2h(f16pair<2>(blo)), sg, cg));  // row g,   k 2t+8..2t+9
            a1 = h2u(__hfma2(u2h(f16pair<0>(bhi)), sh, ch));  // row g+8, k 2t..2t+1
            a3 = h2u(__hfma2(u2h(f16pair<2>(bhi)), sh, ch));  // row g+8, k 2t+8..2t+9
        }
        if constexpr (NT8 == 1) {
            u32 b0, b1;
            ldsm_x2(xb + xoff[ks], b0, b1);
            if constexpr (F == 2) mma16816(tmp[0], a0, a1, a2, a3, b0, b1);
            else mma16816(acc[0], a0, a1, a2, a3, b0, b1);
        } else {
#pragma unroll
            for (int np = 0; np < NT8 / 2; ++np) {
                u32 b0, b1, b2, b3;
                ldsm_x4(xb + xoff[ks] + np * 16 * (KT * 2), b0, b1, b2, b3);
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
    const int t = lane & 3;
    const int ttile = blockIdx.y, tok0 = ttile * MT;
    const int KU = (K_pad + KT - 1) / KT;
    const int U = RT * KU;
    const int c = blockIdx.x;
    const int ubeg = stripe_begin(c, U, n_ctas), uend = stripe_begin(c + 1, U, n_ctas);
    const int my_first_tile = ubeg / KU;

    TcOffsets ofs;
    {
        const int g = lane >> 2, q = lane >> 3;
        ofs.w = (u32)((mtile * 32 + lane) * 16);
        ofs.s = (u32)((mtile * 8 + g) * (F == 2 ? 4 : 8));
        // ldmatrix rows: token j; 16-byte chunks XOR-swizzled by token & 7, and a group
        // starts at a multiple of 8 chunks, so the swizzle only touches the low 3 bits
        const int j = (NT8 == 1) ? (lane & 7) : ((q >> 1) * 8 + (lane & 7));
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) ofs.xoff[ks] = (u32)(j * (KT * 2) + (((2 * ks + (q & 1)) ^ (j & 7)) << 4));
        if constexpr (NT8 <= 2)  // larger token tiles need the registers (a spill at MT = 32)
            asm volatile("" : "+r"(ofs.w), "+r"(ofs.s), "+r"(ofs.xoff[0]), "+r"(ofs.xoff[1]), "+r"(ofs.xoff[2]),
                         "+r"(ofs.xoff[3]));
    }

    float acc[NT8][4];
#pragma unroll
    for (int n = 0; n < NT8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;

    // prologue
    TcLoader<F, MT, KT, STAGES> ld;
    ld.init(reinterpret_cast<const unsigned char*>(codes), scales, x, ubeg, KU, K, K_pad, M, tok0);
    const u32 sbase = smem_u32(smem);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (ubeg + s < uend) ld.load(sbase + s * C::STAGE_BYTES, x);
        cp_async_commit();
    }

    int stage = 0;
    u32 wstage = sbase + (STAGES - 1) * C::STAGE_BYTES;  // stage the next prefetch fills
    int crt = ubeg / KU, ckc = ubeg % KU;  // unit being computed
    for (int u = ubeg; u < uend; ++u) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (u + STAGES - 1 < uend) ld.load(wstage, x);
        cp_async_commit();
        wstage = (wstage == sbase + (STAGES - 1) * C::STAGE_BYTES) ? sbase : wstage + C::STAGE_BYTES;
        const unsigned char* st = smem + stage * C::STAGE_BYTES;
        const unsigned char* sc = st + C::CODE_BYTES;
        const u32 xs = smem_u32(st + C::STAGE_BYTES - C::X_BYTES);
        const int klen = min(KT, K_pad - ckc * KT);
        if (klen == KT) {  // full unit: compile-time trip count
#pragma unroll
            for (int gi = 0; gi < KT / 128; ++gi) {
                const int g4 = kq + 2 * gi;
                tc_group<F, MT, KT>(acc, st, sc, xs + g4 * 128, ofs, g4, L);
            }
        } else {
            const int groups = klen / 64;
            for (int g4 = kq; g4 < groups; g4 += 2) tc_group<F, MT, KT>(acc, st, sc, xs + g4 * 128, ofs, g4, L);
        }

        // end of a row tile in this stripe: combine the two k-halves, finish the tile
        if (u + 1 == uend || ckc + 1 == KU) {
            const int rt = crt;
            const int r0 = mtile * 16 + (lane >> 2);
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
        stage = (stage == STAGES - 1) ? 0 : stage + 1;
        if (++ckc == KU) { ckc = 0; ++crt; }
    }
    cp_async_wait<0>();
}

}  // namespace mt
