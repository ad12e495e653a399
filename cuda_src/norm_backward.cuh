// The backward pass of RMSNorm and LayerNorm, shared by both backwards' kernel sources.
//
// With x_hat = (x - mean) * inv (mean = 0 for RMSNorm), g = w * dy (w = 1 + weight for Gemma):
//   RMSNorm:   dx = inv * (g - x_hat * mean(x_hat * g))
//   LayerNorm: dx = inv * ((g - mean(g)) - x_hat * mean(x_hat * g))
//   dweight = sum over rows of dy * x_hat;  dbias (LayerNorm, RMSNorm with a bias) = sum over rows of dy.
// W, the weight's type: T, float beside bf16/fp16 rows (fp32 master weights), or void (no weight: every
// w = 1, so g = dy, and no dweight). G, dy's type: T, or float (the gradient of a forward whose output
// is fp32, as a Hugging Face norm's with an fp32 weight is). Both are read exactly as fp32, so the
// arithmetic is the same whatever their storage: an fp32 weight or dy only skips a rounding. DBIAS: sums dbias
// (LayerNorm always beside a weight, without one only when asked, so that a backward without weight and
// bias sums nothing over rows: no workspace, no kernel 2; RMSNorm when it has a bias).
// Each row's statistics are recomputed by the row core's row_stats (row_core.cuh) with the forward's fold
// width `fold` (the planner passes it; the backward's own block may be narrower), so they are the forward's
// bit for bit by construction; or, where the forward saved them, read: `rstd` (its inv, fp32 per row) and, for
// LayerNorm, `mean`, the same values, so the same bits, without the statistics' block reductions (one for
// RMSNorm, two for LayerNorm).
//
// Kernel 1 (norm_backward_rows, one block per rows_per_block rows: a multiple of chunk_rows, or, for few
// rows, one row per block with chunk_rows = 1, so that each workspace row holds one row's terms):
// per row, (1) row_stats, split at the input row's boundaries; (2) the row sums of x_hat*g (and g),
// in the row core's tree for fold width blockDim.x (per-vector partials folded per thread, then the
// block sum),
// and (3) dx and the parameter-gradient terms, both split at the WEIGHT's boundaries: the weight is
// the one operand whose split is the same in every row, so thread t owns the same columns in every
// row, and only it ever touches their running sums (no atomics, no barrier). Without a weight the
// columns split as a 16-byte aligned weight's would (column_split), so that (2)'s tree, and so dx,
// are bitwise those of a weighted backward with an aligned all-ones weight. The sums live in
// shared memory when they fit (sums_in_shared; copied to the chunk's workspace row at the end of
// the chunk), else directly in that workspace row. x and dy are loaded, and dx stored, at the
// widest width their alignment relative to the weight allows: 16 bytes when they share its phase,
// as unpadded contiguous tensors of aligned bases do. V = how many body vectors of x and dy per
// thread stay in registers between passes (0: re-read them).
//
// Kernel 2 (sum_partials_kernel): the sum over chunks, per column, in a fixed order.
//
// Gated RMSNorm's backward (gated_rms_norm_backward.cu) runs kernel 1 per (row, group) with a gate as its hook
// (Gates, below: what is normalized, g's upstream gradient, dx and z's gradient per element); RMSNorm's and
// LayerNorm's kernels take NoGate, which changes none of their arithmetic.
//
// The dweight order is defined per ROW INDEX, never by the launch: per column, chunk c's partial is
// ((0 + p[cC]) + p[cC+1]) + ... over its rows in order (C, the chunk's rows, is chosen by the row count
// alone: plan.py's chunk_rows_for); then lane y of 32 sums chunks y, y+32, ...
// in order, and the 32 lane sums are added in lane order. rows_per_block only decides which block
// computes which rows; with one row per block, kernel 1 writes each row's terms and kernel 2 makes the
// chunks' partials of them in the same order. So the result is bitwise the same for every
// rows_per_block, every run.
// pyrms.reference.norm_backward_twin reproduces all of it bit for bit.
//
// Workspace: P planes (those of dweight and dbias that are summed, in that order) of [workspace rows]
// [ws_stride] floats (a row per chunk, or per input row with one row per block), 16-byte aligned,
// ws_stride a multiple of 4 and >= hidden + 7; none (P = 0) without a weight or a dbias to sum.
// Column i lives at plane[row * ws_stride + phase(weight) + i],
// which puts every owned body vector on a 16-byte boundary for float4 stores.
//
// In place: grad_input may be grad_output or input (exactly the same memory): passes (2) and (3)
// read and write each element by the same thread, and pass (1)'s reads precede a barrier.
// Consecutive block sums alternate two scratch buffers, so no barrier beyond block_sum's is needed.
#pragma once
#include "row_core.cuh"

