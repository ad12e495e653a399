// Pieces shared by the pyrms kernel families: storage types <-> fp32, 16-byte vectors loaded and
// stored at any relative alignment, a deterministic block-wide sum, and the per-row passes
// (statistics, write-back) that the forward and backward kernels share.
//
// Numeric choices (GUIDE.md §3): every operation that a numpy twin must reproduce is written
// with an explicit round-to-nearest intrinsic (__fmul_rn, __fadd_rn, ...), so the compiler can
// neither contract a multiply and an add into an FMA nor reorder them.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace pyrms {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// Elements of T in one 16-byte vector.
template <typename T> struct Vec {
    static constexpr int N = 16 / sizeof(T);
};

// 16 bytes viewed as N elements of T. Loaded and stored as one uint4 where alignment allows.
template <typename T> struct alignas(16) Pack {
    T e[Vec<T>::N];
};

// Position of p inside its 16-byte vector, in elements (0 .. N-1). p must be T-aligned.
template <typename T> __device__ __forceinline__ int vec_phase(const T* p) {
    return static_cast<int>((reinterpret_cast<unsigned long long>(p) / sizeof(T)) & (Vec<T>::N - 1));
}

// Elements before the first 16-byte boundary of a row of n elements starting at p.
template <typename T> __device__ __forceinline__ int prefix_len(const T* p, int n) {
    return min((Vec<T>::N - vec_phase(p)) & (Vec<T>::N - 1), n);
}

// Widest load (bytes) that is aligned at p whenever the 16-byte-aligned q = p + k*N... is:
// rel = (phase(p) - phase(q)) mod N in elements; 0 means p shares q's alignment (16 bytes).
template <typename T> __device__ __forceinline__ int load_width(int rel) {
    return rel == 0 ? 16 : (rel & -rel) * static_cast<int>(sizeof(T));
}

// Load 16 bytes from p, which is aligned to `width` bytes (16, 8, 4 or 2). The branch is
// uniform across the block (it depends on pointers, not on the thread), so it costs no divergence.
template <typename T> __device__ __forceinline__ Pack<T> load_pack(const T* p, int width) {
    Pack<T> r;
    if (width == 16) {
        *reinterpret_cast<uint4*>(&r) = *reinterpret_cast<const uint4*>(p);
    } else if (width == 8) {
        const uint2* q = reinterpret_cast<const uint2*>(p);
        uint2* d = reinterpret_cast<uint2*>(&r);
        d[0] = q[0];
        d[1] = q[1];
    } else if (sizeof(T) == 4 || width == 4) {  // a 4-byte type is never less than 4-byte aligned
        const unsigned* q = reinterpret_cast<const unsigned*>(p);
        unsigned* d = reinterpret_cast<unsigned*>(&r);
#pragma unroll
        for (int i = 0; i < 4; ++i) d[i] = q[i];
    } else {
        const unsigned short* q = reinterpret_cast<const unsigned short*>(p);
        unsigned short* d = reinterpret_cast<unsigned short*>(&r);
#pragma unroll
        for (int i = 0; i < 8; ++i) d[i] = q[i];
    }
    return r;
}

template <typename T> __device__ __forceinline__ Pack<T> load_aligned(const T* p) {
    Pack<T> r;
    *reinterpret_cast<uint4*>(&r) = *reinterpret_cast<const uint4*>(p);
    return r;
}

template <typename T> __device__ __forceinline__ void store_aligned(T* p, const Pack<T>& v) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);
}

// Store 16 bytes to p, which is aligned to `width` bytes: the mirror of load_pack.
template <typename T> __device__ __forceinline__ void store_pack(T* p, const Pack<T>& v, int width) {
    if (width == 16) {
        *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);
    } else if (width == 8) {
        uint2* d = reinterpret_cast<uint2*>(p);
        const uint2* s = reinterpret_cast<const uint2*>(&v);
        d[0] = s[0];
        d[1] = s[1];
    } else if (sizeof(T) == 4 || width == 4) {
        unsigned* d = reinterpret_cast<unsigned*>(p);
        const unsigned* s = reinterpret_cast<const unsigned*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) d[i] = s[i];
    } else {
        unsigned short* d = reinterpret_cast<unsigned short*>(p);
        const unsigned short* s = reinterpret_cast<const unsigned short*>(&v);
#pragma unroll
        for (int i = 0; i < 8; ++i) d[i] = s[i];
    }
}

