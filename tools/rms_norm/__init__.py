"""rms_norm's own lab tools: its launch-shape sweep (``python -m tools.rms_norm.tune``) and QK-norm on
strided views of a fused QKV tensor (``python -m tools.rms_norm.bench_qk_norm``)."""