namespace pyrms {

template <bool CENTERED> __device__ __forceinline__ float normalized(float x, const RowStats& st) {
    return __fmul_rn(CENTERED ? __fsub_rn(x, st.mean) : x, st.inv);
}

template <bool GEMMA> __device__ __forceinline__ float weighted(float w, float dy) {
    return __fmul_rn(GEMMA ? __fadd_rn(1.0f, w) : w, dy);
}

// One element's dx, its dweight term dy * x_hat (its dbias term is dy itself), and x_hat.
struct ElementGrad {
    float dx, dweight, x_hat;
};

template <bool CENTERED, bool GEMMA>
__device__ __forceinline__ ElementGrad element_grad(float x, float w, float dy, const RowStats& st,
                                                    float g_mean, float dot_mean) {
    const float x_hat = normalized<CENTERED>(x, st);
    const float g = weighted<GEMMA>(w, dy);
    const float centered = CENTERED ? __fsub_rn(g, g_mean) : g;
    return {__fmul_rn(st.inv, __fsub_rn(centered, __fmul_rn(x_hat, dot_mean))), __fmul_rn(dy, x_hat), x_hat};
}

// ---- Gates: what the gated RMSNorm's backward adds to the rows' passes ------------------------------------------
//
// A gate multiplies the row by silu(z) of a second operand z, before or after the norm (SiluGate,
// gated_rms_norm_backward.cu). norm_backward_rows asks its Gate for each row's gate, row(r, w_phase): z's row (Z,
// its element type: void where there is none, so that loading it loads nothing) and its load width at the weight's
// split, and source(x), the statistics' row core Source; per element at(z), the gate's values there; value(x, a),
// what is normalized (x, or x * silu(z)); grad(dy, a), g's upstream gradient (dy, or dy * silu(z)); out(e, x, dy,
// w, a, dz): dx from e (what element_grad made of those two) and z's gradient into dz, stored by store_dz. NoGate,
// RMSNorm's and LayerNorm's, has no z and makes each of them the identity: their code is as without a gate.
struct NoGate {
    struct At {};
    struct Row {
        using Z = void;
        static constexpr bool ON = false;
        const void* z = nullptr;
        int z_width = 16;
        template <typename T> __device__ __forceinline__ RowIn<T, false> source(const T* x) const { return {x}; }
        __device__ __forceinline__ At at(float) const { return {}; }
        __device__ __forceinline__ float value(float x, At) const { return x; }
        __device__ __forceinline__ float grad(float dy, At) const { return dy; }
        __device__ __forceinline__ float out(const ElementGrad& e, float, float, float, At, float&) const { return e.dx; }
        template <typename V> __device__ __forceinline__ void store_dz(int, const V&) const {}
    };
    __device__ __forceinline__ Row row(int, int) const { return {}; }
};

// Columns q .. q + 3 of a body vector (a vector is made four columns at a time: fewer live registers): their dx
// into out, and with P > 0 planes their parameter-gradient terms: plane 0 dy * x_hat (dy without a weight: dbias),
// plane 1 dy. The rows and the staged kernels both make them here, then add the terms to their own running sums.
// A gate's row gr (gated RMSNorm's): z's columns zv, and z's gradient into *dz.
template <int P, bool CENTERED, bool GEMMA, typename T, typename W, typename G, typename GR = NoGate::Row>
__device__ __forceinline__ void quad_grads(const Pack<T>& xv, const WeightVec<T, W>& w, const WeightVec<T, G>& dv,
                                           const RowStats& st, float g_mean, float dot_mean, int q, Pack<T>& out,
                                           float (&terms)[P > 0 ? P : 1][4], const GR& gr = GR{},
                                           const WeightVec<T, typename GR::Z>& zv = {}, Pack<T>* dz = nullptr) {
    constexpr bool WEIGHTED = !Weightless<W>::value;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float dyv = dv.at(q + j), xj = to_float(xv.e[q + j]);
        const auto a = gr.at(zv.at(q + j));
        const ElementGrad e = element_grad<CENTERED, GEMMA>(gr.value(xj, a), w.at(q + j), gr.grad(dyv, a), st, g_mean,
                                                            dot_mean);
        float dzj = 0.0f;
        out.e[q + j] = from_float<T>(gr.out(e, xj, dyv, w.at(q + j), a, dzj));
        if constexpr (GR::ON) dz->e[q + j] = from_float<T>(dzj);
        if constexpr (P > 0) {
            terms[0][j] = WEIGHTED ? e.dweight : dyv;
            if constexpr (P == 2) terms[1][j] = dyv;
        }
    }
}

// The running sums of the columns thread t owns: a chunk's dweight (and dbias) partials, in
// shared memory or directly in the workspace; float4 accesses for the 16-byte aligned body vectors.
template <int P> struct ColumnSums {
    float* at;  // column i of plane p at at[p * plane + i]
    long long plane;

    __device__ __forceinline__ void add(int i, const float (&terms)[P]) {
#pragma unroll
        for (int p = 0; p < P; ++p) at[p * plane + i] = __fadd_rn(at[p * plane + i], terms[p]);
    }
    // Columns i .. i+3, i on a 16-byte boundary.
    __device__ __forceinline__ void add4(int i, const float (&terms)[P][4]) {
#pragma unroll
        for (int p = 0; p < P; ++p) {
            float4* a = reinterpret_cast<float4*>(at + p * plane + i);
            float4 v = *a;
            v.x = __fadd_rn(v.x, terms[p][0]);
            v.y = __fadd_rn(v.y, terms[p][1]);
            v.z = __fadd_rn(v.z, terms[p][2]);
            v.w = __fadd_rn(v.w, terms[p][3]);
            *a = v;
        }
    }
};