// A row of n elements at p cut at p's 16-byte boundaries: scalar prefix [0, pre), `vectors`
// 16-byte vectors from pre, scalar tail [tail, n). The same for every pointer of the same phase.
struct RowSplit {
    int pre, vectors, tail;
};

template <typename T> __device__ __forceinline__ RowSplit split_row(const T* p, int n) {
    const int pre = prefix_len(p, n);
    const int vectors = (n - pre) / Vec<T>::N;
    return {pre, vectors, pre + vectors * Vec<T>::N};
}

// acc + x*x, rounded after the multiply and after the add (no FMA), as the twin does.
__device__ __forceinline__ float add_square(float acc, float x) {
    return __fadd_rn(acc, __fmul_rn(x, x));
}

// Sum of v over the block, returned to every thread. blockDim.x must be a multiple of 32
// (at most 1024); `scratch` holds 32 floats of shared memory. The order is fixed: a butterfly
// (xor 16, 8, 4, 2, 1) inside each warp, then the same butterfly over the warp totals padded
// with zeros to 32 lanes, done by every warp so no second barrier is needed. The order depends
// only on blockDim.x, never on the grid, so a row's result does not depend on its batch.
// The caller must __syncthreads() before reusing `scratch`.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31;
    if (lane == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// 1 / sqrt(sum / n + eps), correctly rounded at each step (not rsqrtf, which is approximate).
__device__ __forceinline__ float inv_rms(float sum_sq, int n, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum_sq, static_cast<float>(n)), eps)));
}

// ---- Per-row passes shared by the forward kernels and the backward ----------------------------
//
// Thread order of a pass over a row split at some pointer's 16-byte boundaries (rms_norm.cu's
// order, which pyrms.reference.thread_sums_twin reproduces): thread t takes the prefix element t
// (t < pre), then body vectors t, t+B, t+2B, ... element by element, then the tail element t.

// The thread's first CACHE body vectors of the row (split at the row's own boundaries), all
// loads issued before any is used so they are in flight together.
template <typename T, int CACHE>
__device__ __forceinline__ void load_cached(const T* row, const RowSplit& s, Pack<T> (&cached)[CACHE > 0 ? CACHE : 1]) {
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < s.vectors) cached[k] = load_aligned(row + s.pre + i * Vec<T>::N);
    }
}

// Block-wide sum of term(x) over the row, in the thread order above for the row's own split;
// body vectors beyond the CACHE in registers are re-read. __fadd_rn: no contraction with term.
template <typename T, int CACHE, typename Term>
__device__ __forceinline__ float row_sum(const T* row, const RowSplit& s, int n,
                                         const Pack<T> (&cached)[CACHE > 0 ? CACHE : 1], float* scratch, Term term) {
    constexpr int N = Vec<T>::N;
    const int t = threadIdx.x;
    const int B = blockDim.x;
    float acc = 0.0f;
    if (t < s.pre) acc = __fadd_rn(acc, term(to_float(row[t])));
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {
        if (t + k * B < s.vectors) {
#pragma unroll
            for (int j = 0; j < N; ++j) acc = __fadd_rn(acc, term(to_float(cached[k].e[j])));
        }
    }
    for (int i = t + CACHE * B; i < s.vectors; i += B) {
        const Pack<T> v = load_aligned(row + s.pre + i * N);
#pragma unroll
        for (int j = 0; j < N; ++j) acc = __fadd_rn(acc, term(to_float(v.e[j])));
    }
    if (s.tail + t < n) acc = __fadd_rn(acc, term(to_float(row[s.tail + t])));
    return block_sum(acc, scratch);
}

// What normalizing a row needs: x_hat = (x - mean) * inv (mean = 0 for RMSNorm).
struct RowStats {
    float mean, inv;
};

