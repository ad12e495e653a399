// pyrms's RMSNorm forward kernel, grown from the seed's (seed_rms_norm.cu).
//
//   out[r, i] = round_T( round_T(x[r, i] * inv_rms[r]) * w_i )      (default: the seed's rounding)
//   out[r, i] = round_T( (x[r, i] * inv_rms[r]) * w_i )             (ROUND_ONCE: PyTorch, current vLLM)
//   inv_rms[r] = 1 / sqrt(sum_i x[r, i]^2 / hidden + eps), all in fp32
//   w_i = weight[i], or 1 + weight[i] in fp32 (GEMMA)
//
// One block per row; the hidden size is a run-time value, so any hidden size from 1 up works; rows
// are addressed with 64-bit strides. The two passes and the reduction tree are the row core's
// (row_core.cuh): the sum of squares is split at the INPUT's 16-byte boundaries, the write pass at the
// OUTPUT's, so every body store is 16 bytes wide, and input and weight are loaded at the widest width
// their alignment relative to the output allows. Each pointer may be misaligned independently; each
// row of a strided tensor computes its own split.
//
// Variants (template parameters): T in {float, __half, __nv_bfloat16}; CACHE = how many 16-byte input
// vectors per fold thread stay in registers between the passes (0 = re-read them); SPREAD = threads
// per fold thread (1 for many rows; 2 or 4 for few, the row core's latency shape); GEMMA; ROUND_ONCE;
// EARLY_WEIGHTS (load the weights before the reduction: a latency choice for few rows); ALIGNED (the
// launcher found every row 16-byte aligned, hidden a multiple of the vector: see RowShape); W, the
// weight's type: T (the default), float (an fp32 weight with bf16 or fp16 rows: w_i is read exactly), or
// void (no weight, w_i = 1: out = round_T(x * inv_rms), either rounding, and weight is not read); O, the
// output's type: T (the default), or float beside bf16 or fp16 rows (round_T above becomes exact for the
// final product only: the intermediate round_T(x * inv_rms) stays; rms_scale). The planner
// (pyrms/plan.py) picks the fold width F = blockDim.x / SPREAD and CACHE from the hidden size only,
// and every variant computes the same bits for the same F (the row core's tree).
//
// Cache hints: the held input vectors and the body stores are streaming accesses (load_streaming).
// In place (out == input, O = T) is allowed (see write_row). An fp32 O splits at out's 32-byte boundaries
// (a vector of T's N elements: two 16-byte stores), so ALIGNED there also needs out 32-byte aligned.
//
// rms_norm_nd_kernel: the same rows (rms_norm_row, the same tree), addressed as an N-D view: row r of
// `rows` is (i0, i1, i2) of leading sizes (rows / (d1 * d2), d1, d2), at element offset
// i0 * s0 + i1 * s1 + i2 * s2 with input and output each their own 64-bit strides (a slice of a fused
// QKV tensor, a transposed [batch, heads, seq, head_dim] view); the weight of row r is row i0 of a
// [d0, hidden] weight of row stride w_stride (0: one weight for every row; vLLM's batched weight).
// LANES > 0 packs blockDim.x / LANES rows of LANES lanes into each block (RowShape's packed rows: the
// planner's shape for short rows, also for plain layouts), CACHE then the vectors each lane holds (over
// min(CACHE, 32 / LANES) fold positions: plan.PACKED_SHAPES); LANES = 0 launches one row per block of F.
// ALIGNED (packed rows only): every row, and each weight row, 16-byte aligned and the hidden size a
// multiple of the vector (RowShape's ALIGNED): the same tree in far fewer instructions, which is what
// bounds short rows (each thread moves 16 to 64 bytes per row; QK-norm rows are 128 elements).
#include "rms_norm_row.cuh"

namespace pyrms {

// rstd: null, or where row r's inv_rms goes (rstd[r], float32), for the backward to read instead of recomputing.
template <typename T, int CACHE, int SPREAD, bool GEMMA, bool ROUND_ONCE, bool EARLY_WEIGHTS, bool ALIGNED, typename W = T,
          typename O = T>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD)) rms_norm_kernel(
    O* out, const T* input, const W* __restrict__ weight, float* rstd, float epsilon, int hidden,
    long long input_stride, long long out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    O* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    rms_norm_row<T, W, CACHE, SPREAD, ALIGNED, GEMMA, ROUND_ONCE, EARLY_WEIGHTS, true>(
        out_row, in_row, RowIn<T, true>{in_row}, weight, epsilon, hidden, rstd == nullptr ? nullptr : rstd + blockIdx.x);
}

// Row r's leading indices (i0, i1, i2) of sizes (rows / (d1 * d2), d1, d2). Where d2 is a power of two
// (QK-norm's heads; 1 for one or two leading dimensions: pyrms/ops/_views.py), a shift and a mask: a
// division is twenty-odd instructions, a tenth of a packed QK-norm row's (Nsight Compute on the H200:
// docs/perf_notes.md). d2 is an argument, so the branch is uniform. The same for d1 raised the packed kernels'
// registers from 32 to 50 (and so cut their occupancy; QK-norm's q ran 158 -> 235 us); with d2's
// alone they stay at or below the division's (ptxas -v, every packed variant). Unsigned: r, d1, d2 >= 0.
struct LeadIndex {
    long long i0, i1, i2;
    __device__ __forceinline__ LeadIndex(unsigned r, unsigned d1, unsigned d2) {
        unsigned q;
        if ((d2 & (d2 - 1)) == 0) {
            q = r >> __popc(d2 - 1);
            i2 = r & (d2 - 1);
        } else {
            q = r / d2;
            i2 = r - q * d2;
        }
        const unsigned h = q / d1;
        i0 = h;
        i1 = q - h * d1;
    }
};

// Packed rows launch blocks of this many threads (pyrms.plan.PACKED_THREADS). Those of at most two held
// vectors per lane are held to 6 blocks per SM (40 registers): the (8, 2) shape of QK-norm's rows took 51
// and half the SM's warps, and ran q of 16384 tokens in 169 us (timed with GPU tests beside it), against
// 137 us so bounded on the H200 (ptxas spills 2 bytes there; docs/perf_notes.md); four held vectors would
// spill some 80 bytes so.
constexpr int PACKED_THREADS = 256;

template <typename T, int CACHE, int LANES, bool ALIGNED, bool GEMMA, bool ROUND_ONCE, typename W = T, typename O = T>
__global__ void __launch_bounds__(LANES > 0 ? PACKED_THREADS : max_threads(CACHE), LANES > 0 && CACHE <= 2 ? 6 : 1) rms_norm_nd_kernel(
    O* out, const T* input, const W* __restrict__ weight, float epsilon, int rows, int d1, int d2, int hidden,
    long long in_s0, long long in_s1, long long in_s2, long long out_s0, long long out_s1, long long out_s2,
    long long w_stride) {
    begin_dependent_grid();
    const int r = LANES > 0 ? blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES : blockIdx.x;
    if (r >= rows) return;  // a packed block's last rows: whole segments, which share no shuffle or barrier
    const LeadIndex at(r, d1, d2);
    const T* in_row = input + at.i0 * in_s0 + at.i1 * in_s1 + at.i2 * in_s2;
    O* out_row = out + at.i0 * out_s0 + at.i1 * out_s1 + at.i2 * out_s2;
    rms_norm_row<T, W, CACHE, 1, ALIGNED, GEMMA, ROUND_ONCE, false, true, LANES>(
        out_row, in_row, RowIn<T, true>{in_row}, weight_row(weight, at.i0 * w_stride), epsilon, hidden);
}

}  // namespace pyrms
