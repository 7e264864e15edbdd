// ReSET step-aware temperature policy, one decoding step for a batch of sequences
// (golden/reset_temperature.py defines every operation; this kernel follows it bit for bit).
//
// One CL-CTA cluster per sequence (blockIdx.y; CL = 8, or 16 with the non-portable
// cluster size, so that a batch of 8 spreads over 128 of the 132 SMs); element i of the
// vocabulary belongs to CTA i / (T*R), thread i % T, slot (i % (T*R)) / T. Logits stay in registers between the
// passes; the cluster combines maxima, sums and the sampling search through distributed
// shared memory. CTA rank 0 updates the per-sequence state at the end.
#include "ptx.cuh"

namespace mt {

using namespace ptx;

constexpr int RS_THREADS = 1024;
constexpr int RS_WARPS = RS_THREADS / 32;

__device__ __forceinline__ float exp_f32(float x) {
    const float t = __fmul_rn(x, RS_LOG2E);
    if (t < RS_EXP_T_MIN) return 0.f;
    const float n = rintf(t);
    const float f = __fsub_rn(t, n);
    return __fmul_rn(rs_exp_poly(f), __int_as_float(((int)n + 127) << 23));
}
__device__ __forceinline__ float log_f32(float s) {
    const unsigned bits = __float_as_uint(s);
    const int k = (int)((bits >> 23) & 0xFFu) - 127;
    const float m = __uint_as_float((bits & 0x7FFFFFu) | 0x3F800000u);
    const float q = __fdiv_rn(__fsub_rn(m, 1.f), __fadd_rn(m, 1.f));
    const float q2 = __fmul_rn(q, q);
    return __fadd_rn(__fmul_rn((float)k, RS_LN2), __fmul_rn(rs_log_poly(q2), q));
}

// Hillis-Steele inclusive scan over the 32 lanes.
__device__ __forceinline__ float warp_incl(float x, int lane) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x = __fadd_rn(x, y);
    }
    return x;
}

constexpr int RS_RING_MAX = 256;  // largest window the kernel keeps in shared memory

struct RsShared {
    float wt[2][RS_WARPS];
    float wi[2][RS_WARPS];
    float ti[2][RS_THREADS];
    float tot[2][2];  // [phase][value]: each cluster exchange has its own slot (no reuse barrier)
    float red[RS_WARPS];
    int ired[2][RS_WARPS];
    int isel[2];
    float bcast[4];
    // per-sequence state, loaded at kernel start so its latency overlaps the logits pass
    double ring[RS_RING_MAX];
    double sum_all, step_sum;
    long long count, t0, step_n, seq;
    int prev_end;
};

// Thread inclusive prefix TI and exclusive TE of `x` (two independent values) within the
// CTA, and the CTA totals, in the layout's order.
__device__ __forceinline__ void cta_scan2(RsShared& sh, float x0, float x1, float& te0, float& te1,
                                          float& tot0, float& tot1) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float i0 = warp_incl(x0, lane), i1 = warp_incl(x1, lane);
    if (lane == 31) {
        sh.wt[0][warp] = i0;
        sh.wt[1][warp] = i1;
    }
    __syncthreads();
    if (warp == 0) {
        float v0 = lane < RS_WARPS ? sh.wt[0][lane] : 0.f;
        float v1 = lane < RS_WARPS ? sh.wt[1][lane] : 0.f;
        v0 = warp_incl(v0, lane);
        v1 = warp_incl(v1, lane);
        if (lane < RS_WARPS) {
            sh.wi[0][lane] = v0;
            sh.wi[1][lane] = v1;
        }
    }
    __syncthreads();
    const float ti0 = warp ? __fadd_rn(sh.wi[0][warp - 1], i0) : i0;
    const float ti1 = warp ? __fadd_rn(sh.wi[1][warp - 1], i1) : i1;
    sh.ti[0][tid] = ti0;
    sh.ti[1][tid] = ti1;
    __syncthreads();
    te0 = tid ? sh.ti[0][tid - 1] : 0.f;
    te1 = tid ? sh.ti[1][tid - 1] : 0.f;
    tot0 = sh.ti[0][RS_THREADS - 1];
    tot1 = sh.ti[1][RS_THREADS - 1];
}

// Offsets of this CTA in the cluster chain and the cluster totals (all threads). Each
// phase uses its own slot, so no second barrier is needed before the slot could be reused.
template <int CL>
__device__ __forceinline__ void cluster_chain2(RsShared& sh, int phase, float tot0, float tot1, unsigned rank,
                                               float& off0, float& off1, float& all0, float& all1) {
    if (threadIdx.x == 0) {
        sh.tot[phase][0] = tot0;
        sh.tot[phase][1] = tot1;
    }
    cluster_sync();
    float c0 = 0.f, c1 = 0.f;
    off0 = off1 = 0.f;
#pragma unroll
    for (unsigned c = 0; c < CL; ++c) {
        if (c == rank) {
            off0 = c0;
            off1 = c1;
        }
        c0 = __fadd_rn(c0, ld_dsmem_f32(&sh.tot[phase][0], c));
        c1 = __fadd_rn(c1, ld_dsmem_f32(&sh.tot[phase][1], c));
    }
    all0 = c0;
    all1 = c1;
}

