// The Hopper GEMM engine: Y[M, N] = X[M, K] W[N, K]^T for every weight format.
//
// Computed transposed, D[n, m] (Machete's choice): the narrow weight is the wgmma A operand
// (64 output features per consumer warpgroup), the activations are B (the token tile, N of
// the wgmma = BN tokens), so one decode of a weight fragment serves BN tokens.
//
// Structure (CUTLASS SM90 warp-specialized collectives):
//   * warpgroup 0 is the producer: lane 0 of one warp (of four for nvfp4 and mxfp4) issues,
//     per pipeline stage, a tensor-map tile load of the activations (128-byte swizzle, zero
//     fill outside M x K) and the weights' bulk copies -- 1-D copies of the pre-tiled FP4
//     fragments, or tensor-map tiles of the NestedFP byte planes -- all completing on the
//     stage's `full` mbarrier;
//   * warpgroups 1..WGS are consumers (WGS = 1..4; with 1-2, setmaxnreg gives the producer 40
//     registers and the consumers 232): wait `full`, turn the weight fragment into the wgmma A
//     operand in registers
//     (the format's policy below), issue wgmma with B from shared memory, and release the
//     stage on its `empty` mbarrier once the wgmmas that read it have retired;
//   * persistent CTAs first take NF rounds of whole tiles (CTA c: tiles c, c + n_ctas, ...),
//     then walk equal stripes of the remaining (output tile, k-block) sequence (hybrid
//     stream-K; pure stream-K when NF = 0): a tile a CTA owns entirely goes straight
//     to the epilogue; a tile shared by several CTAs is summed from their FP32 partials by
//     the last to arrive, in stripe order (deterministic), and its counter returns to zero;
//   * epilogue: FP32 accumulators times the output scale -> FP16 -> stmatrix.trans into a
//     [token][feature] shared tile -> coalesced 16-byte stores.
//
// The format enters only through EngineFmt<F> (generated from the golden specs by
// mactile.gpu.formats) and the fragment policy selected on its A_SRC (docs/gpu.md, "Adding a
// format to the engine"):
//   A_FRAG   FP4 codes in the `frag` layout (one 32-bit word = one lane's m16n8k16 A fragment
//            for one k-step), decoded in registers: bit placement (nvfp4, mxfp4) or the prmt
//            lookup with RaZeR's special value folded in (razer, razer-g128);
//   A_PLANES NestedFP's two byte planes, ldmatrix + FP16 reconstruction in registers;
//   A_SMEM   A straight from shared memory (NestedFP's upper plane as E4M3).
// PROMOTE formats accumulate each stage in a separate FP32 register tile that is then added
// into the accumulators (the FP8 mode's promotion every 128 of K against Hopper's
// reduced-precision FP8 accumulation); that tile covers at most 128 tokens (PN), so a
// 256-token tile is promoted in two passes of 128 (registers: 128 accumulators + 64).
// RESCALE formats (razer-g128: FP16 block scales, exact with the values only in FP32) keep
// the accumulators in units of the current block scale and rescale them between blocks
// (engine_scale_step, engine_scale_acc).
#include "ptx.cuh"
#include "fp4_common.cuh"
#include "nestedfp_common.cuh"

MACTILE_GENERATED_WGMMA

namespace mt {

// Optional per-CTA trace (benchmarks/engine_trace.py): globaltimer stamps of the phases of
// one launch, the SM and the tiles. Compiled only with MT_ENGINE_TRACE (a separate NVRTC
// build of this source): even a null-pointer test costs the 4-warpgroup kernels a spill.
#ifndef MT_ENGINE_TRACE
#define MT_ENGINE_TRACE 0
#endif
#define MT_TRACE(slot, cond, value) \
    do { if (MT_ENGINE_TRACE && (cond)) trace[(size_t)blockIdx.x * TRACE_SLOTS + (slot)] = (value); } while (0)
enum : int { TR_ENTRY, TR_READY, TR_FIRST_COPY, TR_FIRST_DATA, TR_MAIN_END, TR_END, TR_SM, TR_TILES,
             TRACE_SLOTS };
using namespace ptx;
// Named barriers (0 is __syncthreads): all consumer threads; one consumer warpgroup (+ cw).
enum : int { BAR_CONSUMERS = 1, BAR_WG = 2 };

__host__ __device__ constexpr int cround(int a, int b) { return (a + b - 1) / b * b; }

template <int F, int BN, int STAGES, int WGS>
struct EngCfg {
    using T = EngineFmt<F>;
    static constexpr int BK = T::BK;                       // k per stage
    static constexpr int KSTEP = T::FP8 ? 32 : 16;         // k per wgmma
    static constexpr int KS = BK / KSTEP;                  // wgmmas per stage
    static constexpr int B_SUB = BK * (T::FP8 ? 1 : 2) / 128;  // 128-byte-row B sub-tiles
    static constexpr int B_BYTES = B_SUB * BN * 128;
    static constexpr int FRAG_CODE = BK * 32;              // codes of one 64-row tile
    static constexpr int FRAG_SC = T::A_SRC == A_FRAG ? (BK / T::BLOCK) * 64 * T::SCALE_BYTES : 0;
    static constexpr int FRAG_WG = cround(FRAG_CODE + FRAG_SC, 128);
    static constexpr int A_BYTES = T::A_SRC == A_FRAG ? WGS * FRAG_WG
                                 : T::A_SRC == A_PLANES ? 2 * WGS * 64 * 64 : WGS * 64 * 128;
    static constexpr int STAGE_BYTES = cround(B_BYTES + A_BYTES, 1024);
    static constexpr int TX = B_BYTES + (T::A_SRC == A_FRAG ? WGS * (FRAG_CODE + FRAG_SC) : A_BYTES);
    // tokens staged per epilogue pass: 64, but 16 for the 128-k stages at 256 tokens
    // (razer-g128: a third stage fits instead of 2 x 64 x 72 x 2 bytes of staging)
    static constexpr int EPI_TOK = BN < 64 ? BN : (BK > 64 && BN == 256) ? 16 : 64;
    static constexpr int EPI_LD = 72;                      // halves per staged token row
    static constexpr int EPI_BYTES = WGS * EPI_TOK * EPI_LD * 2;
    static constexpr int BAR_OFF = STAGES * STAGE_BYTES + EPI_BYTES;
    static constexpr int SMEM = 1024 + BAR_OFF + 2 * STAGES * 8 + 16;
    static constexpr int THREADS = (WGS + 1) * 128;
    static constexpr int CT = WGS * 128;                   // consumer threads
    static constexpr int NACC = BN / 2;                    // FP32 accumulators per thread
    // PROMOTE: tokens per promotion pass (the stage's partial-sum tile), passes per stage
    static constexpr int PN = T::PROMOTE && BN > 128 ? 128 : BN;
    static constexpr int NPASS = BN / PN;
    static constexpr int SC_T = T::A_SRC == A_FRAG ? (BK / T::BLOCK) * 2 * T::SCALE_BYTES : 0;
    // Registers per consumer thread after setmaxnreg (1-2 consumer warpgroups; the producer
    // keeps 40). setmaxnreg.inc can only take what the CTA's decreases released from its
    // launch allocation (entry registers x threads): with 384 threads at 168, 232 fit. With
    // 3-4 consumer warpgroups the entry count is whatever ptxas chose under the launch bound,
    // so no setmaxnreg there (an increase beyond the released registers would never return).
    static constexpr bool SETMAXNREG = WGS <= 2;
    static constexpr int REG_CONSUMER = WGS == 1 ? 240 : 232;
    static_assert(BN % 8 == 0 && BN >= 8 && BN <= 256, "BN: multiple of 8 in [8, 256]");
    static_assert(WGS >= 1 && WGS <= 4, "one to four consumer warpgroups");
    static_assert(WGS <= 2 || BN <= 64, "three or four consumer warpgroups: BN <= 64 (registers)");
    static_assert(SMEM <= 232448, "shared memory over the sm_90 limit");
};

// ------------------------------------------------------------------ A_FRAG decode
// Bit-placement decode of one frag word: f16x2 A register with values v * 2^-14.
// rotl(w, R) & MASK is (w << R) & MASK when no bit of MASK lies below R (none of its bits
// wraps around): a plain left shift, which ptxas may issue on the FMA pipe (IMAD.SHL)
// instead of the integer pipe's funnel shift, where the rest of the decode's work is.
template <int R, u32 MASK>
__device__ __forceinline__ u32 rot_masked(u32 w) {
    if constexpr (R == 0) return w & MASK;
    else if constexpr ((MASK & ((1u << R) - 1u)) == 0) return (w << R) & MASK;
    else return rotl(w, R) & MASK;
}
template <int M_, int S_>
__device__ __forceinline__ u32 bp_reg(u32 w) {
    if constexpr (M_ == S_) return rot_masked<M_, BP_MAG_MASK | BP_SIGN_MASK>(w);
    else return rot_masked<M_, BP_MAG_MASK>(w) | rot_masked<S_, BP_SIGN_MASK>(w);
}
__device__ __forceinline__ __half2 u2h(u32 v) { return *reinterpret_cast<__half2*>(&v); }
__device__ __forceinline__ u32 h2u(__half2 v) { return *reinterpret_cast<u32*>(&v); }

// The four A registers of one k-step from one frag word `w` and the scale codes `sp` of
// rows g (low) and g+8 (high) of the word's block (8 or 16 bits each).
template <int F>
__device__ __forceinline__ void frag_decode(u32 (&a)[4], u32 w, u32 sp, const Lut& L) {
    using T = EngineFmt<F>;
    if constexpr (T::BP) {
        u32 s2;
        if constexpr (T::SCALE_KIND == SCALE_E4M3) {
            // E4M3 pair -> f16x2 in hardware, times 2^BP_SCALE_LOG2 (exact)
            s2 = h2u(__hmul2_rn(u2h(e4m3x2_to_f16x2(sp)), u2h(BP_SCALE_F16X2)));
        } else {  // SCALE_POW2_F16: kernel scale byte b -> FP16 2^(b - 15) by bit placement
            s2 = ((sp & 0xFFu) << T::POW2_SHIFT) | ((sp & 0xFF00u) << (T::POW2_SHIFT + 8));
        }
        const __half2 sg = __low2half2(u2h(s2)), sh = __high2half2(u2h(s2));
        a[0] = h2u(__hmul2_rn(u2h(bp_reg<BP_ROT_M0, BP_ROT_S0>(w)), sg));  // row g,   k 2t..2t+1
        a[1] = h2u(__hmul2_rn(u2h(bp_reg<BP_ROT_M1, BP_ROT_S1>(w)), sh));  // row g+8, k 2t..2t+1
        a[2] = h2u(__hmul2_rn(u2h(bp_reg<BP_ROT_M2, BP_ROT_S2>(w)), sg));  // row g,   k 2t+8..2t+9
        a[3] = h2u(__hmul2_rn(u2h(bp_reg<BP_ROT_M3, BP_ROT_S3>(w)), sh));  // row g+8, k 2t+8..2t+9
    } else {
        const __half2 off2 = __float2half2_rn(-F16_OFFSET);
        __half2 sg, sh, cg, ch;
        u32 p0g, p0h;
        if constexpr (T::SCALE_KIND == SCALE_FP32) {  // value only; the scale applies in FP32 (RESCALE)
            sg = sh = __float2half2_rn(1.f);
            cg = ch = off2;
            p0g = special_p0(L, (sp & 0xFFFFu) >> T::META_SHIFT);
            p0h = special_p0(L, (sp >> 16) >> T::META_SHIFT);
        } else {  // SCALE_BITS_F16: payload bits placed into FP16, times 2^(15-bias-prescale)
            if constexpr (T::SPECIAL) {
                p0g = special_p0(L, (sp & 0xFFu) >> T::META_SHIFT);
                p0h = special_p0(L, ((sp >> 8) & 0xFFu) >> T::META_SHIFT);
            } else {
                p0g = p0h = L.p0;
            }
            const u32 bits = ((sp & T::SCALE_MASK) << T::F16_SHIFT) |
                             ((((sp >> 8) & T::SCALE_MASK) << T::F16_SHIFT) << 16);
            const __half2 s2 = __hmul2_rn(u2h(bits), u2h(T::F16X2_MUL));  // (s_g, s_g8) 2^-prescale, exact
            const __half2 c2 = __hmul2_rn(s2, off2);
            sg = __low2half2(s2);
            sh = __high2half2(s2);
            cg = __low2half2(c2);
            ch = __high2half2(c2);
        }
        u32 blo, bhi;
        lut8(w, p0g, p0h, L, blo, bhi);
        a[0] = h2u(__hfma2(u2h(f16pair<0>(blo)), sg, cg));  // row g,   k 2t..2t+1
        a[2] = h2u(__hfma2(u2h(f16pair<2>(blo)), sg, cg));  // row g,   k 2t+8..2t+9
        a[1] = h2u(__hfma2(u2h(f16pair<0>(bhi)), sh, ch));  // row g+8, k 2t..2t+1
        a[3] = h2u(__hfma2(u2h(f16pair<2>(bhi)), sh, ch));  // row g+8, k 2t+8..2t+9
    }
}

// ------------------------------------------------------------------ A_PLANES decode
using nfp::nested_hi;  // NestedFP16 reconstruction (kernels/nestedfp_common.cuh)
// Byte offset of (row, 16-byte chunk) in a tile of 64-byte rows with the 64B swizzle.
__device__ __forceinline__ u32 sw64_offset(int row, int chunk) {
    return (u32)(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4));
}

