"""How far pyrms's default rounding is from Hugging Face's LlamaRMSNorm in bits, on the H200: the share
of bf16 outputs that differ, and in how many of 20 seeds a small Llama's logits are bitwise equal
with its norms swapped for pyrms.torch.RMSNorm (archived probe; run from the checkout root)."""
import torch
import pyrms.torch as pt
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm

torch.manual_seed(0)
norm = LlamaRMSNorm(4096, eps=1e-6).cuda().to(torch.bfloat16)
with torch.no_grad():
    norm.weight.uniform_(-1, 1)
    total = differ = 0
    for _ in range(8):
        x = (torch.randn(4096, 4096, device="cuda") * 2).to(torch.bfloat16)
        a, b = norm(x), pt.rms_norm(x, norm.weight, 1e-6)
        total += a.numel(); differ += int((a.view(torch.int16) != b.view(torch.int16)).sum())
print(f"LlamaRMSNorm vs pyrms.torch.rms_norm, bf16 [4096, 4096] x 8: {differ} of {total} outputs differ "
      f"({differ / total:.2e})")
cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=1000, attn_implementation="eager")
equal = 0
for seed in range(20):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    ids = torch.randint(0, 1000, (2, 64), device="cuda")
    with torch.no_grad():
        ref = model(ids).logits
        model.apply(pt.replace_norms)
        ours = model(ids).logits
    equal += bool(torch.equal(ref, ours))
print(f"small Llama (2 x 64 tokens) logits bitwise equal after swapping norms: {equal} of 20 seeds")