// The statistics of one row, in fp32, split at the row's own 16-byte boundaries. RMSNorm
// (CENTERED = false): inv = inv_rms(sum x^2), bit for bit what rms_norm.cu computes for the same
// block size; uses scratch_a only. LayerNorm: mean = sum x / n, then inv = inv_rms(sum (x - mean)^2)
// over the cached (or re-read) values: two passes, not E[x^2] - mean^2, which cancels
// catastrophically when |mean| >> std. Uses scratch_a, then scratch_b, so a caller that alternates
// the two buffers between consecutive block sums needs no extra barrier (see block_sum).
// Leaves the thread's first CACHE body vectors in `cached`.
template <typename T, int CACHE, bool CENTERED>
__device__ __forceinline__ RowStats row_stats(const T* row, int n, float eps, Pack<T> (&cached)[CACHE > 0 ? CACHE : 1],
                                              float* scratch_a, float* scratch_b) {
    const RowSplit s = split_row(row, n);
    load_cached<T, CACHE>(row, s, cached);
    if constexpr (!CENTERED) {
        const float sum_sq = row_sum<T, CACHE>(row, s, n, cached, scratch_a, [](float x) { return __fmul_rn(x, x); });
        return {0.0f, inv_rms(sum_sq, n, eps)};
    } else {
        const float sum = row_sum<T, CACHE>(row, s, n, cached, scratch_a, [](float x) { return x; });
        const float mean = __fdiv_rn(sum, static_cast<float>(n));
        const float dev_sq = row_sum<T, CACHE>(row, s, n, cached, scratch_b, [mean](float x) {
            const float d = __fsub_rn(x, mean);
            return __fmul_rn(d, d);
        });
        return {mean, inv_rms(dev_sq, n, eps)};
    }
}

// The write pass of the forward kernels: out[i] = f(x[i], w[i], b[i]) (b only when BIAS), split
// at OUT's 16-byte boundaries so that every body store is 16 bytes wide; x, w and b are loaded at
// the widest width their alignment relative to out allows. When x shares out's phase, the split is
// x's own, so the thread's body vectors are the ones `cached` holds from the first pass.
// In place (out == x) is safe: each element is read by the thread that writes it.
template <typename T, int CACHE, bool BIAS, typename F>
__device__ __forceinline__ void write_row(T* out, const T* x, const T* __restrict__ w, const T* __restrict__ b, int n,
                                          const Pack<T> (&cached)[CACHE > 0 ? CACHE : 1], F f) {
    constexpr int N = Vec<T>::N;
    const int t = threadIdx.x;
    const int B = blockDim.x;
    const int out_phase = vec_phase(out);
    const int rel_x = (vec_phase(x) - out_phase) & (N - 1);
    const int w_width = load_width<T>((vec_phase(w) - out_phase) & (N - 1));
    const int b_width = BIAS ? load_width<T>((vec_phase(b) - out_phase) & (N - 1)) : 16;
    const RowSplit s = split_row(out, n);
    auto element = [&](int i) {
        if constexpr (BIAS) {
            out[i] = f(x[i], w[i], b[i]);
        } else {
            out[i] = f(x[i], w[i], T());
        }
    };
    auto vector = [&](int i, const Pack<T>& xv) {
        const int at = s.pre + i * N;
        const Pack<T> wv = load_pack(w + at, w_width);
        Pack<T> y;
        if constexpr (BIAS) {
            const Pack<T> bv = load_pack(b + at, b_width);
#pragma unroll
            for (int j = 0; j < N; ++j) y.e[j] = f(xv.e[j], wv.e[j], bv.e[j]);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) y.e[j] = f(xv.e[j], wv.e[j], T());
        }
        store_aligned(out + at, y);
    };
    if (t < s.pre) element(t);
    if (s.tail + t < n) element(s.tail + t);
    int first_uncached = t;
    if (rel_x == 0) {
#pragma unroll
        for (int k = 0; k < CACHE; ++k) {
            if (t + k * B < s.vectors) vector(t + k * B, cached[k]);
        }
        first_uncached = t + CACHE * B;
    }
    const int x_width = load_width<T>(rel_x);
    for (int i = first_uncached; i < s.vectors; i += B) vector(i, load_pack(x + s.pre + i * N, x_width));
}

}  // namespace pyrms
