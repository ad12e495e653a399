// pyrms's RMSNorm forward kernel, grown from the seed's (seed_rms_norm.cu).
//
//   out[r, i] = round_T( round_T(x[r, i] * inv_rms[r]) * w_i )      (default: the seed's rounding)
//   out[r, i] = round_T( (x[r, i] * inv_rms[r]) * w_i )             (ROUND_ONCE: PyTorch, current vLLM)
//   inv_rms[r] = 1 / sqrt(sum_i x[r, i]^2 / hidden + eps), all in fp32
//   w_i = weight[i], or 1 + weight[i] in fp32 (GEMMA)
//
// One block per row; blockDim.x (a multiple of 32, up to 1024) and the hidden size are run-time
// values, so any hidden size from 1 up works; rows are addressed with 64-bit strides.
//
// Variants (template parameters): T in {float, __half, __nv_bfloat16}; CACHE = how many 16-byte
// input vectors each thread keeps in registers between the two passes (0 = re-read them);
// GEMMA; ROUND_ONCE; EARLY_WEIGHTS (below, a latency variant for few rows). The planner (pyrms/plan.py) picks blockDim.x and CACHE from the hidden size
// only, never from the number of rows.
//
// Cache hints: the cached input vectors and the body stores are streaming accesses (load_streaming).
//
// Alignment: the sum-of-squares pass splits the row by the INPUT's 16-byte boundaries (scalar
// prefix, 16-byte body, scalar tail); the write pass splits it by the OUTPUT's boundaries, so
// every body store is 16 bytes wide, and loads input and weight at the widest width their
// alignment relative to the output allows (16 bytes when they agree). Each pointer may be
// misaligned independently; each row of a strided tensor computes its own split.
//
// Numeric order (reproduced bit for bit by pyrms.reference.rms_norm_twin): thread t accumulates
// its prefix element (t < prefix), its body vectors t, t+B, t+2B, ... element by element, then
// its tail element, with __fmul_rn/__fadd_rn; then pyrms::block_sum (common.cuh). It depends on
// the hidden size, dtype, block size and the input row's alignment only.
//
// In place (out == input) is allowed: every element is read by the thread that later writes it,
// and all first-pass reads precede the block's barrier.
#include "common.cuh"

namespace pyrms {

template <typename T, bool GEMMA, bool ROUND_ONCE>
__device__ __forceinline__ T rms_scale(T x, T w, float inv) {
    const float wf = GEMMA ? __fadd_rn(1.0f, to_float(w)) : to_float(w);
    float xn = __fmul_rn(to_float(x), inv);
    if (!ROUND_ONCE) xn = to_float(from_float<T>(xn));
    return from_float<T>(__fmul_rn(xn, wf));
}

template <typename T, bool GEMMA, bool ROUND_ONCE>
__device__ __forceinline__ Pack<T> rms_scale(const Pack<T>& x, const Pack<T>& w, float inv) {
    Pack<T> y;
#pragma unroll
    for (int j = 0; j < Vec<T>::N; ++j) y.e[j] = rms_scale<T, GEMMA, ROUND_ONCE>(x.e[j], w.e[j], inv);
    return y;
}

// The row's cached input vectors and its 16-byte output stores pass through once: load and store
// them with the cache-streaming hint (ld/st.global.cs, evict first). Measured on the H200 at the
// planner's launch shapes (bench/results/2026-11-30/session2/hints1.log): 4096x5120 0.780 -> 0.815
// of the copy ceiling, 4096x8192 0.837 -> 0.864, 16384x5120 0.936 -> 0.942, no change at 32768x8192
// and 4096x16384; either hint alone was slower. The weights keep the default policy (every block
// re-reads them). The same hints made fused_add_rms_norm.cu 11% slower (hints2.log), so they live here.
template <typename T> __device__ __forceinline__ Pack<T> load_streaming(const T* p) {
    Pack<T> r;
    *reinterpret_cast<uint4*>(&r) = __ldcs(reinterpret_cast<const uint4*>(p));
    return r;
}

template <typename T> __device__ __forceinline__ void store_streaming(T* p, const Pack<T>& v) {
    __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));
}

template <typename T>
__device__ __forceinline__ float add_squares(float acc, const Pack<T>& v) {
#pragma unroll
    for (int j = 0; j < Vec<T>::N; ++j) acc = add_square(acc, to_float(v.e[j]));
    return acc;
}

