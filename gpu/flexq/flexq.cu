// FlexQ W6Ax on binary tensor cores (003_c7ba18c8b0833de1.txt Sec. 4.2-4.3).
//
// Layouts: see gpu/flexq/layout.py. The Python side prepends the generated plane-pair
// schedules (struct FlexqTile<P, Q>) and the constants FLEXQ_GROUP = 128.
//
// Kernels
//   flexq_quantize_pack<BITS, R>  FP16 rows -> IntGroup codes (bit-exact with golden
//                                 IntGroup: FP32 amax/(2^(n-1)-1) -> FP16 scale, FP32
//                                 x/scale, RNE, clamp) -> packed planes + FP16 scales.
//   flexq_gemm<P, Q, MT, RT, WR, WK, U, OUT>
//                                 Y[m, n] = sum_g sx[g, m] * sw[g, n] * Int_g[m, n], Int_g
//                                 from b1 mma.sync .and.popc over plane pairs (Horner in the
//                                 MMA accumulator), group scales in the epilogue.
//   OUT: 0 = FP16 Y, 1 = FP32 Y, 2 = int32 Int_g[m, n, g] (test path, before scaling).

#include "ptx.cuh"  // inlined by mactile.gpu.runtime.load_source (NVRTC and nvcc)

namespace flexq {

using namespace ptx;  // the PTX wrappers (mma, loads, clusters, griddepcontrol) live in one header

// acc = 2 * acc - n  (one IADD3 per register)
__device__ __forceinline__ void dbl_sub(int (&acc)[4], const int (&n)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = acc[i] + acc[i] - n[i];
}
__device__ __forceinline__ void dbl(int (&acc)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = acc[i] + acc[i];
}
__device__ __forceinline__ void neg(int (&acc)[4], const int (&n)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = -n[i];
}

template <int P, int Q> struct FlexqTile;  // specialised by the generated schedules

// Lane-interleaved plane words (gpu/flexq/layout.py): one (tile, group) block holds
// 32 * WORDS words; lane L's word w sits at ((w / V) * 32 + L) * V + w % V, V = 4 words
// (one 16-byte load) where WORDS is a multiple of 4, else 2 (8 bytes). A warp's v-th vector
// load then reads one contiguous 512- or 256-byte run. (Lane-major words put the lanes 48
// bytes apart: every load instruction used half of each sector it touched.)
template <int WORDS>
__device__ __forceinline__ constexpr int plane_vec() {
  static_assert(WORDS % 2 == 0, "plane words per lane come in pairs");
  return WORDS % 4 == 0 ? 4 : 2;
}
template <int WORDS>
__device__ __forceinline__ int plane_word(int lane, int w) {
  constexpr int V = plane_vec<WORDS>();
  return ((w / V) * 32 + lane) * V + w % V;
}

// One warp's weights of group grp for its RT weight tiles wt0.. (clamped to the last tile:
// stores are masked): WW lane-interleaved plane words per lane in 16-byte streaming loads,
// and the two FP16 scales of rows gid and gid + 8. Scale index < 2^31: 32-bit math.
template <int WW, int RT>
__device__ __forceinline__ void load_weight_group(const uint32_t* __restrict__ wp, const __half* __restrict__ sw,
                                                  uint32_t (&wf)[RT][WW], float (&sf)[RT][2], int wt0,
                                                  int n_wtiles, int G, int Npad, int grp, int lane, int gid) {
  static_assert(WW % 4 == 0, "weights are read in 16-byte vectors");
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    const int wt = min(wt0 + i, n_wtiles - 1);
    const uint32_t* p = wp + ((long long)wt * G + grp) * 32 * WW;
#pragma unroll
    for (int v = 0; v < WW / 4; ++v) {
      const uint4 t = ldg_stream16(p + plane_word<WW>(lane, 4 * v));
      wf[i][4 * v] = t.x; wf[i][4 * v + 1] = t.y;
      wf[i][4 * v + 2] = t.z; wf[i][4 * v + 3] = t.w;
    }
    const __half* q = sw + (grp * Npad + wt * 16 + gid);
    sf[i][0] = __half2float(q[0]);
    sf[i][1] = __half2float(q[8]);
  }
}

}  // namespace flexq

FLEXQ_GENERATED_SCHEDULES

