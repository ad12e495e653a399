// RMSNorm with a quantized output (fp8 e4m3fn / e5m2, int8), and the same after vLLM's residual add: the
// RMSNorm of rms_norm_row.cuh (the row core's two passes and reduction tree) with a quantizing output
// hook (quant.cuh) instead of rms_norm's store.
//
//   y[r, i] = (x[r, i] * inv_rms[r]) * w_i                        in fp32 (default: one rounding, the last)
//   y[r, i] = float(round_T(round_T(x[r, i] * inv_rms[r]) * w_i)) ROUND_INPUT: what vLLM's kernels quantize
//                                                                 (rms_norm's default output, as fp32)
//   STATIC:    q[r, i] = quantize(y[r, i], s), s one fp32 scale (an argument, or read from a pointer)
//   PER_TOKEN: s[r] = dynamic_scale(fminf(max_i |y[r, i]|, ub)) written to scales[r] (ub = +inf: none),
//              q[r, i] = quantize(y[r, i], s[r])
//   PER_GROUP: s[r, g] = dynamic_scale(max |y[r, i]| over i in [g*G, (g+1)*G)) (G = 64 or 128; UE8M0:
//              pow2_ceil of it) written at scales + r * scale_row_stride + g * scale_group_stride (row-
//              or column-major), q[r, i] = quantize(y[r, i], s[r, i / G])
//   (fused add) residual[r, i] <- round_T(input[r, i] + residual[r, i]), x = that rounded sum
//   (fused_add_rms_norm.cu's semantics: the rounded sum is normalized; input is only read).
//
// inv_rms, the reduction tree and the planner are rms_norm's, so y's RMS is rms_norm's bit for bit.
// The maximum is a second block reduction after inv_rms, over y recomputed from the held registers
// (and re-read vectors); it is exact, so its order does not matter. Per group, the maxima are taken
// over the group's elements wherever the row's split puts them (group_amax). Output vectors are Vec<T>::N
// quantized elements (8 bytes beside bf16/fp16 rows, 4 beside fp32), split at out's own boundaries of
// that size (write_row), so every pointer may be misaligned independently.
//
// Kernels: rms_norm_quant_kernel and fused_add_rms_norm_quant_kernel (MODE STATIC or PER_TOKEN), and their
// per-group twins rms_norm_group_quant_kernel and fused_add_rms_norm_group_quant_kernel (the same row with
// MODE PER_GROUP; their own entry points because they take the scale layout and group size, which the
// others' arguments, and so their PTX, do without).
// Variants: T in {float, __half, __nv_bfloat16}; Q in {__nv_fp8_e4m3, __nv_fp8_e5m2, signed char (int8)}; MODE;
// ROUND_INPUT; CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED as in rms_norm.cu. The weight is of T. Cache hints as
// the unquantized kernels (rms_norm.cu: streaming; fused add: none), not measured here.
#include "added_row.cuh"
#include "quant.cuh"
#include "rms_norm_row.cuh"

namespace pyrms {

// The value that is quantized (see above); w is the weight as fp32.
template <typename T, bool ROUND_INPUT> __device__ __forceinline__ float normalized(T x, float w, float inv) {
    if constexpr (ROUND_INPUT) {
        return to_float(rms_scale<T, false, false>(x, w, inv));
    } else {
        return __fmul_rn(__fmul_rn(to_float(x), inv), w);
    }
}

// max |y| over the row, returned to every thread of the block: the row walked at x's own split (so its
// body vectors are the held ones), y(x, w) recomputed for each element.
template <typename T, int CACHE, int SPREAD, bool ALIGNED, typename Y>
__device__ __forceinline__ float row_amax(const RowShape<CACHE, SPREAD, ALIGNED>& sh, const T* x, const T* __restrict__ w,
                                          int n, const Pack<T> (&held)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                          const WeightVec<T, T> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS], Y y) {
    __shared__ float scratch[32];  // not the reduction's: no barrier needed after it
    float m = 0.0f;
    for_each_out<T, T, CACHE, SPREAD, ALIGNED, false, false>(
        sh, x, x, w, nullptr, n, held, held_w, [&](int i) { m = fmaxf(m, fabsf(y(x[i], weight_at(w, i)))); },
        [&](const Pack<T>& xv, const WeightVec<T, T>& wv, int, int) {
#pragma unroll
            for (int j = 0; j < Vec<T>::N; ++j) m = fmaxf(m, fabsf(y(xv.e[j], wv.at(j))));
        });
    return block_max(m, scratch, blockDim.x >> 5);
}

