// The work of a decoder layer between its linear layers, on FP16 activations, in few launches
// (mactile.torch's decoder on the GPU; the eager torch code it replaces is the reference,
// mactile/torch/decode_ops.py):
//
//   add_rmsnorm   h = fp16(x + r); y = fp16(w * fp16(h * rsqrt(mean(h^2) + eps)))   (r optional)
//   rope_kv       per-head RMSNorm of q and k (optional, Qwen3), rotary embedding of q and k at
//                 each token's position, q written [B, H, T, D], k and v written into the
//                 static caches [Bc, Hkv, S, D] at the positions
//   silu_mul      y = fp16(fp16(silu(g)) * u)
//   attn_split    split-KV attention of R = G*T query rows per key/value head (decode):
//   attn_combine  every (CTA, warp) part of the keys gives (max, sum, unnormalised output) in
//                 FP32; the combine rescales and sums them (flash-decoding)
//
// Elementwise roundings follow torch's FP16 kernels (each op computed in FP32 and rounded to
// FP16 once), so add, rotary and SwiGLU give torch's bits; the RMSNorm statistic and the
// attention sum in another order (bounds in the tests).

namespace mt {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ __half hmul_rn(__half a, __half b) {
    return __float2half_rn(__half2float(a) * __half2float(b));
}
__device__ __forceinline__ __half hadd_rn(__half a, __half b) {
    return __float2half_rn(__half2float(a) + __half2float(b));
}

// --------------------------------------------------------------------------- add_rmsnorm
// One CTA of NT threads per row of D (even) elements; each thread keeps up to VMAX half2 of
// the row in registers between the statistic and the output.
template <int NT, int VMAX>
__global__ void __launch_bounds__(NT) add_rmsnorm(const __half* x, const __half* r,
                                                  const __half* __restrict__ w, __half* hout,
                                                  __half* __restrict__ y, int D, float eps) {
    const long long row = blockIdx.x;
    const __half2* x2 = reinterpret_cast<const __half2*>(x + row * D);
    const __half2* r2 = r ? reinterpret_cast<const __half2*>(r + row * D) : nullptr;
    const __half2* w2 = reinterpret_cast<const __half2*>(w);
    __half2* h2o = hout ? reinterpret_cast<__half2*>(hout + row * D) : nullptr;
    __half2* y2 = reinterpret_cast<__half2*>(y + row * D);
    const int n2 = D / 2;
    __half2 v[VMAX];
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < VMAX; ++i) {
        const int c = threadIdx.x + i * NT;
        if (c < n2) {
            __half2 a = x2[c];
            if (r2) {
                const __half2 b = r2[c];
                a = __halves2half2(hadd_rn(__low2half(a), __low2half(b)), hadd_rn(__high2half(a), __high2half(b)));
            }
            v[i] = a;
            const float2 f = __half22float2(a);
            ss += f.x * f.x + f.y * f.y;
        }
    }
    __shared__ float part[NT / 32];
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
#pragma unroll
    for (int i = 0; i < NT / 32; ++i) tot += part[i];
    const float inv = rsqrtf(tot / (float)D + eps);
#pragma unroll
    for (int i = 0; i < VMAX; ++i) {
        const int c = threadIdx.x + i * NT;
        if (c < n2) {
            const float2 f = __half22float2(v[i]);
            const __half2 wv = w2[c];
            const __half lo = hmul_rn(__low2half(wv), __float2half_rn(f.x * inv));
            const __half hi = hmul_rn(__high2half(wv), __float2half_rn(f.y * inv));
            y2[c] = __halves2half2(lo, hi);
            if (h2o) h2o[c] = v[i];
        }
    }
}