namespace flexq {

// ---------------------------------------------------------------- online quantizer
// One warp quantizes one (row, group): lane l holds elements l, l+32, l+64, l+96, so
// __ballot_sync of one bit of element 32*c + l over the warp is the packed word of chunk
// c. Golden IntGroup: s16 = FP16(FP32(amax) / FP32(max_int)); q = clip(rint(x32 / s32)).
// Returns the FP16 scale; lane s*4 + c (< 4*BITS) receives the word of plane s, chunk c.
template <int BITS>
__device__ __forceinline__ __half quant_group(const float (&v)[4], int lane, uint32_t& mine) {
  constexpr int MAXI = (1 << (BITS - 1)) - 1;
  constexpr int MINI = -(1 << (BITS - 1));
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < 4; ++c) amax = fmaxf(amax, fabsf(v[c]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const __half s16 = __float2half_rn(__fdiv_rn(amax, (float)MAXI));
  const float s32 = __half2float(s16);
  uint32_t pat[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    int q = 0;
    if (s32 > 0.f) {
      float r = rintf(__fdiv_rn(v[c], s32));
      r = fminf(fmaxf(r, (float)MINI), (float)MAXI);
      q = (int)r;
    }
    pat[c] = (uint32_t)q & ((1u << BITS) - 1u);
  }
  mine = 0;
#pragma unroll
  for (int s = 0; s < BITS; ++s) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint32_t wbits = __ballot_sync(0xffffffffu, (pat[c] >> s) & 1u);
      if (lane == s * 4 + c) mine = wbits;
    }
  }
  return s16;
}

template <int BITS, int R>
__global__ void __launch_bounds__(256)
flexq_quantize_pack(const __half* __restrict__ x, int rows, int K, int ldx,
                    int rows_pad, uint32_t* __restrict__ planes,
                    __half* __restrict__ scales, int* __restrict__ flag) {
  constexpr int HALVES = R / 8;
  constexpr int WORDS = BITS * HALVES;
  const int G = K / FLEXQ_GROUP;
  const int lane = threadIdx.x & 31;
  const long long wid = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (wid >= (long long)rows_pad * G) return;  // warp-uniform
  const int row = (int)(wid / G), grp = (int)(wid % G);
  // Programmatic dependent launch: the GEMM grid may launch at once; it waits for this grid
  // (griddep_wait) only before it reads the planes. This grid may itself be launched early
  // after the previous layer's GEMM (whose output x may be): it waits for it before it
  // reads x or writes the planes that GEMM may still read. Both no-ops in a plain launch.
  griddep_launch_dependents();
  griddep_wait();

  float v[4];
  bool bad = false;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    v[c] = 0.f;
    if (row < rows) v[c] = __half2float(x[(long long)row * ldx + grp * FLEXQ_GROUP + 32 * c + lane]);
    bad |= !isfinite(v[c]);
  }
  if (__any_sync(0xffffffffu, bad) && lane == 0) atomicOr(flag, 1);
  uint32_t mine;
  const __half s16 = quant_group<BITS>(v, lane, mine);
  const int tile = row / R, h = (row % R) / 8, g = row % 8;
  if (lane < BITS * 4) {
    const int s = lane / 4, c = lane % 4;
    const long long base = ((long long)tile * G + grp) * 32 * WORDS;
    planes[base + plane_word<WORDS>(g * 4 + c, s * HALVES + h)] = mine;
  }
  if (lane == 0) scales[(long long)grp * rows_pad + row] = s16;
}

