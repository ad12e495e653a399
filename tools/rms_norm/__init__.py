"""The RMSNorm forward's own lab tools: its launch-shape sweep (``tune``) and QK-norm on strided views of a
fused QKV tensor (``bench_qk_norm``). Each says how to run it."""
