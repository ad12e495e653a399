// QK-norm and rotary embedding in one launch, in place on the q and k heads of a fused QKV tensor (vLLM's
// fused_qk_norm_rope, FlashInfer's apply_rope_with_cos_sin_cache after a per-head RMSNorm). Row r of `rows` is
// head h = r % heads (the q heads, then the k heads; heads = num_q_heads + num_kv_heads) of token
// t = r / heads, the head_dim elements at qkv + t * token_stride + h * head_dim; v's heads are not touched.
//
//   a[i]   = (x[i] * inv_rms) * w_i                   kept in fp32 (never rounded to T before the rotation)
//   w_i    = weight[i], or 1 + weight[i] in fp32 (GEMMA); the q heads' weight is q_weight, the k heads' k_weight
//   inv_rms = 1 / sqrt(sum_i x[i]^2 / head_dim + eps)   in fp32, in the row core's reduction tree
//   out[i] = round_T(a[i] * c_k - a[j] * s_k)          i the first of its pair
//   out[i] = round_T(a[i] * c_k + a[j] * s_k)          i the second of its pair
//   out[i] = round_T(a[i])                             i >= rotary_dim (partial rotary: passed through, normalized)
//
// Pairs (i, j) and their frequency k: IS_NEOX (rotate-half): (k, k + rotary_dim / 2), k < rotary_dim / 2;
// GPT-J (interleaved): (2k, 2k + 1). c_k = cos_sin_cache[p][k], s_k = cos_sin_cache[p][rotary_dim / 2 + k] for
// p = positions[t] (int64; not checked against the cache's rows, as in vLLM): vLLM's cos_sin_cache layout,
// fp32. Every product and sum is one correctly rounded fp32 operation (__fmul_rn, __fadd_rn: no FMA), and the
// value is rounded to T once, at the store, as vLLM's and FlashInfer's fused kernels do (they keep the
// normalized head in fp32 registers through the rotation); vLLM scales by (inv_rms * w_i), pyrms by
// (x * inv_rms) * w_i, the RMSNorm row's order (rms_scale with ROUND_ONCE and an fp32 result).
//
// Launch: packed rows only (row_core.cuh's RowShape LANES, the shape of rms_norm_nd_kernel's QK-norm rows):
// LANES lanes per head, blockDim.x / LANES heads per block; the planner picks (LANES, CACHE) from (dtype,
// head_dim) as the row core's packed rows take (pyrms/ops/_row_plan.py's packed_shape), so the sum of squares is the RMSNorm row's tree for (dtype, head_dim,
// alignment) with F = 32 (pyrms.reference's rms row twin gives the same inv_rms). Every body vector of a head
// is one of its lanes' held vectors (the plan packs only such heads). In place: each lane computes all its
// outputs (reading partners that other lanes own from memory; NeoX's whole rotation of aligned heads pairs each
// lane's own two vectors, from registers) before the segment's __syncwarp, then stores.
//
// KV_CACHE (vLLM's reshape_and_cache_flash after the op, in the same launch): each token's k and v heads are also
// written into a paged cache, unless slot = slot_mapping[t] (int64) is negative (a padding token: its q and k are
// still rewritten in qkv, nothing is written to the caches). Cache head g of the token is at
//   cache + (slot / block_size) * block_stride + (slot % block_size) * page_stride + g * head_stride
// (vLLM's [num_blocks, block_size, num_kv_heads, head_dim] "NHD" layout at any block, page and head stride;
// head_dim contiguous), key_cache for the k heads, value_cache for the v heads (rows q_heads + kv_heads ..
// heads - 1 of a token, copied, not normalized). What is stored is the element of qkv after this op (k: the
// rotated k, rounded to T; v: as it is) converted to KV: KV = T stores it as it is; KV = __nv_fp8_e4m3 stores
// quant.cuh's fp8 of (float(x) / scale), the division correctly rounded, saturating (vLLM's scaled_convert:
// x / k_scale for k, x / v_scale for v), NaN as 0x7F. The scale is *k_scale_ptr (*v_scale_ptr) where the
// pointer is not null (vLLM's scale tensors), else the k_scale (v_scale) argument. So the caches hold bit for
// bit what qk_norm_rope then reshape_and_cache_flash would write. slot is not checked against the cache's
// blocks (a device value, as in vLLM).
//
// Variants: T in {float, __half, __nv_bfloat16}; (CACHE, LANES) as the N-D RMSNorm's packed kernels; GEMMA; IS_NEOX;
// KV_CACHE with KV in {T, __nv_fp8_e4m3};
// ALIGNED (the launcher found qkv and both weights 16-byte aligned, and head_dim and token_stride multiples of
// the vector): every row is all body, and the partners of a vector are one aligned vector (GPT-J: the vector
// itself; NeoX where rotary_dim / 2 is a multiple of the vector), loaded whole instead of element by element.
// The same bits either way. Any other alignment works, element-aligned, through the row core's splits.
// The KV cache's stores are element by element (any alignment of the caches and of their strides). Cache hints:
// the body stores stream (st.global.cs: not read again here); the loads keep the default policy, since the
// partners and weights are read again by other lanes.
#include "quant.cuh"
#include "rms_norm_row.cuh"

