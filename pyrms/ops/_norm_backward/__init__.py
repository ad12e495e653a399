"""The norm backward that RMSNorm's and LayerNorm's backward ops share (cuda_src/norm_backward.cuh), by whether
its kernel is centered (LayerNorm's: the mean subtracted) or not: the plan (``plan``), the prepared launch and
call path (``prepared``), the public workspace size (``workspace``), the twin (``twin``), the registry
declarations (``spec``) and the eager launch on torch tensors (``torch_launch``, which imports torch). Each op's
folder keeps its public function and registry entry."""