// ------------------------------------------------------------------ per-stage fragment work
// Shared-memory loads of this thread's fragment sources for stage s (A_FRAG: the code words
// of every k-step and the block-scale codes of rows g and g+8). U32: through 32-bit shared
// addresses (the batched schedule: 10 fewer instructions per k-loop trip at 8 tokens, no
// generic-to-shared base per stage); else through the generic pointer, which the interleaved
// schedule keeps (measured: its wgmma issue order came out better for razer at 256 tokens).
template <int F, int BN, int STAGES, int WGS, bool U32>
__device__ __forceinline__ void engine_load(const uint8_t* smem, u32 sbase, int s, int cw, int wi, int lane,
                                            uint4 (&wv)[EngineFmt<F>::A_SRC == A_FRAG ? EngineFmt<F>::BK / 64 : 1],
                                            u64& sc) {
    using C = EngCfg<F, BN, STAGES, WGS>;
    if constexpr (EngineFmt<F>::A_SRC == A_FRAG && U32) {
        const u32 aw = sbase + s * C::STAGE_BYTES + C::B_BYTES + cw * C::FRAG_WG;
#pragma unroll
        for (int q = 0; q < C::BK / 64; ++q) wv[q] = lds128(aw + q * 2048 + (wi * 32 + lane) * 16);
        const u32 sp = aw + C::FRAG_CODE + (wi * 8 + (lane >> 2)) * C::SC_T;
        if constexpr (C::SC_T == 8) sc = lds64(sp);
        else sc = lds32(sp);
    } else if constexpr (EngineFmt<F>::A_SRC == A_FRAG) {
        const uint8_t* aw = smem + s * C::STAGE_BYTES + C::B_BYTES + cw * C::FRAG_WG;
#pragma unroll
        for (int q = 0; q < C::BK / 64; ++q)
            wv[q] = *reinterpret_cast<const uint4*>(aw + q * 2048 + (wi * 32 + lane) * 16);
        const uint8_t* sp = aw + C::FRAG_CODE + (wi * 8 + (lane >> 2)) * C::SC_T;
        if constexpr (C::SC_T == 8) sc = *reinterpret_cast<const u64*>(sp);
        else sc = *reinterpret_cast<const u32*>(sp);
    }
}

// The A registers of k-step ks (a compile-time constant after unrolling) of stage s.
template <int F, int BN, int STAGES, int WGS>
__device__ __forceinline__ void engine_decode(u32 (&a)[EngCfg<F, BN, STAGES, WGS>::KS][4], int ks, u32 sbase, int s,
                                              int cw, int wi, int lane,
                                              const uint4 (&wv)[EngineFmt<F>::A_SRC == A_FRAG ? EngineFmt<F>::BK / 64 : 1],
                                              u64 sc, u32 (&pl)[2][4], const Lut& L) {
    using C = EngCfg<F, BN, STAGES, WGS>;
    using T = EngineFmt<F>;
    if constexpr (T::A_SRC == A_FRAG) {
        const int q = ks / 4, j = ks % 4;
        const u32 w = j == 0 ? wv[q].x : j == 1 ? wv[q].y : j == 2 ? wv[q].z : wv[q].w;
        const int kb = ks * 16 / T::BLOCK;  // block column of this k-step
        u32 sp;
        if constexpr (T::SCALE_BYTES == 1) sp = (u32)(sc >> (16 * kb)) & 0xFFFFu;
        else sp = (u32)sc;  // one 128-block per stage: (s_g, s_g8) FP16 codes
        frag_decode<F>(a[ks], w, sp, L);
    } else if constexpr (T::A_SRC == A_PLANES) {
        const u32 up = sbase + s * C::STAGE_BYTES + C::B_BYTES;
        const u32 lo = up + WGS * 64 * 64;
        const int h = (ks & 1) * 2;  // matrices 0,1: k-step ks; 2,3: ks + 1
        if ((ks & 1) == 0) {
            const int j = lane >> 3, r = lane & 7;
            const int row = cw * 64 + wi * 16 + (j & 1) * 8 + r;
            const u32 off = sw64_offset(row, ks + (j >> 1));
            ldsm_x4(up + off, pl[0][0], pl[0][1], pl[0][2], pl[0][3]);
            ldsm_x4(lo + off, pl[1][0], pl[1][1], pl[1][2], pl[1][3]);
        }
        const u32 hg = nested_hi(pl[0][h], pl[1][h]), hg8 = nested_hi(pl[0][h + 1], pl[1][h + 1]);
        a[ks][0] = prmt(pl[1][h], hg, 0x5140u);       // row g,   k 2t, 2t+1
        a[ks][1] = prmt(pl[1][h + 1], hg8, 0x5140u);  // row g+8, k 2t, 2t+1
        a[ks][2] = prmt(pl[1][h], hg, 0x7362u);       // row g,   k 2t+8, 2t+9
        a[ks][3] = prmt(pl[1][h + 1], hg8, 0x7362u);  // row g+8, k 2t+8, 2t+9
    }
}