// Threads a block of a CACHE variant may have: registers for CACHE vectors must fit beside the rest.
__host__ __device__ constexpr int max_threads(int cache) { return cache <= 2 ? 1024 : 2048 / cache; }

template <typename T, int CACHE, bool GEMMA, bool ROUND_ONCE, bool EARLY_WEIGHTS>
__global__ void __launch_bounds__(max_threads(CACHE)) rms_norm_kernel(
    T* out, const T* input, const T* __restrict__ weight, float epsilon, int hidden,
    long long input_stride, long long out_stride) {
    constexpr int N = Vec<T>::N;
    __shared__ float scratch[32];
    const int t = threadIdx.x;
    const int B = blockDim.x;
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;

    // Pass 1: sum of squares, split by the input's alignment.
    const int pre = prefix_len(in_row, hidden);
    const int nvec = (hidden - pre) / N;
    const int tail = pre + nvec * N;
    const T* body = in_row + pre;
    float acc = 0.0f;
    if (t < pre) acc = add_square(acc, to_float(in_row[t]));
    Pack<T> cached[CACHE > 0 ? CACHE : 1];
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {  // all loads first, so they are in flight together
        if (t + k * B < nvec) cached[k] = load_streaming(body + (t + k * B) * N);
    }
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {
        if (t + k * B < nvec) acc = add_squares(acc, cached[k]);
    }
    for (int i = t + CACHE * B; i < nvec; i += B) acc = add_squares(acc, load_aligned(body + i * N));
    if (tail + t < hidden) acc = add_square(acc, to_float(in_row[tail + t]));

    // Pass 2 splits the row by the output's alignment so that body stores are 16 bytes wide.
    const int out_phase = vec_phase(out_row);
    const int rel_in = (vec_phase(in_row) - out_phase) & (N - 1);
    const int w_width = load_width<T>((vec_phase(weight) - out_phase) & (N - 1));
    const int opre = prefix_len(out_row, hidden);
    const int onvec = (hidden - opre) / N;
    const int otail = opre + onvec * N;
    // EARLY_WEIGHTS: where pass 2's split is pass 1's (rel_in == 0), load the weights of this
    // thread's cached vectors before the reduction, so that their latency overlaps the input's
    // instead of following the barrier. It costs registers (occupancy), so the launcher picks it
    // for few rows only, where latency, not bandwidth, sets the time. Results are identical.
    Pack<T> early_w[EARLY_WEIGHTS && CACHE > 0 ? CACHE : 1];
    if (EARLY_WEIGHTS && rel_in == 0) {
#pragma unroll
        for (int k = 0; k < CACHE; ++k) {
            if (t + k * B < onvec) early_w[k] = load_pack(weight + opre + (t + k * B) * N, w_width);
        }
    }

    const float inv = inv_rms(block_sum(acc, scratch), hidden, epsilon);

    if (t < opre) out_row[t] = rms_scale<T, GEMMA, ROUND_ONCE>(in_row[t], weight[t], inv);
    if (otail + t < hidden) {
        out_row[otail + t] = rms_scale<T, GEMMA, ROUND_ONCE>(in_row[otail + t], weight[otail + t], inv);
    }
    int first_uncached = t;
    if (rel_in == 0) {  // same split as pass 1: the cached vectors are this thread's output vectors
#pragma unroll
        for (int k = 0; k < CACHE; ++k) {
            const int i = t + k * B;
            if (i < onvec) {
                const Pack<T> w = EARLY_WEIGHTS ? early_w[k] : load_pack(weight + opre + i * N, w_width);
                store_streaming(out_row + opre + i * N, rms_scale<T, GEMMA, ROUND_ONCE>(cached[k], w, inv));
            }
        }
        first_uncached = t + CACHE * B;
    }
    const int in_width = load_width<T>(rel_in);
    for (int i = first_uncached; i < onvec; i += B) {
        const Pack<T> x = load_pack(in_row + opre + i * N, in_width);
        const Pack<T> w = load_pack(weight + opre + i * N, w_width);
        store_streaming(out_row + opre + i * N, rms_scale<T, GEMMA, ROUND_ONCE>(x, w, inv));
    }
}

}  // namespace pyrms
