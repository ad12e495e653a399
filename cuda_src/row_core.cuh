// The forward row core: one row of `n` elements per block, in two passes, written once for every
// kernel that normalizes rows (the RMSNorm kernels, plain, after the residual add or quantizing, LayerNorm's,
// and the statistics the backward recomputes in norm_backward.cuh).
//
//   pass 1: load the row (a Source hook: plain or streaming loads, or fused add's sums), and reduce
//           it in THE reduction tree below (row_sum, row_stats);
//   pass 2: write_row: out[i] = f(x[i], w[i], b[i]) (an output hook; the weight of the row's dtype,
//           fp32, or none), split at out's 16-byte boundaries, from the vectors pass 1 kept in
//           registers where the splits agree.
//
// The reduction tree is a function of (dtype, n, the row's alignment, F) only, where F, the fold
// width, is the planner's block size for (dtype, n) (pyrms.plan.block_and_cache). For a row split at
// its own 16-byte boundaries into prefix elements, `vectors` body vectors and tail elements:
//
//   P(v)   = ((0 + term(e0)) + term(e1)) + ... + term(e_{N-1})       one body vector's partial
//   acc(t) = (((0 + term(prefix[t])) + P(t)) + P(t + F)) + P(t + 2F) + ... + term(tail[t])
//   total  = pyrms::block_sum of acc(0 .. F-1)                         (the fixed butterfly)
//
// (prefix[t] and tail[t] only where the row has them.) Every launch shape computes exactly that:
//   - RowShape<CACHE, 1>: blockDim.x = F; thread t holds P(t), P(t+F), ... for its first CACHE
//     vectors in registers and folds them itself: the shape for many rows;
//   - RowShape<CACHE, SPREAD> (SPREAD = 2, 4): blockDim.x = SPREAD * F, each thread holds CACHE/SPREAD
//     vectors (a shorter chain, more loads in flight), writes their partials to shared memory, and
//     thread t of the first F folds them in the same order: the latency shape for few rows (and its
//     ALIGNED variant, for rows without prefix or tail: RowShape's third parameter);
//   - RowShape<0, 1> with a fold wider than the block (the backward's): each thread computes acc(t) for
//     t = threadIdx.x, threadIdx.x + blockDim.x, ... in turn;
//   - RowShape<CACHE, 1, false, LANES> (packed rows, F = 32 only): a row per LANES lanes (8, 16 or 32) of
//     a warp, several rows per block, the butterfly over the row's lanes only: the shape for many short
//     rows (QK-norm's 64 to 512 elements), where one 32-thread block per row idles most of each SM. A
//     lane may take POS = min(CACHE, 32 / LANES) fold positions (lane, lane + LANES, ...): it computes
//     each one's acc and does the butterfly's steps between them itself, so each row's work that is not
//     per element (its index, pointers, inv_rms) is shared by fewer lanes (the QK-norm rows' 128
//     elements in 8 lanes of 2 vectors, not 16 of 1: four rows per warp instruction, not two).
// So a row's result is bitwise the same whichever shape launched it, and the backward's statistics
// (RowShape<V, 1> given the forward's F, whatever its own block) are the forward's by construction.
// pyrms.reference.thread_sums_twin is the same tree in numpy.
#pragma once
#include "common.cuh"

