// RMSNorm with a quantized output (fp8 e4m3fn / e5m2, int8), and the same after vLLM's residual add: the
// RMSNorm of rms_norm_row.cuh (the row core's two passes and reduction tree) with a quantizing output
// hook (quant.cuh) instead of the plain kernel's store.
//
//   y[r, i] = (x[r, i] * inv_rms[r]) * w_i                        in fp32 (default: one rounding, the last)
//   y[r, i] = float(round_T(round_T(x[r, i] * inv_rms[r]) * w_i)) ROUND_INPUT: what vLLM's kernels quantize
//                                                                 (the plain kernel's default output, as fp32)
//   STATIC:    q[r, i] = quantize(y[r, i], s), s one fp32 scale (an argument, or read from a pointer)
//   PER_TOKEN: s[r] = dynamic_scale(fminf(max_i |y[r, i]|, ub)) written to scales[r] (ub = +inf: none),
//              q[r, i] = quantize(y[r, i], s[r])
//   PER_GROUP: s[r, g] = dynamic_scale(max |y[r, i]| over i in [g*G, (g+1)*G)) (G = 64 or 128; UE8M0:
//              pow2_ceil of it) written at scales + r * scale_row_stride + g * scale_group_stride (row-
//              or column-major), q[r, i] = quantize(y[r, i], s[r, i / G])
//   (fused add) residual[r, i] <- round_T(input[r, i] + residual[r, i]), x = that rounded sum
//   (the unquantized fused add's semantics: the rounded sum is normalized; input is only read).
//   FP32_SUM:  (fused add, FlashInfer's fused_add_rmsnorm_quant) x = input[r, i] + residual[r, i] in fp32
//              (__fadd_rn), never rounded: it is what is normalized and quantized; residual[r, i] <- round_T(x)
//              (the unquantized fp32-sum kernel's, added_row.cuh's SummedRow). The tree is split at the
//              INPUT's boundaries, where pass 1 holds the sums; pass 2 rebuilds the others from input +
//              residual, so the residual is stored last (fused_add_quant_row).
//   NORM_OUT:  norm_out[r, i] = round_T(y[r, i]) beside q (rows of norm_out_stride): the plain kernel's output bit
//              for bit, its default rounding with ROUND_INPUT (y is that value), ROUND_ONCE's without.
//
// inv_rms, the reduction tree and the planner are the plain kernel's, so y's RMS is its bit for bit.
// Per token and per group, y is computed once for each element of the held vectors, right after inv_rms
// (held_y: kept in registers as fp32), and both the maximum and the quantizing store read it; the
// vectors not held, the prefix and the tail recompute y from x where each needs it (y is a function of
// x, w and inv only, so every computation of an element's y gives the same bits). The maximum is a second
// block reduction after inv_rms; it is exact, so its order does not matter. Per group, the maxima are
// taken over the group's elements wherever the row's split puts them (group_amax). Static mode has no
// maximum, so its store computes y once per element as it is (write_row). Output vectors are Vec<T>::N
// quantized elements (8 bytes beside bf16/fp16 rows, 4 beside fp32), split at out's own boundaries of
// that size (write_row), so every pointer may be misaligned independently.
//
// Kernels: rms_norm_quant_kernel and fused_add_rms_norm_quant_kernel (MODE STATIC or PER_TOKEN), and their
// per-group twins rms_norm_group_quant_kernel and fused_add_rms_norm_group_quant_kernel (the same row with
// MODE PER_GROUP; their own entry points because they take the scale layout and group size, which the
// others' arguments, and so their PTX, do without).
// Variants: T in {float, __half, __nv_bfloat16}; Q in {__nv_fp8_e4m3, __nv_fp8_e5m2, signed char (int8)}; MODE;
// ROUND_INPUT; NORM_OUT (a template flag, so that kernels without it keep their code and registers); FP32_SUM (the
// fused-add kernels; bf16/fp16 only: a float T's sum is never rounded, so the planner never sets it); CACHE,
// SPREAD, EARLY_WEIGHTS, ALIGNED as in the plain kernel. The weight is of T. Cache hints as the unquantized kernels
// (the plain kernel: streaming; fused add: none), not measured here.
#include "added_row.cuh"
#include "quant.cuh"
#include "rms_norm_row.cuh"

