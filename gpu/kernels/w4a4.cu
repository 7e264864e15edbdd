// ReSET's W4A4 NVFP4 small-M path (002_adb391b0b44d3bdd.txt Sec. 5, App. C.1-C.2):
//
// 1. nvfp4_quantize_act: one launch of one 8-CTA thread-block cluster quantizes X[M,K]
//    (fp16) to NVFP4 with golden/fp4blocks.py's FP32 op order, bit for bit: tensor amax
//    (cluster-wide through distributed shared memory; nvfp4_quantize_act_solo, for small
//    X: eight plain CTAs that each take it over all of X), D32 = amax / 2688, per block
//    E4M3(amax_b / (D32 * 6)) (RNE, saturating), q = FP4(x / (D32 * s)) (RNE).
//    Output: codes [M][KA/2] (low nibble = element 2i), linear E4M3 scales [M][KA/16]
//    (KA = K rounded up to 512, zero padded), the FP32 tensor scale in ts_out[0]; for the
//    tensor-core path also the dequantized values without the tensor scale (FP16, exact)
//    and the tensor scale once per token.
// 2. w4a4_gemv: weights nvfp4 in the rowmajor layout; every CTA streams its weight stripe
//    once for all MT tokens (C1: multi-token CTA fusion), each thread keeps 8 rows x MT
//    accumulators (C2) and decodes both operands in registers (C3): FP4 codes -> bytes by
//    prmt lookup, block products by dp4a on exact small integers (weights 4v+64 as u8,
//    activations 4v as s8, the offset removed with one per-token correction), one FFMA per
//    block with s_w * s_a / 16. The block dot products are exact; only the FP32
//    accumulation across blocks rounds.
// 3. w4a4_gemv_rows (M = 1): the same products with the weights streamed into registers,
//    each CTA owning whole rows over all of K (below).
#include "rowmajor_common.cuh"
#include <cuda_fp8.h>

