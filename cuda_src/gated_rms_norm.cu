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
// approximate exp2 (ex2.approx); gate_exp below builds exp from operations that round once each, so the numpy
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
#include "added_row.cuh"

namespace pyrms {

// exp(a) for the sigmoid, for a <= 87 (silu below sets the sigmoid to 0 above), from correctly rounded fp32
// operations and fused multiply-adds (each one rounding; pyrms.ops._fma_twin reproduces them in numpy): a is first
// raised to -86 at least (fmaxf: NaN becomes -86, and the product with z keeps it NaN); below -86, 1 + exp(a) is 1
// in fp32, as it is from a < -17 on, so the sigmoid is unchanged. Then a = k ln2 + r: k = round(a log2 e) by the
// 1.5 * 2^23 shifter (fmaf(a, log2 e, 1.5 * 2^23): the product unrounded, the sum rounded to an integer, ties to
// even), r = a - k ln2 by Cody-Waite with ln2 in two parts (two fmaf), exp(r) by its Taylor polynomial of degree 7
// (Horner in fmaf; |r| <= ln2 / 2 + a little, truncation below 2^-26), and the exact scaling by 2 * 2^(k - 1): k is
// in [-124, 126], so 2^(k - 1) is a normal float (the 2 is in the polynomial). About half the instructions of the
// same polynomial without fma (the gate is most of the kernel's issue).
__device__ __forceinline__ float gate_exp(float a) {
    a = fmaxf(a, -86.0f);
    const float shifted = __fmaf_rn(a, 0x1.715476p+0f, 0x1.8p+23f);  // log2 e; 1.5 * 2^23
    const float kf = __fsub_rn(shifted, 0x1.8p+23f);                   // exact
    const int k = __float_as_int(shifted) - 0x4b400000;                // 0x1.8p+23's bits
    const float r = __fmaf_rn(-kf, -0x1.05c610p-29f, __fmaf_rn(-kf, 0x1.62e430p-1f, a));  // ln2 = hi + lo
    // 2 exp(r): each coefficient doubled, so each step is exactly twice the undoubled one (no overflow or
    // underflow here), and p + p costs no instruction.
    float p = 0x1.a01a02p-12f;                 // 2/7!
    p = __fmaf_rn(p, r, 0x1.6c16c2p-9f);       // 2/6!
    p = __fmaf_rn(p, r, 0x1.111112p-6f);       // 2/5!
    p = __fmaf_rn(p, r, 0x1.555556p-4f);       // 2/4!
    p = __fmaf_rn(p, r, 0x1.555556p-2f);       // 2/3!
    p = __fmaf_rn(p, r, 1.0f);
    p = __fmaf_rn(p, r, 2.0f);
    p = __fmaf_rn(p, r, 2.0f);
    return __fmul_rn(p, __int_as_float((k + 126) << 23));
}

// 1 / d correctly rounded, for d in [1, 2^126): the hardware's approximate reciprocal refined by one Newton step in
// fmaf, which is the fast path of the compiler's own rcp.rn.f32 on sm_90 (that adds a range check and a slow path
// for exponents outside this range, six instructions more an element).
__device__ __forceinline__ float reciprocal_in_range(float d) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return __fmaf_rn(r, __fmaf_rn(-d, r, 1.0f), r);
}

// silu(z) = z * sigmoid(z) in fp32, sigmoid(z) = 1 / (1 + exp(-z)), the reciprocal correctly rounded; 0 where
// -z > 87 (there the sigmoid is below 1.7e-38, and silu(z) within 1e-35 of 0; silu(-inf) = -inf * 0 is NaN, as the
// peer's Triton arithmetic gives).
__device__ __forceinline__ float silu(float z) {
    const float a = -z;
    const float sigmoid = reciprocal_in_range(__fadd_rn(1.0f, gate_exp(a)));
    return __fmul_rn(z, a > 87.0f ? 0.0f : sigmoid);
}

// The N gated values x * silu(z) of one vector of x (xv) and of z at z + at (`width`-byte aligned).
template <typename T> __device__ __forceinline__ WidePack<T> gated(const Pack<T>& xv, const T* z, int width) {
    const Pack<T> zv = load_pack(z, width);
    WidePack<T> g;
#pragma unroll
    for (int j = 0; j < Vec<T>::N; ++j) g.e[j] = __fmul_rn(to_float(xv.e[j]), silu(to_float(zv.e[j])));
    return g;
}

// Pass 1's Source of the gate-first order: the fp32 values x * silu(z), on the row split at x's 16-byte boundaries,
// z read at z_width; and, as SummedRow (added_row.cuh), the same values for pass 2's split (sums, at_split).
template <typename T> struct GatedRow {
    const T* x;
    const T* z;
    int z_width;
    __device__ __forceinline__ WidePack<T> held(int at) const { return gated(load_aligned(x + at), z + at, z_width); }
    __device__ __forceinline__ void keep(int, const WidePack<T>&) const {}
    __device__ __forceinline__ WidePack<T> vec(int at) const { return held(at); }
    __device__ __forceinline__ float elem(int at) const { return __fmul_rn(to_float(x[at]), silu(to_float(z[at]))); }
    __device__ __forceinline__ WidePack<T> sums(const WidePack<T>& held_values, int) const { return held_values; }
    __device__ __forceinline__ WidePack<T> sums(const Pack<T>& xv, int at) const { return gated(xv, z + at, z_width); }
    template <typename Shape> __device__ __forceinline__ GatedRow at_split(const Shape& sh, const T* out) const {
        return {x, z, load_width<T>((sh.phase(z) - sh.phase(out)) & (Vec<T>::N - 1))};
    }
};

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
