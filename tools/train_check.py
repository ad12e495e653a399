"""Train small Hugging Face models with their norms swapped for pyrms's, beside the same model in eager
PyTorch and under torch.compile, and compare loss curves and step times (needs a GPU, torch, transformers).

Each model is built from a config (random weights, seed 0) and trained for --steps steps of AdamW on a
fixed cycle of random token batches (so the loss falls: the batches are memorized), in two precisions:

- bf16: the model's parameters and activations in bfloat16;
- autocast: fp32 master parameters, the forward under ``torch.autocast(dtype=torch.bfloat16)`` (HF
  Trainer's and Megatron's mixed precision: the norms see bf16 activations beside fp32 weights).

Three runs per (model, precision), each from the same initial weights and batches: "eager" (HF's own
norms), "compiled" (the whole model under torch.compile) and "pyrms" (``pyrms.torch.replace_norms``, eager
otherwise), taking their steps in turn. The check passes where pyrms's largest loss difference from eager over the steps is at most the
compiled run's (the spread that a different but valid rounding of the same model shows; ``--floor``
raises that bound, 0 by default) and where pyrms's median step time is at most eager's. Writes a table to
stdout and, with --out, a JSON of every loss and time.

    python -m tools.train_check                       # qwen3 and gemma3, both precisions, 40 steps
    python -m tools.train_check --models qwen3 --precisions autocast --steps 20 --out /tmp/train.json
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

MODELS = ("qwen3", "gemma3")
PRECISIONS = ("bf16", "autocast")
RUNS = ("eager", "compiled", "pyrms")


def build(kind: str):
    """A small causal LM of this family from a config, random weights (seed 0), on the GPU in fp32."""
    import torch
    import transformers

    sizes = dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=64, vocab_size=4096, attn_implementation="sdpa")
    if kind == "qwen3":
        model_class, config = transformers.Qwen3ForCausalLM, transformers.Qwen3Config(**sizes)
    elif kind == "gemma3":
        model_class = transformers.Gemma3ForCausalLM
        config = transformers.Gemma3TextConfig(sliding_window=64, **sizes)
    else:
        raise ValueError(f"model must be one of {MODELS}, got {kind!r}")
    torch.manual_seed(0)
    return model_class(config).cuda()


def batches(vocab: int, count: int, batch: int, seq: int):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(1234)
    return [torch.randint(0, vocab, (batch, seq), device="cuda", generator=gen) for _ in range(count)]


def trainer(model, precision: str, run: str, data, lr: float):
    """One run's training step (a function of the step's index, returning (loss, seconds)), on its own copy of
    the model and its own optimizer."""
    import torch

    import pyrms.torch as pt

    model = copy.deepcopy(model)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    if run == "pyrms":
        report = pt.replace_norms(model)
        if report.kept or not report.swapped:
            raise RuntimeError(f"replace_norms did not take every norm:\n{report}")
    model.train()
    forward = torch.compile(model) if run == "compiled" else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)

    def step(index: int) -> tuple[float, float]:
        ids = data[index % len(data)]
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "autocast"):
            loss = forward(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return float(loss.detach()), time.perf_counter() - start
    return step


def train(model, precision: str, data, steps: int, lr: float) -> dict[str, tuple[list[float], list[float]]]:
    """(loss per step, seconds per step) of each run. The runs take their steps in turn, the order rotating
    every step: the steps are host-bound at these sizes, and a drift of the host's speed over the check (a
    compiler's worker processes still busy, another tenant, clocks) would otherwise land on one run alone."""
    steppers = {run: trainer(model, precision, run, data, lr) for run in RUNS}
    curves: dict[str, tuple[list[float], list[float]]] = {run: ([], []) for run in RUNS}
    for index in range(steps):
        for k in range(len(RUNS)):
            run = RUNS[(index + k) % len(RUNS)]
            loss, seconds = steppers[run](index)
            curves[run][0].append(loss)
            curves[run][1].append(seconds)
    return curves


def check(kind: str, precision: str, steps: int, lr: float, floor: float) -> dict:
    import torch

    torch._dynamo.reset()
    model = build(kind)
    data = batches(model.config.vocab_size, 4, 8, 256)
    curves = train(model, precision, data, steps, lr)
    eager = curves["eager"][0]

    def spread(run):
        return max(abs(a - b) for a, b in zip(curves[run][0], eager))

    def step_time(run):  # the median past the first few steps (compiles, allocator warm-up)
        return statistics.median(curves[run][1][min(5, steps - 1):])

    result = {"model": kind, "precision": precision, "steps": steps,
              "losses": {run: curves[run][0] for run in RUNS}, "seconds": {run: curves[run][1] for run in RUNS},
              "spread": {run: spread(run) for run in ("compiled", "pyrms")},
              "median_step_ms": {run: 1e3 * step_time(run) for run in RUNS}}
    result["loss_ok"] = result["spread"]["pyrms"] <= max(result["spread"]["compiled"], floor)
    result["time_ok"] = result["median_step_ms"]["pyrms"] <= result["median_step_ms"]["eager"]
    result["finite"] = all(v == v and abs(v) != float("inf") for run in RUNS for v in curves[run][0])
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help=f"comma list of {', '.join(PRECISIONS)}")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--floor", type=float, default=0.0,
                        help="the smallest loss spread the check allows (default 0: compiled's spread alone)")
    parser.add_argument("--out", help="write every loss and step time as JSON here")
    args = parser.parse_args(argv)
    models, precisions = args.models.split(","), args.precisions.split(",")
    for name, given, allowed in (("model", models, MODELS), ("precision", precisions, PRECISIONS)):
        bad = [g for g in given if g not in allowed]
        if bad:
            parser.error(f"unknown {name} {bad[0]!r}; choose from {', '.join(allowed)}")
    if args.steps < 6:
        parser.error(f"--steps must be at least 6 (the step time is a median past the first five), got {args.steps}")
    results = []
    print(f"{'model':8} {'precision':9} {'loss eager first->last':>24} {'|pyrms-eager|':>14} {'|compiled-eager|':>17} "
          f"{'ms eager':>9} {'ms compiled':>12} {'ms pyrms':>9}  verdict", flush=True)
    for kind in models:
        for precision in precisions:
            r = check(kind, precision, args.steps, args.lr, args.floor)
            results.append(r)
            eager, ms = r["losses"]["eager"], r["median_step_ms"]
            verdict = "ok" if r["loss_ok"] and r["time_ok"] and r["finite"] else (
                "FAILED: " + ", ".join(w for w, ok in (("loss", r["loss_ok"]), ("step time", r["time_ok"]),
                                                        ("finite", r["finite"])) if not ok))
            print(f"{kind:8} {precision:9} {eager[0]:11.4f} -> {eager[-1]:8.4f} {r['spread']['pyrms']:14.4f} "
                  f"{r['spread']['compiled']:17.4f} {ms['eager']:9.2f} {ms['compiled']:12.2f} {ms['pyrms']:9.2f}  "
                  f"{verdict}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["loss_ok"] and r["time_ok"] and r["finite"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
