"""One folder per op family (public function, plan, prepared launch, twin) over the shared machinery in
this package's private modules."""
from ._workspace import release_workspaces
from .fused_add_rms_norm import fused_add_rms_norm
from .layer_norm import layer_norm, layer_norm_backward
from .rms_norm import rms_norm
from .rms_norm_backward import backward_workspace_bytes, rms_norm_backward
from .rms_norm_quant import fused_add_rms_norm_quant, rms_norm_quant
from .seed import seed_rms_norm

__all__ = ["rms_norm", "seed_rms_norm", "fused_add_rms_norm", "rms_norm_backward", "layer_norm", "layer_norm_backward",
           "rms_norm_quant", "fused_add_rms_norm_quant",
           "backward_workspace_bytes", "release_workspaces"]