namespace pyrms {

// Which vectors of a row the calling thread holds, for a block of SPREAD * fold threads, or (LANES > 0,
// packed rows) for a segment of LANES lanes of a warp, one row per segment, blockDim.x / LANES rows per block.
// A packed lane holds CACHE vectors: POS fold positions (lane + m * LANES, m < POS), STEPS fold steps each.
template <int CACHE, int SPREAD, bool ALIGNED = false, int LANES = 0> struct RowShape {
    static_assert(SPREAD == 1 || (CACHE > 0 && CACHE % SPREAD == 0), "a spread shape divides the cache");
    static_assert(LANES == 0 || (SPREAD == 1 && (LANES == 8 || LANES == 16 || LANES == 32)),
                  "packed rows take 8, 16 or 32 lanes each (prefix and tail elements: one per lane)");
    static constexpr int POS_MAX = LANES > 0 ? 32 / LANES : 1;  // a packed lane's share of the 32 fold positions
    static constexpr int POS = CACHE < 1 ? 1 : (CACHE < POS_MAX ? CACHE : POS_MAX);  // min(CACHE, 32 / LANES)
    static constexpr int STEPS = CACHE / POS;                // held fold steps of each of the thread's positions
    static_assert(CACHE % POS == 0, "a packed lane's held vectors fill its positions' steps evenly");
    static constexpr int HELD = CACHE / SPREAD;              // vectors each thread keeps in registers
    static constexpr int SLOTS = HELD > 0 ? HELD : 1;        // (arrays may not be empty)
    static constexpr int PARTIALS = SPREAD > 1 ? CACHE * 1024 / SPREAD : 1;  // shared floats for P(v)
    int fold, t, s;  // F; the position in the fold; which of the SPREAD slices the thread belongs to
    int lane, lanes; // the thread's place among the threads that share its row, and their number

    // The fold width: blockDim.x / SPREAD, or `width` (SPREAD = 1 and CACHE = 0 only: a multiple of 32,
    // wider than the block when a backward kernel recomputes the forward's statistics), or 32 for packed
    // rows (the planner packs only rows whose fold is one warp).
    __device__ __forceinline__ explicit RowShape(int width = 0) {
        if constexpr (LANES > 0) {
            fold = 32;
            t = lane = threadIdx.x & (LANES - 1);
            lanes = LANES;
            s = 0;
        } else if constexpr (SPREAD == 1) {
            fold = width > 0 ? width : blockDim.x;
            t = lane = threadIdx.x;
            lanes = blockDim.x;
            s = 0;
        } else {
            fold = blockDim.x / SPREAD;
            s = threadIdx.x / fold;
            t = threadIdx.x - s * fold;
            lane = threadIdx.x;
            lanes = blockDim.x;
        }
    }
    // Packed rows: the lanes of the warp that share the calling thread's row (shuffles and syncs are
    // confined to them, so a segment whose row is past the end may return early).
    __device__ __forceinline__ unsigned segment_mask() const {
        return LANES == 32 ? 0xffffffffu : ((1u << LANES) - 1u) << ((threadIdx.x & 31) & ~(LANES - 1));
    }
    // The body vector index of held slot k: fold step j = s + k * SPREAD, vector t + j * F; packed rows:
    // position t + (k % POS) * LANES, fold step k / POS (with POS = 1: t + k * F).
    __device__ __forceinline__ int held_vector(int k) const {
        if constexpr (LANES > 0) {
            return t + (k % POS) * LANES + (k / POS) * fold;
        } else {
            return t + (s + k * SPREAD) * fold;
        }
    }

    // ALIGNED: the launcher promises that every row pointer (and the weight) is 16-byte aligned and
    // the hidden size a multiple of the vector, so every split is all body (no prefix, no tail) and every
    // load and store 16 bytes wide. The same tree (a row without prefix or tail elements adds none) in
    // far fewer instructions: the few-row kernels are latency-bound, and the executed code is a large
    // part of their time (H200: 3.44 -> 2.97 us at 1x5120 bf16; docs/perf_notes.md, "The row core").
    // N: the vector in elements of p's type (a quantized output's is the rows' N: write_row).
    template <typename T, int N = Vec<T>::N> __device__ __forceinline__ int phase(const T* p) const {
        return ALIGNED ? 0 : vec_phase<T, N>(p);
    }
    template <typename T, int N = Vec<T>::N> __device__ __forceinline__ RowSplit split(const T* p, int n) const {
        return ALIGNED ? RowSplit{0, n / N, n} : split_row<T, N>(p, n);
    }
};

// Threads a kernel of this shape may have: registers for its held vectors must fit beside the rest.
__host__ __device__ constexpr int max_threads(int held) { return held <= 2 ? 1024 : 2048 / held; }

// ---- Sources: how pass 1 reads a row --------------------------------------------------------------
// held(at): a body vector (at: element offset, 16-byte aligned) kept in registers for pass 2, a Pack<T>
// (or any pack of N = Vec<T>::N values with to_float: added_row.cuh's fp32 sums, a WidePack<T>);
// keep(at, v): what to do with it once every held load is issued (fused add stores its sums there);
// vec(at): a body vector not kept (re-read in pass 2); elem(at): a prefix or tail element.

// A row read from memory. STREAMING: the held vectors are read once, so they bypass the caches'
// keep policy (ld.global.cs); the re-read ones keep the default policy, since pass 2 reads them again.
template <typename T, bool STREAMING> struct RowIn {
    const T* row;
    __device__ __forceinline__ Pack<T> held(int at) const {
        return STREAMING ? load_streaming(row + at) : load_aligned(row + at);
    }
    __device__ __forceinline__ void keep(int, const Pack<T>&) const {}
    __device__ __forceinline__ Pack<T> vec(int at) const { return load_aligned(row + at); }
    __device__ __forceinline__ T elem(int at) const { return row[at]; }
};

// ---- Pass 1 ---------------------------------------------------------------------------------------

// The thread's held vectors of a row split `s`: every load issued before any is used, so they are in
// flight together; then keep() each.
template <int CACHE, int SPREAD, bool ALIGNED, int LANES, typename Src, typename H>
__device__ __forceinline__ void load_held(const RowShape<CACHE, SPREAD, ALIGNED, LANES>& sh, const RowSplit& s, const Src& src,
                                          H (&held)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS]) {
    constexpr int N = H::N;
#pragma unroll
    for (int k = 0; k < RowShape<CACHE, SPREAD, ALIGNED, LANES>::HELD; ++k) {
        const int v = sh.held_vector(k);
        if (v < s.vectors) held[k] = src.held(s.pre + v * N);
    }
#pragma unroll
    for (int k = 0; k < RowShape<CACHE, SPREAD, ALIGNED, LANES>::HELD; ++k) {
        const int v = sh.held_vector(k);
        if (v < s.vectors) src.keep(s.pre + v * N, held[k]);
    }
}