namespace mt {

constexpr int QA_THREADS = 512;
constexpr int QA_CTAS = 8;  // the quantizer's CTAs (one cluster, or plain CTAs for small x)
constexpr int QA_BATCH = 4;  // blocks per thread whose loads the amax pass issues together

// ------------------------------------------------------------------ GEMV
template <int MT, int STAGES>
struct W4a4Cfg {
    static constexpr int ACODE_BYTES = MT * (RM_KC / 2);
    static constexpr int ASCALE_BYTES = ((MT * (RM_KC / 16) + 127) / 128) * 128;
    static constexpr int STAGE_BYTES = RM_CODE_BYTES + RmScales<0>::BYTES + ACODE_BYTES + ASCALE_BYTES;
    static constexpr int RED_BYTES = MT * RM_RED_LD * 4;
    static constexpr int SMEM = STAGES * STAGE_BYTES + RED_BYTES + 16;
};

// One unit's stage is its weights (codes + scales) and its activations (codes + scales);
// they are issued separately so that the prologue can request the weights (which no
// kernel before us writes) ahead of griddepcontrol.wait and the activations after it.
template <int MT, int STAGES>
__device__ __forceinline__ void w4a4_load_acts(unsigned char* st, int k0, int KA, int M,
                                               const u8* __restrict__ acodes, const u8* __restrict__ ascales) {
    using C = W4a4Cfg<MT, STAGES>;
    unsigned char* ac = st + RM_CODE_BYTES + RmScales<0>::BYTES;
    const u32 dc = smem_u32(ac), ds = smem_u32(ac + C::ACODE_BYTES);
    // the activation buffers are padded to KA (multiple of 512): always whole units.
    // MT*16 code chunks and MT*2 scale chunks (MT <= 8): one predicated copy each.
    const unsigned tid = threadIdx.x;
    static_assert(MT * 16 <= RM_THREADS, "one activation chunk per thread");
    if (tid < MT * 16) {
        const unsigned m = tid >> 4, ch = tid & 15u;
        const bool ok = (int)m < M;
        cp_async16(dc + m * (RM_KC / 2) + ch * 16,
                   ok ? acodes + (size_t)m * (unsigned)(KA / 2) + (unsigned)(k0 / 2) + ch * 16 : acodes, ok ? 16 : 0);
    } else if (tid < MT * 16 + MT * 2) {
        const unsigned j = tid - MT * 16, m = j >> 1, ch = j & 1u;
        const bool ok = (int)m < M;
        cp_async16(ds + m * (RM_KC / 16) + ch * 16,
                   ok ? ascales + (size_t)m * (unsigned)(KA / 16) + (unsigned)(k0 / 16) + ch * 16 : ascales,
                   ok ? 16 : 0);
    }
}

template <int MT, int STAGES>
__device__ __forceinline__ void w4a4_load_unit(unsigned char* st, int rt, int k0, int klen, int K_pad, int KA, int M,
                                               const unsigned char* __restrict__ codes,
                                               const unsigned char* __restrict__ scales,
                                               const u8* __restrict__ acodes, const u8* __restrict__ ascales) {
    rm_load_weights<0>(st, st + RM_CODE_BYTES, rt, k0, klen, K_pad, codes, scales);
    w4a4_load_acts<MT, STAGES>(st, k0, KA, M, acodes, ascales);
}

// LUT bytes 4v+64 (v in [-6, 6]) -> signed bytes 4v, per byte without borrows.
__device__ __forceinline__ u32 lutbyte_to_s8(u32 b) {
    return b ^ 0xC0C0C0C0u ^ ((b & 0x40404040u) << 1);
}

template <int MT, int STAGES>
__global__ void __launch_bounds__(256, (MT == 1 ? 3 : MT == 2 ? 2 : 1))
w4a4_gemv(const unsigned char* __restrict__ codes, const unsigned char* __restrict__ scales,
          const u8* acodes, const u8* ascales, const float* a_ts,  // not __restrict__: with it
          // NVVM marks their loads invariant and hoists them above griddepcontrol.wait (seen in
          // the SASS: the tensor-scale load ran before ACQBULK and read the previous layer's)
          void* __restrict__ y, float* __restrict__ ws, int* __restrict__ counters, int M, int N, int K_pad,
          int KA, int RT, int n_ctas, float w_ts, int out_f32, u32 l0, u32 l1, u32 l2, u32 l3) {
    using C = W4a4Cfg<MT, STAGES>;
    extern __shared__ __align__(128) unsigned char smem[];
    float* red = reinterpret_cast<float*>(smem + STAGES * C::STAGE_BYTES);
    int* s_flag = reinterpret_cast<int*>(smem + STAGES * C::STAGE_BYTES + C::RED_BYTES);
    const Lut L{l0, l1, l2, l3, 0u};
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

    // Prologue, weights first: with programmatic dependent launch (after the activation
    // quantizer) these copies overlap the quantizer; the activations, their scales and the
    // tensor scale are read only after griddepcontrol.wait (a no-op in a plain launch).
    // Everything before the wait reads weights only and writes nothing in global memory.
    int prt = ubeg / KU, pkc = ubeg % KU;  // unit being prefetched
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (ubeg + s < uend)
            rm_load_weights<0>(smem + s * C::STAGE_BYTES, smem + s * C::STAGE_BYTES + RM_CODE_BYTES, prt,
                               pkc * RM_KC, min(RM_KC, K_pad - pkc * RM_KC), K_pad, codes, scales);
        if (++pkc == KU) { pkc = 0; ++prt; }
    }
    // No early griddepcontrol.launch_dependents here (the trigger is implicit at exit): in
    // a chain of layers an early trigger lets the next quantizer and then the next GEMV
    // become resident while this GEMV streams, and at M = 1 on the layers of >= 400 row
    // tiles that was 12-16% slower than launching them one after the other (H100,
    // 2026-11-26; docs/gpu.md). The quantizer does trigger at once: its GEMV's prologue
    // overlaps it.
    griddep_wait();
    const float out_scale = w_ts * __ldcg(a_ts);  // L2: written by the quantizer on another SM
    pkc = ubeg % KU;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {  // group 0 also holds every prologue weight copy
        if (ubeg + s < uend) w4a4_load_acts<MT, STAGES>(smem + s * C::STAGE_BYTES, pkc * RM_KC, KA, M, acodes, ascales);
        cp_async_commit();
        if (++pkc == KU) pkc = 0;
    }
    int stage = 0;
    int crt = ubeg / KU, ckc = ubeg % KU;  // unit being computed
    for (int u = ubeg; u < uend; ++u) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            if (u + STAGES - 1 < uend)
                w4a4_load_unit<MT, STAGES>(smem + ((stage + STAGES - 1) % STAGES) * C::STAGE_BYTES, prt,
                                           pkc * RM_KC, min(RM_KC, K_pad - pkc * RM_KC), K_pad, KA, M, codes,
                                           scales, acodes, ascales);
            cp_async_commit();
            if (++pkc == KU) { pkc = 0; ++prt; }
        }
        const unsigned char* st = smem + stage * C::STAGE_BYTES;
        const unsigned char* sc = st + RM_CODE_BYTES;
        const unsigned char* ac = sc + RmScales<0>::BYTES;
        const unsigned char* as = ac + C::ACODE_BYTES;
        const int klen = min(RM_KC, K_pad - ckc * RM_KC);
        if (16 * lane < klen) {
            // activations of block `lane` for every token: signed bytes 4v, offset correction, scale/16
            u32 aw[MT][4];
            int corr[MT];
            float sa[MT];
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const uint2 a8 = *reinterpret_cast<const uint2*>(ac + m * (RM_KC / 2) + 8 * lane);
                u32 lo, hi;
                lut8(a8.x, L.p0, L.p0, L, lo, hi);
                aw[m][0] = lutbyte_to_s8(lo);
                aw[m][1] = lutbyte_to_s8(hi);
                lut8(a8.y, L.p0, L.p0, L, lo, hi);
                aw[m][2] = lutbyte_to_s8(lo);
                aw[m][3] = lutbyte_to_s8(hi);
                int cr = 0;
#pragma unroll
                for (int q = 0; q < 4; ++q) cr = dp4a_u8s8(0x40404040u, aw[m][q], cr);
                corr[m] = cr;
                sa[m] = scale_f32<FID_NVFP4>(as[m * (RM_KC / 16) + lane]) * (LUT_INV_SCALE * LUT_INV_SCALE);
            }
            const uint2 sv = *reinterpret_cast<const uint2*>(sc + (warp * RmScales<0>::NB + lane) * 8);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float sw = scale_f32<FID_NVFP4>(((i < 4 ? sv.x : sv.y) >> (8 * (i & 3))) & 0xFFu);
                const uint2 w8 = *reinterpret_cast<const uint2*>(st + (warp * 8 + i) * (RM_KC / 2) + 8 * lane);
                u32 b[4];
                lut8(w8.x, L.p0, L.p0, L, b[0], b[1]);
                lut8(w8.y, L.p0, L.p0, L, b[2], b[3]);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    int d = dp4a_u8s8(b[0], aw[m][0], 0);
                    d = dp4a_u8s8(b[1], aw[m][1], d);
                    d = dp4a_u8s8(b[2], aw[m][2], d);
                    d = dp4a_u8s8(b[3], aw[m][3], d);
                    acc[i][m] = fmaf((float)(d - corr[m]), sw * sa[m], acc[i][m]);
                }
            }
        }
        if (u + 1 == uend || ckc + 1 == KU) {
            rm_reduce_to_part<MT>(acc, red);
            __syncthreads();
            finish_tile<MT, RM_RED_LD, RM_THREADS>(red, crt, 0, U, KU, n_ctas, my_first_tile, ws, counters, RT,
                                                   M, N, 0, out_scale, out_f32, y, s_flag);
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


// ------------------------------------------------------------------ row-streaming GEMV
// w4a4_gemv_rows<MT, NW>: the same products as w4a4_gemv (exact block dot products, one
// FFMA per block with s_w * s_a / 16, FP32 accumulation), with the weights streamed from
// global memory into registers instead of through cp.async stages in shared memory:
// * an item is (row group of 8 rows, chunk of RS_KC = 1024 k); lane l takes blocks 2l and
//   2l+1 of the chunk: one 16-byte load per row (a warp reads 512 contiguous bytes of the
//   row) and one 16-byte load of their scales (rowmajor scales [N/8][K/16][8]: the 8 rows of
//   both blocks);
// * CTA b owns whole row groups [b * n_rg / C, (b + 1) * n_rg / C) (no partial sums between
//   CTAs, no workspace); its NW warps take its items round-robin, each keeping the next
//   item's loads in flight while it computes the current one (two register buffers);
// * a warp's sum of a row group goes to its own shared slot, and the slots are added in
//   warp order at the end (deterministic).
// Measured, not kept (H100, 2026-11-27, docs/gpu.md): the items staged in a shared-memory
// ring per warp (each lane's own cp.async copies, three slots: two items in flight instead
// of one) were no faster, so bytes in flight are not what limits this kernel.
// The first item's weights are requested before griddepcontrol.wait (PDL after the
// quantizer); activations, their scales and the tensor scale only after it.
constexpr int RS_KC = 1024;

template <int MT>
struct RsAct {  // one item's activations of lane l: 32 codes and 2 block scales per token
    uint4 c[MT];
    u32 s[MT];
};

// One item's products of lane l: blocks 2l, 2l+1 of 8 rows (w: 16 bytes of codes per row,
// s: the rows' E4M3 scales of both blocks) with MT tokens' activations, added to acc.
template <int MT>
__device__ __forceinline__ void rs_dot(const uint4 (&w)[8], const uint4& s, const RsAct<MT>& a, const Lut& L,
                                       float (&acc)[8][MT]) {
    u32 aw[MT][8];
    int corr[MT][2];
    float sa[MT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        const u32 q[4] = {a.c[m].x, a.c[m].y, a.c[m].z, a.c[m].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            u32 lo, hi;
            lut8(q[j], L.p0, L.p0, L, lo, hi);
            aw[m][2 * j] = lutbyte_to_s8(lo);
            aw[m][2 * j + 1] = lutbyte_to_s8(hi);
        }
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            int cr = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) cr = dp4a_u8s8(0x40404040u, aw[m][4 * b + j], cr);
            corr[m][b] = cr;
            sa[m][b] = scale_f32<FID_NVFP4>((a.s[m] >> (8 * b)) & 0xFFu) * (LUT_INV_SCALE * LUT_INV_SCALE);
        }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const u32 q[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
        u32 bw[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) lut8(q[j], L.p0, L.p0, L, bw[2 * j], bw[2 * j + 1]);
        const float sw0 = scale_f32<FID_NVFP4>(((i < 4 ? s.x : s.y) >> (8 * (i & 3))) & 0xFFu);
        const float sw1 = scale_f32<FID_NVFP4>(((i < 4 ? s.z : s.w) >> (8 * (i & 3))) & 0xFFu);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            int d0 = dp4a_u8s8(bw[0], aw[m][0], 0);
            d0 = dp4a_u8s8(bw[1], aw[m][1], d0);
            d0 = dp4a_u8s8(bw[2], aw[m][2], d0);
            d0 = dp4a_u8s8(bw[3], aw[m][3], d0);
            int d1 = dp4a_u8s8(bw[4], aw[m][4], 0);
            d1 = dp4a_u8s8(bw[5], aw[m][5], d1);
            d1 = dp4a_u8s8(bw[6], aw[m][6], d1);
            d1 = dp4a_u8s8(bw[7], aw[m][7], d1);
            acc[i][m] = fmaf((float)(d0 - corr[m][0]), sw0 * sa[m][0], acc[i][m]);
            acc[i][m] = fmaf((float)(d1 - corr[m][1]), sw1 * sa[m][1], acc[i][m]);
        }
    }
}

