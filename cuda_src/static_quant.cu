// A standalone static quantizer: vLLM's static_scaled_fp8_quant (and static_scaled_int8_quant's
// symmetric case), no normalization. One fp32 scale s for the whole tensor:
//
//   out[r, i] = quantize(float(input[r, i]), s)     rows of input_stride / out_stride elements
//
// with exactly the quantizing norms' static step (quant.cuh's Scaled<Q, divide_for<Q, STATIC>>): float8
// multiplies by the reciprocal, x * __fdiv_rn(1, s) (vLLM's scaled_fp8_conversion with its inverted scale),
// int8 divides, __fdiv_rn(x, s) (vLLM's static_scaled_int8_quant_kernel); then float8: cvt.rn.satfinite
// (±inf and finite overflow to ±qmax), NaN written as the one positive NaN pattern (0x7F e4m3fn, 0x7E e5m2);
// int8: cvt.rni.sat.s8.f32 (round to nearest even, saturate, NaN -> 0). The input's conversion to fp32 is
// exact, so the twin is quantize_static (pyrms.reference) of the input as fp32. s: the `scale` argument, or
// the fp32 at scale_ptr where that is not null (read once per thread, its value not checked: as in vLLM).
//
// Variants: T in {float, __half, __nv_bfloat16}; Q in {__nv_fp8_e4m3, __nv_fp8_e5m2, signed char (int8)}.
// One block per row (gridDim.x rows), blockDim.x a multiple of 32 (the plan's). Every pointer at any
// element alignment, independently: each row is cut at out's boundaries of Vec<T>::N one-byte elements
// (8 beside bf16/fp16 rows, 4 beside fp32; common.cuh's split_row), a scalar prefix and tail around the
// body; each body vector is one store (store_out, 8 or 4 bytes) and 16 bytes of input, read as one 16-byte
// load where input and out share their phase (same element offset in their vectors) and in the widest
// pieces their relative phase allows otherwise (load_pack). Cache hints: streaming on both sides (each
// byte passes once; common.cuh's streaming hints), not measured for this kernel.
#include "common.cuh"
#include "quant.cuh"

namespace pyrms {

// Threads per block at most (the plan's blocks: pyrms/ops/static_quant/plan.py MAX_BLOCK).
constexpr int STATIC_QUANT_MAX_THREADS = 512;

template <typename T, typename Q>
__global__ void __launch_bounds__(STATIC_QUANT_MAX_THREADS) static_quant_kernel(
    Q* out, const T* input, const float* scale_ptr, float scale, int hidden, long long input_stride,
    long long out_stride) {
    constexpr int N = Vec<T>::N;
    using Step = Scaled<Q, divide_for<Q, STATIC>()>;
    begin_dependent_grid();
    const Step quantize(scale_ptr ? *scale_ptr : scale);
    const T* x = input + static_cast<long long>(blockIdx.x) * input_stride;
    Q* o = out + static_cast<long long>(blockIdx.x) * out_stride;
    const RowSplit s = split_row<Q, N>(o, hidden);
    // x + at for a body vector at `at` (out + at is N-aligned) sits at this element phase of its 16 bytes
    const int width = load_width<T>((vec_phase(x) - vec_phase<Q, N>(o)) & (N - 1));
    for (int i = threadIdx.x; i < s.pre; i += blockDim.x) o[i] = quantize(to_float(x[i]));
    for (int v = threadIdx.x; v < s.vectors; v += blockDim.x) {
        const int at = s.pre + v * N;
        const Pack<T> p = width == 16 ? load_streaming(x + at) : load_pack(x + at, width);
        OutPack<T, Q> q;
#pragma unroll
        for (int j = 0; j < N; ++j) q.e[j] = quantize(to_float(p.e[j]));
        store_out<true>(o + at, q);
    }
    for (int i = s.tail + threadIdx.x; i < hidden; i += blockDim.x) o[i] = quantize(to_float(x[i]));
}

}  // namespace pyrms
