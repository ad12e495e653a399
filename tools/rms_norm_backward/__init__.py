"""The RMSNorm backward's own lab tool: its launch-shape sweep (``tune``), which says how to run it."""