// dst[p * dst_plane + q] = src ? src[p * src_plane + q] : 0 for q < count (1, or N on a 16-byte boundary).
template <int P, int N>
__device__ __forceinline__ void copy_columns(float* dst, long long dst_plane, const float* src, long long src_plane,
                                             int count) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
        if (count == 1) {
            dst[p * dst_plane] = src ? src[p * src_plane] : 0.0f;
        } else {
#pragma unroll
            for (int q = 0; q < N; q += 4) {
                *reinterpret_cast<float4*>(dst + p * dst_plane + q) =
                    src ? *reinterpret_cast<const float4*>(src + p * src_plane + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
    }
}

// The columns of a row as the backward splits them: at the weight's vector boundaries (vectors of
// Vec<T>::N columns: 16 bytes of a weight of T, 32 of an fp32 weight beside 2-byte rows), or without a
// weight at an aligned weight's (no prefix), the split every weighted backward with a freshly allocated
// weight computes.
template <typename T, typename W> __device__ __forceinline__ RowSplit column_split(const W* weight, int hidden) {
    if constexpr (Weightless<W>::value) {
        const int vectors = hidden / Vec<T>::N;
        return {0, vectors, vectors * Vec<T>::N};
    } else {
        return split_row<W, Vec<T>::N>(weight, hidden);
    }
}

// The weight's phase in that split, in columns (0 .. Vec<T>::N - 1).
template <typename T, typename W> __device__ __forceinline__ int column_phase(const W* weight) {
    if constexpr (Weightless<W>::value) {
        return 0;
    } else {
        return vec_phase<W, Vec<T>::N>(weight);
    }
}

// Bytes per element of the weight that the staged kernel keeps in shared memory: a weight of T's width; none
// for no weight, and none for an fp32 weight beside 2-byte rows, which it reads from global memory instead
// (L1-resident after the first rows): its hidden * 4 bytes in shared memory would cost a block per multiprocessor.
template <typename T, typename W> __host__ __device__ constexpr int staged_weight_bytes() {
    if constexpr (Weightless<W>::value) {
        return 0;
    } else {
        return sizeof(W) == sizeof(T) ? static_cast<int>(sizeof(W)) : 0;
    }
}

// Threads a block of the backward kernels may have, by V: two cached vectors per thread (x and dy)
// need up to 128 registers (512 threads), and LayerNorm's one cached vector more than 64; RMSNorm's one,
// or none, fit in the 64 that 1024 threads leave.
__host__ __device__ constexpr int backward_max_threads(int v, bool centered) {
    return v >= 2 || (centered && v >= 1) ? 512 : 1024;
}

// __launch_bounds__'s blocks per multiprocessor of a staged kernel (its threads: 256 where HELD > 0, else up to
// 512 and no minimum): held sums take 8 registers per vector and plane, so one plane's leave room for 4 blocks (64
// registers a thread) and two planes' (dweight and dbias) for 2 (128).
__host__ __device__ constexpr int staged_min_blocks(int held, int planes) { return held == 0 ? 0 : planes > 1 ? 2 : 4; }

// The parameter gradients a variant sums over rows (the workspace's planes): dweight unless weightless, then dbias.
template <typename W, bool DBIAS> __host__ __device__ constexpr int param_planes() {
    return int(!Weightless<W>::value) + int(DBIAS);
}

// Calls f(first element, count) for every column the calling thread owns: its prefix element,
// its body vectors, its tail element. (A function template, not a generic lambda: NVRTC 13.0
// rejects generic lambdas in device code.)
template <int N, typename F>
__device__ __forceinline__ void for_owned_columns(const RowSplit& ws, int hidden, F&& f) {
    const int t = threadIdx.x;
    if (t < ws.pre) f(t, 1);
    for (int i = t; i < ws.vectors; i += blockDim.x) f(ws.pre + i * N, N);
    if (ws.tail + t < hidden) f(ws.tail + t, 1);
}

// SUMS = false: dx alone, no parameter-gradient terms (norm_backward_few sums them from the rows themselves).
// Gate: NoGate, or gated RMSNorm's (see Gates above; rows re-read, V = 0).
template <typename T, int V, bool CENTERED, bool GEMMA, typename W, bool DBIAS, typename G, bool SUMS = true,
          typename Gate = NoGate>
__device__ __forceinline__ void norm_backward_rows(
    T* grad_input, float* partials, const G* grad_output, const T* input, const W* __restrict__ weight,
    const float* __restrict__ mean, const float* __restrict__ rstd, float epsilon, int rows, int hidden,
    long long grad_input_stride, long long grad_output_stride, long long input_stride, int chunk_rows,
    int rows_per_block, long long ws_stride, int sums_in_shared, int fold, const Gate& gate = Gate{}) {
    static_assert(!(GEMMA && Weightless<W>::value), "gemma scales by 1 + weight: it needs a weight");
    using GateRow = decltype(gate.row(0, 0));
    using Z = typename GateRow::Z;
    static_assert(!GateRow::ON || V == 0, "a gated row is re-read (its source's values are not x's)");
    constexpr int N = Vec<T>::N;
    constexpr bool WEIGHTED = !Weightless<W>::value;
    constexpr int P = SUMS ? param_planes<W, DBIAS>() : 0;  // parameter gradients summed over rows: dweight, dbias
    constexpr int PS = P > 0 ? P : 1;              // (arrays may not be empty; nothing is summed when P = 0)
    constexpr int VC = V > 0 ? V : 1;
    __shared__ float scratch[2][32];
    extern __shared__ __align__(16) float shared_sums[];  // P * ws_stride floats when sums_in_shared
    begin_dependent_grid();
    const int t = threadIdx.x;
    const int B = blockDim.x;
    const RowSplit ws = column_split<T>(weight, hidden);  // the columns thread t owns, in every row
    const int w_phase = column_phase<T>(weight);
    const long long plane = (static_cast<long long>(rows) + chunk_rows - 1) / chunk_rows * ws_stride;

    using Shape = RowShape<V, 1>;
    const Shape sh(fold);
    Pack<T> xc[VC];
    WeightVec<T, G> dyc[VC];  // dy's N columns (WeightVec: N columns of any storage type, read as fp32)
    // Row indices fit in int (rows <= 2^31 - 1); nothing below computes past `rows`.
    const int first = static_cast<int>(min(static_cast<long long>(blockIdx.x) * rows_per_block, static_cast<long long>(rows)));
    const int end = rows - first < rows_per_block ? rows : first + rows_per_block;
    for (int c0 = first, c1; c0 < end; c0 = c1) {
        c1 = end - c0 < chunk_rows ? end : c0 + chunk_rows;  // never past end: no int overflow
        // This chunk's column 0 in the workspace, and its running sums (unused when P = 0: no workspace).
        float* part = partials + static_cast<long long>(c0 / chunk_rows) * ws_stride + w_phase;
        ColumnSums<PS> sums = sums_in_shared ? ColumnSums<PS>{shared_sums + w_phase, ws_stride}
                                                : ColumnSums<PS>{part, plane};
        if constexpr (P > 0) {
            for_owned_columns<N>(ws, hidden, [&](int at, int count) { copy_columns<P, N>(sums.at + at, sums.plane, nullptr, 0, count); });
        }
        for (int r = c0; r < c1; ++r) {
            const T* x = input + static_cast<long long>(r) * input_stride;
            const G* dy = grad_output + static_cast<long long>(r) * grad_output_stride;
            T* dx = grad_input + static_cast<long long>(r) * grad_input_stride;
            const GateRow gr = gate.row(r, w_phase);

            // (1) statistics; xc holds the thread's body vectors of x's own split.
            const RowSplit xs = split_row(x, hidden);
            const auto src = gr.source(x);
            if constexpr (V > 0) load_held(sh, xs, src, xc);
            // Given the forward's statistics (the same tree's): no sums to make for them.
            const bool saved = rstd != nullptr;
            const RowStats st = saved ? RowStats{CENTERED ? mean[r] : 0.0f, rstd[r]}
                                      : row_stats<T, V, 1, false, CENTERED>(sh, xs, hidden, epsilon, src, xc, scratch[0],
                                                                            scratch[1], nullptr);

            // (2) sum of x_hat * g (and of g), over the weight's split.
            const int rel_x = (vec_phase(x) - w_phase) & (N - 1);
            const int x_width = load_width<T>(rel_x);
            const int dy_width = load_width<G>((vec_phase<G, N>(dy) - w_phase) & (N - 1));
            // The row core's tree: each body vector's terms summed into a partial, added to the thread's sum.
            float dot = 0.0f, g_sum = 0.0f;
            auto add = [&](float& dot_acc, float& g_acc, float xv, float wv, float dyv, float zv) {
                const auto a = gr.at(zv);
                const float g = weighted<GEMMA>(wv, gr.grad(dyv, a));
                dot_acc = __fadd_rn(dot_acc, __fmul_rn(normalized<CENTERED>(gr.value(xv, a), st), g));
                if (CENTERED) g_acc = __fadd_rn(g_acc, g);
            };
            auto add_vector = [&](const Pack<T>& xv, const WeightVec<T, W>& w, const WeightVec<T, G>& dv,
                                  const WeightVec<T, Z>& zv) {
                float dot_p = 0.0f, g_p = 0.0f;
#pragma unroll
                for (int j = 0; j < N; ++j) add(dot_p, g_p, to_float(xv.e[j]), w.at(j), dv.at(j), zv.at(j));
                dot = __fadd_rn(dot, dot_p);
                if (CENTERED) g_sum = __fadd_rn(g_sum, g_p);
            };
            if (t < ws.pre) add(dot, g_sum, to_float(x[t]), weight_at(weight, t), to_float(dy[t]), weight_at(gr.z, t));
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const int i = t + k * B;
                if (i < ws.vectors) {
                    const int at = ws.pre + i * N;
                    // xc[k] is already this vector where x shares the weight's phase and the block is the fold
                    if (rel_x != 0 || fold != B) xc[k] = load_pack(x + at, x_width);
                    dyc[k] = load_weights<T>(dy, at, dy_width);
                    add_vector(xc[k], load_weights<T>(weight, at, 16), dyc[k], load_weights<T>(gr.z, at, gr.z_width));
                }
            }
            for (int i = t + V * B; i < ws.vectors; i += B) {
                const int at = ws.pre + i * N;
                add_vector(load_pack(x + at, x_width), load_weights<T>(weight, at, 16), load_weights<T>(dy, at, dy_width),
                           load_weights<T>(gr.z, at, gr.z_width));
            }
            if (ws.tail + t < hidden) {
                const int at = ws.tail + t;
                add(dot, g_sum, to_float(x[at]), weight_at(weight, at), to_float(dy[at]), weight_at(gr.z, at));
            }
            // RMSNorm's stats used scratch[0], LayerNorm's scratch[0] then [1]: keep alternating (block_sum
            // needs a barrier before its scratch is reused); RMSNorm's one sum with a saved rstd, by the row's
            // parity (LayerNorm's two alternate by themselves).
            const int warps = B >> 5;
            float* dot_scratch = scratch[CENTERED ? 0 : saved ? (r & 1) : 1];
            const float dot_mean = __fdiv_rn(block_sum(dot, dot_scratch, warps), static_cast<float>(hidden));
            const float g_mean = CENTERED ? __fdiv_rn(block_sum(g_sum, scratch[1], warps), static_cast<float>(hidden)) : 0.0f;

            // (3) dx, and the running parameter-gradient sums.
            const int dx_width = load_width<T>((vec_phase(dx) - w_phase) & (N - 1));
            auto scalar = [&](int at) {
                const float dyv = to_float(dy[at]), xv = to_float(x[at]), wv = weight_at(weight, at);
                const auto a = gr.at(weight_at(gr.z, at));
                const ElementGrad e = element_grad<CENTERED, GEMMA>(gr.value(xv, a), wv, gr.grad(dyv, a), st, g_mean,
                                                                    dot_mean);
                float dz = 0.0f;
                dx[at] = from_float<T>(gr.out(e, xv, dyv, wv, a, dz));
                gr.store_dz(at, dz);
                if constexpr (P > 0) {
                    float terms[P];
                    terms[0] = WEIGHTED ? e.dweight : dyv;  // plane 0: dweight, or dbias without a weight
                    if constexpr (P == 2) terms[1] = dyv;
                    sums.add(at, terms);
                }
            };
            auto vector = [&](int at, const Pack<T>& xv, const WeightVec<T, G>& dv) {
                const WeightVec<T, W> w = load_weights<T>(weight, at, 16);
                const WeightVec<T, Z> zv = load_weights<T>(gr.z, at, gr.z_width);
                Pack<T> out, dz;
#pragma unroll
                for (int q = 0; q < N; q += 4) {
                    float terms[PS][4];
                    quad_grads<P, CENTERED, GEMMA>(xv, w, dv, st, g_mean, dot_mean, q, out, terms, gr, zv, &dz);
                    if constexpr (P > 0) sums.add4(at + q, terms);
                }
                store_pack(dx + at, out, dx_width);
                gr.store_dz(at, dz);
            };
            if (t < ws.pre) scalar(t);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                if (t + k * B < ws.vectors) vector(ws.pre + (t + k * B) * N, xc[k], dyc[k]);
            }
            for (int i = t + V * B; i < ws.vectors; i += B) {
                const int at = ws.pre + i * N;
                vector(at, load_pack(x + at, x_width), load_weights<T>(dy, at, dy_width));
            }
            if (ws.tail + t < hidden) scalar(ws.tail + t);
        }
        if constexpr (P > 0) {
            if (sums_in_shared) {  // the chunk's sums of the columns this thread owns, to its workspace row
                for_owned_columns<N>(ws, hidden, [&](int at, int count) { copy_columns<P, N>(part + at, plane, sums.at + at, ws_stride, count); });
            }
        }
    }
}

