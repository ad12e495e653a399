// Pieces shared by the pyrms kernel families: storage types <-> fp32, 16-byte vectors loaded and
// stored at any relative alignment, a deterministic block-wide sum, and programmatic dependent
// launch. The per-row passes that the forward and backward kernels share are in row_core.cuh.
//
// Numeric choices (docs/numerics.md): every operation that a numpy twin must reproduce is written
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
    enum { N = Vec<T>::N };  // an enumerator, not a static member: no storage in the PTX
    T e[N];
};

// Position of p inside its vector of N elements (by default 16 bytes: Vec<T>::N), in elements
// (0 .. N-1). p must be T-aligned. A smaller N serves an output narrower than the rows it is computed
// from: a quantized row of 1-byte elements written in vectors of the input's N elements.
template <typename T, int N = Vec<T>::N> __device__ __forceinline__ int vec_phase(const T* p) {
    return static_cast<int>((reinterpret_cast<unsigned long long>(p) / sizeof(T)) & (N - 1));
}

// Elements before the first vector boundary (N elements, 16 bytes by default) of a row of n elements at p.
template <typename T, int N = Vec<T>::N> __device__ __forceinline__ int prefix_len(const T* p, int n) {
    return min((N - vec_phase<T, N>(p)) & (N - 1), n);
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

// 16-byte load and store with the cache-streaming hint (ld/st.global.cs, evict first), for data that
// passes through once. Measured on the H200 for the plain RMSNorm kernel's held vectors and output stores
// (docs/perf_notes.md, "Versions"): 4096x5120 0.780 -> 0.815 of the copy ceiling,
// 4096x8192 0.837 -> 0.864, 16384x5120 0.936 -> 0.942, no change at 32768x8192 and 4096x16384; either
// hint alone was slower. The same hints made the residual-add kernel 11% slower.
template <typename T> __device__ __forceinline__ Pack<T> load_streaming(const T* p) {
    Pack<T> r;
    *reinterpret_cast<uint4*>(&r) = __ldcs(reinterpret_cast<const uint4*>(p));
    return r;
}

template <typename T> __device__ __forceinline__ void store_streaming(T* p, const Pack<T>& v) {
    __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));
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

// A row of n elements at p cut at p's vector boundaries (N elements, 16 bytes by default): scalar
// prefix [0, pre), `vectors` vectors from pre, scalar tail [tail, n). The same for every pointer of the
// same phase.
struct RowSplit {
    int pre, vectors, tail;
};

template <typename T, int N = Vec<T>::N> __device__ __forceinline__ RowSplit split_row(const T* p, int n) {
    const int pre = prefix_len<T, N>(p, n);
    const int vectors = (n - pre) / N;
    return {pre, vectors, pre + vectors * N};
}

// The output vector of a row of T written as O: Vec<T>::N elements of O, so that its split matches the
// row's (16 bytes when O is T; 8 bytes of a 1-byte O beside 2-byte rows; 32 bytes of fp32 beside 2-byte
// rows, split at out's 32-byte boundaries). Stored as one word, or two (store_out).
template <typename T, typename O> struct alignas(sizeof(O) * Vec<T>::N) OutPack {
    O e[Vec<T>::N];
};

template <int BYTES> struct Word;
template <> struct Word<16> { using type = uint4; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<4> { using type = unsigned; };

// Store an output vector at p, aligned to its size, in words of at most 16 bytes (the widest store: an
// fp32 output beside bf16/fp16 rows is 32 bytes, two of them); STREAMING: with the cache-streaming hint
// (st.global.cs).
template <bool STREAMING, typename T, typename O> __device__ __forceinline__ void store_out(O* p, const OutPack<T, O>& v) {
    constexpr int BYTES = sizeof(OutPack<T, O>);
    if constexpr (BYTES > 16) {
        const uint4* words = reinterpret_cast<const uint4*>(&v);
#pragma unroll
        for (int k = 0; k < BYTES / 16; ++k) {
            if constexpr (STREAMING) {
                __stcs(reinterpret_cast<uint4*>(p) + k, words[k]);
            } else {
                reinterpret_cast<uint4*>(p)[k] = words[k];
            }
        }
    } else {
        using W = typename Word<BYTES>::type;
        if constexpr (STREAMING) {
            __stcs(reinterpret_cast<W*>(p), *reinterpret_cast<const W*>(&v));
        } else {
            *reinterpret_cast<W*>(p) = *reinterpret_cast<const W*>(&v);
        }
    }
}

// The operations of the block reductions: an fp32 sum, correctly rounded (its order is fixed below), and
// a maximum, which is exact, so any order gives the same bits (fmaxf: NaN loses to a number).
struct AddRn {
    __device__ __forceinline__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};
struct MaxF {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The xor butterfly (16, 8, 4, 2, 1) over the 32 lanes of a warp: every lane gets the same result.
template <typename Op> __device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, AddRn{}); }

// The second level of a block reduction, after the barrier that follows the writes of the warp totals
// to scratch[0 .. warps): the same butterfly over them padded with zeros to 32 lanes (the identity of
// the sum, and of the maximum of values >= 0, its only use), done by every warp so no second barrier is
// needed.
template <typename Op> __device__ __forceinline__ float reduce_warp_totals(const float* scratch, int warps, Op op) {
    const int lane = threadIdx.x & 31;
    return warp_reduce(lane < warps ? scratch[lane] : 0.0f, op);
}

__device__ __forceinline__ float sum_of_warp_totals(const float* scratch, int warps) {
    return reduce_warp_totals(scratch, warps, AddRn{});
}

// op-reduction of v over the first `warps` warps of the block, returned to every thread. blockDim.x must
// be a multiple of 32 (at most 1024); `scratch` holds 32 floats of shared memory; every thread of the
// block must call it (the values of warps past `warps` are ignored). The order is fixed: warp_reduce in
// each warp, then reduce_warp_totals. It depends only on `warps`, never on the grid, so a row's result
// does not depend on its batch. The caller must __syncthreads() before reusing `scratch`.
template <typename Op> __device__ __forceinline__ float block_reduce(float v, float* scratch, int warps, Op op) {
    v = warp_reduce(v, op);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    return reduce_warp_totals(scratch, warps, op);
}

__device__ __forceinline__ float block_sum(float v, float* scratch, int warps) {
    return block_reduce(v, scratch, warps, AddRn{});
}

// The maximum of v >= 0 over the block (block_reduce's rules).
__device__ __forceinline__ float block_max(float v, float* scratch, int warps) {
    return block_reduce(v, scratch, warps, MaxF{});
}

// 1 / sqrt(sum / n + eps), correctly rounded at each step (not rsqrtf, which is approximate).
__device__ __forceinline__ float inv_rms(float sum_sq, int n, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum_sq, static_cast<float>(n)), eps)));
}

// ---- Programmatic dependent launch (sm_90 and later) ----------------------------------------------
// Launched with programmatic stream serialization (pyrms's pdl=True), a kernel may start while the
// kernel before it on the stream is still running. Every pyrms kernel therefore waits for the grids
// it depends on before its first global access (a read of their outputs, or a write to memory they
// may still read), and then lets the next kernel launch: that one waits in the same way for this one
// to complete and flush, so triggering early is safe and hides the next launch's latency behind this
// kernel's work. Without the launch attribute both instructions return at once.
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void begin_dependent_grid() {
    wait_for_prior_grids();
    allow_next_grid();
}

}  // namespace pyrms