namespace pyrms {

// Threads per block (pyrms/ops/_row_plan.py PACKED_THREADS, the packed rows' block). Shapes of at most two held
// vectors per lane are bounded to four resident blocks (64 registers: half the SM's threads, for latency hiding
// across many short heads); with no minimum, ptxas spilled fp32's (8, 1) variant at 40 registers, and four held
// vectors spill at 64 (ptxas -v: tests/ops/qk_norm_rope/test_qk_norm_rope.py compiles every variant).
constexpr int QK_NORM_ROPE_THREADS = 256;

// One token's rotation: its cos_sin_cache row (cos in [0, half), sin in [half, 2 * half)).
struct Rotary {
    const float* cs;
    int dim, half;

    // j, the partner of element i < dim
    template <bool IS_NEOX> __device__ __forceinline__ int partner(int i) const {
        return IS_NEOX ? (i < half ? i + half : i - half) : (i ^ 1);
    }
    // out[i] of the comment above, in fp32, from a = a[i], b = a[partner(i)] and its frequency's cos c and sin s
    static __device__ __forceinline__ float turn(bool first, float a, float b, float c, float s) {
        const float ac = __fmul_rn(a, c);
        const float bs = __fmul_rn(b, s);
        return first ? __fsub_rn(ac, bs) : __fadd_rn(ac, bs);
    }
    // out[i], reading its frequency's cos and sin (b unused for i >= dim)
    template <bool IS_NEOX> __device__ __forceinline__ float rotate(int i, float a, float b) const {
        if (i >= dim) return a;
        const bool first = IS_NEOX ? i < half : (i & 1) == 0;
        const int k = IS_NEOX ? (first ? i : i - half) : i >> 1;
        return turn(first, a, b, cs[k], cs[half + k]);
    }
    // c[j] = cos and s[j] = sin of frequency k + j, j < n: 16-byte loads where n is a multiple of 4 and the token's
    // row allows them (a cache of 16-byte aligned rows), else one element at a time.
    template <int n> __device__ __forceinline__ void cos_sin(int k, float (&c)[n], float (&s)[n]) const {
        if constexpr (n % 4 == 0) {
            if (((reinterpret_cast<unsigned long long>(cs + k) | reinterpret_cast<unsigned long long>(cs + half + k)) &
                 15) == 0) {
#pragma unroll
                for (int j = 0; j < n; j += 4) {
                    const float4 cv = *reinterpret_cast<const float4*>(cs + k + j);
                    const float4 sv = *reinterpret_cast<const float4*>(cs + half + k + j);
                    c[j] = cv.x, c[j + 1] = cv.y, c[j + 2] = cv.z, c[j + 3] = cv.w;
                    s[j] = sv.x, s[j + 1] = sv.y, s[j + 2] = sv.z, s[j + 3] = sv.w;
                }
                return;
            }
        }
#pragma unroll
        for (int j = 0; j < n; ++j) c[j] = cs[k + j], s[j] = cs[half + k + j];
    }
    // out[at + j], j < n, of a whole vector inside the rotation (at + n <= dim; NeoX: in one half) from a[j] and
    // b[j] = a[partner(at + j)]: its frequencies' cos and sin loaded once (GPT-J: each pair's)
    template <bool IS_NEOX, int n> __device__ __forceinline__ void rotate_vector(int at, const float (&a)[n],
                                                                               const float (&b)[n], float (&out)[n]) const {
        if constexpr (IS_NEOX) {
            const bool first = at < half;
            float c[n], s[n];
            cos_sin(first ? at : at - half, c, s);
#pragma unroll
            for (int j = 0; j < n; ++j) out[j] = turn(first, a[j], b[j], c[j], s[j]);
        } else {
            float c[n / 2], s[n / 2];
            cos_sin(at >> 1, c, s);
#pragma unroll
            for (int j = 0; j < n; ++j) out[j] = turn((j & 1) == 0, a[j], b[j], c[j >> 1], s[j >> 1]);
        }
    }
};

// An element of qkv as the KV cache stores it: KV = T as it is; fp8 through `scale` (the comment above).
template <typename T, typename KV> struct KvStore {
    float scale;
    __device__ __forceinline__ KV operator()(T x) const { return Scaled<KV, true>::apply(to_float(x), scale); }
};
template <typename T> struct KvStore<T, T> {
    float scale;
    __device__ __forceinline__ T operator()(T x) const { return x; }
};

// Where cache head g of slot starts (the comment above).
template <typename KV>
__device__ __forceinline__ KV* kv_head(KV* cache, long long slot, int g, int block_size, long long block_stride,
                                       long long page_stride, long long head_stride) {
    return cache + (slot / block_size) * block_stride + (slot % block_size) * page_stride + g * head_stride;
}

// heads: the rows of a token (q_heads + kv_heads, and with KV_CACHE the kv_heads v heads after them).
template <typename T, int CACHE, int LANES, bool ALIGNED, bool GEMMA, bool IS_NEOX, bool KV_CACHE = false,
          typename KV = T>
__global__ void __launch_bounds__(QK_NORM_ROPE_THREADS, CACHE <= 2 ? 4 : 1) qk_norm_rope_kernel(
    T* qkv, const T* __restrict__ q_weight, const T* __restrict__ k_weight, const float* __restrict__ cos_sin_cache,
    const long long* __restrict__ positions, KV* __restrict__ key_cache, KV* __restrict__ value_cache,
    const long long* __restrict__ slot_mapping, const float* __restrict__ k_scale_ptr,
    const float* __restrict__ v_scale_ptr, float k_scale, float v_scale, float epsilon, int rows, int heads,
    int q_heads, int kv_heads, int head_dim, int rotary_dim, long long token_stride, int block_size,
    long long block_stride, long long page_stride, long long head_stride) {
    static_assert(LANES > 0, "packed rows only");
    using Shape = RowShape<CACHE, 1, ALIGNED, LANES>;
    constexpr int N = Vec<T>::N;
    begin_dependent_grid();
    const int r = blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES;
    if (r >= rows) return;  // whole segments: they share no shuffle or barrier with the others
    const int token = r / heads;
    const int head = r - token * heads;
    T* row = qkv + token * token_stride + static_cast<long long>(head) * head_dim;
    const T* w = head < q_heads ? q_weight : k_weight;
    const Shape sh;
    // The token's slot, for its k and v heads (read early: the k heads store it only at the end).
    const long long slot = KV_CACHE && head >= q_heads ? slot_mapping[token] : -1;
    if (KV_CACHE && head >= q_heads + kv_heads) {  // a v head: copied into value_cache (a whole segment returns)
        if (slot >= 0) {
            KV* dst = kv_head(value_cache, slot, head - q_heads - kv_heads, block_size, block_stride, page_stride,
                              head_stride);
            const KvStore<T, KV> store{v_scale_ptr ? *v_scale_ptr : v_scale};
            for (int i = sh.lane; i < head_dim; i += LANES) dst[i] = store(row[i]);
        }
        return;
    }

    Pack<T> held[Shape::SLOTS];
    WeightVec<T, T> unused_w[Shape::SLOTS];  // the weights are loaded with the partners', after the sum
    const float inv = row_inv_rms<T, T, CACHE, 1, ALIGNED, false>(sh, row, row, RowIn<T, false>{row}, w, epsilon,
                                                                  head_dim, held, unused_w);
    const Rotary rot{cos_sin_cache + positions[token] * rotary_dim, rotary_dim, rotary_dim >> 1};
    auto norm = [inv](float x, float wi) { return rms_scale<T, GEMMA, true, float>(x, wi, inv); };  // a[i] of x[i]
    auto from_memory = [&](int i) { return norm(to_float(row[i]), to_float(w[i])); };  // a[i], read from the row
    auto out_at = [&](int i, float a) {
        return from_float<T>(rot.rotate<IS_NEOX>(i, a, i < rot.dim ? from_memory(rot.partner<IS_NEOX>(i)) : 0.0f));
    };

    // Every output of the lane, computed before any is stored: partners are other lanes' elements.
    const RowSplit s = sh.split(row, head_dim);
    const int u = sh.lane;
    const bool has_pre = u < s.pre, has_tail = s.tail + u < head_dim;
    T pre_out = T(), tail_out = T();
    if (has_pre) pre_out = out_at(u, from_memory(u));
    if (has_tail) tail_out = out_at(s.tail + u, from_memory(s.tail + u));
    const int w_width = weight_width(sh, w, sh.phase(row));
    // ALIGNED: a vector's partners are one aligned vector (GPT-J: its own; NeoX: half away, when half is whole vectors)
    const bool whole = ALIGNED && (!IS_NEOX || (rot.half & (N - 1)) == 0);
    Pack<T> out[Shape::SLOTS];
    // NeoX, whole vectors, and the rotation's half LANES vectors: the lane's two held vectors (held_vector: l and
    // l + LANES) are each other's partners, so both rotate from registers (no partner loaded and normalized
    // again). The same operations on the same values: the same bits.
    bool paired = false;
    if constexpr (IS_NEOX && Shape::HELD == 2 && Shape::POS == 2) {
        paired = whole && rot.half == LANES * N;
        if (paired) {
            const int at = sh.held_vector(0) * N;  // whole: the row is all body (s.pre = 0); held[1] is at + half
            const WeightVec<T, T> w0 = load_weights<T>(w, at, 16), w1 = load_weights<T>(w, at + rot.half, 16);
            float c[N], sn[N];
            rot.cos_sin(at, c, sn);  // the pair's frequencies are the same
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const float a0 = norm(to_float(held[0].e[j]), w0.at(j)), a1 = norm(to_float(held[1].e[j]), w1.at(j));
                out[0].e[j] = from_float<T>(Rotary::turn(true, a0, a1, c[j], sn[j]));
                out[1].e[j] = from_float<T>(Rotary::turn(false, a1, a0, c[j], sn[j]));
            }
        }
    }
#pragma unroll
    for (int k = 0; k < Shape::HELD; ++k) {
        if (paired) break;
        const int at = s.pre + sh.held_vector(k) * N;
        if (sh.held_vector(k) >= s.vectors) continue;
        const WeightVec<T, T> wv = load_weights<T>(w, at, w_width);
        float a[N];
#pragma unroll
        for (int j = 0; j < N; ++j) a[j] = norm(to_float(held[k].e[j]), wv.at(j));
        if (whole) {
            float b[N];
            if (IS_NEOX) {
                const int p = at < rot.half ? at + rot.half : at - rot.half;  // the vector's partners (at < dim)
                const Pack<T> xp = at < rot.dim ? load_aligned(row + p) : held[k];
                const WeightVec<T, T> wp = at < rot.dim ? load_weights<T>(w, p, 16) : wv;
#pragma unroll
                for (int j = 0; j < N; ++j) b[j] = norm(to_float(xp.e[j]), wp.at(j));
            } else {
#pragma unroll
                for (int j = 0; j < N; ++j) b[j] = a[j ^ 1];
            }
            if (at + N <= rot.dim) {
                float r[N];
                rot.rotate_vector<IS_NEOX>(at, a, b, r);
#pragma unroll
                for (int j = 0; j < N; ++j) out[k].e[j] = from_float<T>(r[j]);
            } else {  // past the rotation, or (GPT-J) across its end
#pragma unroll
                for (int j = 0; j < N; ++j) out[k].e[j] = from_float<T>(rot.rotate<IS_NEOX>(at + j, a[j], b[j]));
            }
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) out[k].e[j] = out_at(at + j, a[j]);
        }
    }
    __syncwarp(sh.segment_mask());  // every lane of the head has read what it needs before any store

    if (has_pre) row[u] = pre_out;
    if (has_tail) row[s.tail + u] = tail_out;
#pragma unroll
    for (int k = 0; k < Shape::HELD; ++k) {
        if (sh.held_vector(k) < s.vectors) store_streaming(row + s.pre + sh.held_vector(k) * N, out[k]);
    }
    if (slot >= 0) {  // a k head of a token with a slot (KV_CACHE only): the lane's outputs into key_cache too
        KV* dst = kv_head(key_cache, slot, head - q_heads, block_size, block_stride, page_stride, head_stride);
        const KvStore<T, KV> store{k_scale_ptr ? *k_scale_ptr : k_scale};
        if (has_pre) dst[u] = store(pre_out);
        if (has_tail) dst[s.tail + u] = store(tail_out);
#pragma unroll
        for (int k = 0; k < Shape::HELD; ++k) {
            if (sh.held_vector(k) >= s.vectors) continue;
#pragma unroll
            for (int j = 0; j < N; ++j) dst[s.pre + sh.held_vector(k) * N + j] = store(out[k].e[j]);
        }
    }
}

}  // namespace pyrms