// P(v) of the tree above: one vector's terms, in element order. __fadd_rn: no contraction with term.
template <typename H, typename Term> __device__ __forceinline__ float vector_sum(const H& v, Term term) {
    float p = 0.0f;
#pragma unroll
    for (int j = 0; j < H::N; ++j) p = __fadd_rn(p, term(to_float(v.e[j])));
    return p;
}

// The block-wide sum of term(x) over the row, in the tree above, returned to every thread.
// `partials`: RowShape::PARTIALS floats of shared memory (unused when SPREAD == 1). Consecutive calls
// must alternate `scratch` buffers, or put a barrier between them (the warp totals are read after this
// function's last barrier); `partials` may be reused, since every read of it precedes that barrier.
template <int CACHE, int SPREAD, bool ALIGNED, int LANES, typename Src, typename H, typename Term>
__device__ __forceinline__ float row_sum(const RowShape<CACHE, SPREAD, ALIGNED, LANES>& sh, const RowSplit& s, int n, const Src& src,
                                         const H (&held)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS], float* scratch,
                                         float* partials, Term term) {
    constexpr int N = H::N;
    if constexpr (SPREAD > 1) {
#pragma unroll
        for (int k = 0; k < RowShape<CACHE, SPREAD, ALIGNED, LANES>::HELD; ++k) {
            const int v = sh.held_vector(k);
            if (v < s.vectors) partials[v] = vector_sum(held[k], term);
        }
        __syncthreads();
    }
    // acc(t) of the tree above; m: which of the thread's fold positions t is (held vectors: the first POS
    // only, position m's at slots m, m + POS, ...; RowShape::POS is 1 except for packed rows).
    using Shape = RowShape<CACHE, SPREAD, ALIGNED, LANES>;
    const int F = sh.fold;
    auto position = [&](int t, int m) {
        float acc = 0.0f;
        if (t < s.pre) acc = __fadd_rn(acc, term(to_float(src.elem(t))));
        int j = 0;  // fold steps: held (or their partials) first
        if (m < Shape::POS) {
#pragma unroll
            for (; j < Shape::STEPS; ++j) {  // CACHE, or a packed lane's steps per position
                if (t + j * F < s.vectors) {
                    if constexpr (SPREAD > 1) {
                        acc = __fadd_rn(acc, partials[t + j * F]);
                    } else {
                        acc = __fadd_rn(acc, vector_sum(held[m + j * Shape::POS], term));
                    }
                }
            }
        }
        for (int v = t + j * F; v < s.vectors; v += F) acc = __fadd_rn(acc, vector_sum(src.vec(s.pre + v * N), term));
        if (s.tail + t < n) acc = __fadd_rn(acc, term(to_float(src.elem(s.tail + t))));
        return acc;
    };
    if constexpr (LANES > 0) {
        // Packed rows (F = 32): the butterfly of the fold's one warp over the row's LANES lanes only. Fold
        // positions from LANES * POS up hold no element (the planner packs a row into LANES lanes only
        // when its vectors fit them), so their acc is +0, and the full butterfly's steps across them add +0:
        // exact (no acc is -0: it starts at +0 and a sum is -0 only if both terms are). The second level
        // (sum_of_warp_totals of one warp) adds +0 too. So the same bits as one row per block.
        // A lane's POS positions: their acc, then the butterfly's steps between them (offsets POS * LANES / 2
        // down to LANES pair positions m and m ^ (offset / LANES) of the same lane; a + b and b + a are the
        // same bits), leaving every a[m] the sum over the lane's positions; the shuffles do the rest.
        float a[Shape::POS];
#pragma unroll
        for (int m = 0; m < Shape::POS; ++m) a[m] = position(sh.t + m * LANES, m);
#pragma unroll
        for (int o = Shape::POS / 2; o > 0; o >>= 1) {
            float b[Shape::POS];
#pragma unroll
            for (int m = 0; m < Shape::POS; ++m) b[m] = __fadd_rn(a[m], a[m ^ o]);
#pragma unroll
            for (int m = 0; m < Shape::POS; ++m) a[m] = b[m];
        }
        float acc = a[0];
        auto butterfly = [&acc](unsigned mask) {
#pragma unroll
            for (int o = LANES / 2; o > 0; o >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(mask, acc, o));
            __syncwarp(mask);  // orders pass 1's global writes (fused add's sums) before pass 2's reads
        };
        // The same butterfly under either mask. A computed mask makes the compiler check the warp's
        // convergence before each use (about ten instructions per row, Nsight Compute on the H200:
        // docs/perf_notes.md); where every lane of the warp is active (all but the warp of a grid's last rows,
        // whose segments past the end have returned), the full mask does without. __activemask() returns the same
        // value to the lanes that run it together, so they all take the same branch.
        if (LANES == 32 || __activemask() == 0xffffffffu) {
            butterfly(0xffffffffu);
        } else {
            butterfly(sh.segment_mask());
        }
        return acc;
    } else {
        // Fold positions t = threadIdx.x + m * blockDim.x below F: one per thread for many rows, none for
        // the extra threads of a spread shape, several when the fold is wider than the block. F and
        // blockDim.x are multiples of 32, so the loop and the butterflies in it are uniform across a warp.
        // Only a re-reading shape of one thread per fold position may have a fold wider than its block.
        constexpr bool WIDE = CACHE == 0 && SPREAD == 1;
        for (int t = threadIdx.x, m = 0; t < F; t += blockDim.x, ++m) {
            const float acc = warp_sum(position(t, m));
            if ((threadIdx.x & 31) == 0) scratch[t >> 5] = acc;
            if constexpr (!WIDE) break;  // one fold position per thread, at most: no loop to keep registers for
        }
        __syncthreads();
        return sum_of_warp_totals(scratch, F >> 5);
    }
}

