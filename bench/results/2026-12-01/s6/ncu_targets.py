"""Run 31's profiling targets, each kernel launched twice (ncu profiles the second: -k and --launch-skip 1
per kernel name): QK-norm's q (16384 tokens x 64 heads x 128, a strided view of a fused QKV tensor) by
pyrms and by the bench's Triton r16w4; rms_norm, rms_norm_quant static, per_token and per_group (groups of 128) at 16384x5120 bf16."""
import sys

import torch

import pyrms
sys.path.insert(0, ".")
from tools import bench_qk_norm as qk  # noqa: E402

EPS = 1e-6
what = sys.argv[1]
if what == "qk":
    qkv = torch.randn(16384, 80 * 128, dtype=torch.bfloat16, device="cuda")
    q = qkv[:, :64 * 128].view(16384, 64, 128)
    y = torch.empty_like(q)
    w = torch.randn(128, dtype=torch.bfloat16, device="cuda")
    tri = qk.triton_impl()["triton r16w4"]
    for _ in range(2):
        pyrms.rms_norm(y, q, w, EPS)
        tri(q, w, y)
else:
    x = torch.randn(16384, 5120, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(5120, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    qo = torch.empty(16384, 5120, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(16384, dtype=torch.float32, device="cuda")
    sg = torch.empty(16384, 5120 // 128, dtype=torch.float32, device="cuda")
    for _ in range(2):
        pyrms.rms_norm(y, x, w, EPS)
        pyrms.rms_norm_quant(qo.data_ptr(), x, w, EPS, scale=0.02, mode="static", round_input=True)
        pyrms.rms_norm_quant(qo.data_ptr(), x, w, EPS, scale=s.data_ptr(), mode="per_token", round_input=True)
        if len(sys.argv) > 2:  # run 36 on: per_group too
            pyrms.rms_norm_quant(qo.data_ptr(), x, w, EPS, scale=sg.data_ptr(), mode="per_group", group_size=128,
                                 round_input=True)
torch.cuda.synchronize()
