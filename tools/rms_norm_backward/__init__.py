"""The RMSNorm backward's own lab tool: its launch-shape sweep (``tune``, run as
``python -m tools.<this folder>.tune``)."""