// What normalizing a row needs: x_hat = (x - mean) * inv (mean = 0 for RMSNorm).
struct RowStats {
    float mean, inv;
};

// The statistics of one row (already loaded into `held` by load_held), in fp32. RMSNorm
// (CENTERED = false): inv = inv_rms(sum x^2); uses scratch_a only. LayerNorm: mean = sum x / n, then
// inv = inv_rms(sum (x - mean)^2) over the held (or re-read) values: two passes, not E[x^2] - mean^2,
// which cancels catastrophically when |mean| >> std. Uses scratch_a, then scratch_b, so a caller that
// alternates the two buffers between consecutive block sums needs no extra barrier.
template <typename T, int CACHE, int SPREAD, bool ALIGNED, bool CENTERED, int LANES, typename Src>
__device__ __forceinline__ RowStats row_stats(const RowShape<CACHE, SPREAD, ALIGNED, LANES>& sh, const RowSplit& s, int n, float eps,
                                              const Src& src, const Pack<T> (&held)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS],
                                              float* scratch_a, float* scratch_b, float* partials) {
    if constexpr (!CENTERED) {
        const float sum_sq = row_sum(sh, s, n, src, held, scratch_a, partials, [](float x) { return __fmul_rn(x, x); });
        return {0.0f, inv_rms(sum_sq, n, eps)};
    } else {
        const float sum = row_sum(sh, s, n, src, held, scratch_a, partials, [](float x) { return x; });
        const float mean = __fdiv_rn(sum, static_cast<float>(n));
        const float dev_sq = row_sum(sh, s, n, src, held, scratch_b, partials, [mean](float x) {
            const float d = __fsub_rn(x, mean);
            return __fmul_rn(d, d);
        });
        return {mean, inv_rms(dev_sq, n, eps)};
    }
}