namespace pyrms {

// The value that is quantized (see above); w is the weight as fp32, x of T or an fp32 sum (FP32_SUM).
template <typename T, bool ROUND_INPUT, typename X> __device__ __forceinline__ float normalized(X x, float w, float inv) {
    if constexpr (ROUND_INPUT) {
        return to_float(rms_scale<T, false, false>(x, w, inv));
    } else {
        return __fmul_rn(__fmul_rn(to_float(x), inv), w);
    }
}

// y of one element, or of one vector of x with its weights (a WidePack: the N values as fp32), for the row's inv;
// x of T (a Pack) or fp32 sums (a WidePack).
template <typename T, bool ROUND_INPUT> struct Normalize {
    float inv;
    template <typename X> __device__ __forceinline__ float operator()(X x, float w) const {
        return normalized<T, ROUND_INPUT>(x, w, inv);
    }
    template <typename P> __device__ __forceinline__ WidePack<T> operator()(const P& x, const WeightVec<T, T>& wv) const {
        WidePack<T> y;
#pragma unroll
        for (int j = 0; j < Vec<T>::N; ++j) y.e[j] = normalized<T, ROUND_INPUT>(x.e[j], wv.at(j), inv);
        return y;
    }
};

// The y values of the thread's held vectors (x's split), each computed once: the maximum and the store read
// them instead of x (whose held packs are dead from here). held_w: their weights, loaded early at x's split
// (EARLY_WEIGHTS), else loaded here. fp32 even where ROUND_INPUT makes y a value of T, which would take half
// the registers beside bf16/fp16: both readers want fp32, so a pack of T would cost a conversion per element
// per reader, in kernels that are bound by instructions, and one layout serves both roundings.
template <typename T, bool EARLY_WEIGHTS, int CACHE, int SPREAD, bool ALIGNED, typename Y, typename H>
__device__ __forceinline__ void held_y(const RowShape<CACHE, SPREAD, ALIGNED>& sh, const T* x, const T* __restrict__ w,
                                       int n, const H (&held)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                       const WeightVec<T, T> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS], const Y& y,
                                       WidePack<T> (&ys)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS]) {
    constexpr int N = Vec<T>::N;
    const RowSplit s = sh.split(x, n);
    const int w_width = weight_width(sh, w, sh.phase(x));
#pragma unroll
    for (int k = 0; k < RowShape<CACHE, SPREAD, ALIGNED>::HELD; ++k) {
        const int v = sh.held_vector(k);
        if (v < s.vectors) ys[k] = y(held[k], EARLY_WEIGHTS ? held_w[k] : load_weights<T>(w, s.pre + v * N, w_width));
    }
}

// The row values pass 2 reads where it does not hold them, stored as they are normalized: the plain kernel's
// input, the rounded sum in the residual (the fp32 sum's are added_row.cuh's SummedRow, with the same members:
// the values re-read at `in` become sums(x, at), an element elem(i); at_split re-aims them at a walk's split).
template <typename T> struct StoredRow {
    const T* in;
    using Sums = Pack<T>;
    using Elem = T;
    __device__ __forceinline__ T elem(int i) const { return in[i]; }
    __device__ __forceinline__ Pack<T> sums(const Pack<T>& x, int) const { return x; }
    template <typename Shape, typename O> __device__ __forceinline__ StoredRow at_split(const Shape&, const O*) const {
        return *this;
    }
};

// for_each_out's body callback over y: it hands over a held vector (its y values, from held_y) or a re-read
// one (x's values, as Vals makes them, and weights, normalized here), and f(y, at) gets the y values either way. A
// struct with two overloads, not a generic lambda, for NVRTC 13.0 (added_row.cuh's SumsOf).
template <typename T, typename Y, typename Vals, typename F> struct OnY {
    const Y& y;
    const Vals& vals;
    const F& f;
    __device__ __forceinline__ void operator()(const WidePack<T>& v, const WeightVec<T, T>&, int at, int) const {
        f(v, at);
    }
    __device__ __forceinline__ void operator()(const Pack<T>& x, const WeightVec<T, T>& wv, int at, int) const {
        f(y(vals.sums(x, at), wv), at);
    }
};