// PROMOTE (A from shared memory, E4M3: the only A_SMEM format): one wgmma of k-step ks over
// tokens [h PN, (h + 1) PN) of stage sb into the partial-sum tile (B: one 128-byte sub-tile
// per stage, rows of one token each; +32 bytes, descriptor +2, per k-step).
template <int F, int BN, int STAGES, int WGS>
__device__ __forceinline__ void engine_mma_promote(float (&tmp)[EngCfg<F, BN, STAGES, WGS>::PN / 2], int ks, u32 sb,
                                                   int cw, int h) {
    using C = EngCfg<F, BN, STAGES, WGS>;
    static_assert(EngineFmt<F>::A_SRC == A_SMEM && C::KS <= 4, "E4M3 A in shared memory, one B sub-tile");
    Wgmma<C::PN>::ss_e4m3(tmp, desc_sw128(sb + C::B_BYTES + cw * 64 * 128) + 2 * ks,
                          desc_sw128(sb + h * C::PN * 128) + 2 * ks, ks == 0 ? 0 : 1);
}

// PROMOTE: promotion pass h of stage sb that is not the stage's last (the last is issued like
// every other format's wgmmas, so that the next stage's fragments load while it runs): its
// wgmmas into the partial-sum tile, then added into the accumulators' columns of those
// tokens. The wgmma accumulator layout of N = BN is that of N = PN repeated along the
// columns: pass h owns acc[h PN/2 .. (h + 1) PN/2).
template <int F, int BN, int STAGES, int WGS>
__device__ __forceinline__ void engine_promote_pass(float (&acc)[BN / 2], float (&tmp)[EngCfg<F, BN, STAGES, WGS>::PN / 2],
                                                    int h, u32 sb, int cw) {
    using C = EngCfg<F, BN, STAGES, WGS>;
    fence_regs(tmp);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < C::KS; ++ks) engine_mma_promote<F, BN, STAGES, WGS>(tmp, ks, sb, cw, h);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(tmp);
#pragma unroll
    for (int i = 0; i < C::PN / 2; ++i) acc[h * (C::PN / 2) + i] += tmp[i];
}

// One wgmma of k-step ks of stage sb into d (A from registers: A_FRAG, A_PLANES).
template <int F, int BN, int STAGES, int WGS>
__device__ __forceinline__ void engine_mma(float (&d)[BN / 2], const u32 (&a)[EngCfg<F, BN, STAGES, WGS>::KS][4],
                                           int ks, u32 sb, int scale_d) {
    // B: the 128-byte sub-tile of this k-step, +32 bytes (descriptor +2) per k-step inside it
    const u64 bdesc = desc_sw128(sb + (ks / 4) * BN * 128) + 2 * (ks % 4);
    Wgmma<BN>::rs_f16(d, a[ks], bdesc, scale_d);
}

// FP16 block-scale code (metadata bits masked off) -> FP32 value, exact (bit placement).
template <int F>
__device__ __forceinline__ float engine_scale_f32(u32 code) {
    using T = EngineFmt<F>;
    return __uint_as_float((code & T::SCALE_MASK) << T::F32_SHIFT) * T::F32_MUL;
}

// RESCALE formats keep the accumulators in units of the current block scale of rows g and
// g+8 (s_g, s_h; the FP16 operand carries the values only). Before a stage of the next block
// they are multiplied by old / new (the fast division, at most 2 ulp, then one rounded
// multiplication per row and block: about three FP32 roundings per 128 of K, within the
// FP32-accumulation bound; IEEE division cost 7-10% at 8 tokens, H100); after the tile's last
// stage by the scale itself. engine_scale_step computes that factor from the next stage's
// scale codes, engine_scale_acc applies it. No block scale is 0: the packer gives blocks of
// scale 0 the zero code and scale 1 (mactile.gpu.packing.nonzero_kernel_scales).
template <int F>
__device__ __forceinline__ void engine_scale_step(float& s_g, float& s_h, float& rg, float& rh, u64 sc_next,
                                                  bool more) {
    rg = s_g;
    rh = s_h;
    if (more) {
        const float ng = engine_scale_f32<F>((u32)sc_next & 0xFFFFu);
        const float nh = engine_scale_f32<F>((u32)(sc_next >> 16) & 0xFFFFu);
        rg = __fdividef(s_g, ng);  // MUFU.RCP + FMUL: <= 2 ulp, exact for powers of two
        rh = __fdividef(s_h, nh);
        s_g = ng;
        s_h = nh;
    }
}
template <int NACC>
__device__ __forceinline__ void engine_scale_acc(float (&acc)[NACC], float rg, float rh) {
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] *= (i & 2) ? rh : rg;
}

// ------------------------------------------------------------------ work partition
// Persistent CTA c first takes NF rounds of whole tiles (tiles c, c + n_ctas, ...: the CTAs
// of a round work on neighbouring tiles at the same k, so the L2 serves their shared
// activations and weights once), then walks units [ubeg, uend) of the remaining (tile,
// k-block) sequence, tile-major: equal stripes of units U0..U-1 (Marlin/stream-K):
// stripe_begin / stripe_owner of fp4_common.cuh (U < 2^31, checked on the host).