// ---------------------------------------------------------------- GEMM
// Block: WR x WK warps. Warp (wr, wk) owns RT weight tiles (16 rows each) and the groups
// g = wk, wk + WK, ...; all warps share the block's MT activation tiles (8 tokens each).
// Split-K partial sums meet in shared memory; the block writes Y[tok, row] coalesced.
// W6A6 blocks of 512 threads with one group in flight (the M <= 8 default) ask for two
// blocks per SM, i.e. at most 64 registers: they stream weights and want the warps
// resident. (ptxas takes 64 for this loop anyway; an earlier form of it took 71 without
// the bound, one block per SM.) W6A8 (two more activation words per lane) and U = 2 spill
// under it, so those get none: a minimum of 0 emits no .minnctapersm (1 would let ptxas
// take up to 255 registers: +50 on M >= 16).
template <int P, int Q, int MT, int RT, int WR, int WK, int U, int OUT>
__global__ void __launch_bounds__(WR * WK * 32, (WR * WK == 16 && Q == 6 && U == 1) ? 2 : 0)
flexq_gemm(const uint32_t* __restrict__ wp, const __half* __restrict__ sw,
           const uint32_t* xp, const __half* sx,  // not __restrict__: with it NVVM marks their
           // loads invariant and hoists them above griddepcontrol.wait (seen in the SASS)
           void* __restrict__ out, int M, int N, int G, int n_wtiles, int Npad, int Mpad) {
  constexpr int WW = 2 * P;  // words per lane of one weight tile-group
  constexpr int BROWS = 16 * RT * WR;
  constexpr int BTOK = 8 * MT;
  extern __shared__ float red[];  // [WK][BTOK][BROWS]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wr = warp % WR, wk = warp / WR;
  const int gid = lane >> 2, tig = lane & 3;
  const int wt0 = blockIdx.x * RT * WR + wr * RT;
  const int xt0 = blockIdx.y * MT;
  // This warp's weight words for group grp (lane-interleaved: plane_word) and their FP16
  // scales. Weights come from no earlier kernel, so the first step's may be requested
  // before griddepcontrol.wait (PEEL below; non-coherent path: const __restrict__).
  auto load_w = [&](uint32_t (&wf)[U][RT][WW], float (&swf)[U][RT][2], int u, int grp) {
    load_weight_group<WW, RT>(wp, sw, wf[u], swf[u], wt0, n_wtiles, G, Npad, grp, lane, gid);
  };
  float facc[RT][MT][4];
#pragma unroll
  for (int i = 0; i < RT; ++i)
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) facc[i][j][r] = 0.f;

  // One step: this warp's groups g0 + u * WK (u < U). fetch_w: load each group's weights
  // just before its activations, else they are in wf/swf already.
  auto step = [&](uint32_t (&wf)[U][RT][WW], float (&swf)[U][RT][2], int g0, bool fetch_w) {
    uint32_t xf[U][MT][Q];
    float sxf[U][MT][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int grp = g0 + u * WK;
      if (grp < G) {
        if (fetch_w) load_w(wf, swf, u, grp);
#pragma unroll
        for (int j = 0; j < MT; ++j) {
          const uint32_t* p = xp + ((long long)(xt0 + j) * G + grp) * 32 * Q;
          if constexpr (Q % 4 == 0) {
#pragma unroll
            for (int v = 0; v < Q / 4; ++v) {
              const uint4 t = *reinterpret_cast<const uint4*>(p + plane_word<Q>(lane, 4 * v));
              xf[u][j][4 * v] = t.x; xf[u][j][4 * v + 1] = t.y;
              xf[u][j][4 * v + 2] = t.z; xf[u][j][4 * v + 3] = t.w;
            }
          } else {
#pragma unroll
            for (int v = 0; v < Q / 2; ++v) {
              const uint2 t = *reinterpret_cast<const uint2*>(p + plane_word<Q>(lane, 2 * v));
              xf[u][j][2 * v] = t.x; xf[u][j][2 * v + 1] = t.y;
            }
          }
          const __half2 s2 = *reinterpret_cast<const __half2*>(
              sx + (grp * Mpad + (xt0 + j) * 8 + 2 * tig));
          sxf[u][j][0] = __low2float(s2);
          sxf[u][j][1] = __high2float(s2);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int grp = g0 + u * WK;
      if (grp < G) {
#pragma unroll
        for (int i = 0; i < RT; ++i) {
#pragma unroll
          for (int j = 0; j < MT; ++j) {
            int acc[4];
            FlexqTile<P, Q>::run(wf[u][i], xf[u][j], acc);
            if constexpr (OUT == 2) {
              int* o = reinterpret_cast<int*>(out);
#pragma unroll
              for (int r = 0; r < 4; ++r) {
                const int row = (wt0 + i) * 16 + gid + 8 * (r >> 1);
                const int tok = (xt0 + j) * 8 + 2 * tig + (r & 1);
                if (row < N && tok < M && wt0 + i < n_wtiles)
                  o[((long long)tok * N + row) * G + grp] = acc[r];
              }
            } else {
              // sw * sx is exact in FP32 (two FP16 significands); one rounding per FMA.
#pragma unroll
              for (int r = 0; r < 4; ++r)
                facc[i][j][r] = fmaf((float)acc[r], swf[u][i][r >> 1] * sxf[u][j][r & 1],
                                     facc[i][j][r]);
            }
          }
        }
      }
    }
  };

  auto load_w_all = [&](uint32_t (&wf)[U][RT][WW], float (&swf)[U][RT][2], int g0) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (g0 + u * WK < G) load_w(wf, swf, u, g0 + u * WK);
  };
  // PEEL: the first step's weights are requested before griddepcontrol.wait (below) and
  // every step loads all its weights before its activations. Against the plain loop (wait
  // first, each group's weights just before its activations), one process on the H100
  // (benchmarks/flexq_ab.py, docs/results/gpu_flexq_peel_ab_h100.json): the plain loop
  // takes 6.9% / 8.2% / 2.5% more time at M = 1 / 16 / 64 (geomeans over nine layers); at
  // M = 32 (MT = 4) peeling is up to 9% faster on seven layers but takes 30-45% more time on
  // the two with N = 4096 (ptxas gives it 127 instead of 166 registers), so MT = 4 keeps
  // the plain loop.
  constexpr bool PEEL = MT != 4;
  // Programmatic dependent launch: the activation planes come from the quantize launch,
  // which may still run when this grid starts; griddepcontrol.wait waits for it (a no-op
  // for a plain launch).
  int g_first = wk;
  if constexpr (PEEL) {
    uint32_t wf[U][RT][WW];
    float swf[U][RT][2];
    load_w_all(wf, swf, wk);
    griddep_wait();
    if (wk < G) step(wf, swf, wk, false);
    g_first = wk + WK * U;
  } else {
    griddep_wait();
  }
  for (int g0 = g_first; g0 < G; g0 += WK * U) {
    // weights declared per step: a conditional load of a loop-carried array (grp < G)
    // would keep the previous step's registers alive (measured: up to +70 registers)
    uint32_t wf[U][RT][WW];
    float swf[U][RT][2];
    if constexpr (PEEL) {
      load_w_all(wf, swf, g0);
      step(wf, swf, g0, false);
    } else {
      step(wf, swf, g0, true);
    }
  }
  if constexpr (OUT != 2) {
#pragma unroll
    for (int i = 0; i < RT; ++i)
#pragma unroll
      for (int j = 0; j < MT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int rl = (wr * RT + i) * 16 + gid + 8 * (r >> 1);
          const int tl = j * 8 + 2 * tig + (r & 1);
          red[(wk * BTOK + tl) * BROWS + rl] = facc[i][j][r];
        }
    __syncthreads();
    const int row0 = blockIdx.x * BROWS, tok0 = blockIdx.y * BTOK;
    for (int idx = threadIdx.x; idx < BTOK * BROWS; idx += blockDim.x) {
      const int tl = idx / BROWS, rl = idx % BROWS;
      const int row = row0 + rl, tok = tok0 + tl;
      if (row < N && tok < M) {
        float s = red[tl * BROWS + rl];
#pragma unroll
        for (int w = 1; w < WK; ++w) s += red[(w * BTOK + tl) * BROWS + rl];
        if constexpr (OUT == 0)
          reinterpret_cast<__half*>(out)[(long long)tok * N + row] = __float2half_rn(s);
        else
          reinterpret_cast<float*>(out)[(long long)tok * N + row] = s;
      }
    }
  }
}

