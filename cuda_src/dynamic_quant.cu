// A standalone dynamic quantizer: the scale is computed from the input's absolute maximum, then the input is
// quantized through it (no normalization). vLLM's scaled_fp8_quant without a scale (per tensor, or per token
// with use_per_token_if_dynamic and an optional scale_ub), scaled_int8_quant without a scale (per token,
// symmetric) and per_token_group_quant_fp8 (per group of 64 or 128 elements, optionally UE8M0 scales):
//
//   amax  = fmaxf over |x| of the tensor, the row or the group (NaN skipped: fmaxf; exact, so any order)
//   s     = fmaxf(amax' / qmax, floor)          written to `scales`; amax' = fminf(amax, scale_ub) per token
//   out   = quantize(x, s)                       quant.cuh's conversions (satfinite fp8, NaN the one positive
//                                                NaN; int8 cvt.rni.sat, NaN -> 0)
//
// Each mode keeps its vLLM kernel's spelling, bit for bit where vLLM's own output is finite:
//   per tensor (scaled_fp8_quant_kernel): x * (1/s); floor 2^-126 (FLT_MIN), where vLLM has none: only a
//     tensor whose amax is below qmax * 2^-126 differs (vLLM's reciprocal overflows there).
//   per token, fp8 (dynamic_per_token_scaled_fp8_quant_kernel): x / s, floor 1/(qmax * 512) (min_scale).
//   per token, int8 (dynamic_scaled_int8_quant_kernel): s = amax / 127 (floor 0), x * (127 / amax), the
//     factor 0 for an all-zero row.
//   per group (per_token_group_quant_8bit_kernel): x / s with s = fmaxf(amax, 1e-10) / qmax, which is the
//     floor fl(1e-10 / qmax) on the quotient (rounding is monotone); UE8M0: s = pow2_ceil(fmaxf(s, 1e-10)),
//     exp2f(ceilf(log2f(.))) bit for bit.
// The floor comes from the host (pyrms/ops/dynamic_quant/plan.py scale_floor, which the twin reads too).
// Where pyrms differs from vLLM (NaN, int8 per group's rounding): docs/numerics.md, "Dynamic quantizers".
//
// Kernels: dynamic_quant_kernel, one block per row (per token and per group compute the row's scales, per
// tensor reads the one scale); per tensor, two launches of dynamic_quant_amax_kernel before it: one block
// that clears the scale, then min(rows, plan MAX_AMAX_BLOCKS) blocks over the rows, each folding its
// maximum's scale into it with atomicMax on its bits (fp32 >= 0 orders as its bits; a maximum is exact, so
// the result is the same bits whatever the blocks' order or count). Within a row, each thread keeps its
// running maximum and folds it into shared memory (atomicMax on the bits) once per slot: the row's one slot,
// or each group it touches.
//
// Variants: T in {float, __half, __nv_bfloat16}; Q in {__nv_fp8_e4m3, __nv_fp8_e5m2, signed char}; MODE in
// {PER_TENSOR, PER_TOKEN, PER_GROUP}. blockDim.x a multiple of 32 (the plan's). Every pointer at any element
// alignment: each row is cut at out's boundaries of Vec<T>::N one-byte elements as static_quant.cu's rows
// (a scalar prefix and tail around the body; 16 bytes of input per body vector, in the widest pieces the
// relative phase allows); the maxima launch reads its rows at their own 16-byte boundaries. Cache hints:
// none on the first read of a row (the second read should find it in L2), streaming on the second read and
// the stores.
#include "common.cuh"
#include "quant.cuh"

namespace pyrms {

// Threads per block at most (the plan's blocks: pyrms/ops/dynamic_quant/plan.py MAX_BLOCK), and the groups of
// a row at most (plan.py MAX_GROUPS: their maxima are kept in static shared memory).
constexpr int DYNAMIC_QUANT_MAX_THREADS = 512;
constexpr int DYNAMIC_QUANT_MAX_GROUPS = 1024;

// The element step of each mode: divide by s (per token fp8, per group), or multiply by a factor (per tensor:
// 1/s; per token int8: 127/amax).
template <typename Q, int MODE> __host__ __device__ constexpr bool dynamic_divides() {
    return MODE == PER_GROUP || (MODE == PER_TOKEN && !Quant<Q>::integer);
}

// The factor the element step applies for scale s of values whose maximum is amax.
template <typename Q, int MODE> __device__ __forceinline__ float dynamic_factor(float s, float amax) {
    if constexpr (MODE == PER_TOKEN && Quant<Q>::integer) {
        return amax == 0.0f ? 0.0f : __fdiv_rn(Quant<Q>::qmax, amax);
    } else {
        return Scaled<Q, dynamic_divides<Q, MODE>()>::factor(s);
    }
}

// The largest |x| of each slot of a row's elements (slot i >> shift of element i) folded into slots[] as
// fp32 bits (atomicMax; NaN skipped). The row is walked at split s, its body vectors read in pieces of `width`
// bytes without a cache hint (the rows' second pass should find them in L2). Each thread meets its elements in
// increasing order, so its running maximum is folded once per slot it touches.
template <typename T> __device__ __forceinline__ void fold_row_max(const T* x, RowSplit s, int width, int hidden,
                                                                   int shift, unsigned* slots) {
    constexpr int N = Vec<T>::N;
    int slot = 0;
    float m = 0.0f;
    auto take = [&](int i, float v) {
        if ((i >> shift) != slot) {
            atomicMax(slots + slot, __float_as_uint(m));
            slot = i >> shift;
            m = 0.0f;
        }
        m = fmaxf(m, fabsf(v));
    };
    for (int i = threadIdx.x; i < s.pre; i += blockDim.x) take(i, to_float(x[i]));
    for (int v = threadIdx.x; v < s.vectors; v += blockDim.x) {
        const int at = s.pre + v * N;
        const Pack<T> p = load_pack(x + at, width);
#pragma unroll
        for (int j = 0; j < N; ++j) take(at + j, to_float(p.e[j]));
    }
    for (int i = s.tail + threadIdx.x; i < hidden; i += blockDim.x) take(i, to_float(x[i]));
    atomicMax(slots + slot, __float_as_uint(m));
}

// Per tensor, before dynamic_quant_kernel: with reset != 0 (one block), the scale cleared to 0; else the rows
// blockIdx.x, blockIdx.x + gridDim.x, ... folded into it: fmaxf(their amax / qmax, floor), by atomicMax.
template <typename T, typename Q>
__global__ void __launch_bounds__(DYNAMIC_QUANT_MAX_THREADS) dynamic_quant_amax_kernel(
    float* scale, const T* input, int rows, int reset, float floor, int hidden, long long input_stride) {
    __shared__ unsigned block_max;
    if (threadIdx.x == 0) block_max = 0u;
    begin_dependent_grid();
    if (reset) {
        if (threadIdx.x == 0) *scale = 0.0f;
        return;
    }
    __syncthreads();
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* x = input + static_cast<long long>(r) * input_stride;
        fold_row_max(x, split_row(x, hidden), 16, hidden, 31, &block_max);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicMax(reinterpret_cast<unsigned*>(scale),
                  __float_as_uint(dynamic_scale<Q>(__uint_as_float(block_max), floor)));
    }
}