// This thread's accumulators into a partial-sum slot [NACC/4][CT] float4 (coalesced, L2).
template <int CT, int NACC>
__device__ __forceinline__ void engine_store_partial(const float (&acc)[NACC], float* slot, int ct) {
    float4* mine = reinterpret_cast<float4*>(slot) + ct;
#pragma unroll
    for (int j = 0; j < NACC / 4; ++j)
        __stcg(mine + j * CT, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
}

// acc[i] = p[i] + acc[i] for a partial-sum slot [NACC/4][CT] float4 (the loads of a chunk
// of 16 float4 in flight together).
template <int CT, int NACC>
__device__ __forceinline__ void engine_add_partial(float (&acc)[NACC], const float* slot, int ct) {
    const float4* p = reinterpret_cast<const float4*>(slot) + ct;
    constexpr int CH = NACC / 4 < 16 ? NACC / 4 : 16;
#pragma unroll
    for (int j0 = 0; j0 < NACC / 4; j0 += CH) {
        float4 q[CH];
#pragma unroll
        for (int j = 0; j < CH; ++j) q[j] = __ldcg(p + (j0 + j) * CT);
#pragma unroll
        for (int j = 0; j < CH; ++j) {
            float* a4 = acc + 4 * (j0 + j);
            a4[0] = q[j].x + a4[0];
            a4[1] = q[j].y + a4[1];
            a4[2] = q[j].z + a4[2];
            a4[3] = q[j].w + a4[3];
        }
    }
}

// ------------------------------------------------------------------ epilogue
// Tile `tile` is split into exactly P > 1 parts, one per CTA (CTAs tile*P .. tile*P + P-1,
// every stripe inside one tile, so it is each CTA's only tile: the host launches the PART = 2
// kernels only then, with every CTA resident at once). Called once this CTA's FP32 sums are
// stored in its slot 2c: the P CTAs wait for each other, and each gathers one P-th of the tile
// from every part into its pipeline buffers (free now: cp.async, all in flight at once),
// sums it in part order (the same additions in the same order as the last arriver's:
// bit-identical) and writes it. The last arriver alone reads P - 1 partial tiles; here each
// CTA reads one tile's worth. The counter counts to 2P (arrivals, then departures).
// Not inlined: inlined, its loops cost the 4-warpgroup kernels' k-loop its precomputed
// shared-memory addresses (266 instructions per trip instead of 240 at 8 tokens, 4-5% of
// the time at M = 1 and 16); a call leaves the k-loop as without it (243). What it needs is
// a kernel parameter or recomputed (the tile is c / P, the buffers found again).
template <int F, int BN, int STAGES, int WGS>
__device__ __noinline__ void engine_reduce_parts(int RT, int P, const float* __restrict__ col_scale,
                                                    void* __restrict__ y, const float* __restrict__ ws,
                                                    int* __restrict__ counters, int M, int N, float out_scale,
                                                    int out_f32) {
    using C = EngCfg<F, BN, STAGES, WGS>;
    constexpr int CT = C::CT, SLOT = CT * C::NACC, F4 = SLOT / 4;
    static_assert(SLOT * 4 <= STAGES * C::STAGE_BYTES, "a tile of partial sums fits the pipeline's buffers");
    extern __shared__ uint8_t smem_raw[];
    uint8_t* stage_smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);  // as the kernel's
    const int ct = threadIdx.x - 128;
    const int c = blockIdx.x, tile = c / P, c_first = tile * P, RTc = RT / WGS;
    fence_proxy_async_smem();  // the buffers were last read by wgmma (async proxy); cp.async writes them
    // one release per CTA: the barrier orders every thread's stores before thread 0's fence
    // (and the arrival needs no reply: the spin reads the counter anyway)
    named_sync(BAR_CONSUMERS, CT);
    if (ct == 0) {
        fence_acq_rel_gpu();
        red_add_gpu(counters + tile, 1);
        while (ld_acquire_gpu(counters + tile) < P) __nanosleep(64);
    }
    named_sync(BAR_CONSUMERS, CT);
    // this CTA's float4 [f_lo, f_lo + n4) of every part -> shared [P][n4]
    const int r = c - c_first, f_lo = (int)((long long)r * F4 / P);
    const int n4 = (int)((long long)(r + 1) * F4 / P) - f_lo;
    const float4* src = reinterpret_cast<const float4*>(ws + (size_t)(2 * c_first) * SLOT) + f_lo;
    const u32 dst = smem_u32(stage_smem);
#pragma unroll 1
    for (int i = ct; i < P * n4; i += CT) {
        const int pp = i / n4, k = i - pp * n4;
        cp_async16(dst + 16 * i, src + (size_t)pp * 2 * F4 + k, 16);
    }
    cp_async_commit();
    // every part has passed its wait: the last to depart returns the counter to zero for the
    // next launch (which touches it only after griddepcontrol.wait). Here, while the gather's
    // loads are in flight, not before them: its reply is an L2 round trip.
    if (ct == 0 && atomicAdd(counters + tile, 1) == 2 * P - 1) counters[tile] = 0;
    cp_async_wait<0>();
    named_sync(BAR_CONSUMERS, CT);
    const int tt = tile / RTc, rc = tile % RTc, tok0 = tt * BN;
    const float4* part = reinterpret_cast<const float4*>(stage_smem);
#pragma unroll 1
    for (int k = ct; k < n4; k += CT) {
        float4 v = part[k];
#pragma unroll 4
        for (int pp = 1; pp < P; ++pp) {
            const float4 q = part[pp * n4 + k];
            v = make_float4(v.x + q.x, v.y + q.y, v.z + q.z, v.w + q.w);
        }
        // f = j CT + t: acc[4j .. 4j+3] of consumer thread t of the fragment layout, i.e.
        // (tok, n), (tok+1, n), (tok, n+8), (tok+1, n+8)
        const int f = f_lo + k, j = f / CT, ft = f % CT, fl = ft & 31;
        const int tok = tok0 + 8 * j + 2 * (fl & 3);
        const int n = (rc * WGS + (ft >> 7)) * 64 + ((ft >> 5) & 3) * 16 + (fl >> 2);
        const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int tk = tok + (q & 1), nn = n + 8 * (q >> 1);
            if (tk >= M || nn >= N) continue;
            if (out_f32) {  // the rounding of engine_finish_tile's FP32 path
                reinterpret_cast<float*>(y)[(size_t)tk * N + nn] = e[q] * out_scale * (col_scale ? col_scale[tk] : 1.f);
            } else {        // and of its FP16 path
                const float cs = col_scale ? out_scale * col_scale[tk] : out_scale;
                reinterpret_cast<__half*>(y)[(size_t)tk * N + nn] = __float2half_rn(e[q] * cs);
            }
        }
    }
}

template <int F, int BN, int STAGES, int WGS>
__device__ __forceinline__ void engine_write_tile(const float (&acc)[BN / 2], int tile, int RTc, uint8_t* epi,
                                                  const float* __restrict__ col_scale, void* __restrict__ y,
                                                  int M, int N, float out_scale, int out_f32, int j_lo, int j_hi);

// Tile `tile` of this CTA is done: write it (sole owner), or store this CTA's FP32 sums and,
// if last to arrive, add every contributor's sums in stripe order and write. The sum is
// formed in the same order whoever arrives last: (((p_first + p_2) + ...) + p_last), the
// last arriver inserting its own sums (still in registers) at their place.
template <int F, int BN, int STAGES, int WGS>
__device__ __forceinline__ void engine_finish_tile(float (&acc)[BN / 2], int tile, int RTc, int KU, int U,
                                                   int U0, int n_ctas, int ubeg, uint8_t* epi, int* s_flag,
                                                   const float* __restrict__ col_scale, void* __restrict__ y,
                                                   float* __restrict__ ws, int* __restrict__ counters, int M,
                                                   int N, float out_scale, int out_f32) {
    using C = EngCfg<F, BN, STAGES, WGS>;
    constexpr int NACC = C::NACC, CT = C::CT;
    const int ct = threadIdx.x - 128;
    const int c = blockIdx.x;
    const int t_u0 = tile * KU;
    // tiles of the whole-tile rounds (t_u0 < U0) have one owner; the others are striped over
    // units U0..U-1
    const int c_first = t_u0 < U0 ? c : stripe_owner(t_u0 - U0, U - U0, n_ctas);
    const int c_last = t_u0 < U0 ? c : stripe_owner(t_u0 + KU - 1 - U0, U - U0, n_ctas);
    if (c_first != c_last) {
        // partial sums as float4 [slot][NACC/4][CT] (coalesced); slot 2c: the tile is the first
        // of c's stripe, 2c+1: its last. Every later contributor's stripe begins in the tile.
        constexpr int SLOT = CT * NACC;
        engine_store_partial<CT, NACC>(acc, ws + (size_t)(2 * c + (ubeg / KU == tile ? 0 : 1)) * SLOT, ct);
        // one release per CTA (the barrier orders every thread's stores before thread 0's
        // fence) and, for the last arriver, one acquire of every earlier contributor's
        named_sync(BAR_CONSUMERS, CT);
        if (ct == 0) {
            fence_acq_rel_gpu();
            const int prev = atomicAdd(counters + tile, 1);
            const int last = prev == c_last - c_first;
            if (last) fence_acq_rel_gpu();
            *s_flag = last;
        }
        named_sync(BAR_CONSUMERS, CT);
        if (*s_flag == 0) return;
        const int b_first = U0 + stripe_begin(c_first, U - U0, n_ctas);
        const int first_slot = 2 * c_first + (b_first < t_u0 ? 1 : 0);
        auto slot_of = [&](int cc) { return cc == c_first ? first_slot : 2 * cc; };
        // acc = S + acc where S is the in-order sum of the earlier contributors' partials
        if (c - c_first == 1) {  // one earlier contributor: S is its partial
            engine_add_partial<CT, NACC>(acc, ws + (size_t)slot_of(c_first) * SLOT, ct);
        } else if (c > c_first) {  // several: S in chunks of 4 float4
#pragma unroll
            for (int j0 = 0; j0 < NACC / 4; j0 += 4) {
                float4 v[4];
                // unrolled: the loads of several contributors go out before their adds (a
                // load-add chain cost one L2 round trip per contributor: up to 3.9 us of tail
                // at 8 parts per tile, traced); the adds keep their order (bit-identical).
                // Small token tiles only: at BN >= 32 the unrolled loads spilled.
#pragma unroll(C::NACC <= 8 ? 4 : 1)
                for (int cc = c_first; cc < c; ++cc) {
                    const float4* p = reinterpret_cast<const float4*>(ws + (size_t)slot_of(cc) * SLOT) + ct;
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        if (j0 + j < NACC / 4) {
                            const float4 q = __ldcg(p + (j0 + j) * CT);
                            if (cc == c_first) v[j] = q;
                            else v[j] = make_float4(v[j].x + q.x, v[j].y + q.y, v[j].z + q.z, v[j].w + q.w);
                        }
                    }
                }
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (j0 + j < NACC / 4) {
                        float* a4 = acc + 4 * (j0 + j);
                        a4[0] = v[j].x + a4[0];
                        a4[1] = v[j].y + a4[1];
                        a4[2] = v[j].z + a4[2];
                        a4[3] = v[j].w + a4[3];
                    }
                }
            }
        }
        // then the later contributors in order: acc += p
