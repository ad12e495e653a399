"""LayerNorm's own lab tools: its cost against RMSNorm's, forward and backward (``norm_table``). Each says how
to run it."""
