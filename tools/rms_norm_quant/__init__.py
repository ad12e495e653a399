"""rms_norm_quant's own lab tool: the norm + quantization timing against torch and others
(``python -m tools.rms_norm_quant.bench``)."""
