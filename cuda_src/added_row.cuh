// The residual add as a row core Source (row_core.cuh): pass 1 reads input + residual, rounds each sum
// to T once (__fadd_rn in fp32, then one rounding: vLLM's fused_add_rms_norm) and stores it into the
// residual as it is made; pass 2 re-reads the sums from the residual. Used by fused_add_rms_norm.cu and
// rms_norm_quant.cu.
#pragma once
#include "common.cuh"

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

}  // namespace pyrms