// acc[8][MT] summed over the 32 lanes (7 shuffles for MT = 1); lane L then holds value
// L >> SH (row i = idx / MT, token m = idx % MT) in v, written by lanes with L % 2^SH == 0.
template <int MT>
__device__ __forceinline__ void rs_warp_sum(float (&acc)[8][MT], int lane, float* dst, int ld_m) {
    constexpr int V = 8 * MT;
    static_assert(V <= 16, "MT <= 2");
    float v[V];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int m = 0; m < MT; ++m) v[i * MT + m] = acc[i][m], acc[i][m] = 0.f;
    warp_transpose_reduce<V>(v, lane);
    constexpr int SH = (V == 16) ? 1 : 2;
    if ((lane & ((1 << SH) - 1)) == 0) {
        const int idx = lane >> SH, i = idx / MT, m = idx % MT;
        dst[m * ld_m + i] = v[0];
    }
}

template <int MT, int NW>
__global__ void __launch_bounds__(NW * 32, 16 / NW)  // 16 warps per SM, <= 128 registers
w4a4_gemv_rows(const unsigned char* __restrict__ codes, const unsigned char* __restrict__ scales,
               const u8* acodes, const u8* ascales, const float* a_ts,  // not __restrict__: PDL
               void* __restrict__ y, int M, int N, int K_pad, int KA, int n_rg, int rg_max, float w_ts,
               int out_f32, int early_trigger, u32 l0, u32 l1, u32 l2, u32 l3) {
    extern __shared__ __align__(16) float slots[];  // [NW][MT][rg_max * 8]
    const Lut L{l0, l1, l2, l3, 0u};
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rg0 = (int)(((long long)blockIdx.x * n_rg) / gridDim.x);
    const int rg1 = (int)(((long long)(blockIdx.x + 1) * n_rg) / gridDim.x);
    const int KC = (K_pad + RS_KC - 1) / RS_KC;
    const unsigned row_bytes = (unsigned)K_pad / 2;
    const int rstride = rg_max * 8;
    float* mine = slots + warp * MT * rstride;
    for (int i = lane; i < MT * rstride; i += 32) mine[i] = 0.f;  // rows this warp never touches
    __syncwarp();  // the zeros land before any lane's flush writes a slot

    // Items t = warp, warp + NW, ... of the CTA's nj * KC, each as (row group j, chunk c),
    // advanced without divisions: t -> t + NW adds NW / KC row groups and NW % KC chunks.
    struct Item {
        int j, c;
    };
    const int dj = NW / KC, dc = NW % KC;
    auto next = [&](Item it) {
        it.c += dc;
        it.j += dj;
        if (it.c >= KC) { it.c -= KC; ++it.j; }
        return it;
    };
    auto active = [&](int c) { return c * RS_KC + 32 * lane < K_pad; };
    auto load_w = [&](uint4 (&w)[8], uint4& s, Item it) {
        if (active(it.c)) {
            const int rg = rg0 + it.j;
            const unsigned char* p = codes + (size_t)rg * 8 * row_bytes + (unsigned)it.c * (RS_KC / 2) + 16 * lane;
#pragma unroll
            for (int i = 0; i < 8; ++i) w[i] = ldg_stream16(p + (size_t)i * row_bytes);
            s = ldg_stream16(scales + ((size_t)rg * ((unsigned)K_pad / 16) + (unsigned)it.c * (RS_KC / 16) + 2 * lane) * 8);
        }
    };
    auto load_a = [&](RsAct<MT>& a, Item it) {
        if (active(it.c)) {
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                if (m < M) {  // L2 (__ldcg): written by the quantizer on another SM
                    a.c[m] = __ldcg(reinterpret_cast<const uint4*>(acodes + (size_t)m * (unsigned)(KA / 2) +
                                                                   (unsigned)it.c * (RS_KC / 2) + 16 * lane));
                    a.s[m] = __ldcg(reinterpret_cast<const unsigned short*>(
                        ascales + (size_t)m * (unsigned)(KA / 16) + (unsigned)it.c * (RS_KC / 16) + 2 * lane));
                } else {
                    a.c[m] = make_uint4(0u, 0u, 0u, 0u);
                    a.s[m] = 0u;
                }
            }
        }
    };
    float acc[8][MT];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int m = 0; m < MT; ++m) acc[i][m] = 0.f;
    auto compute = [&](const uint4 (&w)[8], const uint4& s, const RsAct<MT>& a, Item it) {
        if (active(it.c)) rs_dot<MT>(w, s, a, L, acc);
    };
    // A row group's sum (the 32 lanes added) into this warp's slot; acc back to 0.
    auto flush = [&](Item it) { rs_warp_sum<MT>(acc, lane, mine + it.j * 8, rstride); };

    const int nj = rg1 - rg0;  // items with j < nj exist
    // Two register buffers: a warp requests the next item's loads, then computes the
    // current one. Only the first item's weights are requested before griddepcontrol.wait:
    // requesting two there (the same steady state, the activation loads later) took 6.5%
    // more time alone and 1% with the quantizer (geomeans over nine layers, one process,
    // H100, 2026-11-27; docs/gpu.md).
    uint4 wA[8], wB[8], sA, sB;
    RsAct<MT> aA, aB;
    Item t0{warp / KC, warp % KC};
    if (t0.j < nj) load_w(wA, sA, t0);
    griddep_wait();
    const float out_scale = w_ts * __ldcg(a_ts);
    if (t0.j < nj) load_a(aA, t0);
    // early_trigger: let the next kernel (the next layer's quantizer) launch now; it waits
    // for this grid's end before it reads. Measured per layer (docs/gpu.md): faster where
    // K >= 8192, slower on the K = 4096 layers; the host passes the rule.
    if (early_trigger) griddep_launch_dependents();
    while (t0.j < nj) {
        const Item t1 = next(t0);
        if (t1.j < nj) { load_w(wB, sB, t1); load_a(aB, t1); }
        compute(wA, sA, aA, t0);
        if (t1.j != t0.j) flush(t0);
        if (t1.j >= nj) break;
        const Item t2 = next(t1);
        if (t2.j < nj) { load_w(wA, sA, t2); load_a(aA, t2); }
        compute(wB, sB, aB, t1);
        if (t2.j != t1.j) flush(t1);
        t0 = t2;
    }
    __syncthreads();
    const int rows = (rg1 - rg0) * 8;
    for (int i = threadIdx.x; i < MT * rows; i += NW * 32) {
        const int m = i / rows, r = i % rows;
        const int row = rg0 * 8 + r;
        if (m < M && row < N) {
            float v = 0.f;
#pragma unroll 4
            for (int w = 0; w < NW; ++w) v += slots[(w * MT + m) * rstride + r];
            v *= out_scale;
            if (out_f32) reinterpret_cast<float*>(y)[(size_t)m * N + row] = v;
            else reinterpret_cast<__half*>(y)[(size_t)m * N + row] = __float2half_rn(v);
        }
    }
}


}  // namespace mt

