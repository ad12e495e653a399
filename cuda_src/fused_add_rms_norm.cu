// Fused residual add + RMSNorm, in place, with vLLM's semantics (fused_add_rms_norm):
//
//   residual[r, i] <- s[r, i] = round_T(input[r, i] + residual[r, i])      (__fadd_rn, then one rounding)
//   input[r, i]    <- rms_scale(s[r, i], w_i, inv_rms[r])                   (exactly rms_norm.cu's scaling)
//   inv_rms[r] = 1 / sqrt(sum_i float(s[r, i])^2 / hidden + eps)            (the ROUNDED sum is normalized)
//
// so `input` ends up equal to rms_norm(residual) of the updated residual, bit for bit.
// One block per row, planned as rms_norm.cu is (pyrms.plan.block_and_cache: blockDim.x and CACHE from
// the hidden size only) and under its launch bounds (max_threads); T, CACHE, GEMMA and ROUND_ONCE as
// there. Rows are addressed with 64-bit strides; input and residual each have their own row stride.
//
// Alignment: pass 1 splits the row at the RESIDUAL's 16-byte boundaries, so that residual loads and
// stores are 16 bytes wide; input is loaded at the widest width its alignment relative to the residual
// allows. Pass 2 (pyrms::write_row) splits at the INPUT's boundaries, since input is what it writes,
// and re-reads the sums from the residual where they are not the ones cached in registers.
//
// Numeric order (pyrms.reference.fused_add_rms_norm_twin): the sum of squares runs in rms_norm.cu's
// per-thread order for the residual row's split, then pyrms::block_sum.
//
// Memory: input and residual must be disjoint (checked by the op). Pass 2 reads sums that other
// threads of the block stored in pass 1; block_sum's __syncthreads() orders those global writes
// before the reads, and residual is never read through the non-coherent (.nc) path.
#include "common.cuh"
#include "rms_norm.cu"  // rms_scale, add_squares, max_threads: the normalization must be rms_norm's own

namespace pyrms {

template <typename T> __device__ __forceinline__ T add_rounded(T a, T b) {
    return from_float<T>(__fadd_rn(to_float(a), to_float(b)));
}

template <typename T> __device__ __forceinline__ Pack<T> add_rounded(const Pack<T>& a, const Pack<T>& b) {
    Pack<T> s;
#pragma unroll
    for (int j = 0; j < Vec<T>::N; ++j) s.e[j] = add_rounded(a.e[j], b.e[j]);
    return s;
}

template <typename T, int CACHE, bool GEMMA, bool ROUND_ONCE>
__global__ void __launch_bounds__(max_threads(CACHE), 1) fused_add_rms_norm_kernel(
    T* input, T* residual, const T* __restrict__ weight, float epsilon, int hidden,
    long long input_stride, long long residual_stride) {
    constexpr int N = Vec<T>::N;
    __shared__ float scratch[32];
    const int t = threadIdx.x;
    const int B = blockDim.x;
    T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* res_row = residual + static_cast<long long>(blockIdx.x) * residual_stride;

    // Pass 1: residual <- input + residual, and the sum of squares of the rounded sums.
    const RowSplit s = split_row(res_row, hidden);
    const int in_width = load_width<T>((vec_phase(in_row) - vec_phase(res_row)) & (N - 1));
    float acc = 0.0f;
    if (t < s.pre) {
        const T sum = add_rounded(in_row[t], res_row[t]);
        res_row[t] = sum;
        acc = add_square(acc, to_float(sum));
    }
    Pack<T> cached[CACHE > 0 ? CACHE : 1];
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {  // all loads first, so they are in flight together
        const int i = t + k * B;
        if (i < s.vectors) {
            cached[k] = add_rounded(load_pack(in_row + s.pre + i * N, in_width), load_aligned(res_row + s.pre + i * N));
        }
    }
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {
        const int i = t + k * B;
        if (i < s.vectors) {
            store_aligned(res_row + s.pre + i * N, cached[k]);
            acc = add_squares(acc, cached[k]);
        }
    }
    for (int i = t + CACHE * B; i < s.vectors; i += B) {
        const Pack<T> sum = add_rounded(load_pack(in_row + s.pre + i * N, in_width), load_aligned(res_row + s.pre + i * N));
        store_aligned(res_row + s.pre + i * N, sum);
        acc = add_squares(acc, sum);
    }
    if (s.tail + t < hidden) {
        const T sum = add_rounded(in_row[s.tail + t], res_row[s.tail + t]);
        res_row[s.tail + t] = sum;
        acc = add_square(acc, to_float(sum));
    }

    const float inv = inv_rms(block_sum(acc, scratch), hidden, epsilon);

    // Pass 2: input <- rms_norm of the new residual row.
    write_row<T, CACHE, false>(in_row, res_row, weight, nullptr, hidden, cached,
                               [inv](T x, T w, T) { return rms_scale<T, GEMMA, ROUND_ONCE>(x, w, inv); });
}

}  // namespace pyrms
