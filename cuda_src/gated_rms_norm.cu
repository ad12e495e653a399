// Gated RMSNorm forward (Mamba2's and the gated DeltaNet's output norm): the RMSNorm of x gated by silu(z), per
// group of `group_size` consecutive columns. The semantics of mamba_ssm's rmsnorm_fn (its _layer_norm_fwd with
// is_rms_norm, no bias), which vLLM's RMSNormGated reproduces:
//
//   norm_before_gate (NORM_BEFORE_GATE):  out[r, i] = round_T( ((x[r, i] * inv[r, g]) * w_i) * silu(z[r, i]) )
//   otherwise (Mamba2's default order):    out[r, i] = round_T( (gx[r, i] * inv[r, g]) * w_i ),
//                                          gx[r, i] = x[r, i] * silu(z[r, i])
//   inv[r, g] = 1 / sqrt(sum of v[r, i]^2 over the columns i of group g / group_size + eps),  v = x (or gx)
//   silu(z) = z * sigmoid(z),  sigmoid(z) = 1 / (1 + exp(-z))
//   w_i = weight[i] (the rows' dtype or fp32), or 1 without a weight
//
// Rounding: as the peer's Triton kernel, everything is fp32 from the loads to the store: z's and x's values are
// read as fp32, gx is never rounded to T, and the output is rounded to T once. Every product, sum and reciprocal
// is one correctly rounded fp32 operation (__fmul_rn, __fadd_rn, reciprocal_in_range; no contraction), and
// gate_exp's fused multiply-adds are explicit (__fmaf_rn). The peer's sigmoid evaluates exp through the hardware's
// approximate exp2 (ex2.approx); gate_exp (gate.cuh) builds exp from operations that round once each, so the numpy
// twin (pyrms.ops.gated_rms_norm.twin) reproduces it bit for bit; results may differ from the peer's in the last
// bits. The peer's own bias and its LayerNorm mode are not offered.
//
// The reduction: each (row r, group g) is one row of the row core (row_core.cuh), `group_size` elements at
// x + r * x_stride + g * group_size, planned from (dtype, group_size) as the RMSNorm row is from (dtype, hidden):
// the sum of squares is the RMSNorm row's tree for (dtype, group_size, the group's alignment), whichever launch
// shape ran it, and with group_size = hidden (one group) it is the RMSNorm row's tree of the whole row. One block
// per (row, group), blockIdx.x = r * groups + g; a group never spans blocks, so no cross-block reduction is needed.
// The sum is split at x's 16-byte boundaries; z is loaded in pass 1 beside each vector of x that the thread holds
// (both orders), at the widest width its alignment relative to x allows, and in pass 2 beside the rest, relative to
// out. With NORM_BEFORE_GATE off, pass 1 computes gx (GatedRow: held as fp32 vectors,
// as the fused add's fp32 sum is, added_row.cuh) and pass 2 recomputes it (the same operations, the same bits)
// where the vectors it writes are not the held ones.
//
// Variants (template parameters): T in {float, __half, __nv_bfloat16}; CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED as in
// rms_norm.cu (the row core's launch shapes: the same bits); NORM_BEFORE_GATE; W, the weight's type (T, float
// beside bf16/fp16 rows, or void: no weight). ALIGNED: x, z, out and the weight 16-byte aligned and group_size and
// every row stride whole vectors. out must be disjoint from x, z and the weight (checked by the op).
#include "gate.cuh"