namespace mt {
__device__ __forceinline__ void qa_load_block(const __half* x, int m, int K, int kb, uint4 (&v)[2]) {
    const uint4* p = reinterpret_cast<const uint4*>(x + (size_t)m * K + kb * 16);
    v[0] = __ldcg(p);  // L2: x may be the previous kernel's output
    v[1] = __ldcg(p + 1);
}

__device__ __forceinline__ float qa_block_amax(const uint4 (&v)[2]) {
    const u32 w[8] = {v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w};
    float a = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        a = fmaxf(a, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
    return a;
}

// Block b (token m, column block kb) in the golden FP32 op order: its E4M3 scale code and
// sixteen FP4 codes (zeros for the padding blocks kb >= K / 16). With xhat, also the
// dequantized values without the tensor scale, code x block scale: exact in FP16 (at most
// 4 x 4 significant bits, magnitudes 2^-10 .. 2688), the FP16 operand of the tensor-core path.
__device__ __forceinline__ void qa_emit_block(const uint4 (&v)[2], int m, int kb, int K, int KA, int nb_real,
                                              float d32, float d6, u8* __restrict__ codes,
                                              u8* __restrict__ scales, __half* __restrict__ xhat) {
    uint2 packed = make_uint2(0u, 0u);
    u8 sc = 0;
    if (kb < nb_real) {
        const u32 w[8] = {v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w};
        float e[16];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
            e[2 * i] = f.x;
            e[2 * i + 1] = f.y;
        }
        const float arg = __fdiv_rn(qa_block_amax(v), d6);
        sc = (u8)__nv_cvt_float_to_fp8(arg, __NV_SATFINITE, __NV_E4M3);
        const float sval = scale_f32<FID_NVFP4>(sc);
        const float denom = __fmul_rn(d32, sval);
        u32 lo = 0u, hi = 0u;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const float q = (denom > 0.f) ? __fdiv_rn(e[i], denom) : 0.f;
            const u32 code = fp4_mag_code(fabsf(q)) | (signbit(q) ? 8u : 0u);
            if (i < 8) lo |= code << (4 * i);
            else hi |= code << (4 * (i - 8));
        }
        packed = make_uint2(lo, hi);
        if (xhat) {
            const float half_s = 0.5f * sval;  // exact: a power-of-two factor of an E4M3 value
            u32 h[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                float f[2];
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const u32 c = ((2 * i + j < 8 ? lo : hi) >> (4 * ((2 * i + j) & 7))) & 0xFu;
                    const float mag = (float)(__byte_perm(FP4_TWICE_LO, FP4_TWICE_HI, c & 7u) & 0xFFu) * half_s;
                    f[j] = (c & 8u) ? -mag : mag;
                }
                const __half2 p2 = __floats2half2_rn(f[0], f[1]);
                h[i] = *reinterpret_cast<const u32*>(&p2);
            }
            uint4* dst = reinterpret_cast<uint4*>(xhat + (size_t)m * K + kb * 16);
            dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
            dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
        }
    }
    *reinterpret_cast<uint2*>(codes + (size_t)m * (KA / 2) + kb * 8) = packed;
    scales[(size_t)m * (KA / 16) + kb] = sc;
}
}  // namespace mt

