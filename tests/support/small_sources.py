"""A tiny kernel source tree for compiler and cache tests: fast to compile (about 0.1 s)."""
SMALL_CU = '#include "x.cuh"\ntemplate <int N> __global__ void k(int* out) { out[threadIdx.x] = N + kValue; }\n'
X_CUH = "#pragma once\nconstexpr int kValue = 7;\n"
BAD_CU = "__global__ void k(int* out) {\n  int a = 1;\n  out[0] = undefined_name + a;\n}\n"