__device__ __forceinline__ float rs_uniform(unsigned long long seed, long long seq, long long pos) {
    unsigned long long z = seed * 0x9E3779B97F4A7C15ull + (unsigned long long)seq * 0xD1B54A32D192ED03ull +
                           (unsigned long long)pos * 0xABC98388FB8FAC03ull;
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * 0x1p-24f;
}

template <int CL, int RMAX>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(RS_THREADS, 1)
reset_temperature_step(const void* __restrict__ logits, int logits_f16, int V, int R,
                       const unsigned char* __restrict__ step_end, const long long* __restrict__ seq_ids,
                       long long* __restrict__ st_count, double* __restrict__ st_sum_all,
                       long long* __restrict__ st_t0, double* __restrict__ st_step_sum,
                       long long* __restrict__ st_step_n, int* __restrict__ st_prev_end,
                       double* __restrict__ st_ring, int window, double tau0, float t_low, float t_high,
                       float inv_low, float inv_high, unsigned long long seed, int* __restrict__ out_token,
                       float* __restrict__ out_temp, float* __restrict__ out_entropy,
                       double* __restrict__ out_hstep, double* __restrict__ out_hbar, double* __restrict__ out_tau) {
    __shared__ RsShared sh;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned rank = cluster_ctarank();
    const int b = blockIdx.y;
    const long long base = (long long)rank * RS_THREADS * R;
    const float* z32 = reinterpret_cast<const float*>(logits) + (size_t)b * V;
    const __half* z16 = reinterpret_cast<const __half*>(logits) + (size_t)b * V;
    if (tid == 0) {  // state: loads issued now, consumed after the first passes
        sh.count = st_count[b];
        sh.prev_end = st_prev_end[b];
        sh.t0 = st_t0[b];
        sh.step_sum = st_step_sum[b];
        sh.step_n = st_step_n[b];
        sh.sum_all = st_sum_all[b];
        sh.seq = seq_ids[b];
    } else if (warp == 1) {
        for (int i = lane; i < window; i += 32) sh.ring[i] = st_ring[(size_t)b * window + i];
    }

    // ---- load, max
    float d[RMAX];
    float zmax = -INFINITY;
#pragma unroll
    for (int r = 0; r < RMAX; ++r) {
        const long long i = base + (long long)r * RS_THREADS + tid;
        float z = -INFINITY;
        if (r < R && i < V) z = logits_f16 ? __half2float(z16[i]) : z32[i];
        d[r] = z;
        zmax = fmaxf(zmax, z);
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) zmax = fmaxf(zmax, __shfl_xor_sync(0xffffffffu, zmax, o));
    if (lane == 0) sh.red[warp] = zmax;
    __syncthreads();
    if (tid == 0) {
        float m = -INFINITY;
        for (int w = 0; w < RS_WARPS; ++w) m = fmaxf(m, sh.red[w]);
        sh.bcast[0] = m;
    }
    cluster_sync();
    float m = -INFINITY;
#pragma unroll
    for (unsigned c = 0; c < CL; ++c) m = fmaxf(m, ld_dsmem_f32(&sh.bcast[0], c));

    // ---- entropy at T = 1: S = sum e, W = sum e*d (sequential per thread, then the scans);
    // e is kept: the sampling pass reuses it when T = 1 (d * 1 == d exactly)
    float se = 0.f, sw = 0.f;
    float e2[RMAX];
#pragma unroll
    for (int r = 0; r < RMAX; ++r) {
        const long long i = base + (long long)r * RS_THREADS + tid;
        const bool valid = r < R && i < V;
        d[r] = valid ? __fsub_rn(d[r], m) : 0.f;
        e2[r] = 0.f;
        if (r < R) {
            const float e = valid ? exp_f32(d[r]) : 0.f;
            e2[r] = e;
            se = __fadd_rn(se, e);
            sw = __fadd_rn(sw, valid ? __fmul_rn(e, d[r]) : 0.f);
        }
    }
    float te0, te1, tot0, tot1, off0, off1, S, Wt;
    cta_scan2(sh, se, sw, te0, te1, tot0, tot1);
    cluster_chain2<CL>(sh, 0, tot0, tot1, rank, off0, off1, S, Wt);
    const float H = __fsub_rn(log_f32(S), __fdiv_rn(Wt, S));

    // ---- decision (identical in every CTA: same state, same arithmetic)
    if (tid == 0) {
        const long long t = sh.count;
        const bool prev = sh.prev_end != 0;
        const long long t0 = prev ? t : sh.t0;
        double ssum = prev ? 0.0 : sh.step_sum;
        long long sn = prev ? 0 : sh.step_n;
        const double sum_all = sh.sum_all + (double)H;
        const double hbar = sum_all / (double)(t + 1);
        ssum += (double)H;
        sn += 1;
        double hstep;
        if (t - t0 < window) {
            const int nwin = (int)((t + 1 < window) ? t + 1 : window);
            // golden order p = t-nwin+1 .. t; one 64-bit modulo, then a wrapping ring index
            // (the per-iteration 64-bit modulo was the longest serial chain of the kernel)
            int idx = (int)((t - nwin + 1) % window);
            double acc = 0.0;
            for (int q = 0; q < nwin - 1; ++q) {
                acc += sh.ring[idx];
                idx = (idx + 1 == window) ? 0 : idx + 1;
            }
            acc += (double)H;
            hstep = acc / (double)nwin;
        } else {
            hstep = ssum / (double)sn;
        }
        const double tau = (hstep <= hbar) ? tau0 : hstep;
        const int low = ((double)H < tau) ? 1 : 0;
        sh.bcast[1] = low ? inv_low : inv_high;
        sh.bcast[2] = rs_uniform(seed, sh.seq, t);
        if (rank == 0) {
            out_temp[b] = low ? t_low : t_high;
            out_entropy[b] = H;
            out_hstep[b] = hstep;
            out_hbar[b] = hbar;
            out_tau[b] = tau;
        }
    }
    __syncthreads();
    const float inv = sh.bcast[1];
    const float u = sh.bcast[2];

    // ---- sampling: e' = exp(d * invT), scan, first element with e' > 0 and G > u * S'
    float p = 0.f;
    const bool same = (inv == 1.0f);  // uniform across the CTA
#pragma unroll
    for (int r = 0; r < RMAX; ++r) {
        const long long i = base + (long long)r * RS_THREADS + tid;
        const bool valid = r < R && i < V;
        if (!same) e2[r] = valid ? exp_f32(__fmul_rn(d[r], inv)) : 0.f;
        if (r < R) p = __fadd_rn(p, e2[r]);
    }
    float te, tunused, ctot, cunused, off, offu, S2, S2u;
    cta_scan2(sh, p, 0.f, te, tunused, ctot, cunused);
    cluster_chain2<CL>(sh, 1, ctot, 0.f, rank, off, offu, S2, S2u);
    const float target = __fmul_rn(u, S2);
    int first = 0x7fffffff, last = -1;
    float s = 0.f;
#pragma unroll
    for (int r = 0; r < RMAX; ++r) {
        if (r < R) {
            s = __fadd_rn(s, e2[r]);
            const float G = __fadd_rn(off, __fadd_rn(te, s));
            const int order = (int)(((long long)rank * RS_THREADS + tid) * R + r);
            if (e2[r] > 0.f) {
                last = order;  // increasing in r
                if (G > target && first == 0x7fffffff) first = order;
            }
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
        last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    }
    if (lane == 0) {
        sh.ired[0][warp] = first;
        sh.ired[1][warp] = last;
    }
    __syncthreads();
    if (tid == 0) {
        int f = 0x7fffffff, l = -1;
        for (int w = 0; w < RS_WARPS; ++w) {
            f = min(f, sh.ired[0][w]);
            l = max(l, sh.ired[1][w]);
        }
        sh.isel[0] = f;
        sh.isel[1] = l;
    }
    cluster_sync();
    if (rank == 0 && tid == 0) {
        int f = 0x7fffffff, l = -1;
        for (unsigned c = 0; c < CL; ++c) {
            f = min(f, ld_dsmem_s32(&sh.isel[0], c));
            l = max(l, ld_dsmem_s32(&sh.isel[1], c));
        }
        const int o = (f != 0x7fffffff) ? f : l;
        const int cc = o / (RS_THREADS * R), j = (o / R) % RS_THREADS, rr = o % R;
        const int tok = cc * RS_THREADS * R + rr * RS_THREADS + j;
        out_token[b] = tok;
        // state update (every CTA read the old state before the barrier above)
        const long long t = sh.count;
        const bool prev = sh.prev_end != 0;
        st_t0[b] = prev ? t : sh.t0;
        st_step_sum[b] = (prev ? 0.0 : sh.step_sum) + (double)H;
        st_step_n[b] = (prev ? 0 : sh.step_n) + 1;
        st_sum_all[b] = sh.sum_all + (double)H;
        st_ring[(size_t)b * window + (size_t)(t % window)] = (double)H;
        st_count[b] = t + 1;
        st_prev_end[b] = step_end[tok] ? 1 : 0;
    }
    cluster_sync();  // rank 0's shared memory stays alive until it has been read
}

}  // namespace mt
