"""pyrms for PyTorch users: functions of torch tensors, ``torch.library`` custom ops, autograd, and modules.

    import pyrms.torch
    y = pyrms.torch.rms_norm(x, weight, 1e-6)              # x: a CUDA tensor [..., hidden]
    pyrms.torch.fused_add_rms_norm(x, residual, weight, 1e-6)   # in place, as vLLM's
    y, residual = pyrms.torch.add_rms_norm(x, residual, weight, 1e-6)  # the same into new tensors, differentiable
    y = pyrms.torch.layer_norm(x, weight, bias, 1e-5)
    q = pyrms.torch.rms_norm_quant(x, weight, 1e-6, scale=0.02)   # fp8 (or int8) out: static, per_token, per_group
    q, s = pyrms.torch.rms_norm_quant(x, weight, 1e-6, mode="per_token")   # and its fp32 scales
    q, s = pyrms.torch.fused_add_rms_norm_quant(x, residual, weight, 1e-6, mode="per_group")  # residual += x
    q = pyrms.torch.layer_norm_quant(x, gamma, beta, 1e-6, scale=0.02)  # LayerNorm, static fp8 (or int8) out
    print(pyrms.torch.replace_norms(model))               # HF RMSNorms, nn.RMSNorm, nn.LayerNorm -> pyrms's

Calls launch on torch's current stream and work eagerly, under autograd, under
``torch.compile(fullgraph=True)`` and inside CUDA graph capture; the ops are ``torch.ops.pyrms.*``.
The quantizing ones return new tensors (``norm_out=True`` appends the unquantized output) and have no
backward.
Each op's binding (its custom ops, fake implementation, autograd, eager launch and user function) lives in its
family's folder, ``pyrms/ops/<family>/torch_binding.py``, which the op's registry entry names (``OpSpec.torch``);
this package imports every one the registry names and re-exports what each lists in ``__all__`` (a binding's
module too, as ``RMSNorm`` and ``LayerNorm``). Shared here: tensor checks and layouts (``_layout``), the routing
of a call (``_routing``), and ``replace_norms``, which swaps the bindings' modules in (``modules``).
Only pyrms.torch and those bindings import torch: ``import pyrms`` never does.
"""
try:
    import torch  # noqa: F401
except ImportError as exc:
    raise ImportError("pyrms.torch needs PyTorch: pip install torch") from exc

import importlib as _importlib
from typing import TYPE_CHECKING, Any

from ..ops import registry as _registry

if TYPE_CHECKING:
    # The bindings' names are added at import (_bindings, from the registry): a type checker cannot list them,
    # so it takes each as Any rather than reporting it missing.
    def __getattr__(name: str) -> Any: ...


def _bindings() -> list[str]:
    """Import every op's torch binding that the registry names (each once, in registry order: importing one
    registers its torch.ops.pyrms ops) and put its ``__all__`` into this namespace; the names added."""
    added: dict[str, str] = {}
    for module in dict.fromkeys(spec.torch for spec in _registry.REGISTRY.values() if spec.torch):
        binding = _importlib.import_module(module)
        if getattr(binding.__spec__, "_initializing", False):  # its own import led here: it is half-defined
            raise ImportError(f"{module} is an op's torch binding, which pyrms.torch imports: import pyrms.torch "
                              "first, not the binding")
        for name in binding.__all__:
            if name in added:
                raise ImportError(f"{module} and {added[name]} both export {name!r} to pyrms.torch")
            added[name] = module
            globals()[name] = getattr(binding, name)
    return list(added)


__all__ = _bindings()

from ..model_norms import HF_RMS_NORMS, NormReport  # noqa: E402
from .modules import replace_norms  # noqa: E402

__all__ += ["replace_norms", "HF_RMS_NORMS", "NormReport"]