// --------------------------------------------------------------------------- rope_kv
// One warp per (token, head) of the H query heads, Hkv key heads and Hkv value heads; lane
// l holds the rotary pairs (d, d + D/2) for d = l + 32 j. Token i = b*T + t; q, k, v rows
// i at strides sq, sk, sv (views into one fused projection's output work); cos/sin FP32
// tables [P, D] indexed by pos[t].
template <int D>
__global__ void __launch_bounds__(256) rope_kv(const __half* __restrict__ q, const __half* __restrict__ k,
                                               const __half* __restrict__ v, long long sq, long long sk,
                                               long long sv, const float* __restrict__ cos_t,
                                               const float* __restrict__ sin_t, const long long* __restrict__ pos,
                                               const __half* __restrict__ qn, const __half* __restrict__ kn,
                                               float eps, __half* __restrict__ qout, __half* __restrict__ kc,
                                               __half* __restrict__ vc, int T, int H, int Hkv, int S) {
    constexpr int HALF = D / 2, J = HALF / 32;
    const int tok = blockIdx.x, b = tok / T, t = tok % T;
    const int head = blockIdx.y * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (head >= H + 2 * Hkv) return;
    const long long p = pos[t];
    const int kind = head < H ? 0 : head < H + Hkv ? 1 : 2;  // q, k, v
    const int hh = kind == 0 ? head : kind == 1 ? head - H : head - H - Hkv;
    const __half* src = kind == 0 ? q + tok * sq + hh * D : kind == 1 ? k + tok * sk + hh * D : v + tok * sv + hh * D;
    __half* dst = kind == 0 ? qout + (((long long)b * H + hh) * T + t) * D
                            : (kind == 1 ? kc : vc) + (((long long)b * Hkv + hh) * S + p) * D;
    if (kind == 2) {
#pragma unroll
        for (int j = 0; j < J; ++j) {
            dst[lane + 32 * j] = src[lane + 32 * j];
            dst[lane + 32 * j + HALF] = src[lane + 32 * j + HALF];
        }
        return;
    }
    __half a[J], c[J];
#pragma unroll
    for (int j = 0; j < J; ++j) { a[j] = src[lane + 32 * j]; c[j] = src[lane + 32 * j + HALF]; }
    const __half* nw = kind == 0 ? qn : kn;
    if (nw) {  // the per-head RMSNorm (Qwen3's q_norm / k_norm)
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const float x0 = __half2float(a[j]), x1 = __half2float(c[j]);
            ss += x0 * x0 + x1 * x1;
        }
        const float inv = rsqrtf(warp_sum(ss) / (float)D + eps);
#pragma unroll
        for (int j = 0; j < J; ++j) {
            a[j] = hmul_rn(nw[lane + 32 * j], __float2half_rn(__half2float(a[j]) * inv));
            c[j] = hmul_rn(nw[lane + 32 * j + HALF], __float2half_rn(__half2float(c[j]) * inv));
        }
    }
    const float* cr = cos_t + p * D;
    const float* sr = sin_t + p * D;
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const int d = lane + 32 * j;
        // torch: x * cos + rotate_half(x) * sin, each product and the sum rounded to FP16,
        // the tables cast to FP16 first; rotate_half(x)[d] = -x[d + D/2], [d + D/2] = x[d]
        const __half c0 = __float2half_rn(cr[d]), s0 = __float2half_rn(sr[d]);
        const __half c1 = __float2half_rn(cr[d + HALF]), s1 = __float2half_rn(sr[d + HALF]);
        dst[d] = hadd_rn(hmul_rn(a[j], c0), hmul_rn(__hneg(c[j]), s0));
        dst[d + HALF] = hadd_rn(hmul_rn(c[j], c1), hmul_rn(a[j], s1));
    }
}

// --------------------------------------------------------------------------- silu_mul
// y [rows, n] contiguous; g, u rows at strides sg, su. torch's silu: x / (1 + exp(-x)) in FP32.
__global__ void __launch_bounds__(256) silu_mul(const __half* __restrict__ g, const __half* __restrict__ u,
                                                long long sg, long long su, __half* __restrict__ y,
                                                int n, long long total) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const long long row = i / n, col = i % n;
    const float gf = __half2float(g[row * sg + col]);
    const __half s = __float2half_rn(gf / (1.0f + expf(-gf)));
    y[i] = hmul_rn(s, u[row * su + col]);
}

// --------------------------------------------------------------------------- attention
constexpr int ATT_WARPS = 4;

__device__ __forceinline__ int att_length(const long long* pos, int T) {
    long long m = 0;
    for (int t = 0; t < T; ++t) m = pos[t] > m ? pos[t] : m;
    return (int)m + 1;
}
// Keys per split: the valid length L over ``splits`` parts, a multiple of 32 (one warp tile).
__device__ __forceinline__ int att_chunk(int L, int splits) {
    const int c = (L + splits - 1) / splits;
    return (c + 31) & ~31;
}

