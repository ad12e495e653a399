"""Throwaway experiment (run 32): a copy of the tree whose rms_norm_nd_kernel loops over its rows with a grid
of at most $PYRMS_ND_CAP blocks (the same per-row code, so the same bits): run 28 tried it on a tree that
was slower for another reason (host-side fast division); this is the kept tree."""
import shutil, sys
src, dst = sys.argv[1], sys.argv[2]
for d in ("pyrms", "cuda_src", "tools"):
    shutil.copytree(f"{src}/{d}", f"{dst}/{d}", dirs_exist_ok=True)
p = dst + "/cuda_src/rms_norm.cu"
s = open(p).read()
old = """    const int r = LANES > 0 ? blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES : blockIdx.x;
    if (r >= rows) return;  // a packed block's last rows: whole segments, which share no shuffle or barrier"""
new = """    const int per_block = LANES > 0 ? blockDim.x / LANES : 1;
    for (int r = LANES > 0 ? blockIdx.x * per_block + threadIdx.x / LANES : blockIdx.x; r < rows; r += gridDim.x * per_block) {"""
assert old in s
s = s.replace(old, new)
old2 = """        out_row, in_row, RowIn<T, true>{in_row}, weight_row(weight, i0 * w_stride), epsilon, hidden);
}"""
assert old2 in s
s = s.replace(old2, old2[:-1] + "    }\n}")
open(p, "w").write(s)
p = dst + "/pyrms/ops/rms_norm_nd.py"
s = open(p).read()
old = "self.launch(kernel, -(-rows // self.per_block), stream"
assert old in s
s = s.replace(old, "self.launch(kernel, min(-(-rows // self.per_block), _CAP), stream")
s = s.replace("_MAX_ELEMS = ", "import os\n_CAP = int(os.environ.get('PYRMS_ND_CAP', '1000000000'))\n_MAX_ELEMS = ", 1)
open(p, "w").write(s)
