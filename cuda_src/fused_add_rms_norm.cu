// Fused residual add + RMSNorm, in place, with vLLM's semantics (fused_add_rms_norm):
//
//   residual[r, i] <- s[r, i] = round_T(input[r, i] + residual[r, i])      (__fadd_rn, then one rounding)
//   input[r, i]    <- rms_scale(s[r, i], w_i, inv_rms[r])                   (rms_norm.cu's scaling)
//   inv_rms[r] = 1 / sqrt(sum_i float(s[r, i])^2 / hidden + eps)            (the ROUNDED sum is normalized)
//
// so `input` ends up equal to rms_norm(residual) of the updated residual, bit for bit: both run
// pyrms::rms_norm_row (rms_norm_row.cuh) on the row core; only pass 1's Source differs (AddedRow).
// Planned as rms_norm.cu is (pyrms.plan.block_and_cache), with the same variants: T, CACHE, SPREAD,
// GEMMA, ROUND_ONCE, EARLY_WEIGHTS, ALIGNED, and the weight's type W (rms_norm.cu). Rows are addressed with 64-bit strides; input and residual each
// have their own row stride. No cache hints: the streaming hints that help rms_norm.cu made this
// kernel 11% slower (bench/results/2026-11-30/session2/hints2.log).
//
// Alignment: pass 1 splits the row at the RESIDUAL's 16-byte boundaries, so that residual loads and
// stores are 16 bytes wide; input is loaded at the widest width its alignment relative to the residual
// allows. Pass 2 (write_row) splits at the INPUT's boundaries, since input is what it writes, and
// re-reads the sums from the residual where they are not the ones held in registers.
//
// Memory: input and residual must be disjoint (checked by the op). Pass 2 reads sums that other
// threads of the block stored in pass 1; the barrier in the block sum orders those global writes
// before the reads, and residual is never read through the non-coherent (.nc) path.
#include "rms_norm_row.cuh"

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

// Pass 1's Source: the rounded sums input + residual, stored into the residual as they are made.
template <typename T> struct AddedRow {
    const T* in;
    T* res;
    int in_width;  // the widest load aligned at `in` where `res` is 16-byte aligned
    __device__ __forceinline__ Pack<T> held(int at) const {
        return add_rounded(load_pack(in + at, in_width), load_aligned(res + at));
    }
    __device__ __forceinline__ void keep(int at, const Pack<T>& sum) const { store_aligned(res + at, sum); }
    __device__ __forceinline__ Pack<T> vec(int at) const {
        const Pack<T> sum = held(at);
        keep(at, sum);
        return sum;
    }
    __device__ __forceinline__ T elem(int at) const {
        const T sum = add_rounded(in[at], res[at]);
        res[at] = sum;
        return sum;
    }
};

template <typename T, int CACHE, int SPREAD, bool GEMMA, bool ROUND_ONCE, bool EARLY_WEIGHTS, bool ALIGNED, typename W = T>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) fused_add_rms_norm_kernel(
    T* input, T* residual, const W* __restrict__ weight, float epsilon, int hidden,
    long long input_stride, long long residual_stride) {
    constexpr int N = Vec<T>::N;
    begin_dependent_grid();
    T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* res_row = residual + static_cast<long long>(blockIdx.x) * residual_stride;
    const AddedRow<T> sums{in_row, res_row,
                           ALIGNED ? 16 : load_width<T>((vec_phase(in_row) - vec_phase(res_row)) & (N - 1))};
    rms_norm_row<T, W, CACHE, SPREAD, ALIGNED, GEMMA, ROUND_ONCE, EARLY_WEIGHTS, false>(in_row, res_row, sums, weight,
                                                                              epsilon, hidden);
}

}  // namespace pyrms
