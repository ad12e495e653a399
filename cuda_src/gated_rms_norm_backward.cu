// Gated RMSNorm backward: the gradients of gated_rms_norm.cu's forward for the upstream gradient dy, per group g of
// `group_size` columns of each row r, with s = silu(z), s' = silu'(z) = sigmoid(z) * (1 + z * (1 - sigmoid(z))):
//
//   norm_before_gate (NORM_BEFORE_GATE), y = ((x * inv) * w) * s:
//     x_hat = x * inv, g = w * (dy * s)
//     dx = inv * (g - x_hat * mean(x_hat * g))                       the mean over the group
//     dz = (dy * (x_hat * w)) * s'
//     dw = sum over rows of (dy * s) * x_hat
//   otherwise (Mamba2's order), y = (v * inv) * w with v = x * s:
//     v_hat = v * inv, g = w * dy, dv = inv * (g - v_hat * mean(v_hat * g))
//     dx = dv * s,  dz = (dv * x) * s',  dw = sum over rows of dy * v_hat
//   inv = 1 / sqrt(mean of v^2 over the group + eps) (v = x for norm_before_gate), the forward's bit for bit
//
// Each (row, group) is a row of RMSNorm's backward (norm_backward.cuh's norm_backward_rows) of group_size columns,
// with SiluGate below as its gate: the statistics in the forward's tree (fold width `fold`, the forward's block for
// (dtype, group_size)), so the same inv; the row sums of x_hat * g in the tree of the block's width; dx and dz
// rounded once to T; dw's terms summed per column over chunks of rows, then over chunks (sum_partials_kernel), in the
// order norm_backward.cuh fixes by row index, so every gradient is bitwise the same for every launch shape, batch
// split and run. The gate's values are made again per pass (s and s' from one sigmoid, gate.cuh's, the forward's
// bits), in correctly rounded fp32 operations, so the twin (pyrms.ops.gated_rms_norm.twin) reproduces every bit.
//
// Launch: blockIdx.y = the group; blockIdx.x covers rows_per_block rows (one, each row's terms its own workspace row,
// or a multiple of chunk_rows: a chunk's sums per workspace row). The workspace holds every group's columns of a
// row at one offset, the weight's phase: column c at partials[row * ws_stride + phase(weight) + c]. Variants:
// T in {float, __half, __nv_bfloat16}; NORM_BEFORE_GATE; W, the weight's type (T, float beside bf16/fp16 rows, or
// void: no weight, then no dw and no workspace). grad_x and grad_z are disjoint from every operand (the op checks).
#include "gate.cuh"
#include "norm_backward.cuh"

namespace pyrms {

// silu(z)'s gate on norm_backward_rows (norm_backward.cuh's Gates).
template <typename T, bool NORM_BEFORE_GATE> struct SiluGate {
    struct At {
        float s, ds;  // silu(z), silu'(z)
    };
    struct Row {
        using Z = T;
        static constexpr bool ON = true;
        const T* z;
        T* dz;
        int z_width, dz_width;  // at the weight's split
        // The statistics' values: x, or x * silu(z) as the forward's gate-first pass 1 reads them (its GatedRow).
        __device__ __forceinline__ auto source(const T* x) const {
            if constexpr (NORM_BEFORE_GATE) {
                return RowIn<T, false>{x};
            } else {
                return GatedRow<T>{x, z, load_width<T>((vec_phase(z) - vec_phase(x)) & (Vec<T>::N - 1))};
            }
        }
        __device__ __forceinline__ At at(float zv) const {
            const float sg = sigmoid(zv);
            return {__fmul_rn(zv, sg), __fmul_rn(sg, __fadd_rn(1.0f, __fmul_rn(zv, __fsub_rn(1.0f, sg))))};
        }
        __device__ __forceinline__ float value(float x, At a) const {
            return NORM_BEFORE_GATE ? x : __fmul_rn(x, a.s);
        }
        __device__ __forceinline__ float grad(float dy, At a) const {
            return NORM_BEFORE_GATE ? __fmul_rn(dy, a.s) : dy;
        }
        __device__ __forceinline__ float out(const ElementGrad& e, float x, float dy, float w, At a, float& dzv) const {
            if constexpr (NORM_BEFORE_GATE) {
                dzv = __fmul_rn(__fmul_rn(dy, __fmul_rn(e.x_hat, w)), a.ds);
                return e.dx;
            } else {
                dzv = __fmul_rn(__fmul_rn(e.dx, x), a.ds);
                return __fmul_rn(e.dx, a.s);
            }
        }
        __device__ __forceinline__ void store_dz(int at, float v) const { dz[at] = from_float<T>(v); }
        __device__ __forceinline__ void store_dz(int at, const Pack<T>& v) const { store_pack(dz + at, v, dz_width); }
    };

    const T* z;
    T* dz;
    long long z_stride, dz_stride;

    __device__ __forceinline__ Row row(int r, int w_phase) const {
        const T* zr = z + r * z_stride;
        T* dzr = dz + r * dz_stride;
        constexpr int M = Vec<T>::N - 1;
        return {zr, dzr, load_width<T>((vec_phase(zr) - w_phase) & M), load_width<T>((vec_phase(dzr) - w_phase) & M)};
    }
};

// Kernel 1: dx, dz and the workspace's dw terms of group blockIdx.y (see above); kernel 2 is norm_backward.cuh's
// sum_partials_kernel. At most 512 threads (the plan's block), so 128 registers for the gate's arithmetic.
template <typename T, bool NORM_BEFORE_GATE, typename W = T>
__global__ void __launch_bounds__(512, 1) gated_rms_norm_backward_kernel(
    T* grad_x, T* grad_z, float* partials, const T* grad_output, const T* x, const T* z, const W* __restrict__ weight,
    float epsilon, int rows, int group_size, long long grad_x_stride, long long grad_z_stride,
    long long grad_output_stride, long long x_stride, long long z_stride, int chunk_rows, int rows_per_block,
    long long ws_stride, int sums_in_shared, int fold) {
    const long long col = static_cast<long long>(blockIdx.y) * group_size;
    const W* w = weight_row(weight, col);
    // norm_backward_rows puts the group's column i at its workspace base + phase(w) + i: every group's at
    // partials + phase(weight) + col + i.
    float* part = partials;
    if constexpr (!Weightless<W>::value) part += column_phase<T>(weight) + col - column_phase<T>(w);
    norm_backward_rows<T, 0, false, false, W, false, T, true, SiluGate<T, NORM_BEFORE_GATE>>(
        grad_x + col, part, grad_output + col, x + col, w, nullptr, nullptr, epsilon, rows, group_size, grad_x_stride,
        grad_output_stride, x_stride, chunk_rows, rows_per_block, ws_stride, sums_in_shared, fold,
        SiluGate<T, NORM_BEFORE_GATE>{z + col, grad_z + col, z_stride, grad_z_stride});
}

}  // namespace pyrms