// grid (splits, Hkv, B), ATT_WARPS warps. q [B, H, T, D]; caches [Bc, Hkv, S, D]; row r of
// the R = G*T rows of a key/value head is head h*G + r / T at position pos[r % T] and sees
// keys 0..pos. Each warp takes tiles of 32 keys (K staged in shared memory with 16-byte
// loads, the lane's slice of V in registers, all in flight at once); the warps' softmax states are merged in the CTA and
// written as part ``split`` of row (b, head, t): o_part[(row * splits + split)][D] (not
// normalised), ml_part[row * splits + split] = (max, sum) in the log2 domain.
template <int D, int RMAX>
__global__ void __launch_bounds__(ATT_WARPS * 32) attn_split(
    const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
    const long long* __restrict__ pos, int T, int G, int Hkv, int S, float scale_log2,
    float* __restrict__ o_part, float2* __restrict__ ml_part) {
    constexpr int W = D / 2 + 1;     // words per staged key row (odd: no bank conflicts)
    constexpr int DPL = D / 32;      // output dims per lane (a lane's value slice: 8 bytes at D = 128)
    static_assert(DPL == 4 || DPL == 2, "head dims 64 and 128");
    extern __shared__ float smem[];
    float* qs = smem;                                                   // [RMAX][D]
    unsigned* kv_all = reinterpret_cast<unsigned*>(qs + RMAX * D);      // [warps][32][W] keys
    float* ps_all = reinterpret_cast<float*>(kv_all + ATT_WARPS * 32 * W);  // [warps][RMAX][32]
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int splits = gridDim.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int H = Hkv * G, R = G * T;
    const int L = att_length(pos, T);
    const int chunk = att_chunk(L, splits);
    const int start = split * chunk, end = min(start + chunk, L);
    if (start >= end) return;  // no keys here (the combine reads only the splits that have some)
    const __half* qb = q + ((long long)b * H + (long long)h * G) * T * D;  // R consecutive rows
    for (int i = threadIdx.x; i < RMAX * D; i += ATT_WARPS * 32)
        qs[i] = i < R * D ? __half2float(qb[i]) : 0.f;
    __syncthreads();
    int rpos[RMAX];
#pragma unroll
    for (int r = 0; r < RMAX; ++r) rpos[r] = r < R ? (int)pos[r % T] : -1;
    const __half* kb = kc + ((long long)b * Hkv + h) * S * D;
    const __half* vb = vc + ((long long)b * Hkv + h) * S * D;
    unsigned* ks = kv_all + warp * 32 * W;
    float* ps = ps_all + warp * RMAX * 32;
    float m[RMAX], l[RMAX], o[RMAX][DPL];
#pragma unroll
    for (int r = 0; r < RMAX; ++r) {
        m[r] = -INFINITY; l[r] = 0.f;
#pragma unroll
        for (int e = 0; e < DPL; ++e) o[r][e] = 0.f;
    }
    for (int j0 = start + warp * 32; j0 < end; j0 += ATT_WARPS * 32) {
        // the lane's slice of 32 values into registers and 32 keys staged in shared memory:
        // every load of the tile in flight at once, the values' latency behind the scores
        uint2 vreg[32];
#pragma unroll
        for (int kk = 0; kk < 32; ++kk) {
            vreg[kk] = make_uint2(0, 0);
            if (j0 + kk < end) {
                const __half* src = vb + (long long)(j0 + kk) * D + lane * DPL;
                if constexpr (DPL == 4) vreg[kk] = *reinterpret_cast<const uint2*>(src);
                else vreg[kk].x = *reinterpret_cast<const unsigned*>(src);
            }
        }
        uint4 kr[D / 8];
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            const int c = i * 32 + lane, key = c / (D / 8), part = c % (D / 8);
            kr[i] = make_uint4(0, 0, 0, 0);
            if (j0 + key < end) kr[i] = *reinterpret_cast<const uint4*>(kb + (long long)(j0 + key) * D + part * 8);
        }
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            const int c = i * 32 + lane, key = c / (D / 8), part = c % (D / 8);
            unsigned* kd = ks + key * W + part * 4;
            kd[0] = kr[i].x; kd[1] = kr[i].y; kd[2] = kr[i].z; kd[3] = kr[i].w;
        }
        __syncwarp();
        const int j = j0 + lane;
        float acc[RMAX];
#pragma unroll
        for (int r = 0; r < RMAX; ++r) acc[r] = 0.f;
#pragma unroll 4
        for (int wd = 0; wd < D / 2; ++wd) {
            const unsigned kw = ks[lane * W + wd];
            const float2 kf = __half22float2(*reinterpret_cast<const __half2*>(&kw));
#pragma unroll
            for (int r = 0; r < RMAX; ++r) acc[r] = fmaf(qs[r * D + 2 * wd], kf.x, fmaf(qs[r * D + 2 * wd + 1], kf.y, acc[r]));
        }
#pragma unroll
        for (int r = 0; r < RMAX; ++r) {
            const bool ok = j < end && j <= rpos[r];
            const float s = ok ? acc[r] * scale_log2 : -INFINITY;
            const float mn = fmaxf(m[r], warp_max(s));
            const float alpha = m[r] == -INFINITY ? 0.f : exp2f(m[r] - mn);
            const float p = ok ? exp2f(s - mn) : 0.f;
            l[r] = l[r] * alpha + p;
#pragma unroll
            for (int e = 0; e < DPL; ++e) o[r][e] *= alpha;
            ps[r * 32 + lane] = p;
            m[r] = mn;
        }
        __syncwarp();
        const int nk = min(32, end - j0);