// ---------------------------------------------------------------- fused small-M GEMM
// One launch for M <= 8*MT tokens: the block's K range (gps groups from blockIdx.y * gps)
// is quantized and packed into shared memory in the prologue (quant_group, bit-exact with
// flexq_quantize_pack) while the first weight loads are in flight, then the same plane-pair
// MMAs as flexq_gemm run with the weights streamed through registers (double-buffered).
// C > 1: a cluster of C blocks along N shares the quantization (block rank r packs groups
// r, r + C, ...; the others read them over distributed shared memory).
// K splits (gridDim.y > 1) meet in an FP32 workspace (red.add); the last block of a row
// block converts it and clears it (order of FP32 additions not fixed).

template <int P, int Q, int MT, int RT, int WR, int WK, int U, int C, int OUT>
__global__ void __launch_bounds__(WR * WK * 32) __cluster_dims__(C, 1, 1)
flexq_fused(const uint32_t* __restrict__ wp, const __half* __restrict__ sw,
            const __half* __restrict__ x, int ldx, void* __restrict__ out,
            float* __restrict__ ws, int* __restrict__ counters, int* __restrict__ flag,
            int M, int N, int G, int n_wtiles, int Npad, int gps) {
  constexpr int WW = 2 * P;
  constexpr int NW = WR * WK;
  constexpr int BROWS = 16 * RT * WR;
  constexpr int BTOK = 8 * MT;
  extern __shared__ __align__(16) uint32_t smem[];
  uint32_t* xs = smem;                                          // [MT][gps][32][Q]
  float* sxs = reinterpret_cast<float*>(smem + MT * gps * 32 * Q);  // [gps][BTOK]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wr = warp % WR, wk = warp / WR;
  const int gid = lane >> 2, tig = lane & 3;
  const int wt0 = blockIdx.x * RT * WR + wr * RT;
  const int gs0 = blockIdx.y * gps;
  const int gcount = min(gps, G - gs0);

  uint32_t wfa[U][RT][WW], wfb[U][RT][WW];
  float sfa[U][RT][2], sfb[U][RT][2];
  // Groups of this warp: gl = wk + WK * (u + U * it), it = 0, 1, ...
  auto load = [&](uint32_t (&wf)[U][RT][WW], float (&sf)[U][RT][2], int it) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int gl = wk + WK * (u + U * it);
      if (gl < gcount)
        load_weight_group<WW, RT>(wp, sw, wf[u], sf[u], wt0, n_wtiles, G, Npad, gs0 + gl, lane, gid);
    }
  };
  load(wfa, sfa, 0);  // in flight during the activation prologue

  // ---- prologue: quantize + pack this block's groups of the M tokens into shared memory
  {
    const uint32_t rank = C > 1 ? cluster_ctarank() : 0u;
    const int own = (gcount - (int)rank + C - 1) / C;  // groups rank, rank + C, ...
    const int pairs = own * BTOK;
    bool bad = false;
    for (int pi = warp; pi < pairs; pi += NW) {
      const int tt = pi % BTOK, gl = (int)rank + C * (pi / BTOK);
      const int j = tt >> 3, gg = tt & 7;
      uint32_t* dst = xs + ((j * gps + gl) * 32) * Q;
      if (tt < M) {  // warp-uniform
        const __half* src = x + (long long)tt * ldx + (gs0 + gl) * FLEXQ_GROUP + lane;
        float v[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          v[c] = __half2float(src[32 * c]);
          bad |= !isfinite(v[c]);
        }
        uint32_t mine;
        const __half s16 = quant_group<Q>(v, lane, mine);
        if (lane < Q * 4) dst[(gg * 4 + (lane & 3)) * Q + (lane >> 2)] = mine;
        if (lane == 0) sxs[gl * BTOK + tt] = __half2float(s16);
      } else {
        if (lane < Q * 4) dst[(gg * 4 + (lane & 3)) * Q + (lane >> 2)] = 0u;
        if (lane == 0) sxs[gl * BTOK + tt] = 0.f;
      }
    }
    if (__any_sync(0xffffffffu, bad) && lane == 0) atomicOr(flag, 1);
    if constexpr (C > 1) {
      cluster_arrive();
      cluster_wait();  // every block's own groups are packed
      const int per_group = MT * 32 * Q + BTOK;  // words + scales of one group
      for (int e = threadIdx.x; e < gcount * per_group; e += NW * 32) {
        const int gl = e / per_group, w = e % per_group;
        const uint32_t owner = (uint32_t)(gl % C);
        if (owner == rank) continue;
        if (w < MT * 32 * Q) {
          const int j = w / (32 * Q), r = w % (32 * Q);
          uint32_t* a = xs + (j * gps + gl) * 32 * Q + r;
          *a = ld_dsmem_u32(a, owner);
        } else {
          float* a = sxs + gl * BTOK + (w - MT * 32 * Q);
          *a = __uint_as_float(ld_dsmem_u32(a, owner));
        }
      }
      cluster_arrive();  // done reading the others' shared memory (waited for before exit)
    }
    __syncthreads();
  }

  float facc[RT][MT][4];