namespace pyrms {

// Pass 1's held vector of the norm-first order: x's values (the sum of squares reads them, as a Pack<T>) and z's at
// the same elements, loaded together so that the gate's loads are in flight with the row's, not after its reduction.
template <typename T> struct WithZ : Pack<T> {
    Pack<T> z;
};

// Pass 1's Source of the norm-first order: x as RowIn reads it (on its own 16-byte split), and z beside each held
// vector at z_width (the widest load its alignment relative to x allows); the vectors not held are re-read in
// pass 2, z with them.
template <typename T> struct XAndZRow : RowIn<T, true> {
    const T* z;
    int z_width;
    __device__ __forceinline__ WithZ<T> held(int at) const {
        WithZ<T> v;
        static_cast<Pack<T>&>(v) = RowIn<T, true>::held(at);
        v.z = load_pack(z + at, z_width);
        return v;
    }
};

// Asks for the 128-byte line at p to be brought into L2 (prefetch.global.L2): no register waits for it.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Pass 1's Source of the norm-first order where z is not held: x as RowIn reads it, and z's line beside each vector
// of x read asked into L2, so that pass 2's loads of z wait for L2, not for memory.
template <typename T> struct XPrefetchZRow : RowIn<T, true> {
    const T* z;
    __device__ __forceinline__ Pack<T> held(int at) const {
        prefetch_l2(z + at);
        return RowIn<T, true>::held(at);
    }
    __device__ __forceinline__ Pack<T> vec(int at) const {
        prefetch_l2(z + at);
        return RowIn<T, true>::vec(at);
    }
};

// Pass 1 of the norm-first order: z held beside x (HOLD_Z), or x alone with z prefetched into L2.
template <typename T, bool HOLD_Z> struct NormFirstPass1 {
    using Held = WithZ<T>;
    __device__ __forceinline__ static XAndZRow<T> source(const T* x, const T* z, int z_width) {
        return {{x}, z, z_width};
    }
};
template <typename T> struct NormFirstPass1<T, false> {
    using Held = Pack<T>;
    __device__ __forceinline__ static XPrefetchZRow<T> source(const T* x, const T* z, int) { return {{x}, z}; }
};

// for_each_out's body callback for the norm-first order: a held vector brings its z, a re-read one loads it (at
// z_width, the width of pass 2's split, out's). A struct with two overloads, as SumsOf (added_row.cuh) says why.
template <typename T, typename W, typename F> struct WithItsZ {
    const T* z;
    int z_width;
    const F& f;
    __device__ __forceinline__ void operator()(const WithZ<T>& v, const WeightVec<T, W>& wv, int at, int) const {
        f(v, v.z, wv, at);
    }
    __device__ __forceinline__ void operator()(const Pack<T>& v, const WeightVec<T, W>& wv, int at, int) const {
        f(v, load_pack(z + at, z_width), wv, at);
    }
};

// norm_before_gate: inv from x itself (the RMSNorm row's pass 1, z loaded beside x), then
// out = ((x * inv) * w) * silu(z). z is held only by shapes whose threads hold one vector of x (the few-row ones):
// with more, its registers cost the many-row shape occupancy and made the 2-way spread shape spill.
template <typename T, typename W, int CACHE, int SPREAD, bool ALIGNED, bool EARLY_WEIGHTS>
__device__ __forceinline__ void norm_then_gate_row(T* out, const T* x, const T* z, const W* __restrict__ w,
                                                   float epsilon, int n) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED>;
    using Pass1 = NormFirstPass1<T, Shape::HELD == 1>;
    const Shape sh;
    const auto src = Pass1::source(x, z, load_width<T>((sh.phase(z) - sh.phase(x)) & (Vec<T>::N - 1)));
    typename Pass1::Held held[Shape::SLOTS];
    WeightVec<T, W> held_w[Shape::SLOTS];
    const float inv = row_inv_rms<T, W, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(sh, out, x, src, w, epsilon, n, held,
                                                                               held_w);
    const auto y = [inv](float xv, float wv, float zv) {
        return from_float<T>(__fmul_rn(rms_scale<T, false, true, float>(xv, wv, inv), silu(zv)));
    };
    const auto body = [&](const Pack<T>& xv, const Pack<T>& zv, const WeightVec<T, W>& wv, int at) {
        Pack<T> o;
#pragma unroll
        for (int j = 0; j < Vec<T>::N; ++j) o.e[j] = y(to_float(xv.e[j]), wv.at(j), to_float(zv.e[j]));
        store_streaming(out + at, o);
    };
    for_each_out<T, W, CACHE, SPREAD, ALIGNED, false, EARLY_WEIGHTS>(
        sh, out, x, w, nullptr, n, held, held_w,
        [&](int i) { out[i] = y(to_float(x[i]), weight_at(w, i), to_float(z[i])); },
        WithItsZ<T, W, decltype(body)>{z, load_width<T>((sh.phase(z) - sh.phase(out)) & (Vec<T>::N - 1)), body});
}

// The gate first: inv from gx = x * silu(z), then out = (gx * inv) * w (rms_scale rounding once).
template <typename T, typename W, int CACHE, int SPREAD, bool ALIGNED, bool EARLY_WEIGHTS>
__device__ __forceinline__ void gate_then_norm_row(T* out, const T* x, const T* z, const W* __restrict__ w,
                                                   float epsilon, int n) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED>;
    const Shape sh;
    const GatedRow<T> src{x, z, ALIGNED ? 16 : load_width<T>((sh.phase(z) - sh.phase(x)) & (Vec<T>::N - 1))};
    WidePack<T> held[Shape::SLOTS];
    WeightVec<T, W> held_w[Shape::SLOTS];
    const float inv = row_inv_rms<T, W, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(sh, out, x, src, w, epsilon, n, held,
                                                                               held_w);
    const GatedRow<T> at_out = src.at_split(sh, out);
    const auto body = [&](const WidePack<T>& g, const WeightVec<T, W>& wv, int at, int) {
        Pack<T> o;
#pragma unroll
        for (int j = 0; j < Vec<T>::N; ++j) o.e[j] = rms_scale<T, false, true>(g.e[j], wv.at(j), inv);
        store_streaming(out + at, o);
    };
    for_each_out<T, W, CACHE, SPREAD, ALIGNED, false, EARLY_WEIGHTS>(
        sh, out, x, w, nullptr, n, held, held_w,
        [&](int i) { out[i] = rms_scale<T, false, true>(src.elem(i), weight_at(w, i), inv); },
        SumsOf<T, W, GatedRow<T>, decltype(body)>{at_out, body});
}

// 64 registers a thread in every shape: blocks of up to max_threads(held) threads, 1024 / that many per SM. The
// gate makes the kernel issue-bound, so resident warps matter: held to 64, a many-row block of 128 threads runs
// eight to an SM (six at the 77 ptxas takes unbounded). No variant spills at 64 (at 40, the many-row ones do;
// ptxas -v; tests/ops/gated_rms_norm compiles every variant).
template <typename T, int CACHE, int SPREAD, bool NORM_BEFORE_GATE, bool EARLY_WEIGHTS, bool ALIGNED, typename W = T>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1024 / max_threads(CACHE / SPREAD)) gated_rms_norm_kernel(
    T* out, const T* x, const T* z, const W* __restrict__ weight, float epsilon, int group_size, int groups,
    long long x_stride, long long z_stride, long long out_stride) {
    begin_dependent_grid();
    const int r = blockIdx.x / groups;
    const long long col = static_cast<long long>(blockIdx.x - r * groups) * group_size;
    T* out_row = out + r * out_stride + col;
    const T* x_row = x + r * x_stride + col;
    const T* z_row = z + r * z_stride + col;
    if constexpr (NORM_BEFORE_GATE) {
        norm_then_gate_row<T, W, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(out_row, x_row, z_row, weight_row(weight, col),
                                                                        epsilon, group_size);
    } else {
        gate_then_norm_row<T, W, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(out_row, x_row, z_row, weight_row(weight, col),
                                                                        epsilon, group_size);
    }
}

}  // namespace pyrms
