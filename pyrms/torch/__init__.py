"""pyrms for PyTorch users: functions of torch tensors, ``torch.library`` custom ops, autograd, and modules.

    import pyrms.torch
    y = pyrms.torch.rms_norm(x, weight, 1e-6)              # x: a CUDA tensor [..., hidden]
    pyrms.torch.fused_add_rms_norm(x, residual, weight, 1e-6)   # in place, as vLLM's
    y = pyrms.torch.layer_norm(x, weight, bias, 1e-5)
    q = pyrms.torch.rms_norm_quant(x, weight, 1e-6, scale=0.02)   # fp8 (or int8) out: static, per_token, per_group
    q, s = pyrms.torch.rms_norm_quant(x, weight, 1e-6, mode="per_token")   # and its fp32 scales
    q, s = pyrms.torch.fused_add_rms_norm_quant(x, residual, weight, 1e-6, mode="per_group")  # residual += x
    model.apply(pyrms.torch.replace_norms)                 # Hugging Face RMSNorms and nn.LayerNorms -> pyrms's

Calls launch on torch's current stream and work eagerly, under autograd, under
``torch.compile(fullgraph=True)`` and inside CUDA graph capture; the ops are ``torch.ops.pyrms.*``.
The quantizing ones return new tensors (``norm_out=True`` appends the unquantized output) and have no
backward.
Only this module imports torch: ``import pyrms`` never does.
"""
try:
    import torch  # noqa: F401
except ImportError as exc:
    raise ImportError("pyrms.torch needs PyTorch: pip install torch") from exc

from .functional import fused_add_rms_norm, fused_add_rms_norm_quant, layer_norm, rms_norm, rms_norm_quant
from .modules import HF_RMS_NORMS, LayerNorm, RMSNorm, replace_norms

__all__ = ["rms_norm", "fused_add_rms_norm", "layer_norm", "rms_norm_quant", "fused_add_rms_norm_quant", "RMSNorm",
           "LayerNorm", "replace_norms", "HF_RMS_NORMS"]