#pragma unroll(C::NACC <= 8 ? 4 : 1)
        for (int cc = c + 1; cc <= c_last; ++cc) engine_add_partial<CT, NACC>(acc, ws + (size_t)(2 * cc) * SLOT, ct);
        if (ct == 0) counters[tile] = 0;  // ready for the next launch (graph replay)
    }
    engine_write_tile<F, BN, STAGES, WGS>(acc, tile, RTc, epi, col_scale, y, M, N, out_scale, out_f32, 0, BN / 8);
}

// Write the token chunks [j_lo, j_hi) (8 tokens each; bounds at epilogue passes of EPI_TOK
// tokens) of tile `tile` from the FP32 sums in acc: output scale, per-token scale, FP16 or FP32.
template <int F, int BN, int STAGES, int WGS>
__device__ __forceinline__ void engine_write_tile(const float (&acc)[BN / 2], int tile, int RTc, uint8_t* epi,
                                                  const float* __restrict__ col_scale, void* __restrict__ y,
                                                  int M, int N, float out_scale, int out_f32, int j_lo, int j_hi) {
    using C = EngCfg<F, BN, STAGES, WGS>;
    constexpr int NACC = C::NACC;
    const int ct = threadIdx.x - 128, cw = ct >> 7, wi = (ct >> 5) & 3;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tt = tile / RTc, rc = tile % RTc;
    const int tok0 = tt * BN, nb = (rc * WGS + cw) * 64;
    if (out_f32) {  // FP32 output (tests): straight from the registers
        const int n0 = nb + wi * 16 + g;
#pragma unroll
        for (int i = 0; i < NACC; ++i) {
            if ((i >> 2) < j_lo || (i >> 2) >= j_hi) continue;
            const int tok = tok0 + 8 * (i >> 2) + 2 * t + (i & 1);
            const int n = n0 + 8 * ((i >> 1) & 1);
            if (tok < M && n < N)
                reinterpret_cast<float*>(y)[(size_t)tok * N + n] = acc[i] * out_scale * (col_scale ? col_scale[tok] : 1.f);
        }
        return;
    }
    // FP16: per pass of EPI_TOK tokens, stmatrix.trans into a [token][feature] tile, then
    // 16-byte stores of whole 128-byte rows
    const u32 ebase = smem_u32(epi);
    const int mj = lane >> 3, r = lane & 7;
    __half* yh = reinterpret_cast<__half*>(y);
#pragma unroll
    for (int p0 = 0; p0 < BN / 8; p0 += C::EPI_TOK / 8) {  // token chunks of 8 in this pass
        if (p0 < j_lo || p0 >= j_hi) continue;  // (uniform: the pass's barriers stay matched)
#pragma unroll
        for (int j = p0; j < p0 + C::EPI_TOK / 8; j += 2) {
            u32 h[4];
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int jj = (j + q < p0 + C::EPI_TOK / 8) ? j + q : j;
                float cs0 = out_scale, cs1 = out_scale;
                if (col_scale) {
                    const int tk = tok0 + 8 * jj + 2 * t;
                    cs0 *= tk < M ? col_scale[tk] : 0.f;
                    cs1 *= tk + 1 < M ? col_scale[tk + 1] : 0.f;
                }
                h[2 * q] = f2h2(acc[4 * jj] * cs0, acc[4 * jj + 1] * cs1);          // rows g
                h[2 * q + 1] = f2h2(acc[4 * jj + 2] * cs0, acc[4 * jj + 3] * cs1);  // rows g+8
            }
            // lane l addresses row l%8 of matrix l/8 (features +8 for odd matrices, tokens +8
            // for matrices 2, 3; with an odd chunk count matrices 2, 3 repeat 0, 1)
            int tok = 8 * (j - p0 + (mj >> 1)) + r;
            if (j + 1 >= p0 + C::EPI_TOK / 8) tok = 8 * (j - p0) + r;
            stsm_x4_trans(ebase + tok * (C::EPI_LD * 2) + (wi * 16 + (mj & 1) * 8) * 2, h[0], h[1], h[2], h[3]);
        }
        named_sync(BAR_WG + cw, 128);
        for (int i = ct & 127; i < C::EPI_TOK * 8; i += 128) {
            const int rr = i >> 3, ch = i & 7;
            const int tok = tok0 + 8 * p0 + rr, n = nb + ch * 8;
            if (tok >= M || n >= N) continue;
            const uint4 v = *reinterpret_cast<const uint4*>(epi + rr * (C::EPI_LD * 2) + ch * 16);
            __half* dst = yh + (size_t)tok * N + n;
            if ((N & 7) == 0) {
                *reinterpret_cast<uint4*>(dst) = v;
            } else {  // ragged N: element by element (tests)
                const u32 wd[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int q = 0; q < 8; ++q)
                    if (n + q < N) dst[q] = __ushort_as_half((unsigned short)(wd[q >> 1] >> (16 * (q & 1))));
            }
        }
        named_sync(BAR_WG + cw, 128);
    }
}

// The token chunks (8 tokens) of a tile dealt out to P ranks by epilogue passes of JP chunks
// (engine_cluster_parts, below).
template <int BN, int JP, int P>
struct ClusterSplit {
    static constexpr int J = BN / 8, NP = J / JP;
    static constexpr int SL = (NP + P - 1) / P * JP;              // most chunks a rank owns
    static constexpr __host__ __device__ int first(int q) { return q * NP / P * JP; }  // rank q's first chunk
    static constexpr __host__ __device__ int owner(int j) { return ((j / JP + 1) * P - 1) / NP; }
};

// The exchange and sums of engine_cluster_parts for P parts (compile-time: every chunk's
// owner and buffer slot known, the accumulators indexed by constants).
template <int F, int BN, int STAGES, int WGS, int P>
__device__ __forceinline__ void engine_cluster_sum(float (&acc)[BN / 2], int r, uint8_t* smem) {
    using C = EngCfg<F, BN, STAGES, WGS>;
    constexpr int CT = C::CT;
    using S = ClusterSplit<BN, C::EPI_TOK / 8, P>;
    static_assert((P - 1) * S::SL * CT * 16 <= STAGES * C::STAGE_BYTES, "the others' sums fit the buffers");
    const int ct = threadIdx.x - 128;
    // every CTA's wgmmas (async proxy) are done with its buffers before the others write them
    fence_proxy_async_smem();
    cluster_sync();  // every non-exited thread of the cluster (the producer warps have returned)
    // my sums of the others' chunks into their buffers: [source slot][chunk - its first][ct]
    // float4, the slots in rank order without the owner's own
    const u32 base = smem_u32(smem);
#pragma unroll
    for (int j = 0; j < S::J; ++j) {
        const int o = S::owner(j);
        if (o == r) continue;
        const int slot = r < o ? r : r - 1;
        const u32 remote = dsmem_map(base + (u32)(((slot * S::SL + j - S::first(o)) * CT + ct) * 16), (u32)o);
        st_dsmem_f32x4(remote, acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
    }
    cluster_sync();  // release / acquire: the others' sums are in my buffers
    const float4* got = reinterpret_cast<const float4*>(smem);
#pragma unroll
    for (int j = 0; j < S::J; ++j) {
        if (S::owner(j) != r) continue;
        const int off = (j - S::first(S::owner(j))) * CT + ct;
        float4 v = r == 0 ? make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]) : got[off];
#pragma unroll
        for (int p = 1; p < P; ++p) {  // part order: ((p0 + p1) + p2) + p3, mine in its place
            const float4 q = p == r ? make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3])
                                    : got[(p < r ? p : p - 1) * S::SL * CT + off];
            v = make_float4(q.x + v.x, q.y + v.y, q.z + v.z, q.w + v.w);
        }
        acc[4 * j] = v.x;
        acc[4 * j + 1] = v.y;
        acc[4 * j + 2] = v.z;
        acc[4 * j + 3] = v.w;
    }
}