// The row's y values walked at OUT's split (for_each_out): element(i, y) for each prefix and tail element,
// vector(y, at) (a WidePack) for each body vector. Where x shares out's phase, out's split is x's and the
// held vectors' y come from ys; otherwise every vector's is made from x re-read at out's split. (for_each_out
// also loads the held vectors' weights, which nothing reads: the compiler drops those loads.)
template <typename T, int CACHE, int SPREAD, bool ALIGNED, typename O, typename Vals, typename Y, typename Elem,
          typename Vector>
__device__ __forceinline__ void for_each_y(const RowShape<CACHE, SPREAD, ALIGNED>& sh, const O* out, const Vals& vals,
                                           const T* __restrict__ w, int n,
                                           const WidePack<T> (&ys)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                           const WeightVec<T, T> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                           const Y& y, Elem element, Vector vector) {
    const Vals at_out = vals.at_split(sh, out);
    for_each_out<T, T, CACHE, SPREAD, ALIGNED, false, false>(
        sh, out, vals.in, w, nullptr, n, ys, held_w, [&](int i) { element(i, y(at_out.elem(i), weight_at(w, i))); },
        OnY<T, Y, Vals, Vector>{y, at_out, vector});
}

// out[i] = f(x[i], w[i]) for the row's values x (as Vals makes them: of T, or fp32 sums), walked at OUT's split
// (for_each_out; O: T or a quantized type): write_row's store, over Vals' values, which pass 2 must rebuild from
// two rows where they are the fp32 sums. f takes Vals::Elem (T or float) and the weight as fp32.
template <typename T, int CACHE, int SPREAD, bool ALIGNED, bool STREAMING, bool EARLY_WEIGHTS, typename O, typename Vals,
          typename H, typename F>
__device__ __forceinline__ void write_values(const RowShape<CACHE, SPREAD, ALIGNED>& sh, O* out, const Vals& vals,
                                             const T* __restrict__ w, int n,
                                             const H (&held)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                             const WeightVec<T, T> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                             F f) {
    const Vals at_out = vals.at_split(sh, out);
    const auto vector = [&](const typename Vals::Sums& x, const WeightVec<T, T>& wv, int at, int) {
        OutPack<T, O> r;
#pragma unroll
        for (int j = 0; j < Vec<T>::N; ++j) r.e[j] = f(x.e[j], wv.at(j));
        store_out<STREAMING>(out + at, r);
    };
    for_each_out<T, T, CACHE, SPREAD, ALIGNED, false, EARLY_WEIGHTS>(
        sh, out, vals.in, w, nullptr, n, held, held_w, [&](int i) { out[i] = f(at_out.elem(i), weight_at(w, i)); },
        SumsOf<T, T, Vals, decltype(vector)>{at_out, vector});
}

// Out's body vector at `at` quantized from its y values through Step (a Scaled): the first `kept` elements
// with factor f, the rest with f_next (per group, the next group's, where the vector crosses into it; kept = N
// where one factor serves the whole vector), so a vector reads its factors once, not once per element.
template <bool STREAMING, typename Step, typename T, typename Q>
__device__ __forceinline__ void store_quantized(Q* out, int at, const WidePack<T>& y, float f, int kept, float f_next) {
    OutPack<T, Q> q;
#pragma unroll
    for (int j = 0; j < Vec<T>::N; ++j) q.e[j] = Step::apply(y.e[j], j < kept ? f : f_next);
    store_out<STREAMING>(out + at, q);
}

// NORM_OUT beside a dynamic mode: the row's y values rounded to T into norm_row, walked at norm_row's own
// split (for_each_y: the held vectors' y where norm_row shares x's phase, else y made from x re-read).
template <bool STREAMING, typename T, int CACHE, int SPREAD, bool ALIGNED, typename Vals, typename Y>
__device__ __forceinline__ void write_norm_out(const RowShape<CACHE, SPREAD, ALIGNED>& sh, T* norm_row, const Vals& vals,
                                               const T* __restrict__ w, int n,
                                               const WidePack<T> (&ys)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                               const WeightVec<T, T> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                               const Y& y) {
    for_each_y(
        sh, norm_row, vals, w, n, ys, held_w, y, [&](int i, float v) { norm_row[i] = from_float<T>(v); },
        [&](const WidePack<T>& v, int at) {
            OutPack<T, T> r;
#pragma unroll
            for (int j = 0; j < Vec<T>::N; ++j) r.e[j] = from_float<T>(v.e[j]);
            store_out<STREAMING>(norm_row + at, r);
        });
}

