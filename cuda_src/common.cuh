// Pieces shared by the pyrms kernel families: storage types <-> fp32, 16-byte vectors loaded
// at any relative alignment, and a deterministic block-wide sum.
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

}  // namespace pyrms