// out[i] = sum over the `chunks` chunks of one workspace plane of column i, in the fixed order described
// above. Workspace row r holds column i at plane[r * ws_stride + offset + i]: a chunk's sums (group = 1),
// or one input row's terms (group = chunk_rows, one row per block: the chunk's sum is made here, in
// kernel 1's order, ((0 + t[cC]) + t[cC+1]) + ...). `ws_rows`: the rows the workspace holds. blockDim =
// (32, 32): 32 columns per block, 32 lanes per column; each warp reads 32 consecutive floats of one row
// (coalesced). For group = 1 the extra 0 + p changes nothing: a sum made from +0 by additions is never -0.
template <typename OutT>
__global__ void __launch_bounds__(1024) sum_partials_kernel(OutT* out, const float* __restrict__ plane, int hidden,
                                                            int chunks, long long ws_stride, int offset, int group,
                                                            int ws_rows) {
    __shared__ float lane_sums[32][32];  // [lane y][column]: a warp (one y) writes, thread y = 0 reads, one row each
    begin_dependent_grid();
    const int col = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    // The loads of up to L terms are issued before their (ordered) additions: a lane's sums are chains of
    // dependent additions of independent loads, which one at a time would wait a memory latency each.
    constexpr int L = 8;
    const float* column = plane + offset + col;
    if (col < hidden && group == 1) {  // a partial per chunk: ws_rows == chunks
        int c = threadIdx.y;
        for (; c + (L - 1) * 32 < chunks; c += L * 32) {
            float v[L];
#pragma unroll
            for (int u = 0; u < L; ++u) v[u] = column[static_cast<long long>(c + u * 32) * ws_stride];
#pragma unroll
            for (int u = 0; u < L; ++u) s = __fadd_rn(s, __fadd_rn(0.0f, v[u]));
        }
        for (; c < chunks; c += 32) s = __fadd_rn(s, __fadd_rn(0.0f, column[static_cast<long long>(c) * ws_stride]));
    } else if (col < hidden) {
        for (int c = threadIdx.y; c < chunks; c += 32) {
            const int r0 = c * group, r1 = ws_rows - r0 < group ? ws_rows : r0 + group;
            float chunk = 0.0f;
            for (int r = r0; r < r1; r += L) {
                float v[L];
#pragma unroll
                for (int u = 0; u < L; ++u) v[u] = r + u < r1 ? column[static_cast<long long>(r + u) * ws_stride] : 0.0f;
#pragma unroll
                for (int u = 0; u < L; ++u) {
                    if (r + u < r1) chunk = __fadd_rn(chunk, v[u]);
                }
            }
            s = __fadd_rn(s, chunk);
        }
    }
    lane_sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < hidden) {
        float total = 0.0f;
#pragma unroll
        for (int y = 0; y < 32; ++y) total = __fadd_rn(total, lane_sums[y][threadIdx.x]);
        out[col] = from_float<OutT>(total);
    }
}