// Where a row's per-group scales go, and the groups' size.
struct GroupScales {
    // At most this many groups per row (hidden <= 65536 with groups of 64; pyrms.plan.MAX_GROUPS), so that a
    // row's group maxima fit in static shared memory.
    enum : int { MAX = 1024 };
    float* row;              // the scale of the row's group 0
    long long group_stride;  // fp32 elements from one group's scale to the next's
    int shift;               // log2 of the group size (6 or 7)
    bool ue8m0;              // scales rounded up to powers of two
};

// The maximum m of |y| over each group g of 2^shift elements of the row (hidden a multiple of it), replaced by
// per_group(g, m) in a shared array returned to every thread (after a barrier). fmaxf from 0: NaN is skipped,
// and the maximum is exact, so any order of the elements gives the same bits (no atomics needed either); what
// must be right is which group each element counts in, at any split.
// The row is walked at x's own split (its body vectors are the held ones) in steps of one vector per thread,
// vector j * B + lane at step j (load_held's order, then the re-read ones), so every lane of a warp takes
// part in every step: the V = G / N lanes that hold one group's vectors in a step (V divides 32, B is a
// multiple of 32) combine them in a butterfly over those lanes, and the first writes amax[g]. Groups start
// at element indices, not at the split: where the row has a prefix, the last vector of each group's V holds
// the first `pre` elements of the next group (its last N - pre are the group's), which that lane writes to
// spill[g + 1]; the prefix is group 0's (spill[0]) and the tail the last group's (spill[groups]), taken by
// warp 0 (both are shorter than a vector). Without a prefix there is no tail and nothing spills.
template <typename T, int CACHE, int SPREAD, bool ALIGNED, typename Y, typename PerGroup>
__device__ __forceinline__ const float* group_amax(const RowShape<CACHE, SPREAD, ALIGNED>& sh, const T* x,
                                                   const T* __restrict__ w, int n, int shift,
                                                   const Pack<T> (&held)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS], Y y,
                                                   PerGroup per_group) {
    constexpr int N = Vec<T>::N;
    constexpr int LOG_N = N == 8 ? 3 : 2;
    __shared__ float amax[GroupScales::MAX];
    __shared__ float spill[GroupScales::MAX + 1];
    const RowSplit s = sh.split(x, n);
    const int w_width = weight_width(sh, w, sh.phase(x));
    const int vshift = shift - LOG_N;  // log2 V
    const int V = 1 << vshift;
    const int u = sh.lane, B = sh.lanes;
    auto step = [&](const Pack<T>& xv, int v) {
        float own = 0.0f, next = 0.0f;
        if (v < s.vectors) {
            const int at = s.pre + v * N;
            const int kept = (((v >> vshift) + 1) << shift) - at;  // elements before the next group: N unless it crosses
            const WeightVec<T, T> wv = load_weights<T>(w, at, w_width);
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const float a = fabsf(y(xv.e[j], wv.at(j)));
                if (j < kept) {
                    own = fmaxf(own, a);
                } else {
                    next = fmaxf(next, a);
                }
            }
        }
        for (int o = V >> 1; o > 0; o >>= 1) own = fmaxf(own, __shfl_xor_sync(0xffffffffu, own, o));
        if (v < s.vectors) {
            if ((v & (V - 1)) == 0) amax[v >> vshift] = own;
            if ((v & (V - 1)) == V - 1 && s.pre > 0) spill[(v >> vshift) + 1] = next;
        }
    };
    constexpr int HELD = RowShape<CACHE, SPREAD, ALIGNED>::HELD;