// PART = 3: tile `tile` split into P = 2..4 parts whose CTAs form one P-CTA cluster (rank =
// part; the host launches these kernels with cluster dimension P only then, and only where
// the GPU holds every cluster at once). The partial sums never leave the chip: the tile's
// epilogue passes (EPI_TOK tokens each) are dealt out to the ranks in order, each rank
// writes its sums of the others' passes into their pipeline buffers (distributed shared
// memory, free once every CTA's wgmmas are done), and each adds its own passes in part
// order, ((p0 + p1) + p2) + p3 with its own sums in their place: the additions of the last
// arriver, so its bits. Through the L2 (the last arriver, or parts summed together) every
// CTA stored a 128 KB tile of partial sums and read one back, all at once: 13-24% of the
// span at M = 256 (docs/gpu.md note 13 (f)).
template <int F, int BN, int STAGES, int WGS>
__device__ __forceinline__ void engine_cluster_parts(float (&acc)[BN / 2], int tile, int RTc, int P, uint8_t* smem,
                                                     uint8_t* epi, const float* __restrict__ col_scale,
                                                     void* __restrict__ y, int M, int N, float out_scale,
                                                     int out_f32) {
    using C = EngCfg<F, BN, STAGES, WGS>;
    constexpr int JP = C::EPI_TOK / 8, NP = BN / 8 / JP;
    const int r = (int)cluster_ctarank();
    if (P == 2) engine_cluster_sum<F, BN, STAGES, WGS, 2>(acc, r, smem);
    if constexpr (NP >= 3) if (P == 3) engine_cluster_sum<F, BN, STAGES, WGS, 3>(acc, r, smem);
    if constexpr (NP >= 4) if (P == 4) engine_cluster_sum<F, BN, STAGES, WGS, 4>(acc, r, smem);
    engine_write_tile<F, BN, STAGES, WGS>(acc, tile, RTc, epi, col_scale, y, M, N, out_scale, out_f32,
                                          r * NP / P * JP, (r + 1) * NP / P * JP);  // ClusterSplit::first
}

