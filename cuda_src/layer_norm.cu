// LayerNorm, forward (the backward is layer_norm_backward.cu, on the same row statistics), and RMSNorm with a bias
// (RMS: its backward is the RMSNorm backward kernel's DBIAS variant).
//
//   mean = sum(x) / n,  var = sum((x - mean)^2) / n  (two passes, over registers),  inv = 1 / sqrt(var + eps)
//   forward:   y  = round_O(((x - mean) * inv) * w + b)      all in fp32, rounded once at the end
//              (BIAS = false: y = round_O(((x - mean) * inv) * w), no addition, so -0 stays -0 as in PyTorch;
//              W = void, no weight: w = 1, as torch.nn.LayerNorm(elementwise_affine=False); w and b of
//              W = float beside bf16/fp16 rows: gamma and beta read exactly; O, the output's type, T or
//              float beside bf16/fp16 rows, where round_O is exact)
//   RMS, RMSNorm with a bias: inv = 1 / sqrt(sum(x^2) / n + eps), RMSNorm's statistics in its tree,
//              y = round_O((x * inv) * w + b), rounded once (QuACK's RMSNorm with a bias)
// Every step is one explicitly rounded fp32 operation (__fsub_rn, __fmul_rn, ...: no FMA), so
// layer_norm_twin (pyrms/ops/layer_norm/twin.py) reproduces the kernel bit for bit.
//
// layer_norm_kernel<T, CACHE, SPREAD, BIAS, EARLY_WEIGHTS, ALIGNED>: one block per row on the row core
// (row_core.cuh), with the row core's variants. Pass 1 (row_stats) splits the row at the input's 16-byte
// boundaries and keeps the held body vectors in registers for both statistics passes; pass 2
// (write_row) splits at the output's boundaries, so every body store is 16 bytes wide, and loads input,
// weight and bias at the widest width their alignment relative to the output allows. In place
// (out == input) is allowed. The planner picks the fold width and CACHE from the hidden size only, and
// every variant computes the row core's one tree, so a row's result does not depend on its batch.
//
#include "row_core.cuh"

namespace pyrms {

// bias is not read when BIAS is false (it may be null). mean, rstd: null, or where row r's mean and inv go
// (fp32, mean[r] and rstd[r]; mean is 0 with RMS), for the backward to read instead of recomputing them.
// W: the weight's type, T, float (bf16/fp16 rows; the bias is then fp32 too: row_core.cuh's Bias) or void
// (no weight: y = round_O((x - mean) * inv [+ b]), weight not read, the bias of T).
// O: the output's type, T or float (bf16/fp16 rows; no in place then).
// RMS: RMSNorm with a bias (last, so that LayerNorm's name expressions stay as they were).
template <typename T, int CACHE, int SPREAD, bool BIAS, bool EARLY_WEIGHTS, bool ALIGNED, typename W = T, typename O = T,
          bool RMS = false>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) layer_norm_kernel(
    O* out, const T* input, const W* __restrict__ weight, const Bias<T, W>* __restrict__ bias, float* mean, float* rstd,
    float epsilon, int hidden, long long input_stride, long long out_stride) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED>;
    __shared__ float scratch[2][32];
    __shared__ float partials[Shape::PARTIALS];
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    O* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
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
                                                                held_w, [st](T x, float w, Bias<T, W> b) {
        // without a weight, w = 1: the product by 1 is exact; b: the bias, of T or float (T() without one,
        // unused). A named type, not auto: NVRTC 13.0 refuses generic lambdas in device code.
        const float scaled = __fmul_rn(__fmul_rn(RMS ? to_float(x) : __fsub_rn(to_float(x), st.mean), st.inv), w);
        return from_float<O>(BIAS ? __fadd_rn(scaled, to_float(b)) : scaled);
    });
}

}  // namespace pyrms
