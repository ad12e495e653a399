"""The norm backward's lab tool (pyrms/ops/_norm_backward/: RMSNorm's and LayerNorm's backward): its launch-shape
sweep (``tune``), which says how to run it."""
