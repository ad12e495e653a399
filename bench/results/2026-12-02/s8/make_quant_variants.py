"""Throwaway experiment (run 45): copies of the tree (pyrms, cuda_src) with one change to the quantizing step each,
timed by quant_variants.py against the tree (not bit-exact in general; nothing here is kept in the kernels):
nonan: fp8's conversion without its NaN select (cvt.satfinite alone); mul: every mode multiplies by 1/s instead
of dividing (vLLM's per-token and per-group fp8 divide; exact only for ue8m0's powers of two)."""
import shutil
import sys

src, dst, which = sys.argv[1], sys.argv[2], sys.argv[3]
for d in ("pyrms", "cuda_src"):
    shutil.copytree(f"{src}/{d}", f"{dst}/{d}", dirs_exist_ok=True)


def patch(path, old, new):
    s = open(f"{dst}/{path}").read()
    assert s.count(old) == 1, (path, old)
    open(f"{dst}/{path}", "w").write(s.replace(old, new))


if which == "nonan":
    patch("cuda_src/quant.cuh", "q.__x = z != z ? NAN_BITS : __nv_cvt_float_to_fp8(z, __NV_SATFINITE, KIND);",
          "q.__x = __nv_cvt_float_to_fp8(z, __NV_SATFINITE, KIND);")
elif which == "mul":
    patch("cuda_src/quant.cuh", "{ return (MODE == STATIC) == Quant<Q>::integer; }", "{ return false; }")
else:
    raise SystemExit(f"unknown variant {which}")