// max |y| over the row, returned to every thread of the block: the row walked at x's own split (so its
// body vectors are the held ones, whose y values are ys).
template <typename T, int CACHE, int SPREAD, bool ALIGNED, typename Vals, typename Y>
__device__ __forceinline__ float row_amax(const RowShape<CACHE, SPREAD, ALIGNED>& sh, const Vals& vals, const T* __restrict__ w,
                                          int n, const WidePack<T> (&ys)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                          const WeightVec<T, T> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                          const Y& y) {
    __shared__ float scratch[32];  // not the reduction's: no barrier needed after it
    float m = 0.0f;
    for_each_y(
        sh, vals.in, vals, w, n, ys, held_w, y, [&](int, float v) { m = fmaxf(m, fabsf(v)); },
        [&](const WidePack<T>& v, int) {
#pragma unroll
            for (int j = 0; j < Vec<T>::N; ++j) m = fmaxf(m, fabsf(v.e[j]));
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
// The row is walked at x's own split (its body vectors are the held ones, whose y values are ys; the others'
// are made from x as they are read) in steps of one vector per thread,
// vector j * B + lane at step j (load_held's order, then the re-read ones), so every lane of a warp takes
// part in every step: the V = G / N lanes that hold one group's vectors in a step (V divides 32, B is a
// multiple of 32) combine them in a butterfly over those lanes, and the first writes amax[g]. Groups start
// at element indices, not at the split: where the row has a prefix, the last vector of each group's V holds
// the first `pre` elements of the next group (its last N - pre are the group's), which that lane writes to
// spill[g + 1]; the prefix is group 0's (spill[0]) and the tail the last group's (spill[groups]), taken by
// warp 0 (both are shorter than a vector). Without a prefix there is no tail and nothing spills.
template <typename T, int CACHE, int SPREAD, bool ALIGNED, typename Vals, typename Y, typename PerGroup>
__device__ __forceinline__ const float* group_amax(const RowShape<CACHE, SPREAD, ALIGNED>& sh, const Vals& vals,
                                                   const T* __restrict__ w, int n, int shift,
                                                   const WidePack<T> (&ys)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                                   const Y& y, PerGroup per_group) {
    constexpr int N = Vec<T>::N;
    constexpr int LOG_N = N == 8 ? 3 : 2;
    __shared__ float amax[GroupScales::MAX];
    __shared__ float spill[GroupScales::MAX + 1];
    const T* x = vals.in;
    const RowSplit s = sh.split(x, n);
    const int w_width = weight_width(sh, w, sh.phase(x));
    const int vshift = shift - LOG_N;  // log2 V
    const int V = 1 << vshift;
    const int u = sh.lane, B = sh.lanes;
    auto step = [&](const WidePack<T>& yv, int v) {
        float own = 0.0f, next = 0.0f;
        if (v < s.vectors) {
            const int at = s.pre + v * N;
            const int kept = (((v >> vshift) + 1) << shift) - at;  // elements before the next group: N unless it crosses
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const float a = fabsf(yv.e[j]);
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
        if (k * B < s.vectors) step(ys[k], k * B + u);
    }
    for (int j = HELD * B; j < s.vectors; j += B) {
        const int v = j + u;
        const int at = s.pre + v * N;
        step(v < s.vectors ? y(vals.sums(load_aligned(x + at), at), load_weights<T>(w, at, w_width)) : WidePack<T>{}, v);
    }
    if (threadIdx.x < 32 && s.pre > 0) {
        float p = u < s.pre ? fabsf(y(vals.elem(u), weight_at(w, u))) : 0.0f;
        float t = s.tail + u < n ? fabsf(y(vals.elem(s.tail + u), weight_at(w, s.tail + u))) : 0.0f;
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
// factor (Scaled) of each element's group, read from shared memory once per group a vector touches (at most
// two: a vector of N <= G elements crosses at most one group boundary) and per prefix or tail element.
template <typename T, typename Q, int CACHE, int SPREAD, bool ALIGNED, bool STREAMING, typename Vals, typename Y>
__device__ __forceinline__ void group_quant_write(const RowShape<CACHE, SPREAD, ALIGNED>& sh, Q* out_row, const Vals& vals,
                                                  const T* __restrict__ w, int n,
                                                  const WidePack<T> (&ys)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                                  const WeightVec<T, T> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                                  const Y& y, const GroupScales& scales) {
    using Step = Scaled<Q, divide_for<Q, PER_GROUP>()>;
    const int shift = scales.shift;
    const float* factor = group_amax(sh, vals, w, n, shift, ys, y, [&](int g, float amax) {
        float s = dynamic_scale<Q>(amax);
        if (scales.ue8m0) s = pow2_ceil(s);
        scales.row[g * scales.group_stride] = s;
        return Step::factor(s);
    });
    for_each_y(
        sh, out_row, vals, w, n, ys, held_w, y, [&](int i, float v) { out_row[i] = Step::apply(v, factor[i >> shift]); },
        [&](const WidePack<T>& v, int at) {
            const int g = at >> shift;
            const int kept = ((g + 1) << shift) - at;  // elements in group g: N unless the vector crosses into g + 1
            const float f = factor[g];
            store_quantized<STREAMING, Step>(out_row, at, v, f, kept, kept < Vec<T>::N ? factor[g + 1] : f);
        });
}

// One row normalized from `src` and quantized into out_row (and with NORM_OUT, y rounded to T into norm_row).
// vals: the row's values where pass 2 re-reads them (StoredRow, or the fp32 sums' SummedRow); pass 1 holds
// src's packs (Pack<T>, or the fp32 sums' WidePack<T>) at vals.in's split.
// given: the static scale, or per-token's upper bound on amax (+inf: none); row_scale: where per-token writes
// the row's scale (a float*), or per group the row's GroupScales.
template <typename T, typename Q, int MODE, bool ROUND_INPUT, bool NORM_OUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS,
          bool ALIGNED, bool STREAMING, typename Vals, typename Src, typename Scales>
__device__ __forceinline__ void rms_norm_quant_row(Q* out_row, T* norm_row, const Vals& vals, const Src& src,
                                                   const T* __restrict__ weight, float epsilon, int hidden, float given,
                                                   Scales row_scale) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED>;
    using X = typename Vals::Elem;
    const Shape sh;
    const T* x_row = vals.in;
    typename Vals::Sums held[Shape::SLOTS];
    WeightVec<T, T> held_w[Shape::SLOTS];
    if constexpr (MODE == STATIC) {
        const float inv = row_inv_rms<T, T, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(sh, out_row, x_row, src, weight,
                                                                                   epsilon, hidden, held, held_w);
        const Scaled<Q, divide_for<Q, MODE>()> quantize(given);
        write_values<T, CACHE, SPREAD, ALIGNED, STREAMING, EARLY_WEIGHTS>(
            sh, out_row, vals, weight, hidden, held, held_w,
            [&](X x, float w) { return quantize(normalized<T, ROUND_INPUT>(x, w, inv)); });
        if constexpr (NORM_OUT) {
            // The plain kernel's store (round_T(y) is rms_scale's value for either rounding). The early weights were
            // loaded at out_row's split, which is norm_row's only where every pointer is aligned.
            write_values<T, CACHE, SPREAD, ALIGNED, STREAMING, EARLY_WEIGHTS && ALIGNED>(
                sh, norm_row, vals, weight, hidden, held, held_w,
                [&](X x, float w) { return rms_scale<T, false, !ROUND_INPUT>(x, w, inv); });
        }
    } else {
        // The held weights at x's split (out_row = x_row for load_held_weights), where held_y uses them.
        const float inv = row_inv_rms<T, T, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(sh, x_row, x_row, src, weight,
                                                                                   epsilon, hidden, held, held_w);
        const Normalize<T, ROUND_INPUT> y{inv};
        WidePack<T> ys[Shape::SLOTS];
        held_y<T, EARLY_WEIGHTS>(sh, x_row, weight, hidden, held, held_w, y, ys);
        if constexpr (MODE == PER_GROUP) {
            group_quant_write<T, Q, CACHE, SPREAD, ALIGNED, STREAMING>(sh, out_row, vals, weight, hidden, ys, held_w, y,
                                                                      row_scale);
        } else {
            const float s = dynamic_scale<Q>(fminf(row_amax(sh, vals, weight, hidden, ys, held_w, y), given));
            if (threadIdx.x == 0) *row_scale = s;
            using Step = Scaled<Q, divide_for<Q, MODE>()>;
            const Step quantize(s);
            for_each_y(
                sh, out_row, vals, weight, hidden, ys, held_w, y, [&](int i, float v) { out_row[i] = quantize(v); },
                [&](const WidePack<T>& v, int at) {
                    store_quantized<STREAMING, Step>(out_row, at, v, quantize.f, Vec<T>::N, quantize.f);
                });
        }
        if constexpr (NORM_OUT) write_norm_out<STREAMING>(sh, norm_row, vals, weight, hidden, ys, held_w, y);
    }
}

// The row after the residual add, in either semantics (FP32_SUM: the fp32 sum; else the rounded one, stored by
// pass 1 and re-read from the residual). The fp32 sum's residual is stored last, after a barrier: pass 2 reads the
// old residual (rebuilding sums it does not hold) at the outputs' splits, by other threads than the input's split
// gives the elements to, so no thread may store before every thread is done reading. Its held sums take twice the
// registers of bf16/fp16 packs: a thread that holds two of them in a block of 1024 threads (64 registers: the
// few-row shape CACHE 4, SPREAD 2) spilled with their early weights beside them, so that shape loads its weights
// in pass 2 (the same values: only when they are loaded changes).
template <typename T, typename Q, int MODE, bool ROUND_INPUT, bool NORM_OUT, bool FP32_SUM, int CACHE, int SPREAD,
          bool EARLY_WEIGHTS, bool ALIGNED, typename Scales>
__device__ __forceinline__ void fused_add_quant_row(Q* out_row, T* norm_row, const T* in_row, T* res_row,
                                                    const T* __restrict__ weight, float epsilon, int hidden, float given,
                                                    Scales row_scale) {
    constexpr int N = Vec<T>::N;
    if constexpr (FP32_SUM) {
        const SummedRow<T, T> sums{in_row, res_row,
                                   ALIGNED ? 16 : load_width<T>((vec_phase(res_row) - vec_phase(in_row)) & (N - 1))};
        rms_norm_quant_row<T, Q, MODE, ROUND_INPUT, NORM_OUT, CACHE, SPREAD, EARLY_WEIGHTS && CACHE / SPREAD < 2, ALIGNED,
                           false>(
            out_row, norm_row, sums, sums, weight, epsilon, hidden, given, row_scale);
        __syncthreads();
        store_summed_row<CACHE, SPREAD, ALIGNED>(sums, res_row, hidden);
    } else {
        const AddedRow<T> sums{in_row, res_row,
                               ALIGNED ? 16 : load_width<T>((vec_phase(in_row) - vec_phase(res_row)) & (N - 1))};
        rms_norm_quant_row<T, Q, MODE, ROUND_INPUT, NORM_OUT, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED, false>(
            out_row, norm_row, StoredRow<T>{res_row}, sums, weight, epsilon, hidden, given, row_scale);
    }
}

// Blocks per SM a kernel is compiled to fit (its launch bounds). Per token and per group keep each held vector's
// y (fp32) beside it, and ptxas took them to 96-102 registers, a quarter of the SM's warps: per token at
// 16384x5120 ran 242 us under Nsight Compute on the H200, 173 us held to 64 registers (docs/perf_notes.md).
// So they fit 1024 threads' worth of their largest block per SM (64 registers at any block size); static
// keeps ptxas's own choice.
// The fp32 sum's kernels (FP32_SUM) hold twice the bytes of bf16/fp16 rows in pass 1 and rebuild the sums they do
// not hold from two rows: they spill at 64 registers, so they keep ptxas's own choice too.
template <int MODE, bool FP32_SUM = false> __host__ __device__ constexpr int min_blocks(int held) {
    return MODE == STATIC || FP32_SUM ? 1 : 1024 / max_threads(held);
}

// given_ptr: where to read `given` instead (a device scale), or null. norm_out (rows of norm_out_stride): written
// with NORM_OUT only; the launches without it pass null (and hidden).
template <typename T, typename Q, int MODE, bool ROUND_INPUT, bool NORM_OUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS,
          bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), min_blocks<MODE>(CACHE / SPREAD)) rms_norm_quant_kernel(
    Q* out, T* norm_out, const T* input, const T* __restrict__ weight, float* scales, const float* given_ptr, float given,
    float epsilon, int hidden, long long input_stride, long long out_stride, long long norm_out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    T* norm_row = norm_out + static_cast<long long>(blockIdx.x) * norm_out_stride;
    rms_norm_quant_row<T, Q, MODE, ROUND_INPUT, NORM_OUT, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED, true>(
        out_row, norm_row, StoredRow<T>{in_row}, RowIn<T, true>{in_row}, weight, epsilon, hidden,
        given_ptr ? *given_ptr : given, scales + blockIdx.x);
}

template <typename T, typename Q, int MODE, bool ROUND_INPUT, bool NORM_OUT, bool FP32_SUM, int CACHE, int SPREAD,
          bool EARLY_WEIGHTS, bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), min_blocks<MODE, FP32_SUM>(CACHE / SPREAD)) fused_add_rms_norm_quant_kernel(
    Q* out, T* norm_out, const T* input, T* residual, const T* __restrict__ weight, float* scales, const float* given_ptr,
    float given, float epsilon, int hidden, long long input_stride, long long residual_stride, long long out_stride,
    long long norm_out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* res_row = residual + static_cast<long long>(blockIdx.x) * residual_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    T* norm_row = norm_out + static_cast<long long>(blockIdx.x) * norm_out_stride;
    fused_add_quant_row<T, Q, MODE, ROUND_INPUT, NORM_OUT, FP32_SUM, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED>(
        out_row, norm_row, in_row, res_row, weight, epsilon, hidden, given_ptr ? *given_ptr : given, scales + blockIdx.x);
}

// Per group: scales of row r at scales + r * scale_row_stride + g * scale_group_stride; groups of 2^group_shift
// elements; ue8m0 != 0: power-of-two scales.
template <typename T, typename Q, bool ROUND_INPUT, bool NORM_OUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS, bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), min_blocks<PER_GROUP>(CACHE / SPREAD)) rms_norm_group_quant_kernel(
    Q* out, T* norm_out, const T* input, const T* __restrict__ weight, float* scales, long long scale_row_stride,
    long long scale_group_stride, float epsilon, int group_shift, int ue8m0, int hidden, long long input_stride,
    long long out_stride, long long norm_out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    T* norm_row = norm_out + static_cast<long long>(blockIdx.x) * norm_out_stride;
    const GroupScales row{scales + static_cast<long long>(blockIdx.x) * scale_row_stride, scale_group_stride,
                          group_shift, ue8m0 != 0};
    rms_norm_quant_row<T, Q, PER_GROUP, ROUND_INPUT, NORM_OUT, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED, true>(
        out_row, norm_row, StoredRow<T>{in_row}, RowIn<T, true>{in_row}, weight, epsilon, hidden, 0.0f, row);
}

template <typename T, typename Q, bool ROUND_INPUT, bool NORM_OUT, bool FP32_SUM, int CACHE, int SPREAD, bool EARLY_WEIGHTS,
          bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), min_blocks<PER_GROUP, FP32_SUM>(CACHE / SPREAD)) fused_add_rms_norm_group_quant_kernel(
    Q* out, T* norm_out, const T* input, T* residual, const T* __restrict__ weight, float* scales, long long scale_row_stride,
    long long scale_group_stride, float epsilon, int group_shift, int ue8m0, int hidden, long long input_stride,
    long long residual_stride, long long out_stride, long long norm_out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* res_row = residual + static_cast<long long>(blockIdx.x) * residual_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    T* norm_row = norm_out + static_cast<long long>(blockIdx.x) * norm_out_stride;
    const GroupScales row{scales + static_cast<long long>(blockIdx.x) * scale_row_stride, scale_group_stride,
                          group_shift, ue8m0 != 0};
    fused_add_quant_row<T, Q, PER_GROUP, ROUND_INPUT, NORM_OUT, FP32_SUM, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED>(
        out_row, norm_row, in_row, res_row, weight, epsilon, hidden, 0.0f, row);
}

}  // namespace pyrms
