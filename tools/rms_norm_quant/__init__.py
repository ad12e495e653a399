"""The quantizing norms' own lab tool: their timing against torch's norm then quantize (``bench``), which says
how to run it."""