// ---- Pass 2 ---------------------------------------------------------------------------------------

// The weight of the output step: W = T, W = float (an fp32 weight beside bf16 or fp16 rows), or W = void
// (no weight: every weight is 1, and nothing is loaded). A WeightVec holds the weights of one output
// vector (N of T's elements); `at(j)` is the j-th as fp32, the value the output step multiplies by.
template <typename W> struct Weightless { static constexpr bool value = false; };
template <> struct Weightless<void> { static constexpr bool value = true; };

template <typename T, typename W> struct alignas(16) WeightVec {
    W e[Vec<T>::N];
    __device__ __forceinline__ float at(int j) const { return to_float(e[j]); }
};
template <typename T> struct WeightVec<T, void> {
    __device__ __forceinline__ float at(int) const { return 1.0f; }
};

// The widest load aligned at w + at for every body vector `at` of a split whose vectors start at
// phase `out_phase` (in T's elements): W's phase relative to it, modulo W's vector.
template <typename W, typename Shape>
__device__ __forceinline__ int weight_width(const Shape& sh, const W* w, int out_phase) {
    if constexpr (Weightless<W>::value) {
        return 16;
    } else {
        return load_width<W>((sh.phase(w) - out_phase) & (Vec<W>::N - 1));
    }
}

// The weights of the output vector at element `at` (w + at `width`-byte aligned): one load of 16
// bytes per Vec<W>.
template <typename T, typename W> __device__ __forceinline__ WeightVec<T, W> load_weights(const W* w, int at, int width) {
    WeightVec<T, W> r;
    if constexpr (!Weightless<W>::value) {
#pragma unroll
        for (int q = 0; q < Vec<T>::N; q += Vec<W>::N) *reinterpret_cast<Pack<W>*>(&r.e[q]) = load_pack(w + at + q, width);
    }
    return r;
}

