"""rms_norm_backward's own lab tool: its launch-shape sweep (``python -m tools.rms_norm_backward.tune``)."""
