"""The quantizing norms' own lab tool: their timing against torch's norm then quantize (``bench``, run as
``python -m tools.<this folder>.bench``)."""