// The weight `at` elements past w (a row of a per-row weight); none stays none (no arithmetic on void*).
template <typename W> __device__ __forceinline__ const W* weight_row(const W* w, long long at) {
    if constexpr (Weightless<W>::value) {
        return w;
    } else {
        return w + at;
    }
}

// A bias's type: the weight's (LayerNorm's gamma and beta are both fp32 beside bf16/fp16 rows, or both of
// the rows' dtype), or the rows' own without a weight.
template <typename T, typename W> struct BiasOf { using type = W; };
template <typename T> struct BiasOf<T, void> { using type = T; };
template <typename T, typename W> using Bias = typename BiasOf<T, W>::type;

// The biases of the output vector at element `at` (b + at `width`-byte aligned), as stored (.e[j]): one
// Pack where they are of T, the weights' loads where they are fp32 beside bf16/fp16 rows.
template <typename T, typename B> __device__ __forceinline__ auto load_bias(const B* b, int at, int width) {
    if constexpr (sizeof(B) == sizeof(T)) {
        return load_pack(b + at, width);
    } else {
        return load_weights<T>(b, at, width);
    }
}

template <typename W> __device__ __forceinline__ float weight_at(const W* w, int i) {
    if constexpr (Weightless<W>::value) {
        return 1.0f;
    } else {
        return to_float(w[i]);
    }
}

// The weights of the thread's held vectors at out's split, loaded before the reduction so that their
// latency overlaps the row's instead of following the barrier (the few-row kernels: latency, not
// bandwidth, sets their time). Only where x shares out's phase: then pass 2's vectors are the held ones.
// O: out's element type (write_row).
template <typename T, typename W, int CACHE, int SPREAD, bool ALIGNED, int LANES, typename O>
__device__ __forceinline__ void load_held_weights(const RowShape<CACHE, SPREAD, ALIGNED, LANES>& sh, const O* out, const T* x,
                                                  const W* __restrict__ w, int n,
                                                  WeightVec<T, W> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS]) {
    constexpr int N = Vec<T>::N;
    const int out_phase = sh.template phase<O, N>(out);
    if (((sh.phase(x) - out_phase) & (N - 1)) != 0) return;
    const int w_width = weight_width(sh, w, out_phase);
    const RowSplit s = sh.template split<O, N>(out, n);
#pragma unroll
    for (int k = 0; k < RowShape<CACHE, SPREAD, ALIGNED, LANES>::HELD; ++k) {
        const int v = sh.held_vector(k);
        if (v < s.vectors) held_w[k] = load_weights<T>(w, s.pre + v * N, w_width);
    }
}

// Pass 2's walk over a row split at OUT's vector boundaries (out's elements of any type O, in vectors of
// T's N elements: 16 bytes when O is T): element(i) for each prefix and tail element, vector(xv, wv, at,
// b_width) for each body vector at element `at`, with x's values and the weights there (w as fp32 through
// WeightVec::at), and the width at which b + at may be loaded (b: a bias of the weight's type, Bias, or
// null where BIAS is false). x
// and w are loaded at the widest width their alignment relative to out allows. When
// x shares out's phase, the split is x's own, so the thread's body vectors are its held ones (and, when
// EARLY_WEIGHTS, their weights are in held_w): vector() then gets the held pack, of held's type H (a Pack<T>,
// or added_row.cuh's fp32 sums), else x's Pack<T>. Each element is visited by exactly one thread. (`at` comes
// last, and is spelled out in each argument: so the unquantized kernels compile to the PTX they had before.)
template <typename T, typename W, int CACHE, int SPREAD, bool ALIGNED, bool BIAS, bool EARLY_WEIGHTS, int LANES,
          typename O, typename Elem, typename Vector, typename H>