// ------------------------------------------------------------------ the kernel
// PART, the work partition: 0, stripes only (stream-K; NF and P ignored); 1, NF rounds of
// whole tiles before the stripes (hybrid stream-K); 2, P >= 2 parts of every tile, one stripe
// per CTA, summed by all P together (engine_reduce_parts); 3, P = 2..4 parts of every tile,
// one stripe per CTA, each tile's CTAs a cluster summing through distributed shared memory
// (engine_cluster_parts). Separate instantiations: the
// loops of the stripes alone measured 2-8% faster than the hybrid loops with NF = 0, and the
// parts' finish in the same kernel as the last arriver's cost the k-loop of the 4-warpgroup
// kernels 10% more instructions (address arithmetic; 4-5% of the time at M = 1 and 16).
// SCHED 0 (interleaved): one wgmma per k-step, the next k-step decoded while it runs (few A
// registers: for wide token tiles). SCHED 1 (batched): the whole next stage decoded while
// the current stage's wgmmas run (two register sets of A; more independent work per warp:
// for narrow token tiles, where the decode dominates). EARLY: units whose weight copies go
// out before griddepcontrol.wait (below; 0: none).
template <int F, int BN, int STAGES, int WGS, int SCHED, int PART, int EARLY>
__global__ void __launch_bounds__((WGS + 1) * 128, 1)
engine_gemm(const __grid_constant__ TensorMap tm_b,   // activations [M][K] (f16 or e4m3)
            const __grid_constant__ TensorMap tm_a0,  // A_PLANES: upper plane; A_SMEM: A
            const __grid_constant__ TensorMap tm_a1,  // A_PLANES: lower plane
            const uint8_t* __restrict__ wcodes,       // A_FRAG: frag codes
            const uint8_t* __restrict__ wscales,      // A_FRAG: frag scales
            const float* __restrict__ col_scale,      // per-token output scale (or null)
            void* __restrict__ y, float* __restrict__ ws, int* __restrict__ counters,
            int M, int N, int K_pad, int RT, int TT, int n_ctas, int NF, int P, float out_scale, int out_f32,
            u32 l0, u32 l1, u32 l2, u32 l3, u32 lsp,
            u64* __restrict__ trace) {             // MT_ENGINE_TRACE: TRACE_SLOTS stamps per CTA
    using C = EngCfg<F, BN, STAGES, WGS>;
    using T = EngineFmt<F>;
    constexpr int BK = C::BK, KS = C::KS, NACC = C::NACC;
    constexpr bool BATCH = SCHED == 1;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    const u32 sbase = smem_u32(smem);
    const u32 bar_full = sbase + C::BAR_OFF, bar_empty = bar_full + 8 * STAGES;
    int* s_flag = reinterpret_cast<int*>(smem + C::BAR_OFF + 16 * STAGES);

    const int tid = threadIdx.x;
    const int wg = warpgroup_id();
    const int RTc = RT / WGS;                   // CTA row tiles of WGS * 64 features
    const int KU = K_pad / BK;                  // k-blocks per tile
    const int U = TT * RTc * KU;                // < 2^31 (host check)
    const int c = blockIdx.x;
    // NF rounds of whole tiles, then this CTA's stripe of units U0..U-1 (host: NF = 0, or the
    // remaining units >= n_ctas, so that every stripe is non-empty)
    const int U0 = PART == 1 ? NF * n_ctas * KU : 0;
    const int ubeg = U0 + stripe_begin(c, U - U0, n_ctas), uend = U0 + stripe_begin(c + 1, U - U0, n_ctas);
    const int tile_beg = ubeg / KU, tile_end = (uend - 1) / KU;  // of the stripe
    const int kb_beg = ubeg - tile_beg * KU;     // first k-block of tile_beg
    const int kb_last = uend - 1 - tile_end * KU;  // last k-block of tile_end
    const int nseg = (PART == 1 ? NF : 0) + (ubeg < uend ? tile_end - tile_beg + 1 : 0);  // tiles this CTA works on
    // segment i < nseg: (tile, first and last k-block)
    auto segment = [&](int i, int& tile, int& k_lo, int& k_hi) {
        if (i < NF) {
            tile = c + i * n_ctas;
            k_lo = 0;
            k_hi = KU - 1;
        } else {
            tile = ubeg / KU + (i - NF);
            k_lo = max(ubeg - tile * KU, 0);
            k_hi = min(uend - tile * KU, KU) - 1;
        }
    };

    MT_TRACE(TR_ENTRY, tid == 0, globaltimer());
    if (tid == 0) {
#pragma unroll 1
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bar_full + 8 * s, 1);
            mbar_init(bar_empty + 8 * s, WGS * 4);  // one arrive per consumer warp
        }
        fence_barrier_init();
    }
    if (tid == 32) {
        tma_prefetch_desc(&tm_b);
        if constexpr (T::A_SRC != A_FRAG) tma_prefetch_desc(&tm_a0);
        if constexpr (T::A_SRC == A_PLANES) tma_prefetch_desc(&tm_a1);
    }
    __syncthreads();
    // Programmatic dependent launch: the next kernel in the stream may be scheduled now; its
    // CTAs take the SMs this grid frees and run their set-up while ours finish (it reads
    // nothing of ours before its own griddepcontrol.wait).
    griddep_launch_dependents();
    // PW producer warps issue a stage's copies (below). EARLY > 0: the weights' copies of the
    // first EARLY units (at most STAGES: all free at the start) go out before
    // griddepcontrol.wait (nothing writes weights), so they land while the previous kernel
    // finishes; the activations' copies and every consumer (workspace, outputs, per-token
    // scales) wait. Chosen per format and token tile on the host (engine.early_units, measured
    // in docs/gpu.md note 16; the tuning table may choose otherwise per layer).
    constexpr int PW = T::A_SRC == A_FRAG && T::BP ? 4 : 1;
    if (EARLY == 0 || wg != 0) griddep_wait();  // the previous kernel's results are visible from here on
    MT_TRACE(TR_READY, tid == 0 && EARLY == 0, globaltimer());
    MT_TRACE(TR_SM, tid == 0, smid());
    MT_TRACE(TR_TILES, tid == 0, nseg);

    if (wg == 0) {
        // ---------------------------------------------------------------- producer
        if constexpr (C::SETMAXNREG) setmaxnreg_dec<40>();
        // PW producer warps issue a stage's copies, lane 0 of each: warp 0 the expected bytes
        // and the activations' tile, and with PW = 4 warp w % 4 the codes of consumer
        // warpgroup w and warp (WGS + w) % 4 its scales. A warp issues its bulk copies one
        // after another; with the whole stage's 1 + 2 WGS copies on one thread the bit-placement
        // formats' consumers waited for data (H100, same process, bitwise-equal outputs: nvfp4
        // 8% and mxfp4 10-11% less time at M = 1 and 16, 4-5% at M = 64; up to 20% on the
        // largest layers). The lookup formats, whose decode sets the pace, lost 1-3% with four
        // warps (razer-g128) and NestedFP's two or three copies gained nothing: one warp.
        // A copy may complete on the stage's barrier before warp 0's expect_tx (as a peer CTA's
        // multicast copy may in CUTLASS's cluster pipelines): the phase cannot complete before
        // warp 0's arrival, which adds the stage's bytes and arrives in one operation.
        const int pw = tid >> 5;
        if ((tid & 31) == 0 && pw < PW && nseg > 0) {
            // weights read by one token tile only are streamed past the L2 (evict first);
            // with several token tiles they are re-read and keep the default policy
            const u64 wpolicy = TT == 1 ? policy_evict_first() : policy_evict_normal();
            int s = 0;
            u32 phase = 0;
            // this warp's weight copies of k-block kb of row tile rc into stage st (barrier full)
            auto copy_weights = [&](const u32 st, const u32 full, const int rc, const int k0) {
                const u32 sa = st + C::B_BYTES;
                if constexpr (T::A_SRC == A_FRAG) {
#pragma unroll
                    for (int w = 0; w < WGS; ++w) {
                        const long long rt = (long long)rc * WGS + w;
                        if (pw == w % PW)
                            bulk_g2s_hint(sa + w * C::FRAG_WG, wcodes + (rt * K_pad + k0) * 32, C::FRAG_CODE,
                                          full, wpolicy);
                        if (pw == (WGS + w) % PW)
                            bulk_g2s_hint(sa + w * C::FRAG_WG + C::FRAG_CODE,
                                          wscales + (rt * (K_pad / T::BLOCK) + k0 / T::BLOCK) * 64 * T::SCALE_BYTES,
                                          C::FRAG_SC, full, wpolicy);
                    }
                } else if constexpr (T::A_SRC == A_PLANES) {
                    tma_load_2d(sa, &tm_a0, k0, rc * WGS * 64, full);  // (PW = 1)
                    tma_load_2d(sa + WGS * 64 * 64, &tm_a1, k0, rc * WGS * 64, full);
                } else {
                    tma_load_2d(sa, &tm_a0, k0, rc * WGS * 64, full);
                }
            };
            // EARLY: warp 0 first issues its weight copies of the first units of its first
            // tile (stages 0.., free at the start), then waits for the previous kernel and
            // issues their activations in the loop; with PW = 4, warps 1-3 (weights only) wait
            // after EARLY units. A copy may complete before warp 0's expect_tx (above).
            int pre = 0;     // warp 0: units whose weights went out before the wait
            int issued = 0;  // units this warp has issued
            if constexpr (EARLY > 0) {
                if (pw == 0) {
                    int tile, k_lo, k_hi;
                    if constexpr (PART == 1) {
                        segment(0, tile, k_lo, k_hi);
                    } else {
                        tile = tile_beg;
                        k_lo = kb_beg;
                        k_hi = tile_beg == tile_end ? kb_last : KU - 1;
                    }
                    pre = min(min(EARLY, STAGES), k_hi - k_lo + 1);
#pragma unroll 1
                    for (int i = 0; i < pre; ++i)
                        copy_weights(sbase + i * C::STAGE_BYTES, bar_full + 8 * i, tile % RTc, (k_lo + i) * BK);
                    griddep_wait();
                    MT_TRACE(TR_READY, true, globaltimer());
                }
            }
            MT_TRACE(TR_FIRST_COPY, pw == 0, globaltimer());
            auto copy_tile = [&](const int tile, const int k_lo, const int k_hi) {  // its k-blocks
                const int tt = tile / RTc, rc = tile % RTc;
#pragma unroll 1
                for (int kb = k_lo; kb <= k_hi; ++kb) {
                    mbar_wait(bar_empty + 8 * s, phase ^ 1);
                    const int k0 = kb * BK;
                    const u32 full = bar_full + 8 * s;
                    const u32 st = sbase + s * C::STAGE_BYTES;
                    if (pw == 0) {
                        mbar_arrive_expect_tx(full, C::TX);
#pragma unroll
                        for (int sub = 0; sub < C::B_SUB; ++sub)  // 128-byte columns: 64 f16 or 128 e4m3
                            tma_load_2d(st + sub * BN * 128, &tm_b, k0 + sub * (T::FP8 ? 128 : 64), tt * BN, full);
                    }
                    if constexpr (EARLY > 0) {
                        if (pw != 0 && issued == EARLY) griddep_wait();
                        if (issued++ >= pre) copy_weights(st, full, rc, k0);
                    } else {
                        copy_weights(st, full, rc, k0);
                    }
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
            };
            if constexpr (PART == 1) {
#pragma unroll 1
                for (int i = 0; i < nseg; ++i) {
                    int tile, k_lo, k_hi;
                    segment(i, tile, k_lo, k_hi);
                    copy_tile(tile, k_lo, k_hi);
                }
            } else {
#pragma unroll 1
                for (int tile = tile_beg; tile <= tile_end; ++tile)
                    copy_tile(tile, tile == tile_beg ? kb_beg : 0, tile == tile_end ? kb_last : KU - 1);
            }
        }
        return;
    }

    // -------------------------------------------------------------------- consumers
    if constexpr (C::SETMAXNREG) setmaxnreg_inc<C::REG_CONSUMER>();
    const int ct = tid - 128;                  // consumer thread 0 .. CT-1
    const int cw = ct >> 7;                    // consumer warpgroup
    const int wi = (ct >> 5) & 3;              // warp in the warpgroup = its m16 tile
    const int lane = tid & 31;
    const Lut L{l0, l1, l2, l3, lsp};
    uint8_t* epi = smem + STAGES * C::STAGE_BYTES + cw * C::EPI_TOK * C::EPI_LD * 2;

    float acc[NACC];
    float tmp[T::PROMOTE ? C::PN / 2 : 1];                  // PROMOTE: one pass's partial sums
    u32 a[BATCH ? 2 : 1][KS][4];                      // A registers of the stage's k-steps
    uint4 wv[T::A_SRC == A_FRAG ? BK / 64 : 1];       // A_FRAG: the stage's code words
    u64 sc = 0;                                       // A_FRAG: the stage's scale codes
    u32 pl[2][4];                                     // A_PLANES: ldmatrix of the planes
    float s_g = 1.f, s_h = 1.f;                       // RESCALE: the accumulators' block scales

    int s = 0;
    u32 phase = 0;
    if (nseg == 0) return;
    // one tile: its k-blocks [k_lo, k_hi] and its finish (first / last of this CTA: the trace)
    auto run_tile = [&](const int tile, const int k_lo, const int k_hi, const bool first, const bool last) {
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
        // tile prologue: no wgmma in flight
        mbar_wait(bar_full + 8 * s, phase);
        MT_TRACE(TR_FIRST_DATA, ct == 0 && first, globaltimer());
        engine_load<F, BN, STAGES, WGS, BATCH>(smem, sbase, s, cw, wi, lane, wv, sc);
        if constexpr (T::RESCALE) {
            s_g = engine_scale_f32<F>((u32)sc & 0xFFFFu);
            s_h = engine_scale_f32<F>((u32)(sc >> 16) & 0xFFFFu);
        }
        if constexpr (BATCH) {
#pragma unroll
            for (int ks = 0; ks < KS; ++ks)
                engine_decode<F, BN, STAGES, WGS>(a[0], ks, sbase, s, cw, wi, lane, wv, sc, pl, L);
        } else {
            engine_decode<F, BN, STAGES, WGS>(a[0], 0, sbase, s, cw, wi, lane, wv, sc, pl, L);
        }
        if constexpr (BATCH) {
            // ------------------------------------------------ batched: two k-blocks per trip
            u32 bar_prev = 0;  // the empty barrier of the stage before this one (tracked: cheaper
                               // in the k-loop than recomputing it from s)
#pragma unroll 1
            for (int kb0 = k_lo; kb0 <= k_hi; kb0 += 2) {
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const int kb = kb0 + p;
                    if (kb > k_hi) break;
                    const u32 sb = sbase + s * C::STAGE_BYTES;
                    const bool more = kb < k_hi;
                    const int s_next = s + 1 == STAGES ? 0 : s + 1;
                    const u32 ph_next = s + 1 == STAGES ? phase ^ 1 : phase;
                    if constexpr (T::PROMOTE) {
#pragma unroll
                        for (int h = 0; h + 1 < C::NPASS; ++h) engine_promote_pass<F, BN, STAGES, WGS>(acc, tmp, h, sb, cw);
                        fence_regs(tmp);
                    }
                    fence_regs(acc);
                    wgmma_fence();
#pragma unroll
                    for (int ks = 0; ks < KS; ++ks) {
                        if constexpr (T::PROMOTE) engine_mma_promote<F, BN, STAGES, WGS>(tmp, ks, sb, cw, C::NPASS - 1);
                        else engine_mma<F, BN, STAGES, WGS>(acc, a[p], ks, sb, 1);
                    }
                    wgmma_commit();
                    // the next stage's fragments while these wgmmas run (their registers
                    // a[1-p] were read by the previous stage's group, retired below/before)
                    if constexpr (!T::PROMOTE && !T::RESCALE) {
                        wgmma_wait<1>();
                        if (kb > k_lo) {  // the previous stage's group has retired: release it
                            __syncwarp();
                            if (lane == 0) mbar_arrive(bar_prev);
                        }
                        bar_prev = bar_empty + 8 * s;
                    }
                    if (more) {
                        mbar_wait(bar_full + 8 * s_next, ph_next);
                        engine_load<F, BN, STAGES, WGS, BATCH>(smem, sbase, s_next, cw, wi, lane, wv, sc);
#pragma unroll
                        for (int ks = 0; ks < KS; ++ks)
                            engine_decode<F, BN, STAGES, WGS>(a[1 - p], ks, sbase, s_next, cw, wi, lane, wv, sc, pl, L);
                    }
                    if constexpr (T::PROMOTE) {
                        // the stage's partial sums (tmp) into the FP32 accumulators (FP8 mode's promotion)
                        wgmma_wait<0>();
                        fence_regs(tmp);
                        __syncwarp();
                        if (lane == 0) mbar_arrive(bar_empty + 8 * s);
#pragma unroll
                        for (int i = 0; i < C::PN / 2; ++i) acc[(C::NPASS - 1) * (C::PN / 2) + i] += tmp[i];
                    } else if constexpr (T::RESCALE) {
                        // the stage's wgmmas have added into acc: into the next block's units
                        float rg, rh;
                        engine_scale_step<F>(s_g, s_h, rg, rh, sc, more);
                        wgmma_wait<0>();
                        fence_regs(acc);
                        __syncwarp();
                        if (lane == 0) mbar_arrive(bar_empty + 8 * s);
                        engine_scale_acc(acc, rg, rh);
                    }
                    s = s_next;
                    phase = ph_next;
                }
            }
        } else {
            // ------------------------------------------------ interleaved
            // (generic-pointer loads and the release address recomputed: the batched loop's
            // 32-bit loads and tracked barrier cost razer 5-8% at M = 1024-4096 here, H100 A/B)
#pragma unroll 1
            for (int kb = k_lo; kb <= k_hi; ++kb) {
                const u32 sb = sbase + s * C::STAGE_BYTES;
                const bool more = kb < k_hi;             // another k-block of this tile follows
                const int s_next = s + 1 == STAGES ? 0 : s + 1;
                const u32 ph_next = s + 1 == STAGES ? phase ^ 1 : phase;
                if constexpr (T::PROMOTE) {
#pragma unroll
                    for (int h = 0; h + 1 < C::NPASS; ++h) engine_promote_pass<F, BN, STAGES, WGS>(acc, tmp, h, sb, cw);
                    fence_regs(tmp);
                }
                fence_regs(acc);
                // One wgmma per k-step; while it runs, the next k-step's A registers are decoded
                // (after wgmma_wait<KS-1> at most KS-1 groups are pending, so the registers of
                // the k-step decoded next -- last read KS wgmmas ago -- are free). The last
                // k-step loads and decodes the next stage's first.
#pragma unroll
                for (int ks = 0; ks < KS; ++ks) {
                    wgmma_fence();
                    if constexpr (T::PROMOTE) engine_mma_promote<F, BN, STAGES, WGS>(tmp, ks, sb, cw, C::NPASS - 1);
                    else engine_mma<F, BN, STAGES, WGS>(acc, a[0], ks, sb, 1);
                    wgmma_commit();
                    if (ks + 1 < KS) {
                        wgmma_wait<KS - 1>();
                        engine_decode<F, BN, STAGES, WGS>(a[0], ks + 1, sbase, s, cw, wi, lane, wv, sc, pl, L);
                    } else if constexpr (T::RESCALE) {
                        // the stage's wgmmas have added into acc: into the next block's units.
                        // The stage is released first (at 256 tokens only 3 stages fit: the
                        // producer refills it meanwhile; waiting for the next stage before
                        // releasing this one cost 5-11% per shape at M = 1024-4096 with 2, H100).
                        wgmma_wait<0>();
                        fence_regs(acc);
                        __syncwarp();
                        if (lane == 0) mbar_arrive(bar_empty + 8 * s);
                        if (more) {
                            mbar_wait(bar_full + 8 * s_next, ph_next);
                            engine_load<F, BN, STAGES, WGS, BATCH>(smem, sbase, s_next, cw, wi, lane, wv, sc);
                        }
                        float rg, rh;
                        engine_scale_step<F>(s_g, s_h, rg, rh, sc, more);
                        if (more) engine_decode<F, BN, STAGES, WGS>(a[0], 0, sbase, s_next, cw, wi, lane, wv, sc, pl, L);
                        engine_scale_acc(acc, rg, rh);
                    } else if constexpr (T::PROMOTE) {
                        // the stage's partial sums (tmp) into the FP32 accumulators (FP8 mode's promotion)
                        wgmma_wait<0>();
                        fence_regs(tmp);
                        __syncwarp();
                        if (lane == 0) mbar_arrive(bar_empty + 8 * s);
#pragma unroll
                        for (int i = 0; i < C::PN / 2; ++i) acc[(C::NPASS - 1) * (C::PN / 2) + i] += tmp[i];
                        if (more) {
                            mbar_wait(bar_full + 8 * s_next, ph_next);
                            engine_load<F, BN, STAGES, WGS, BATCH>(smem, sbase, s_next, cw, wi, lane, wv, sc);
                            engine_decode<F, BN, STAGES, WGS>(a[0], 0, sbase, s_next, cw, wi, lane, wv, sc, pl, L);
                        }
                    } else {
                        wgmma_wait<KS - 1>();
                        // every wgmma of the previous stage has retired: release it
                        if (kb > k_lo) {
                            __syncwarp();
                            if (lane == 0) mbar_arrive(bar_empty + 8 * (s == 0 ? STAGES - 1 : s - 1));
                        }
                        if (more) {
                            mbar_wait(bar_full + 8 * s_next, ph_next);
                            engine_load<F, BN, STAGES, WGS, BATCH>(smem, sbase, s_next, cw, wi, lane, wv, sc);
                            engine_decode<F, BN, STAGES, WGS>(a[0], 0, sbase, s_next, cw, wi, lane, wv, sc, pl, L);
                        }
                    }
                }
                s = s_next;
                phase = ph_next;
            }
        }
        if constexpr (!T::PROMOTE && !T::RESCALE) {  // (those released every stage already)
            wgmma_wait<0>();
            fence_regs(acc);
            __syncwarp();
            if (lane == 0) mbar_arrive(bar_empty + 8 * (s == 0 ? STAGES - 1 : s - 1));  // the tile's last stage
        }
        MT_TRACE(TR_MAIN_END, ct == 0 && last, globaltimer());
        if constexpr (PART == 3) {  // this CTA's only tile, one of its P parts, the others in the cluster
            engine_cluster_parts<F, BN, STAGES, WGS>(acc, tile, RTc, P, smem, epi, col_scale, y, M, N, out_scale,
                                                     out_f32);
        } else if constexpr (PART == 2) {  // this CTA's only tile, one of its P parts
            engine_store_partial<C::CT, NACC>(acc, ws + (size_t)(2 * c) * C::CT * NACC, ct);
            engine_reduce_parts<F, BN, STAGES, WGS>(RT, P, col_scale, y, ws, counters, M, N, out_scale, out_f32);
        } else {
            engine_finish_tile<F, BN, STAGES, WGS>(acc, tile, RTc, KU, U, U0, n_ctas, ubeg, epi, s_flag, col_scale, y,
                                                   ws, counters, M, N, out_scale, out_f32);
        }
    };
    if constexpr (PART == 1) {
        // i < nseg, without keeping nseg live (the 4-warpgroup kernels are at their register limit)
#pragma unroll 1
        for (int i = 0; i < NF || (ubeg < uend && i - NF <= (uend - 1) / KU - ubeg / KU); ++i) {
            int tile, k_lo, k_hi;
            segment(i, tile, k_lo, k_hi);
            run_tile(tile, k_lo, k_hi, i == 0, i == nseg - 1);
        }
    } else {
#pragma unroll 1
        for (int tile = tile_beg; tile <= tile_end; ++tile)
            run_tile(tile, tile == tile_beg ? kb_beg : 0, tile == tile_end ? kb_last : KU - 1, tile == tile_beg,
                     tile == tile_end);
    }
    MT_TRACE(TR_END, ct == 0, globaltimer());
}

}  // namespace mt