namespace mt {
// Both quantizer kernels: QA_CTAS CTAs, CTA `rank` encodes blocks [b0, b1) of the M * KA / 16.
// CLUSTER: the CTAs are one thread-block cluster and take the tensor amax over their own
// blocks, then across the cluster through distributed shared memory. Otherwise every CTA
// takes the amax over all of x itself (no cluster launch, no cluster barriers; for small x,
// where reading x eight times costs less than the barriers: measured in docs/gpu.md).
template <bool CLUSTER>
__device__ __forceinline__ void qa_body(const __half* x, int M, int K, int KA, u8* __restrict__ codes,
                                        u8* __restrict__ scales, float* __restrict__ ts_out,
                                        __half* __restrict__ xhat, float* __restrict__ col) {
    __shared__ float s_red[QA_THREADS / 32];
    __shared__ float s_amax;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u32 rank = CLUSTER ? cluster_ctarank() : blockIdx.x;
    const int nb_row = KA / 16, nb_real = K / 16;
    const int NB = M * nb_row;
    const int b0 = (int)(((long long)rank * NB) / QA_CTAS), b1 = (int)(((long long)(rank + 1) * NB) / QA_CTAS);
    // Programmatic dependent launch: the GEMM may start now (it streams weights until its
    // own griddepcontrol.wait); x is read only after the previous kernel has completed.
    griddep_launch_dependents();
    griddep_wait();

    // phase 1: tensor amax (max is order-independent: exact). QA_BATCH blocks' loads go out
    // together: each CTA of the plain form reads all of x, several blocks per thread, and
    // one L2 round trip per block was most of its time at large K.
    float a = 0.f;
    const int bl = CLUSTER ? b0 : 0, bh = CLUSTER ? b1 : NB;
    for (int b = bl + tid; b < bh; b += QA_BATCH * QA_THREADS) {
        uint4 v[QA_BATCH][2];
#pragma unroll
        for (int j = 0; j < QA_BATCH; ++j) {
            const int bj = b + j * QA_THREADS;
            if (bj < bh && bj % nb_row < nb_real) {
                qa_load_block(x, bj / nb_row, K, bj % nb_row, v[j]);
            } else {
                v[j][0] = make_uint4(0u, 0u, 0u, 0u);  // amax 0: no effect
                v[j][1] = v[j][0];
            }
        }
#pragma unroll
        for (int j = 0; j < QA_BATCH; ++j) a = fmaxf(a, qa_block_amax(v[j]));
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    if (lane == 0) s_red[warp] = a;
    __syncthreads();
    if (tid == 0) {
        float m = 0.f;
        for (int i = 0; i < QA_THREADS / 32; ++i) m = fmaxf(m, s_red[i]);
        s_amax = m;
    }
    float amax = 0.f;
    if constexpr (CLUSTER) {
        cluster_sync();
#pragma unroll
        for (u32 r = 0; r < QA_CTAS; ++r) amax = fmaxf(amax, ld_dsmem_f32(&s_amax, r));
        cluster_sync();  // no CTA leaves while another still reads its shared memory
    } else {
        __syncthreads();
        amax = s_amax;
    }

    float d32 = __fdiv_rn(amax, NVFP4_TS_DENOM);
    if (!(d32 > 0.f)) d32 = 1.f;
    const float d6 = __fmul_rn(d32, 6.0f);
    if (rank == 0 && tid == 0) ts_out[0] = d32;
    if (col && rank == 0)
        for (int m = tid; m < M; m += QA_THREADS) col[m] = d32;

    // phase 2: block scales and codes (and the dequantized values); re-reads x from L1/L2
    for (int b = b0 + tid; b < b1; b += QA_THREADS) {
        uint4 v[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
        if (b % nb_row < nb_real) qa_load_block(x, b / nb_row, K, b % nb_row, v);
        qa_emit_block(v, b / nb_row, b % nb_row, K, KA, nb_real, d32, d6, codes, scales, xhat);
    }
}
}  // namespace mt

// Outside the namespace: extern "C" kernels keep their plain names for NVRTC and nvcc.
// xhat [M][K] (FP16) and col [M] (FP32, the tensor scale once per token) are optional (null
// for the GEMV): the tensor-core path's activations and per-token output factor.
extern "C" __global__ void __cluster_dims__(mt::QA_CTAS, 1, 1) __launch_bounds__(mt::QA_THREADS)
nvfp4_quantize_act(const __half* x, int M, int K, int KA, u8* __restrict__ codes,  // x: no __restrict__ (PDL)
                   u8* __restrict__ scales, float* __restrict__ ts_out, __half* __restrict__ xhat,
                   float* __restrict__ col) {
    mt::qa_body<true>(x, M, K, KA, codes, scales, ts_out, xhat, col);
}

// The same without a cluster (grid of QA_CTAS plain CTAs), for small x.
extern "C" __global__ void __launch_bounds__(mt::QA_THREADS)
nvfp4_quantize_act_solo(const __half* x, int M, int K, int KA, u8* __restrict__ codes,
                        u8* __restrict__ scales, float* __restrict__ ts_out, __half* __restrict__ xhat,
                        float* __restrict__ col) {
    mt::qa_body<false>(x, M, K, KA, codes, scales, ts_out, xhat, col);
}