// ---- Few rows in one launch, from the forward's saved statistics ---------------------------------------------
//
// norm_backward_few: blocks 0 .. rows - 1 make one row's dx each (norm_backward_rows, SUMS = false); each
// block after them makes the parameter gradients of 32 columns straight from x, dy and the saved statistics
// (mean, rstd): the same terms as kernel 1's (dy * x_hat, and dy), summed in sum_partials_kernel's order
// (chunks of chunk_rows rows from +0, lane y of 32 summing chunks y, y + 32, ..., the lane sums in lane
// order), so the same bits as the two kernels, in one launch and without a workspace. Adding a term to +0
// first, as kernel 1 writes it, changes nothing: a sum made from +0 by additions is never -0.
// For few rows: the column blocks read every row, FEW_LANE_BATCH lanes' rows in flight at once; the launcher
// takes it where the rows make at most 32 chunks of at most FEW_CHUNK_ROWS rows, so that a lane sums one chunk,
// and never in place (the column blocks read x and dy while the row blocks write dx),
// and the plan's block has at most FEW_MAX_THREADS threads (the kernels' launch bounds: registers for the batch).
constexpr int FEW_CHUNK_ROWS = 4;
constexpr int FEW_LANE_BATCH = 4;
constexpr int FEW_MAX_THREADS = 512;

// The parameter gradients of `rows` rows, columns column_block * 32 .. + 31 (see above). blockDim.x / 32
// groups of lanes; out[p] (dweight unless weightless, then dbias; null: not written) as float where
// fp32_grads, else as T.
template <typename T, bool CENTERED, typename W, bool DBIAS, typename G>
__device__ __forceinline__ void few_rows_param_grads(void* const (&out)[2], int fp32_grads, const G* grad_output,
                                                     const T* input, const float* __restrict__ mean,
                                                     const float* __restrict__ rstd, int rows, int hidden,
                                                     long long grad_output_stride, long long input_stride,
                                                     int chunk_rows, int column_block) {
    constexpr bool WEIGHTED = !Weightless<W>::value;
    constexpr int P = param_planes<W, DBIAS>();
    __shared__ float lane_sums[P > 0 ? P : 1][32][33];  // [plane][lane][column], padded against bank conflicts
    const int c = threadIdx.x & 31, groups = blockDim.x >> 5;
    const int col = column_block * 32 + c;
    const bool in_row = col < hidden;
    for (int y0 = threadIdx.x >> 5; y0 < 32; y0 += groups * FEW_LANE_BATCH) {
        float xv[FEW_LANE_BATCH][FEW_CHUNK_ROWS], dv[FEW_LANE_BATCH][FEW_CHUNK_ROWS];
        RowStats st[FEW_LANE_BATCH][FEW_CHUNK_ROWS];
        // Every load of the batch first, then the ordered additions: one memory latency per batch.
#pragma unroll
        for (int b = 0; b < FEW_LANE_BATCH; ++b) {
#pragma unroll
            for (int u = 0; u < FEW_CHUNK_ROWS; ++u) {
                const int r = (y0 + b * groups) * chunk_rows + u;
                const bool here = in_row && y0 + b * groups < 32 && u < chunk_rows && r < rows;
                dv[b][u] = here ? to_float(grad_output[r * grad_output_stride + col]) : 0.0f;
                if constexpr (WEIGHTED) {
                    xv[b][u] = here ? to_float(input[r * input_stride + col]) : 0.0f;
                    st[b][u] = here ? RowStats{CENTERED ? mean[r] : 0.0f, rstd[r]} : RowStats{0.0f, 0.0f};
                }
            }
        }
#pragma unroll
        for (int b = 0; b < FEW_LANE_BATCH; ++b) {
            const int y = y0 + b * groups;
            if (y >= 32) break;
            float chunk[P > 0 ? P : 1];
#pragma unroll
            for (int q = 0; q < P; ++q) chunk[q] = 0.0f;
#pragma unroll
            for (int u = 0; u < FEW_CHUNK_ROWS; ++u) {
                if (u < chunk_rows && y * chunk_rows + u < rows) {
                    if constexpr (WEIGHTED) chunk[0] = __fadd_rn(chunk[0], __fmul_rn(dv[b][u], normalized<CENTERED>(xv[b][u], st[b][u])));
                    if constexpr (DBIAS) chunk[P - 1] = __fadd_rn(chunk[P - 1], dv[b][u]);
                }
            }
#pragma unroll
            for (int q = 0; q < P; ++q) lane_sums[q][y][c] = __fadd_rn(0.0f, chunk[q]);
        }
    }
    __syncthreads();
    // group g writes planes g, g + groups, ...: a block of one warp writes both
    for (int q = threadIdx.x >> 5; q < P; q += groups) {
        void* const dst = q == 0 ? out[0] : out[1];  // not out[q]: a dynamic index would put out in local memory
        if (!in_row || dst == nullptr) continue;
        float total = 0.0f;
#pragma unroll
        for (int y = 0; y < 32; ++y) total = __fadd_rn(total, lane_sums[q][y][c]);
        if (fp32_grads) {
            static_cast<float*>(dst)[col] = total;
        } else {
            static_cast<T*>(dst)[col] = from_float<T>(total);
        }
    }
}

