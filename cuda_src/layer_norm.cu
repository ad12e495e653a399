// LayerNorm, forward (the backward is layer_norm_backward.cu, on the same row statistics), RMSNorm with a bias
// (RMS: its backward is the RMSNorm backward kernel's DBIAS variant), and LayerNorm with a quantized output.
//
//   mean = sum(x) / n,  var = sum((x - mean)^2) / n  (two passes, over registers),  inv = 1 / sqrt(var + eps)
//   forward:   y  = round_O(((x - mean) * inv) * w + b)      all in fp32, rounded once at the end
//              (BIAS = false: y = round_O(((x - mean) * inv) * w), no addition, so -0 stays -0 as in PyTorch;
//              W = void, no weight: w = 1, as torch.nn.LayerNorm(elementwise_affine=False); w and b of
//              W = float beside bf16/fp16 rows: gamma and beta read exactly; O, the output's type, T or
//              float beside bf16/fp16 rows, where round_O is exact)
//   RMS, RMSNorm with a bias: inv = 1 / sqrt(sum(x^2) / n + eps), RMSNorm's statistics in its tree,
//              y = round_O((x * inv) * w + b), rounded once (QuACK's RMSNorm with a bias)
//   quantized (layer_norm_quant_kernel, FlashInfer's layernorm_quant): the forward's fp32 value v (before round_O),
//              q = quantize(v, s) with one static fp32 scale s (quant.cuh: float8 v * (1/s), int8 v / s, then
//              saturate); ROUND_INPUT: v rounded to T first, the forward's output of T bit for bit, which is what
//              FlashInfer's kernel quantizes (it casts the value to the input's type before scaling it).
// Every step is one explicitly rounded fp32 operation (__fsub_rn, __fmul_rn, ...: no FMA), so
// layer_norm_twin and layer_norm_quant_twin (pyrms/ops/layer_norm/twin.py) reproduce the kernels bit for bit.
//
// layer_norm_kernel<T, CACHE, SPREAD, BIAS, EARLY_WEIGHTS, ALIGNED>: one block per row on the row core
// (row_core.cuh), with the row core's variants. Pass 1 (row_stats) splits the row at the input's 16-byte
// boundaries and keeps the held body vectors in registers for both statistics passes; pass 2
// (write_row) splits at the output's boundaries, so every body store is 16 bytes wide, and loads input,
// weight and bias at the widest width their alignment relative to the output allows. In place
// (out == input) is allowed. The planner picks the fold width and CACHE from the hidden size only, and
// every variant computes the row core's one tree, so a row's result does not depend on its batch.
// layer_norm_quant_kernel: the same row (layer_norm_row) with a quantizing store: its output vectors are
// Vec<T>::N one-byte elements (8 beside bf16/fp16 rows, 4 beside fp32), split at out's own boundaries of that
// size, so every pointer may be misaligned independently; the statistics and the tree are the forward's.
//
#include "quant.cuh"
#include "row_core.cuh"