#pragma unroll
        for (int kk = 0; kk < 32; ++kk) {
            if (kk >= nk) break;
            float vf[DPL];
            const unsigned* vw = reinterpret_cast<const unsigned*>(&vreg[kk]);
#pragma unroll
            for (int e = 0; e < DPL / 2; ++e) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&vw[e]));
                vf[2 * e] = f.x; vf[2 * e + 1] = f.y;
            }
#pragma unroll
            for (int r = 0; r < RMAX; ++r) {
                const float p = ps[r * 32 + kk];
#pragma unroll
                for (int e = 0; e < DPL; ++e) o[r][e] = fmaf(p, vf[e], o[r][e]);
            }
        }
        __syncwarp();
    }
    // merge the warps: each writes (m, l, o) of its rows to shared memory (over the staging
    // area), then warp w merges rows w, w + ATT_WARPS, ... and writes them
    __syncthreads();
    float* st = reinterpret_cast<float*>(kv_all);          // [warps][RMAX][D] outputs
    float2* mls = reinterpret_cast<float2*>(ps_all);       // [warps][RMAX]
#pragma unroll
    for (int r = 0; r < RMAX; ++r) {
        if (r >= R) break;
        const float ls = warp_sum(l[r]);
#pragma unroll
        for (int e = 0; e < DPL; ++e) st[(warp * RMAX + r) * D + lane * DPL + e] = o[r][e];
        if (lane == 0) mls[warp * RMAX + r] = make_float2(m[r], ls);
    }
    __syncthreads();
    for (int r = warp; r < R; r += ATT_WARPS) {
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; ++w) M = fmaxf(M, mls[w * RMAX + r].x);
        float Ls = 0.f, acc[DPL];
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[e] = 0.f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; ++w) {
            const float2 ml = mls[w * RMAX + r];
            if (ml.x == -INFINITY) continue;
            const float wgt = exp2f(ml.x - M);
            Ls += wgt * ml.y;
#pragma unroll
            for (int e = 0; e < DPL; ++e) acc[e] = fmaf(wgt, st[(w * RMAX + r) * D + lane * DPL + e], acc[e]);
        }
        const long long row = ((long long)b * H + (long long)h * G + r / T) * T + (r % T);
        float* op = o_part + (row * splits + split) * D + lane * DPL;
#pragma unroll
        for (int e = 0; e < DPL; ++e) op[e] = acc[e];
        if (lane == 0) ml_part[row * splits + split] = make_float2(M, Ls);
    }
}

// grid (B*H*T), D threads: y [B, T, H, D] (row (b, head, t) of q's layout) in FP16. Only the
// splits that held keys are read (the others wrote nothing). The parts' weights are computed
// once in shared memory; each thread then sums its dimension over the parts.
constexpr int ATT_MAX_SPLITS = 64;  // gpu/decode_ops.py keeps splits <= this <= D (one per thread)

template <int D>
__global__ void __launch_bounds__(D) attn_combine(const float* __restrict__ o_part,
                                                  const float2* __restrict__ ml_part,
                                                  const long long* __restrict__ pos, int T, int H,
                                                  int splits, __half* __restrict__ y) {
    __shared__ float wgt[ATT_MAX_SPLITS];
    __shared__ float red[D / 32];
    const long long row = blockIdx.x;  // (b*H + head)*T + t
    const int t = (int)(row % T), head = (int)((row / T) % H);
    const long long b = row / ((long long)T * H);
    const int L = att_length(pos, T);
    const int chunk = att_chunk(L, splits);
    const int used = (L + chunk - 1) / chunk;
    const int tid = threadIdx.x;
    float2 ml = make_float2(-INFINITY, 0.f);
    if (tid < used) ml = ml_part[row * splits + tid];
    float M = ml.x;
#pragma unroll
    for (int o = 16; o; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    if ((tid & 31) == 0) red[tid >> 5] = M;
    __syncthreads();
    M = -INFINITY;
#pragma unroll
    for (int i = 0; i < D / 32; ++i) M = fmaxf(M, red[i]);
    const float w = (tid < used && ml.x != -INFINITY) ? exp2f(ml.x - M) : 0.f;
    if (tid < used) wgt[tid] = w;
    float lw = w * ml.y;
    __syncthreads();
    lw = warp_sum(lw);
    if ((tid & 31) == 0) red[tid >> 5] = lw;
    __syncthreads();
    float lsum = 0.f;
#pragma unroll
    for (int i = 0; i < D / 32; ++i) lsum += red[i];
    float acc = 0.f;
    const float* op = o_part + row * splits * D + tid;
#pragma unroll 8
    for (int p = 0; p < used; ++p) acc = fmaf(wgt[p], op[(long long)p * D], acc);
    y[((b * T + t) * H + head) * D + tid] = __float2half_rn(lsum > 0.f ? acc / lsum : 0.f);
}

}  // namespace mt
