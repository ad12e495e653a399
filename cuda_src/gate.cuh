// The gate of gated RMSNorm, shared by its forward (gated_rms_norm.cu) and backward (gated_rms_norm_backward.cu):
// silu(z) = z * sigmoid(z) from correctly rounded fp32 operations and explicit fused multiply-adds, which the numpy
// twin (pyrms.ops.gated_rms_norm.twin) reproduces bit for bit, and the gate-first order's row of x * silu(z) as a
// row core Source.
#pragma once
#include "added_row.cuh"

namespace pyrms {

// exp(a) for the sigmoid, for a <= 87 (sigmoid below is 0 above), from correctly rounded fp32
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

// sigmoid(z) = 1 / (1 + exp(-z)) in fp32, the reciprocal correctly rounded; 0 where -z > 87 (there it is below
// 1.7e-38).
__device__ __forceinline__ float sigmoid(float z) {
    const float a = -z;
    const float r = reciprocal_in_range(__fadd_rn(1.0f, gate_exp(a)));  // unconditionally: a select, not a branch
    return a > 87.0f ? 0.0f : r;
}

// silu(z) = z * sigmoid(z) in fp32 (within 1e-35 of 0 where the sigmoid is 0; silu(-inf) = -inf * 0 is NaN, as the
// peer's Triton arithmetic gives).
__device__ __forceinline__ float silu(float z) { return __fmul_rn(z, sigmoid(z)); }

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

}  // namespace pyrms
