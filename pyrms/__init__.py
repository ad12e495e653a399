"""pyrms: the RMSNorm family of CUDA kernels, compiled by NVRTC and launched through the driver API.

    import pyrms
    y = pyrms.rms_norm(x, weight, eps=1e-6)                              # arrays: input first, y returned
    pyrms.rms_norm(x, weight, 1e-6, out=y)                               # ... into y
    pyrms.rms_norm(out, input, weight, 1e-6, num_tokens, hidden_size)   # raw pointers: out first (vLLM's order)

Arrays (pyrms.Tensor, or anything with __cuda_array_interface__ or DLPack) go input first, as FlashInfer, QuACK
and torch.nn.functional call norms; raw device pointers go out first with epsilon and the sizes, vLLM's order,
which arrays may use too. rms_norm and layer_norm take both (a call without its epsilon is input first); the rest
keep vLLM's order.

and the rest of the family: fused_add_rms_norm, rms_norm_backward, layer_norm, layer_norm_backward, and the
quantizing rms_norm_quant, fused_add_rms_norm_quant and layer_norm_quant (fp8/int8 outputs), and static_quant (vLLM's
static_scaled_fp8_quant: a standalone fp8/int8 quantizer with one scale), dynamic_quant (vLLM's scaled_fp8_quant and
scaled_int8_quant without a scale, per tensor or per token, and per_token_group_quant_fp8), qk_norm_rope (QK-norm then
rotary embedding, in place on a fused QKV: vLLM's fused_qk_norm_rope), and gated_rms_norm (the RMSNorm of x
gated by silu(z), per group of columns: mamba_ssm's rmsnorm_fn, vLLM's RMSNormGated) with gated_rms_norm_backward.

Importing pyrms never touches the GPU; the driver is initialized at first use, and a machine
without one raises pyrms.NoDriverError then.
"""
from ._version import __version__
from .driver import DeviceBuffer, Event, PinnedBuffer, Stream, get_device, synchronize
from .dtypes import BFLOAT16, FLOAT16, FLOAT32
from .errors import (CompileError, CudaError, HeaderNotFoundError, NoDriverError, NvrtcNotFoundError, OutOfMemoryError,
                     PyrmsError)
from .launch import BoundLaunch
from .ops import backward_workspace_bytes, release_workspaces
from .ops._bind import bind
from .ops.dynamic_quant import dynamic_quant
from .ops.fused_add_rms_norm import fused_add_rms_norm
from .ops.gated_rms_norm import gated_rms_norm, gated_rms_norm_backward
from .ops.layer_norm import layer_norm, layer_norm_backward, layer_norm_quant
from .ops.qk_norm_rope import qk_norm_rope
from .ops.rms_norm import rms_norm
from .ops.rms_norm_backward import rms_norm_backward
from .ops.rms_norm_quant import fused_add_rms_norm_quant, rms_norm_quant
from .ops.seed import seed_rms_norm
from .ops.static_quant import static_quant
from .tensor import Tensor

__all__ = [
    "__version__", "rms_norm", "seed_rms_norm", "fused_add_rms_norm", "rms_norm_backward", "layer_norm",
    "rms_norm_quant", "fused_add_rms_norm_quant", "layer_norm_quant", "static_quant", "dynamic_quant", "qk_norm_rope",
    "gated_rms_norm", "gated_rms_norm_backward",
    "layer_norm_backward", "bind", "BoundLaunch", "backward_workspace_bytes", "release_workspaces", "Tensor", "Stream", "Event", "DeviceBuffer", "PinnedBuffer",
    "get_device", "synchronize", "BFLOAT16", "FLOAT16", "FLOAT32", "PyrmsError", "CudaError", "NoDriverError",
    "OutOfMemoryError", "CompileError", "HeaderNotFoundError", "NvrtcNotFoundError",
]