// The kernel's body (see above): grid rows + ceil(hidden / 32) blocks of the plan's block (the row sums' tree).
// grad_weight, grad_bias: void* because they are T or float by fp32_grads, a launch argument rather than a
// template one, so that the variants compile once for both.
template <typename T, bool CENTERED, bool GEMMA, typename W, bool DBIAS, typename G>
__device__ __forceinline__ void norm_backward_few(
    T* grad_input, void* grad_weight, void* grad_bias, int fp32_grads, const G* grad_output, const T* input,
    const W* __restrict__ weight, const float* __restrict__ mean, const float* __restrict__ rstd, float epsilon,
    int rows, int hidden, long long grad_input_stride, long long grad_output_stride, long long input_stride,
    int chunk_rows, int fold) {
    if (static_cast<int>(blockIdx.x) < rows) {
        norm_backward_rows<T, 0, CENTERED, GEMMA, W, DBIAS, G, false>(
            grad_input, nullptr, grad_output, input, weight, mean, rstd, epsilon, rows, hidden, grad_input_stride,
            grad_output_stride, input_stride, 1, 1, 0, 0, fold);
        return;
    }
    begin_dependent_grid();
    void* const out[2] = {Weightless<W>::value ? grad_bias : grad_weight, grad_bias};
    few_rows_param_grads<T, CENTERED, W, DBIAS, G>(out, fp32_grads, grad_output, input, mean, rstd, rows, hidden,
                                                   grad_output_stride, input_stride, chunk_rows,
                                                   static_cast<int>(blockIdx.x) - rows);
}

// ---- The staged backward (aligned operands) -------------------------------------------------------
//
// norm_backward_staged: the same arithmetic as norm_backward_rows, bit for bit (the statistics in the
// forward's tree of fold width `fold`, the row sums of x_hat * g (and g) in the tree of fold width
// `dot_fold` = the plan's block, which norm_backward_rows takes from blockDim.x; dx and the chunk sums of
// the parameter-gradient terms, each column's in row order from +0), for operands whose every row is
// split alike: grad_input, grad_output, input (and the weight) 16-byte aligned, their strides and hidden
// multiples of the vector (the launcher checks; then every split is all body vectors, phase 0). What
// changes is only how the rows reach the block: each block pipelines its rows through `stages` buffers
// of shared memory with cp.async (row r + stages - 1 is loading while row r is reduced), so the bytes in
// flight per multiprocessor no longer depend on its resident threads, and x and dy are read from DRAM
// once. The block's threads (any multiple of 32) compute the fold positions of each tree in turn (a fold
// wider than the block loops, as row_core.cuh's re-reading shape does) and own the columns of the dx
// pass, vectors threadIdx.x, threadIdx.x + blockDim.x, ..., in every row: so each column's chunk sum
// (in shared memory) is added to by one thread, in row order, as in norm_backward_rows.
// Dynamic shared memory: P * hidden floats of sums, then the weight (hidden of W: staged_weight_bytes), then
// `stages` buffers of an x row (hidden of T) and a dy row (hidden of G); only min(stages, rows_per_block)
// are used. HELD > 0: each thread keeps the chunk sums of its (at most HELD) vectors in registers instead, in
// the same order (the same bits), and shared memory holds no sums: more blocks fit per multiprocessor.

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously (cached at L2 only).
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(dst)), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// The most row buffers the staged kernel pipelines through (plan.py's STAGED_MAX_STAGES; cp_async_wait's cases).
constexpr int STAGED_MAX_STAGES = 8;

// Wait until at most `pending` (0 .. STAGED_MAX_STAGES - 2) of this thread's newest cp.async groups are still in
// flight.
__device__ __forceinline__ void cp_async_wait(int pending) {
    switch (pending) {
        case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
        case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
        case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
        case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
        case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
        case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
        default: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    }
}

// The tree of row_core.cuh for a row of `vectors` body vectors and fold width F (a multiple of 32): fold
// position t's acc(t) = ((0 + P(t)) + P(t + F)) + ..., warp_sum, the warp totals to scratch[t >> 5], one
// barrier, the butterfly over the F / 32 warp totals. pv(v, q) gives vector v's partial of tree q (Q trees
// summed at once, each with its own scratch row); returns the totals in `total`.
template <int Q, typename PV>
__device__ __forceinline__ void staged_fold(int F, int vectors, float (*scratch)[32], PV pv, float (&total)[Q]) {
    for (int t = threadIdx.x; t < F; t += blockDim.x) {
        float acc[Q];
#pragma unroll
        for (int q = 0; q < Q; ++q) acc[q] = 0.0f;
        for (int v = t; v < vectors; v += F) {
            float p[Q];
            pv(v, p);
#pragma unroll
            for (int q = 0; q < Q; ++q) acc[q] = __fadd_rn(acc[q], p[q]);
        }
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            acc[q] = warp_sum(acc[q]);
            if ((threadIdx.x & 31) == 0) scratch[q][t >> 5] = acc[q];
        }
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < Q; ++q) total[q] = sum_of_warp_totals(scratch[q], F >> 5);
}

template <typename T> __device__ __forceinline__ Pack<T> shared_pack(const T* p) {
    Pack<T> r;
    *reinterpret_cast<uint4*>(&r) = *reinterpret_cast<const uint4*>(p);
    return r;
}

