// The quantizing output step (docs/numerics.md, "Quantized outputs"; twin: pyrms.reference.quantize_*):
// an fp32 value y to float8_e4m3fn, float8_e5m2 or int8 through one scale s, every step one correctly
// rounded fp32 operation (__fdiv_rn, __fmul_rn; no fast math, no flush to zero).
//
//   fp8:  q = cvt.rn.satfinite(z): round to nearest even, finite overflow and ±inf saturate to ±qmax;
//         NaN is written as the one positive NaN pattern (0x7F e4m3fn, 0x7E e5m2: ml_dtypes' float32 NaN
//         conversion), whatever its sign and whatever pattern cvt would give.
//   int8: q = cvt.rni.sat.s8.f32(z): round to nearest even, saturate to [-128, 127], NaN -> 0.
//   z = y / s or y * (1/s), the reciprocal an fp32 division: as vLLM's kernel of each mode (Scaled).
//   dynamic scales: s = fmaxf(amax / qmax, min_scale), min_scale = 1/(qmax * 512) for fp8, FLT_EPSILON
//   for int8 (vLLM's min_scaling_factor; dynamic_quant.cu passes each mode's own floor instead); per group
//   with ue8m0, s then rounded up to a power of two.
#pragma once
#include <cuda_fp8.h>
#include "common.cuh"

namespace pyrms {

// The modes of a quantizing kernel: one given scale, one computed per row, one per group of a row, one
// computed over the whole tensor (dynamic_quant.cu).
enum QuantMode { STATIC = 0, PER_TOKEN = 1, PER_GROUP = 2, PER_TENSOR = 3 };

template <typename Q> struct Quant;

template <__nv_fp8_interpretation_t KIND, unsigned char NAN_BITS, typename Q> struct Fp8Quant {
    static constexpr bool integer = false;
    __device__ __forceinline__ static Q convert(float z) {
        Q q;
        q.__x = z != z ? NAN_BITS : __nv_cvt_float_to_fp8(z, __NV_SATFINITE, KIND);
        return q;
    }
};

template <> struct Quant<__nv_fp8_e4m3> : Fp8Quant<__NV_E4M3, 0x7F, __nv_fp8_e4m3> {
    static constexpr float qmax = 448.0f;
};
template <> struct Quant<__nv_fp8_e5m2> : Fp8Quant<__NV_E5M2, 0x7E, __nv_fp8_e5m2> {
    static constexpr float qmax = 57344.0f;
};
template <> struct Quant<signed char> {
    static constexpr bool integer = true;
    static constexpr float qmax = 127.0f;
    __device__ __forceinline__ static signed char convert(float z) {
        unsigned q;
        asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(q) : "f"(z));
        return static_cast<signed char>(q);
    }
};

// The floor of a dynamic scale, so that an all-zero row or group gets a finite, positive one.
template <typename Q> __device__ __forceinline__ float min_scale() {
    return Quant<Q>::integer ? 1.1920928955078125e-07f : __fdiv_rn(1.0f, __fmul_rn(Quant<Q>::qmax, 512.0f));
}

// The scale of values whose largest magnitude is amax (amax >= 0, never NaN), at least `floor`.
template <typename Q> __device__ __forceinline__ float dynamic_scale(float amax, float floor) {
    return fmaxf(__fdiv_rn(amax, Quant<Q>::qmax), floor);
}

template <typename Q> __device__ __forceinline__ float dynamic_scale(float amax) {
    return dynamic_scale<Q>(amax, min_scale<Q>());
}

// The power of two at or above s (s > 0, not NaN; DeepSeek's UE8M0 scales): the exponent raised by one
// where the mantissa is not zero, exact for a normal s (a dynamic scale is at least min_scale, so normal), +inf
// kept; dividing by it is exact. vLLM spells it exp2f(ceilf(log2f(s))): the same wherever log2f(s) lands above
// the integer below it, which an s within a few ulps above a power of two may not (log2f rounds to the
// integer: vLLM then gives the power below). Maxima of bf16 or fp16 values (dynamic_quant's rows, rms_norm_quant's
// with round_input) never make such a scale (amax / qmax of an 8- or 11-bit significand lies a factor of at least
// 1 + 2^-11 above any power of two); maxima of fp32 values (fp32 rows, the fp32 normalized values) can.
__device__ __forceinline__ float pow2_ceil(float s) {
    const unsigned bits = __float_as_uint(s);
    return __uint_as_float(((bits >> 23) + ((bits & 0x7FFFFFu) != 0u)) << 23);
}

// y -> q through scale s: y / s where DIVIDE, else y * (1/s). vLLM divides for static int8 and for
// dynamic fp8, and multiplies by the reciprocal for static fp8 and dynamic int8: divide_for says which.
// factor/apply serve a kernel that keeps one factor per group (in shared memory) instead of one Scaled.
template <typename Q, bool DIVIDE> struct Scaled {
    float f;  // s, or 1/s
    __device__ __forceinline__ explicit Scaled(float s) : f(factor(s)) {}
    __device__ __forceinline__ static float factor(float s) { return DIVIDE ? s : __fdiv_rn(1.0f, s); }
    __device__ __forceinline__ static Q apply(float y, float f) {
        return Quant<Q>::convert(DIVIDE ? __fdiv_rn(y, f) : __fmul_rn(y, f));
    }
    __device__ __forceinline__ Q operator()(float y) const { return apply(y, f); }
};

// (Per group: as per token.)
template <typename Q, int MODE> __host__ __device__ constexpr bool divide_for() { return (MODE == STATIC) == Quant<Q>::integer; }

}  // namespace pyrms