#pragma unroll
  for (int i = 0; i < RT; ++i)
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) facc[i][j][r] = 0.f;

  auto compute = [&](const uint32_t (&wf)[U][RT][WW], const float (&sf)[U][RT][2], int it) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int gl = wk + WK * (u + U * it);
      if (gl < gcount) {
#pragma unroll
        for (int j = 0; j < MT; ++j) {
          uint32_t xf[Q];
          const uint32_t* xp = xs + ((j * gps + gl) * 32 + lane) * Q;
          if constexpr (Q % 4 == 0) {
#pragma unroll
            for (int v = 0; v < Q / 4; ++v) {
              const uint4 t = *reinterpret_cast<const uint4*>(xp + 4 * v);
              xf[4 * v] = t.x; xf[4 * v + 1] = t.y; xf[4 * v + 2] = t.z; xf[4 * v + 3] = t.w;
            }
          } else {
#pragma unroll
            for (int v = 0; v < Q / 2; ++v) {
              const uint2 t = *reinterpret_cast<const uint2*>(xp + 2 * v);
              xf[2 * v] = t.x; xf[2 * v + 1] = t.y;
            }
          }
          const float2 s2 = *reinterpret_cast<const float2*>(sxs + gl * BTOK + j * 8 + 2 * tig);
#pragma unroll
          for (int i = 0; i < RT; ++i) {
            int acc[4];
            FlexqTile<P, Q>::run(wf[u][i], xf, acc);
            if constexpr (OUT == 2) {
              int* o = reinterpret_cast<int*>(out);
#pragma unroll
              for (int r = 0; r < 4; ++r) {
                const int row = (wt0 + i) * 16 + gid + 8 * (r >> 1);
                const int tok = j * 8 + 2 * tig + (r & 1);
                if (row < N && tok < M && wt0 + i < n_wtiles)
                  o[((long long)tok * N + row) * G + gs0 + gl] = acc[r];
              }
            } else {
#pragma unroll
              for (int r = 0; r < 4; ++r)
                facc[i][j][r] = fmaf((float)acc[r], sf[u][i][r >> 1] * ((r & 1) ? s2.y : s2.x),
                                     facc[i][j][r]);
            }
          }
        }
      }
    }
  };

  const int iters = gcount > wk ? (gcount - wk + WK * U - 1) / (WK * U) : 0;
  for (int it = 0; it < iters; it += 2) {
    if (it + 1 < iters) load(wfb, sfb, it + 1);
    compute(wfa, sfa, it);
    if (it + 1 >= iters) break;
    if (it + 2 < iters) load(wfa, sfa, it + 2);
    compute(wfb, sfb, it + 1);
  }

  if constexpr (C > 1) cluster_wait();  // the cluster's blocks no longer read our smem
  if constexpr (OUT != 2) {
    float* red = reinterpret_cast<float*>(smem);  // [WK][BTOK][BROWS], reuses xs
    __syncthreads();
#pragma unroll
    for (int i = 0; i < RT; ++i)
#pragma unroll
      for (int j = 0; j < MT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int rl = (wr * RT + i) * 16 + gid + 8 * (r >> 1);
          const int tl = j * 8 + 2 * tig + (r & 1);
          red[(wk * BTOK + tl) * BROWS + rl] = facc[i][j][r];
        }
    __syncthreads();
    const int row0 = blockIdx.x * BROWS;
    const bool split = gridDim.y > 1;
    for (int idx = threadIdx.x; idx < BTOK * BROWS; idx += NW * 32) {
      const int tl = idx / BROWS, rl = idx % BROWS;
      const int row = row0 + rl, tok = tl;
      if (row < N && tok < M) {
        float s = red[tl * BROWS + rl];
#pragma unroll
        for (int w = 1; w < WK; ++w) s += red[(w * BTOK + tl) * BROWS + rl];
        if (split)
          atomicAdd(ws + (long long)tok * N + row, s);
        else if constexpr (OUT == 0)
          reinterpret_cast<__half*>(out)[(long long)tok * N + row] = __float2half_rn(s);
        else
          reinterpret_cast<float*>(out)[(long long)tok * N + row] = s;
      }
    }
    if (split) {
      __threadfence();
      __syncthreads();
      __shared__ int last;
      if (threadIdx.x == 0) last = atomicAdd(counters + blockIdx.x, 1) == (int)gridDim.y - 1;
      __syncthreads();
      if (last) {
        __threadfence();
        for (int idx = threadIdx.x; idx < BTOK * BROWS; idx += NW * 32) {
          const int tl = idx / BROWS, rl = idx % BROWS;
          const int row = row0 + rl, tok = tl;
          if (row < N && tok < M) {
            float* src = ws + (long long)tok * N + row;
            const float s = __ldcg(src);
            __stcg(src, 0.f);
            if constexpr (OUT == 0)
              reinterpret_cast<__half*>(out)[(long long)tok * N + row] = __float2half_rn(s);
            else
              reinterpret_cast<float*>(out)[(long long)tok * N + row] = s;
          }
        }
        if (threadIdx.x == 0) counters[blockIdx.x] = 0;
      }
    }
  }
}

}  // namespace flexq