#pragma unroll
    for (int k = 0; k < HELD; ++k) {
        if (k * B < s.vectors) step(held[k], k * B + u);
    }
    for (int j = HELD * B; j < s.vectors; j += B) {
        const int v = j + u;
        step(v < s.vectors ? load_aligned(x + s.pre + v * N) : Pack<T>{}, v);
    }
    if (threadIdx.x < 32 && s.pre > 0) {
        float p = u < s.pre ? fabsf(y(x[u], weight_at(w, u))) : 0.0f;
        float t = s.tail + u < n ? fabsf(y(x[s.tail + u], weight_at(w, s.tail + u))) : 0.0f;
        p = warp_reduce(p, MaxF{});
        t = warp_reduce(t, MaxF{});
        if (u == 0) {
            spill[0] = p;
            spill[n >> shift] = t;
        }
    }
    __syncthreads();
    const int groups = n >> shift;
    for (int g = u; g < groups; g += B) {
        const float m = s.pre > 0 ? fmaxf(fmaxf(amax[g], spill[g]), g == groups - 1 ? spill[groups] : 0.0f) : amax[g];
        amax[g] = per_group(g, m);
    }
    __syncthreads();
    return amax;
}

// Per group: each group's scale from its maximum, written to `scales`, then the row quantized through the
// factor (Scaled) of each element's group. The walk is write_row's (for_each_out and its stores), with an
// output step that needs the element's index, which write_row's hook does not see.
template <typename T, typename Q, int CACHE, int SPREAD, bool ALIGNED, bool STREAMING, bool EARLY_WEIGHTS, typename Y>
__device__ __forceinline__ void group_quant_write(const RowShape<CACHE, SPREAD, ALIGNED>& sh, Q* out_row, const T* x_row,
                                                  const T* __restrict__ w, int n,
                                                  const Pack<T> (&held)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                                  const WeightVec<T, T> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                                  Y y, const GroupScales& scales) {
    using Step = Scaled<Q, divide_for<Q, PER_GROUP>()>;
    const int shift = scales.shift;
    const float* factor = group_amax(sh, x_row, w, n, shift, held, y, [&](int g, float amax) {
        float s = dynamic_scale<Q>(amax);
        if (scales.ue8m0) s = pow2_ceil(s);
        scales.row[g * scales.group_stride] = s;
        return Step::factor(s);
    });
    for_each_out<T, T, CACHE, SPREAD, ALIGNED, false, EARLY_WEIGHTS>(
        sh, out_row, x_row, w, nullptr, n, held, held_w,
        [&](int i) { out_row[i] = Step::apply(y(x_row[i], weight_at(w, i)), factor[i >> shift]); },
        [&](const Pack<T>& xv, const WeightVec<T, T>& wv, int at, int) {
            OutPack<T, Q> q;
#pragma unroll
            for (int j = 0; j < Vec<T>::N; ++j) q.e[j] = Step::apply(y(xv.e[j], wv.at(j)), factor[(at + j) >> shift]);
            store_out<STREAMING>(out_row + at, q);
        });
}

// One row normalized from `src` and quantized into out_row. given: the static scale, or per-token's upper
// bound on amax (+inf: none); row_scale: where per-token writes the row's scale (a float*), or per group
// the row's GroupScales.
template <typename T, typename Q, int MODE, bool ROUND_INPUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS, bool ALIGNED,
          bool STREAMING, typename Src, typename Scales>
__device__ __forceinline__ void rms_norm_quant_row(Q* out_row, const T* x_row, const Src& src, const T* __restrict__ weight,
                                                   float epsilon, int hidden, float given, Scales row_scale) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED>;
    const Shape sh;
    Pack<T> held[Shape::SLOTS];
    WeightVec<T, T> held_w[Shape::SLOTS];
    const float inv = row_inv_rms<T, T, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(sh, out_row, x_row, src, weight, epsilon,
                                                                               hidden, held, held_w);
    const auto y = [inv](T x, float w) { return normalized<T, ROUND_INPUT>(x, w, inv); };
    if constexpr (MODE == PER_GROUP) {
        group_quant_write<T, Q, CACHE, SPREAD, ALIGNED, STREAMING, EARLY_WEIGHTS>(sh, out_row, x_row, weight, hidden,
                                                                                 held, held_w, y, row_scale);
    } else {
        float s = given;
        if constexpr (MODE == PER_TOKEN) {
            s = dynamic_scale<Q>(fminf(row_amax(sh, x_row, weight, hidden, held, held_w, y), given));
            if (threadIdx.x == 0) *row_scale = s;
        }
        const Scaled<Q, divide_for<Q, MODE>()> quantize(s);
        write_row<T, T, CACHE, SPREAD, ALIGNED, false, STREAMING, EARLY_WEIGHTS>(
            sh, out_row, x_row, weight, nullptr, hidden, held, held_w, [&](T x, float w, T) { return quantize(y(x, w)); });
    }
}

