// The residual add as a row core Source (row_core.cuh), in the two semantics peers differ on:
//
// AddedRow, the rounded sum (vLLM's fused residual add; the default): pass 1 reads input + residual,
// rounds each sum to T once (__fadd_rn in fp32, then one rounding) and stores it into the residual as it
// is made; pass 2 re-reads the sums from the residual. Used by the residual-add kernels, plain and quantizing.
//
// SummedRow, the fp32 sum (FlashInfer's and SGLang's fused_add_rmsnorm; with an fp32 residual R = float,
// QuACK's and Transformer Engine's residual stream): s = input + residual in fp32 (__fadd_rn) is what is
// normalized, never rounded first; the residual gets R(s), rounded to T where R = T, exact where R = float.
// Pass 1 only reads: the fp32 sums are in registers only, so the residual must keep its old values until
// pass 2 has rebuilt the sums it does not hold from input + residual again (the same adds, the same bits:
// QuACK reloads its row the same way). fp32_sum_rms_norm_row below is that pass 2.
#pragma once
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

// ---- The fp32 sum ---------------------------------------------------------------------------------

// One vector of a row of T (Vec<T>::N elements) as fp32 values: the held pack of SummedRow.
template <typename T> struct alignas(16) WidePack {
    enum { N = Vec<T>::N };
    float e[N];
};

// The fp32 sums x + r of the N elements of x and those at r (`r_width`-byte aligned): as many loads of
// R's 16-byte vectors as cover them (two of an fp32 residual beside 2-byte rows).
template <typename T, typename R>
__device__ __forceinline__ WidePack<T> add_fp32(const Pack<T>& x, const R* r, int r_width) {
    WidePack<T> s;
#pragma unroll
    for (int q = 0; q < Vec<T>::N; q += Vec<R>::N) {
        const Pack<R> rv = load_pack(r + q, r_width);
#pragma unroll
        for (int j = 0; j < Vec<R>::N; ++j) s.e[q + j] = __fadd_rn(to_float(x.e[q + j]), to_float(rv.e[j]));
    }
    return s;
}

// r <- R(s), N elements at r (`r_width`-byte aligned): add_fp32's mirror.
template <typename T, typename R> __device__ __forceinline__ void store_sums(R* r, const WidePack<T>& s, int r_width) {
#pragma unroll
    for (int q = 0; q < Vec<T>::N; q += Vec<R>::N) {
        Pack<R> rv;
#pragma unroll
        for (int j = 0; j < Vec<R>::N; ++j) rv.e[j] = from_float<R>(s.e[q + j]);
        store_pack(r + q, rv, r_width);
    }
}

// Pass 1's Source of the fp32 sum, on the row split at the INPUT's 16-byte boundaries (so that pass 2,
// which writes the input, finds its body vectors held); the residual is read at the widest width its
// alignment relative to the input allows.
template <typename T, typename R> struct SummedRow {
    const T* in;
    const R* res;
    int res_width;
    __device__ __forceinline__ WidePack<T> held(int at) const { return add_fp32(load_aligned(in + at), res + at, res_width); }
    __device__ __forceinline__ void keep(int, const WidePack<T>&) const {}
    __device__ __forceinline__ WidePack<T> vec(int at) const { return held(at); }
    __device__ __forceinline__ float elem(int at) const { return __fadd_rn(to_float(in[at]), to_float(res[at])); }
    // The sums of pass 2's vector at `at`: held, or rebuilt from the input's values re-read there.
    using Sums = WidePack<T>;
    using Elem = float;
    __device__ __forceinline__ WidePack<T> sums(const WidePack<T>& held_sums, int) const { return held_sums; }
    __device__ __forceinline__ WidePack<T> sums(const Pack<T>& x, int at) const { return add_fp32(x, res + at, res_width); }
    // The same sums for a pass 2 that walks another operand's split (rms_norm_quant.cu's outputs): the residual's
    // load width for body vectors that start where `out` is vector-aligned (out of any type, in vectors of T's N).
    template <typename Shape, typename O> __device__ __forceinline__ SummedRow at_split(const Shape& sh, const O* out) const {
        return {in, res, load_width<R>((sh.phase(res) - sh.template phase<O, Vec<T>::N>(out)) & (Vec<R>::N - 1))};
    }
};

