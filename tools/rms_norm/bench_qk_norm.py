"""QK-norm at Qwen3's shapes on the H200: pyrms against torch eager, torch.compile and Triton, all on the
same strided views of a fused QKV tensor (docs/family.md).

    python -m tools.rms_norm.bench_qk_norm [--tokens 1,16,128,1024,4096,16384] [--reps 15] [--json out.json]

q = qkv[:, :64*128].view(T, 64, 128) and k = qkv[:, 64*128:72*128].view(T, 8, 128) of a bf16
[T, (64 + 2*8) * 128] tensor; each implementation writes a new contiguous [T, heads, 128] output.
Device time per call by the benchmark's method (pyrms.bench.timing: events around a batch queued
behind a spin kernel), the median of --reps samples; bytes = q (or k) read + out written + weight;
the copy ceiling as pyrms.bench measures it. "pyrms" is pyrms.rms_norm into the given output;
"pyrms (no pdl)" the same with pdl=False, as torch's and Triton's kernels launch: the speedup over the
"fastest other" is of it, like for like (the fraction of the ceiling is pyrms's, with PDL); "pyrms.torch" is
pyrms.torch.rms_norm (a new output, the view read where it lies), left out of the "fastest other". Needs
PyTorch (and Triton for its column).
"""
from __future__ import annotations

import argparse
import sys

import pyrms
from pyrms import driver
from pyrms.bench import ceiling, eager, lab, timing

HEAD_DIM, HEADS, KV_HEADS = 128, 64, 8
EPS = 1e-6


def triton_impl():
    """A Triton QK-norm over the (token, head) rows of a strided view, ROWS rows per program (the best of
    a few), or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def qk_norm(X, W, Y, sxt, sxh, syt, syh, rows, heads, eps, D: tl.constexpr, ROWS: tl.constexpr):
        r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
        t, h = r // heads, r % heads
        cols = tl.arange(0, D)
        mask = (r < rows)[:, None]
        x = tl.load(X + (t * sxt + h * sxh)[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        inv = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)
        w = tl.load(W + cols).to(tl.float32)
        y = x * inv[:, None] * w[None, :]
        tl.store(Y + (t * syt + h * syh)[:, None] + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)

    def make(rows_per_program, warps):
        def run(x, w, y):
            t, h, d = x.shape
            n = t * h
            qk_norm[(triton.cdiv(n, rows_per_program),)](x, w, y, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                                         n, h, EPS, D=d, ROWS=rows_per_program, num_warps=warps)
        return run

    return {f"triton r{r}w{w}": make(r, w) for r, w in ((1, 1), (4, 4), (16, 4), (32, 8))}


def implementations(shapes: int):
    """The implementations' calls (x, w, y); torch.compile's is specialized to each of the `shapes` shapes."""
    import torch

    import pyrms.torch as pt

    fn = eager.norm(torch, EPS)

    # One specialization per shape: past dynamo's recompile limit (8 by default) fn would run eagerly, and the
    # torch.compile column would be torch eager's (the H200 runs before 2026-12-02 hit it from the fourth k row on).
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), shapes))
    compiled_fn = torch.compile(fn, dynamic=False)
    impls = {
        "pyrms": lambda x, w, y: pyrms.rms_norm(y, x, w, EPS),
        "pyrms (no pdl)": lambda x, w, y: pyrms.rms_norm(y, x, w, EPS, pdl=False),
        # pyrms.torch: a new output, the view read where it lies (its N-D path), torch's host conventions
        "pyrms.torch": lambda x, w, y: pt.rms_norm(x, w, EPS),
        # torch's: a new output (copy_ into y would add a kernel); pyrms and Triton write into y.
        "torch eager": lambda x, w, y: fn(x, w),
        "torch.compile": lambda x, w, y: compiled_fn(x, w),
    }
    impls.update(triton_impl() or {})
    return impls


def views(tokens: int, sets: int):
    """`sets` independent (q, k, out_q, out_k) rotations, so that no call finds its input in L2 from the last."""
    import torch

    out = []
    for _ in range(sets):
        qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        q = qkv[:, :HEADS * HEAD_DIM].view(tokens, HEADS, HEAD_DIM)
        k = qkv[:, HEADS * HEAD_DIM:(HEADS + KV_HEADS) * HEAD_DIM].view(tokens, KV_HEADS, HEAD_DIM)
        out.append((qkv, {"q": (q, torch.empty_like(q)), "k": (k, torch.empty_like(k))}))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="1,16,128,1024,4096,16384")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only-pyrms", action="store_true", help="leave out torch and Triton (tuning runs)")
    args = ap.parse_args(argv)
    import torch  # after the arguments: --help needs no PyTorch

    tokens_list = [int(t) for t in args.tokens.split(",")]
    device = driver.selected_device()
    stream = torch.cuda.current_stream().cuda_stream
    timer = timing.EventTimer(device, stream)
    ceil = ceiling.measure(timer, device, 1024, 10, "dtod 1 GiB")
    print(f"copy ceiling {ceil.gbps:.0f} GB/s", flush=True)
    weight = torch.randn(HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    torch_norm = eager.norm(torch, EPS)  # what the rows' largest difference is taken against
    impls = ({"pyrms": lambda x, w, y: pyrms.rms_norm(y, x, w, EPS)} if args.only_pyrms
             else implementations(2 * len(tokens_list)))  # q and k at each token count
    results = []
    for part, heads in (("q", HEADS), ("k", KV_HEADS)):
        for tokens in tokens_list:
            nbytes = 2 * tokens * heads * HEAD_DIM * 2 + HEAD_DIM * 2
            sets = max(2, min(16, (512 << 20) // max(nbytes, 1)))
            data = views(tokens, sets)
            row = {"part": part, "tokens": tokens, "heads": heads, "bytes": nbytes, "us": {}}
            runs = {}
            for name, impl in impls.items():
                def run(i, impl=impl):
                    x, y = data[i][1][part]
                    impl(x, weight, y)
                runs[name] = run
            kept = {}

            def keep(name):  # pyrms's output of set 0, before Triton writes into the same y
                if name == "pyrms":
                    kept[name] = data[0][1][part][1].clone()
            row["us"] = timing.median_us_each(timer, runs, sets, args.reps, synchronize=torch.cuda.synchronize,
                                              where=f"{part} T={tokens}", after_first=keep)
            ref = kept.get("pyrms")
            # pyrms (the seed's two roundings by default) against torch eager (one): the largest difference
            x = data[0][1][part][0]
            torch_out = torch_norm(x, weight)
            row["max_abs_diff_vs_torch"] = float((ref.float() - torch_out.float()).abs().max())
            row.update(lab.figures(row["us"], nbytes, ceil.gbps, fraction_of="pyrms"))
            results.append(row)
            print(f"{part} T={tokens:6d} H={heads:2d}: {timing.cells(row['us'])} | "
                  f"speedup {row['speedup_vs_fastest_other'] or 0:.2f}x "
                  f"ceiling {row['fraction_of_ceiling'] or 0:.3f}", flush=True)
            del data
    if args.json:
        lab.write_json(args.json, ceil.gbps, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