// One row per block. scales: per tensor the one scale (read); per token and per group, row r's scale of group
// g (one group per token) written at scales + r * scale_row_stride + g * scale_group_stride. scale_ub (per
// token): the fp32 at ub_ptr where not null, else ub (+inf: none). group_shift: log2 of the group size (per
// group); ue8m0 != 0: power-of-two scales (per group).
template <typename T, typename Q, int MODE>
__global__ void __launch_bounds__(DYNAMIC_QUANT_MAX_THREADS) dynamic_quant_kernel(
    Q* out, float* scales, const T* input, const float* ub_ptr, float ub, long long scale_group_stride, float floor,
    long long scale_row_stride, int group_shift, int ue8m0, int hidden, long long input_stride,
    long long out_stride) {
    constexpr int N = Vec<T>::N;
    using Step = Scaled<Q, dynamic_divides<Q, MODE>()>;
    // Each slot's amax (fp32 bits), then its factor: the row's one slot, or one per group.
    __shared__ unsigned slots[MODE == PER_GROUP ? DYNAMIC_QUANT_MAX_GROUPS : 1];
    const int shift = MODE == PER_GROUP ? group_shift : 31;
    const int groups = MODE == PER_GROUP ? hidden >> shift : 1;
    for (int g = threadIdx.x; g < groups; g += blockDim.x) slots[g] = 0u;
    begin_dependent_grid();
    const T* x = input + static_cast<long long>(blockIdx.x) * input_stride;
    Q* o = out + static_cast<long long>(blockIdx.x) * out_stride;
    const RowSplit s = split_row<Q, N>(o, hidden);
    // x + at for a body vector at `at` (out + at is N-aligned) sits at this element phase of its 16 bytes
    const int width = load_width<T>((vec_phase(x) - vec_phase<Q, N>(o)) & (N - 1));
    if constexpr (MODE == PER_TENSOR) {
        if (threadIdx.x == 0) slots[0] = __float_as_uint(Step::factor(*scales));
    } else {
        __syncthreads();
        fold_row_max(x, s, width, hidden, shift, slots);
        __syncthreads();
        float* row_scales = scales + static_cast<long long>(blockIdx.x) * scale_row_stride;
        for (int g = threadIdx.x; g < groups; g += blockDim.x) {
            const float amax = __uint_as_float(slots[g]);
            float sc = dynamic_scale<Q>(MODE == PER_TOKEN ? fminf(amax, ub_ptr ? *ub_ptr : ub) : amax, floor);
            if (MODE == PER_GROUP && ue8m0) sc = pow2_ceil(fmaxf(sc, 1e-10f));
            row_scales[g * scale_group_stride] = sc;
            slots[g] = __float_as_uint(dynamic_factor<Q, MODE>(sc, amax));
        }
    }
    __syncthreads();
    const float* factor = reinterpret_cast<const float*>(slots);
    for (int i = threadIdx.x; i < s.pre; i += blockDim.x) o[i] = Step::apply(to_float(x[i]), factor[i >> shift]);
    for (int v = threadIdx.x; v < s.vectors; v += blockDim.x) {
        const int at = s.pre + v * N;
        const Pack<T> p = width == 16 ? load_streaming(x + at) : load_pack(x + at, width);
        OutPack<T, Q> q;
#pragma unroll
        for (int j = 0; j < N; ++j) q.e[j] = Step::apply(to_float(p.e[j]), factor[(at + j) >> shift]);
        store_out<true>(o + at, q);
    }
    for (int i = s.tail + threadIdx.x; i < hidden; i += blockDim.x) {
        o[i] = Step::apply(to_float(x[i]), factor[i >> shift]);
    }
}

}  // namespace pyrms