__device__ __forceinline__ void for_each_out(const RowShape<CACHE, SPREAD, ALIGNED, LANES>& sh, const O* out, const T* x,
                                             const W* __restrict__ w, const Bias<T, W>* __restrict__ b, int n,
                                             const H (&held)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS],
                                             const WeightVec<T, W> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS],
                                             Elem element, Vector vector) {
    constexpr int N = Vec<T>::N;
    const int u = sh.lane;  // the threads that share the row: the block, or a packed row's lanes
    const int B = sh.lanes;
    const int out_phase = sh.template phase<O, N>(out);
    const int rel_x = (sh.phase(x) - out_phase) & (N - 1);
    const int w_width = weight_width(sh, w, out_phase);
    const int b_width = BIAS ? load_width<Bias<T, W>>((sh.phase(b) - out_phase) & (Vec<Bias<T, W>>::N - 1)) : 16;
    const RowSplit s = sh.template split<O, N>(out, n);
    if (u < s.pre) element(u);
    if (s.tail + u < n) element(s.tail + u);
    int first_unheld = u;
    if (rel_x == 0) {
#pragma unroll
        for (int k = 0; k < RowShape<CACHE, SPREAD, ALIGNED, LANES>::HELD; ++k) {
            const int v = sh.held_vector(k);
            if (v < s.vectors) {
                vector(held[k], EARLY_WEIGHTS ? held_w[k] : load_weights<T>(w, s.pre + v * N, w_width), s.pre + v * N,
                       b_width);
            }
        }
        first_unheld = RowShape<CACHE, SPREAD, ALIGNED, LANES>::STEPS * sh.fold + u;  // CACHE * F, or a packed lane's steps
    }
    const int x_width = load_width<T>(rel_x);
    for (int v = first_unheld; v < s.vectors; v += B) {
        vector(load_pack(x + s.pre + v * N, x_width), load_weights<T>(w, s.pre + v * N, w_width), s.pre + v * N, b_width);
    }
}

// out[i] = f(x[i], w[i], b[i]) (w as fp32, 1 without a weight; b of Bias<T, W> when BIAS, else T()), walked by
// for_each_out: split at OUT's vector boundaries so that every body store is aligned (16 bytes when O is
// T; streaming stores when STREAMING: the output is not read again here). O: out's element type, what f
// returns (T, float beside bf16/fp16 rows, or a quantized type: cuda_src/quant.cuh). In place (out == x,
// O = T only) is safe: each element is read by the thread that writes it, after the barrier that ends pass 1.
template <typename T, typename W, int CACHE, int SPREAD, bool ALIGNED, bool BIAS, bool STREAMING, bool EARLY_WEIGHTS,
          int LANES, typename F, typename O>
__device__ __forceinline__ void write_row(const RowShape<CACHE, SPREAD, ALIGNED, LANES>& sh, O* out, const T* x, const W* __restrict__ w,
                                          const Bias<T, W>* __restrict__ b, int n,
                                          const Pack<T> (&held)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS],
                                          const WeightVec<T, W> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS], F f) {
    constexpr int N = Vec<T>::N;
    auto element = [&](int i) {
        if constexpr (BIAS) {
            out[i] = f(x[i], weight_at(w, i), b[i]);
        } else {
            out[i] = f(x[i], weight_at(w, i), T());
        }
    };
    auto vector = [&](const Pack<T>& xv, const WeightVec<T, W>& wv, int at, int b_width) {
        OutPack<T, O> y;
        if constexpr (BIAS) {
            const auto bv = load_bias<T>(b, at, b_width);
#pragma unroll
            for (int j = 0; j < N; ++j) y.e[j] = f(xv.e[j], wv.at(j), bv.e[j]);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) y.e[j] = f(xv.e[j], wv.at(j), T());
        }
        store_out<STREAMING>(out + at, y);
    };
    for_each_out<T, W, CACHE, SPREAD, ALIGNED, BIAS, EARLY_WEIGHTS>(sh, out, x, w, b, n, held, held_w, element, vector);
}

}  // namespace pyrms