// The N = Vec<T>::N columns of E at p (shared memory, 16-byte aligned) as a WeightVec; none for E = void.
template <typename T, typename E> __device__ __forceinline__ WeightVec<T, E> shared_columns(const E* p) {
    WeightVec<T, E> r;
    if constexpr (!Weightless<E>::value) {
#pragma unroll
        for (int q = 0; q < Vec<T>::N; q += Vec<E>::N) *reinterpret_cast<Pack<E>*>(&r.e[q]) = shared_pack(p + q);
    }
    return r;
}

// n elements of E (a multiple of 16 bytes, both ends 16-byte aligned) from global src to shared dst, the
// block's threads 16 bytes each, asynchronously.
template <typename E> __device__ __forceinline__ void copy_row_async(E* dst, const E* src, int n) {
    for (int c = threadIdx.x; c < n / Vec<E>::N; c += blockDim.x) cp_async16(dst + c * Vec<E>::N, src + c * Vec<E>::N);
}

// sm_90 and later copy each row with the bulk copy engine (TMA): one thread issues a row's x and dy as two
// copies whose completion an mbarrier per stage counts in bytes, instead of every thread issuing 16-byte cp.async
// copies (about ten instructions per 16 bytes, a sixth of the kernel's instructions at bf16 hidden 5120). Older
// archs keep cp.async.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PYRMS_STAGED_BULK 1
#else
#define PYRMS_STAGED_BULK 0
#endif

__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}

// One arrival that also expects `bytes` of bulk copies to complete this phase.
__device__ __forceinline__ void mbarrier_expect_bytes(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
                 : "memory");
}

// Until the phase of parity `parity` of the mbarrier is complete.
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(shared_address(bar)), "r"(parity)
        : "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared by the bulk copy engine, counted
// by the mbarrier.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(shared_address(bar)) : "memory");
}