// for_each_out's body callback for the fp32 sum: it hands over a held vector (the sums, as WidePack) or
// a re-read one (the input's values, as Pack), and f gets the sums either way (src.sums). A struct with
// two overloads, not a generic lambda: NVRTC 13.0 takes a generic lambda's operator() for a host function
// ("host functions are not allowed in JIT mode", on the GPU machine), where 13.5 does not.
template <typename T, typename W, typename Src, typename F> struct SumsOf {
    const Src& src;
    const F& f;
    __device__ __forceinline__ void operator()(const WidePack<T>& v, const WeightVec<T, W>& wv, int at, int b) const {
        f(src.sums(v, at), wv, at, b);
    }
    __device__ __forceinline__ void operator()(const Pack<T>& v, const WeightVec<T, W>& wv, int at, int b) const {
        f(src.sums(v, at), wv, at, b);
    }
};

// The fused add of one row with the fp32 sum, in place: residual <- R(s), input <- rms_scale(s, w, inv),
// inv from the sums of squares of s in the row core's tree (the input's split). Pass 2 walks the input's
// split (for_each_out, x = out = the input), each element read and written by one thread.
template <typename T, typename W, typename R, int CACHE, int SPREAD, bool ALIGNED, bool GEMMA, bool ROUND_ONCE,
          bool EARLY_WEIGHTS>
__device__ __forceinline__ void fp32_sum_rms_norm_row(T* in_row, R* res_row, const W* __restrict__ weight, float epsilon,
                                                      int hidden) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED>;
    const Shape sh;
    // (phase(res) - phase(in)) mod R's vector: the same for every body vector of the input's split.
    const int res_width =
        ALIGNED ? 16 : load_width<R>((vec_phase(res_row) - vec_phase(in_row)) & (Vec<R>::N - 1));
    const SummedRow<T, R> src{in_row, res_row, res_width};
    WidePack<T> held[Shape::SLOTS];
    WeightVec<T, W> held_w[Shape::SLOTS];
    const float inv = row_inv_rms<T, W, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(sh, in_row, in_row, src, weight, epsilon,
                                                                               hidden, held, held_w);
    // Pass 2's body vector at `at`, given its fp32 sums (SumsOf rebuilds them from what for_each_out hands over).
    const auto body = [&](const WidePack<T>& s, const WeightVec<T, W>& wv, int at, int) {
        store_sums(res_row + at, s, res_width);
        Pack<T> y;
#pragma unroll
        for (int j = 0; j < Vec<T>::N; ++j) y.e[j] = rms_scale<T, GEMMA, ROUND_ONCE>(s.e[j], wv.at(j), inv);
        store_aligned(in_row + at, y);
    };
    for_each_out<T, W, CACHE, SPREAD, ALIGNED, false, EARLY_WEIGHTS>(
        sh, in_row, in_row, weight, nullptr, hidden, held, held_w,
        [&](int i) {
            const float s = src.elem(i);
            res_row[i] = from_float<R>(s);
            in_row[i] = rms_scale<T, GEMMA, ROUND_ONCE>(s, weight_at(weight, i), inv);
        },
        SumsOf<T, W, SummedRow<T, R>, decltype(body)>{src, body});
}

// The residual's new values R(s) over the row, each sum rebuilt from input + residual by the thread that stores it
// (the input's split): for a kernel whose pass 2 reads the old residual at other splits than the input's, so that
// no store may come before the block's last such read (rms_norm_quant.cu's fp32 sum: it calls this after a barrier).
template <int CACHE, int SPREAD, bool ALIGNED, typename T, typename R>
__device__ __forceinline__ void store_summed_row(const SummedRow<T, R>& src, R* res_row, int n) {
    constexpr int N = Vec<T>::N;
    const RowShape<CACHE, SPREAD, ALIGNED> sh;
    const RowSplit s = sh.split(src.in, n);
    const int u = sh.lane;
    if (u < s.pre) res_row[u] = from_float<R>(src.elem(u));
    if (s.tail + u < n) res_row[s.tail + u] = from_float<R>(src.elem(s.tail + u));
    for (int v = u; v < s.vectors; v += sh.lanes) store_sums(res_row + s.pre + v * N, src.held(s.pre + v * N), src.res_width);
}

}  // namespace pyrms