namespace pyrms {

// The stores of layer_norm_row: the fp32 value v rounded to the output's type O (the forward's), or quantized
// through one static scale (ROUND_INPUT: v rounded to T first). Named types, not lambdas: they are template
// arguments of the row.
template <typename O> struct RoundedStore {
    __device__ __forceinline__ O operator()(float v) const { return from_float<O>(v); }
};
template <typename T, typename Q, bool ROUND_INPUT> struct QuantizedStore {
    Scaled<Q, divide_for<Q, STATIC>()> quantize;
    __device__ __forceinline__ Q operator()(float v) const {
        return quantize(ROUND_INPUT ? to_float(from_float<T>(v)) : v);
    }
};

// One row of LayerNorm (or RMSNorm with a bias) from in_row into out_row, each value stored through `store`.
// bias is not read when BIAS is false (it may be null). mean, rstd: null, or where row r's mean and inv go
// (fp32, mean[r] and rstd[r], r = blockIdx.x; mean is 0 with RMS), for the backward to read instead of
// recomputing them.
// W: the weight's type, T, float (bf16/fp16 rows; the bias is then fp32 too: row_core.cuh's Bias) or void
// (no weight: y = (x - mean) * inv [+ b], weight not read, the bias of T). O: out's element type.
template <typename T, int CACHE, int SPREAD, bool BIAS, bool EARLY_WEIGHTS, bool ALIGNED, typename W, bool RMS,
          typename O, typename Store>
__device__ __forceinline__ void layer_norm_row(O* out_row, const T* in_row, const W* __restrict__ weight,
                                               const Bias<T, W>* __restrict__ bias, float* mean, float* rstd,
                                               float epsilon, int hidden, Store store) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED>;
    __shared__ float scratch[2][32];
    __shared__ float partials[Shape::PARTIALS];
    const Shape sh;
    const RowSplit s = sh.split(in_row, hidden);
    const RowIn<T, false> src{in_row};
    Pack<T> held[Shape::SLOTS];
    WeightVec<T, W> held_w[Shape::SLOTS];
    load_held(sh, s, src, held);
    if constexpr (EARLY_WEIGHTS) load_held_weights(sh, out_row, in_row, weight, hidden, held_w);
    const RowStats st = row_stats<T, CACHE, SPREAD, ALIGNED, !RMS>(sh, s, hidden, epsilon, src, held, scratch[0], scratch[1],
                                                          partials);
    if (threadIdx.x == 0) {  // the statistics, where the caller keeps them for the backward
        if (mean != nullptr) mean[blockIdx.x] = st.mean;
        if (rstd != nullptr) rstd[blockIdx.x] = st.inv;
    }
    write_row<T, W, CACHE, SPREAD, ALIGNED, BIAS, false, EARLY_WEIGHTS>(sh, out_row, in_row, weight, bias, hidden, held,
                                                                held_w, [st, store](T x, float w, Bias<T, W> b) {
        // without a weight, w = 1: the product by 1 is exact; b: the bias, of T or float (T() without one,
        // unused). A named type, not auto: NVRTC 13.0 refuses generic lambdas in device code.
        const float scaled = __fmul_rn(__fmul_rn(RMS ? to_float(x) : __fsub_rn(to_float(x), st.mean), st.inv), w);
        return store(BIAS ? __fadd_rn(scaled, to_float(b)) : scaled);
    });
}

// mean, rstd: layer_norm_row's. O: the output's type, T or float (bf16/fp16 rows; no in place then).
// RMS: RMSNorm with a bias (last, so that LayerNorm's name expressions stay as they were).
template <typename T, int CACHE, int SPREAD, bool BIAS, bool EARLY_WEIGHTS, bool ALIGNED, typename W = T, typename O = T,
          bool RMS = false>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) layer_norm_kernel(
    O* out, const T* input, const W* __restrict__ weight, const Bias<T, W>* __restrict__ bias, float* mean, float* rstd,
    float epsilon, int hidden, long long input_stride, long long out_stride) {
    begin_dependent_grid();
    layer_norm_row<T, CACHE, SPREAD, BIAS, EARLY_WEIGHTS, ALIGNED, W, RMS>(
        out + static_cast<long long>(blockIdx.x) * out_stride, input + static_cast<long long>(blockIdx.x) * input_stride,
        weight, bias, mean, rstd, epsilon, hidden, RoundedStore<O>{});
}

// LayerNorm quantized to Q (__nv_fp8_e4m3, __nv_fp8_e5m2 or signed char: int8) through one static scale: `given`,
// or the fp32 at given_ptr where that is not null (read by every thread, its value not checked: as FlashInfer's
// and vLLM's static scales). out: rows of out_stride one-byte elements, never the input.
template <typename T, typename Q, int CACHE, int SPREAD, bool BIAS, bool ROUND_INPUT, bool EARLY_WEIGHTS, bool ALIGNED,
          typename W = T>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) layer_norm_quant_kernel(
    Q* out, const T* input, const W* __restrict__ weight, const Bias<T, W>* __restrict__ bias, const float* given_ptr,
    float given, float epsilon, int hidden, long long input_stride, long long out_stride) {
    begin_dependent_grid();
    const QuantizedStore<T, Q, ROUND_INPUT> store{Scaled<Q, divide_for<Q, STATIC>()>(given_ptr ? *given_ptr : given)};
    layer_norm_row<T, CACHE, SPREAD, BIAS, EARLY_WEIGHTS, ALIGNED, W, false>(
        out + static_cast<long long>(blockIdx.x) * out_stride, input + static_cast<long long>(blockIdx.x) * input_stride,
        weight, bias, nullptr, nullptr, epsilon, hidden, store);
}

}  // namespace pyrms