template <typename T, bool CENTERED, bool GEMMA, typename W, bool DBIAS, typename G, int HELD = 0>
__device__ __forceinline__ void norm_backward_staged(
    T* grad_input, float* partials, const G* grad_output, const T* input, const W* __restrict__ weight,
    const float* __restrict__ mean, const float* __restrict__ rstd, float epsilon, int rows, int hidden,
    long long grad_input_stride, long long grad_output_stride, long long input_stride, int chunk_rows,
    int rows_per_block, long long ws_stride, int fold, int dot_fold, int stages) {
    static_assert(!(GEMMA && Weightless<W>::value), "gemma scales by 1 + weight: it needs a weight");
    constexpr int N = Vec<T>::N;
    constexpr int P = param_planes<W, DBIAS>();
    __shared__ float scratch[4][32];
    extern __shared__ __align__(16) unsigned char staged_shared[];
    begin_dependent_grid();
    const int tid = threadIdx.x;
    const int B = blockDim.x;
    const int vectors = hidden / N;  // every row is all body vectors (the launcher's promise)
    constexpr int PS = P > 0 ? P : 1;
    // The chunk's column sums: P planes of hidden floats in shared memory, or (HELD > 0) the HELD vectors
    // this thread owns in its registers (the launcher's promise: vectors <= HELD * blockDim.x).
    float* sums = reinterpret_cast<float*>(staged_shared);
    unsigned char* after_sums = staged_shared + (HELD > 0 ? 0ll : 4ll * P * hidden);
    float held[HELD > 0 ? HELD : 1][PS][N];
    constexpr bool W_SHARED = staged_weight_bytes<T, W>() > 0;
    W* wsm = reinterpret_cast<W*>(after_sums);                                  // the weight (W_SHARED)
    unsigned char* buffers = after_sums + static_cast<long long>(staged_weight_bytes<T, W>()) * hidden;  // x, dy
    const long long stage_bytes = static_cast<long long>(sizeof(T) + sizeof(G)) * hidden;
    const long long plane = (static_cast<long long>(rows) + chunk_rows - 1) / chunk_rows * ws_stride;

    const int first = static_cast<int>(min(static_cast<long long>(blockIdx.x) * rows_per_block, static_cast<long long>(rows)));
    const int end = rows - first < rows_per_block ? rows : first + rows_per_block;
    const int count = end - first;

#if PYRMS_STAGED_BULK
    __shared__ __align__(8) unsigned long long full[STAGED_MAX_STAGES];  // per stage: its row has arrived
    if (tid == 0) {
        for (int s = 0; s < stages; ++s) mbarrier_init(&full[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();
    auto issue = [&](int i) {  // row first + i into its stage, if it exists (the weight with row 0)
        if (tid == 0 && i < count) {
            const long long r = first + i;
            T* xs = reinterpret_cast<T*>(buffers + (i % stages) * stage_bytes);
            unsigned long long* bar = &full[i % stages];
            const unsigned x_bytes = static_cast<unsigned>(sizeof(T)) * hidden;
            const unsigned dy_bytes = static_cast<unsigned>(sizeof(G)) * hidden;
            const unsigned w_bytes = W_SHARED && i == 0 ? static_cast<unsigned>(staged_weight_bytes<T, W>()) * hidden : 0u;
            // the stage was last read by this block's threads (generic proxy) before the barrier that precedes this
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            mbarrier_expect_bytes(bar, x_bytes + dy_bytes + w_bytes);
            bulk_copy(xs, input + r * input_stride, x_bytes, bar);
            bulk_copy(xs + hidden, grad_output + r * grad_output_stride, dy_bytes, bar);
            if constexpr (W_SHARED) {
                if (i == 0) bulk_copy(wsm, weight, w_bytes, bar);
            }
        }
    };
#else
    auto issue = [&](int i) {  // row first + i into its stage, if it exists; always one group
        if (i < count) {
            const long long r = first + i;
            T* xs = reinterpret_cast<T*>(buffers + (i % stages) * stage_bytes);
            copy_row_async(xs, input + r * input_stride, hidden);
            copy_row_async(reinterpret_cast<G*>(xs + hidden), grad_output + r * grad_output_stride, hidden);
        }
        cp_async_commit();
    };
    if constexpr (W_SHARED) copy_row_async(wsm, weight, hidden);
#endif
    // The weight's columns at `at` (a multiple of N; the launcher has the weight start a vector of the split).
    auto weights_at = [&](int at) {
        if constexpr (W_SHARED) {
            return shared_columns<T>(wsm + at);
        } else {
            return load_weights<T>(weight, at, 16);
        }
    };
    for (int i = 0; i < stages - 1; ++i) issue(i);  // the weight travels with the first group

    // Row i's stage (and the parity of its fill) and its place in its chunk, counted rather than divided (first
    // is a multiple of chunk_rows).
    int slot = 0, in_chunk = 0;
    unsigned parity = 0;
    float* part = partials + static_cast<long long>(first / chunk_rows) * ws_stride;
    for (int i = 0; i < count; ++i) {
        const int r = first + i;
#if PYRMS_STAGED_BULK
        mbarrier_wait(&full[slot], parity);  // row r is in its stage
#else
        cp_async_wait(stages - 2);  // row r's group is complete (this thread's copies)
#endif
        __syncthreads();            // everyone's; and every thread is done with row r - 1 and its stage
        issue(i + stages - 1);      // into row r - 1's stage
        const T* xs = reinterpret_cast<const T*>(buffers + slot * stage_bytes);
        parity ^= slot + 1 == stages ? 1u : 0u;
        slot = slot + 1 == stages ? 0 : slot + 1;
        const G* ds = reinterpret_cast<const G*>(xs + hidden);

        // (1) statistics, in the forward's tree (fold width `fold`).
        RowStats st;
        if (rstd != nullptr) {  // the forward's, given
            st = {CENTERED ? mean[r] : 0.0f, rstd[r]};
        } else if constexpr (!CENTERED) {
            float tot[1];
            staged_fold<1>(fold, vectors, &scratch[0], [&](int v, float (&p)[1]) {
                p[0] = vector_sum(shared_pack(xs + v * N), [](float x) { return __fmul_rn(x, x); });
            }, tot);
            st = {0.0f, inv_rms(tot[0], hidden, epsilon)};
        } else {
            float tot[1];
            staged_fold<1>(fold, vectors, &scratch[0], [&](int v, float (&p)[1]) {
                p[0] = vector_sum(shared_pack(xs + v * N), [](float x) { return x; });
            }, tot);
            const float mean = __fdiv_rn(tot[0], static_cast<float>(hidden));
            staged_fold<1>(fold, vectors, &scratch[1], [&](int v, float (&p)[1]) {
                p[0] = vector_sum(shared_pack(xs + v * N), [mean](float x) {
                    const float d = __fsub_rn(x, mean);
                    return __fmul_rn(d, d);
                });
            }, tot);
            st = {mean, inv_rms(tot[0], hidden, epsilon)};
        }

        // (2) the row sums of x_hat * g (and g), in the tree of fold width dot_fold.
        constexpr int Q = CENTERED ? 2 : 1;
        float tot[Q];
        staged_fold<Q>(dot_fold, vectors, &scratch[2], [&](int v, float (&p)[Q]) {
            const Pack<T> xv = shared_pack(xs + v * N);
            const WeightVec<T, G> dv = shared_columns<T>(ds + v * N);
            const WeightVec<T, W> wv = weights_at(v * N);
            float dot_p = 0.0f, g_p = 0.0f;
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const float g = weighted<GEMMA>(wv.at(j), dv.at(j));
                dot_p = __fadd_rn(dot_p, __fmul_rn(normalized<CENTERED>(to_float(xv.e[j]), st), g));
                if (CENTERED) g_p = __fadd_rn(g_p, g);
            }
            p[0] = dot_p;
            if constexpr (CENTERED) p[Q - 1] = g_p;
        }, tot);
        const float dot_mean = __fdiv_rn(tot[0], static_cast<float>(hidden));
        const float g_mean = CENTERED ? __fdiv_rn(tot[Q - 1], static_cast<float>(hidden)) : 0.0f;

        // (3) dx, and the running chunk sums of the columns this thread owns.
        const bool chunk_start = in_chunk == 0;
        const bool chunk_end = in_chunk + 1 == chunk_rows || i + 1 == count;
        T* dx = grad_input + static_cast<long long>(r) * grad_input_stride;
        // The owned vectors v = tid + k * B: dx, and the columns' chunk sums in held[k] (HELD > 0: the loop
        // unrolls, so k is a constant and held stays in registers) or in shared memory.
#pragma unroll(HELD > 0 ? HELD : 1)
        for (int k = 0, v = tid; HELD > 0 ? k < HELD : v < vectors; ++k, v += B) {
            if (HELD > 0 && v >= vectors) break;
            float (&acc)[PS][N] = held[HELD > 0 ? k : 0];
            const int at = v * N;
            const Pack<T> xv = shared_pack(xs + at);
            const WeightVec<T, G> dv = shared_columns<T>(ds + at);
            const WeightVec<T, W> wv = weights_at(at);
            Pack<T> out;
#pragma unroll
            for (int q = 0; q < N; q += 4) {
                float terms[PS][4];
                quad_grads<P, CENTERED, GEMMA>(xv, wv, dv, st, g_mean, dot_mean, q, out, terms);
                // Each plane's four running sums: from +0 at the chunk's first row, to the workspace row after its
                // last; in between in held[k], or (HELD = 0) at a in shared memory.
#pragma unroll
                for (int p = 0; p < P; ++p) {
                    float4* const a = reinterpret_cast<float4*>(sums + p * hidden + at + q);
                    float4 s = chunk_start ? make_float4(0.0f, 0.0f, 0.0f, 0.0f)
                               : HELD > 0  ? make_float4(acc[p][q], acc[p][q + 1], acc[p][q + 2], acc[p][q + 3])
                                           : *a;
                    s.x = __fadd_rn(s.x, terms[p][0]);
                    s.y = __fadd_rn(s.y, terms[p][1]);
                    s.z = __fadd_rn(s.z, terms[p][2]);
                    s.w = __fadd_rn(s.w, terms[p][3]);
                    if (chunk_end) {
                        *reinterpret_cast<float4*>(part + p * plane + at + q) = s;
                    } else if constexpr (HELD > 0) {
                        acc[p][q] = s.x, acc[p][q + 1] = s.y, acc[p][q + 2] = s.z, acc[p][q + 3] = s.w;
                    } else {
                        *a = s;
                    }
                }
            }
            store_aligned(dx + at, out);
        }
        if (chunk_end) part += ws_stride;
        in_chunk = chunk_end ? 0 : in_chunk + 1;
    }
#if !PYRMS_STAGED_BULK
    cp_async_wait(0);  // nothing is left in flight (every group past the last row is empty)
#endif
}

}  // namespace pyrms