// given_ptr: where to read `given` instead (a device scale), or null.
template <typename T, typename Q, int MODE, bool ROUND_INPUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS, bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD)) rms_norm_quant_kernel(
    Q* out, const T* input, const T* __restrict__ weight, float* scales, const float* given_ptr, float given,
    float epsilon, int hidden, long long input_stride, long long out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    rms_norm_quant_row<T, Q, MODE, ROUND_INPUT, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED, true>(
        out_row, in_row, RowIn<T, true>{in_row}, weight, epsilon, hidden, given_ptr ? *given_ptr : given,
        scales + blockIdx.x);
}

template <typename T, typename Q, int MODE, bool ROUND_INPUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS, bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) fused_add_rms_norm_quant_kernel(
    Q* out, const T* input, T* residual, const T* __restrict__ weight, float* scales, const float* given_ptr,
    float given, float epsilon, int hidden, long long input_stride, long long residual_stride, long long out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* res_row = residual + static_cast<long long>(blockIdx.x) * residual_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    const AddedRow<T> sums{in_row, res_row,
                           ALIGNED ? 16 : load_width<T>((vec_phase(in_row) - vec_phase(res_row)) & (Vec<T>::N - 1))};
    rms_norm_quant_row<T, Q, MODE, ROUND_INPUT, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED, false>(
        out_row, res_row, sums, weight, epsilon, hidden, given_ptr ? *given_ptr : given, scales + blockIdx.x);
}

// Per group: scales of row r at scales + r * scale_row_stride + g * scale_group_stride; groups of 2^group_shift
// elements; ue8m0 != 0: power-of-two scales.
template <typename T, typename Q, bool ROUND_INPUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS, bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD)) rms_norm_group_quant_kernel(
    Q* out, const T* input, const T* __restrict__ weight, float* scales, long long scale_row_stride,
    long long scale_group_stride, float epsilon, int group_shift, int ue8m0, int hidden, long long input_stride,
    long long out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    const GroupScales row{scales + static_cast<long long>(blockIdx.x) * scale_row_stride, scale_group_stride,
                          group_shift, ue8m0 != 0};
    rms_norm_quant_row<T, Q, PER_GROUP, ROUND_INPUT, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED, true>(
        out_row, in_row, RowIn<T, true>{in_row}, weight, epsilon, hidden, 0.0f, row);
}

template <typename T, typename Q, bool ROUND_INPUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS, bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) fused_add_rms_norm_group_quant_kernel(
    Q* out, const T* input, T* residual, const T* __restrict__ weight, float* scales, long long scale_row_stride,
    long long scale_group_stride, float epsilon, int group_shift, int ue8m0, int hidden, long long input_stride,
    long long residual_stride, long long out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* res_row = residual + static_cast<long long>(blockIdx.x) * residual_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    const AddedRow<T> sums{in_row, res_row,
                           ALIGNED ? 16 : load_width<T>((vec_phase(in_row) - vec_phase(res_row)) & (Vec<T>::N - 1))};
    const GroupScales row{scales + static_cast<long long>(blockIdx.x) * scale_row_stride, scale_group_stride,
                          group_shift, ue8m0 != 0};
    rms_norm_quant_row<T, Q, PER_GROUP, ROUND_INPUT, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED, false>(
        out_row, res_row, sums, weight, epsilon, hidden, 0.0f, row);
}

}  // namespace pyrms
