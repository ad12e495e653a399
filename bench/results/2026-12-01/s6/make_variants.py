"""Throwaway experiment (run 36): copies of the tree (pyrms, cuda_src, tools) with one change each, to time
against the tree itself: qk16 (packed rows of 9 to 16 vectors in 16 lanes of one position, the shape before
PACKED_SHAPES' (8, 2)), qkmin6 (the packed kernels' launch bounds ask for 6 blocks of 256 threads per SM),
quantmin2 (the per-token and per-group quantizing kernels ask for 2 blocks of their largest size per SM)."""
import shutil, sys
src, dst, which = sys.argv[1], sys.argv[2], sys.argv[3]
for d in ("pyrms", "cuda_src", "tools"):
    shutil.copytree(f"{src}/{d}", f"{dst}/{d}", dirs_exist_ok=True)


def patch(path, old, new, count=1):
    s = open(f"{dst}/{path}").read()
    assert s.count(old) == count, (path, old)
    open(f"{dst}/{path}", "w").write(s.replace(old, new))


if which == "qk16":
    patch("pyrms/plan.py", "PACKED_SHAPES = ((8, 1), (8, 2), (32, 1), (32, 2), (32, 4))",
          "PACKED_SHAPES = ((8, 1), (16, 1), (32, 1), (32, 2), (32, 4))")
elif which == "qkmin6":
    patch("cuda_src/rms_norm.cu", "__global__ void __launch_bounds__(max_threads(CACHE)) rms_norm_nd_kernel(",
          "__global__ void __launch_bounds__(LANES > 0 ? 256 : max_threads(CACHE), LANES > 0 ? 6 : 1) rms_norm_nd_kernel(")
elif which == "quantmin2":
    patch("cuda_src/rms_norm_quant.cu", "__global__ void __launch_bounds__(max_threads(CACHE / SPREAD)) rms_norm_quant_kernel(",
          "__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), MODE == STATIC ? 1 : 2) rms_norm_quant_kernel(")
    patch("cuda_src/rms_norm_quant.cu", "__global__ void __launch_bounds__(max_threads(CACHE / SPREAD)) rms_norm_group_quant_kernel(",
          "__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 2) rms_norm_group_quant_kernel(")
else:
    raise SystemExit(f"unknown variant {which}")
