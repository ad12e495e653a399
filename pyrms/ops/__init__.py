"""One module per kernel family: validation, planning and launch."""
from .rms_norm import rms_norm
from .seed import seed_rms_norm

__all__ = ["rms_norm", "seed_rms_norm"]
