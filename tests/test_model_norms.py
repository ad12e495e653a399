"""Which norms replace_norms takes over, as which options, and its report, without PyTorch: the decisions
of pyrms.model_norms on the facts pyrms.torch reads off a module (tests/torch/test_torch.py runs the same
on real modules where torch is installed, tests/torch/test_torch_gpu.py against transformers' classes)."""
import math

import pytest

from pyrms import model_norms as mn
from pyrms.model_norms import Facts, Keep, Kept, NormReport, Swap, Swapped, decide

# The RMSNorm classes of the model families Liger-Kernel patches (its transformers/monkey_patch.py), with
# the formula each computes in transformers: weight * (x * r).to(x.dtype) ("llama"), (x * r * weight).to(...)
# ("round once"), (x * r * (1 + weight)).to(...) ("gemma"). Liger also names SmolVLMRMSNorm, which
# transformers does not define, and leaves Nemotron's LayerNorm1P alone, as pyrms does.
LIGER_FAMILIES = {
    "llama": ["LlamaRMSNorm", "Llama4TextRMSNorm", "MllamaTextRMSNorm", "MistralRMSNorm", "MinistralRMSNorm",
              "MixtralRMSNorm", "PixtralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Qwen3MoeRMSNorm",
              "Qwen3VLTextRMSNorm", "Qwen3VLMoeTextRMSNorm", "Phi3RMSNorm", "GraniteRMSNorm", "SmolLM3RMSNorm",
              "Glm4RMSNorm", "Glm4vRMSNorm", "Glm4vMoeRMSNorm", "Glm4vMoeTextRMSNorm", "InternVLVisionRMSNorm",
              "FalconH1RMSNorm", "HunYuanDenseV1RMSNorm", "HunYuanMoEV1RMSNorm", "DeepseekV4RMSNorm",
              "Exaone4RMSNorm"],
    "round once": ["Olmo2RMSNorm", "Olmo3RMSNorm", "GptOssRMSNorm", "Gemma4RMSNorm"],
    "gemma": ["GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm", "Qwen3NextRMSNorm", "Qwen3_5RMSNorm",
              "Qwen3_5MoeRMSNorm"],
}
OPTIONS = {"llama": (False, False), "round once": (False, True), "gemma": (True, True)}


def hf(name, hidden=64, eps=1e-6, **facts):
    return Facts(name, weight=(hidden,), eps=eps, **facts)


@pytest.mark.parametrize("formula, name", [(f, n) for f, names in LIGER_FAMILIES.items() for n in names])
def test_every_family_liger_patches_is_taken_with_its_formula(formula, name):
    gemma, round_once = OPTIONS[formula]
    assert decide(hf(name, 896, 1e-5)) == Swap("RMSNorm", 896, 1e-5, gemma, round_once, True)


def test_the_table_holds_each_class_once_with_one_of_the_three_formulas():
    listed = mn._LLAMA_CLASSES + mn._ROUND_ONCE_CLASSES + mn._GEMMA_CLASSES
    assert len(set(listed)) == len(listed) == len(mn.HF_RMS_NORMS)
    assert set(map(id, mn.HF_RMS_NORMS.values())) == {id(mn.LLAMA), id(mn.ROUND_ONCE), id(mn.GEMMA)}
    with pytest.raises(TypeError):  # shared by every entry: not to be changed through one of them
        mn.HF_RMS_NORMS["LlamaRMSNorm"]["gemma"] = True


def test_gemma_3n_and_4_norms_without_scale_have_no_weight():
    for name in ("Gemma3nRMSNorm", "Gemma4RMSNorm"):
        # Gemma 3n keeps a 0-d buffer named weight (not a Parameter), Gemma 4 none: no weight either way
        assert decide(Facts(name, eps=1e-6, with_scale=False)) == Swap("RMSNorm", None, 1e-6, False, True, False)
        assert decide(hf(name)) == Swap("RMSNorm", 64, 1e-6, False, True, True)


def test_torch_rms_norm():
    rms = dict(torch_norm="RMSNorm", exact=True)
    assert decide(Facts("RMSNorm", weight=(64,), eps=1e-5, normalized_shape=(64,), **rms)) == \
        Swap("RMSNorm", 64, 1e-5, False, True, True)  # PyTorch rounds once: its fused kernel and its composite path
    assert decide(Facts("RMSNorm", eps=None, normalized_shape=(64,), **rms)) == \
        Swap("RMSNorm", 64, 2.0 ** -23, False, True, False)  # eps=None and elementwise_affine=False
    assert mn.TORCH_DEFAULT_EPS == float.fromhex("0x1p-23")  # FLT_EPSILON, whatever the input's dtype
    assert decide(Facts("RMSNorm", weight=(4, 16), eps=1e-5, normalized_shape=(4, 16), **rms)) == \
        Keep("it normalizes over its last 2 dimensions (4, 16); pyrms over the last one only")


def test_torch_layer_norm():
    ln = dict(torch_norm="LayerNorm", exact=True)
    assert decide(Facts("LayerNorm", weight=(64,), eps=1e-5, normalized_shape=(64,), **ln)) == Swap("LayerNorm")
    assert decide(Facts("LayerNorm", normalized_shape=(4, 4), **ln)).reason.startswith(
        "it normalizes over its last 2 dimensions (4, 4)")


@pytest.mark.parametrize("facts, reason", [
    (Facts("FloatLayerNorm", "LayerNorm", weight=(64,), eps=1e-5, normalized_shape=(64,)),
     "a subclass of torch.nn.LayerNorm, which may compute something else"),
    (Facts("MyRMSNorm", "RMSNorm", weight=(64,), eps=1e-5, normalized_shape=(64,)),
     "a subclass of torch.nn.RMSNorm, which may compute something else"),
    (hf("LlamaRMSNorm", forward_replaced=True), "its forward was replaced on the instance (as Liger-Kernel's "
                                                "patches do), so its class does not say what it computes"),
    (Facts("LayerNorm", "LayerNorm", True, (64,), 1e-5, (64,), forward_replaced=True), "its forward was replaced"),
    (Facts("Qwen3NextRMSNormGated", weight=(64,), eps=1e-6), "pyrms knows no formula for Qwen3NextRMSNormGated"),
    (Facts("NemotronLayerNorm1P", "LayerNorm", weight=(64,), eps=1e-5, normalized_shape=(64,)),
     "a subclass of torch.nn.LayerNorm"),
    (Facts("Llama4TextL2Norm", eps=1e-6), "pyrms knows no formula for Llama4TextL2Norm"),
    (Facts("GroupNorm", weight=(64,), eps=1e-5), "pyrms knows no formula for GroupNorm"),
    (Facts("LlamaRMSNorm", eps=1e-6), "it has no weight Parameter"),
    (Facts("LlamaRMSNorm", weight=(8, 8), eps=1e-6), "its weight Parameter has shape (8, 8), not (hidden_size,)"),
    (Facts("LlamaRMSNorm", weight=(8,)), "it has no variance_epsilon or eps attribute"),
    (hf("LlamaRMSNorm", eps=-1e-6), "its eps -1e-06 is not a finite number >= 0"),
    (hf("LlamaRMSNorm", eps=math.nan), "its eps nan is not a finite number >= 0"),
    (hf("LlamaRMSNorm", eps="1e-6"), "its eps '1e-6' is not a finite number >= 0"),
    (hf("LlamaRMSNorm", eps=True), "its eps True is not a finite number >= 0"),
])
def test_norms_left_in_place_say_why(facts, reason):
    found = decide(facts)
    assert isinstance(found, Keep) and found.reason.startswith(reason), found


@pytest.mark.parametrize("name", ["Linear", "Embedding", "Qwen3Attention", "BatchNorm1d", "Identity"])
def test_other_modules_are_no_norms(name):
    assert decide(Facts(name, weight=(64,), eps=1e-6)) is None


def test_an_assumed_formula_takes_a_class_the_table_does_not_list():
    """RMSNorm.from_module's way: any module with a 1-D weight and an eps, with the options given."""
    assert decide(hf("MyModelRMSNorm", 32, 1e-5), assume={}) == Swap("RMSNorm", 32, 1e-5)
    assert decide(hf("Norm", 32, 0), assume=mn.GEMMA) == Swap("RMSNorm", 32, 0.0, True, True, True)
    assert decide(hf("LlamaRMSNorm", 32), assume=mn.GEMMA).gemma is False  # the table wins for a class it lists
    assert decide(Facts("Linear", weight=(8, 4)), assume={}) == Keep("its weight Parameter has shape (8, 4), not "
                                                                     "(hidden_size,)")


def test_report_summary():
    report = NormReport("model", (
        Swapped("layers.0.input_layernorm", "LlamaRMSNorm", "RMSNorm(64, eps=1e-05)"),
        Swapped("layers.1.input_layernorm", "LlamaRMSNorm", "RMSNorm(64, eps=1e-05)"),
        Swapped("norm", "GemmaRMSNorm", "RMSNorm(64, eps=1e-06, gemma=True, round_once=True)"),
    ), (Kept("layers.0.mixer.norm", "Qwen3NextRMSNormGated", "pyrms knows no formula for Qwen3NextRMSNormGated"),
        Kept("", "FloatLayerNorm", "a subclass of torch.nn.LayerNorm, which may compute something else")))
    assert str(report) == """\
replace_norms swapped 3 norms, kept 2:
  2 x LlamaRMSNorm -> RMSNorm(64, eps=1e-05)
  1 x GemmaRMSNorm -> RMSNorm(64, eps=1e-06, gemma=True, round_once=True)
kept:
  layers.0.mixer.norm (Qwen3NextRMSNormGated): pyrms knows no formula for Qwen3NextRMSNormGated
  (the model) (FloatLayerNorm): a subclass of torch.nn.LayerNorm, which may compute something else"""
    assert str(NormReport("model", (), ())) == "replace_norms swapped 0 norms, kept 0"
    one = NormReport("model", report.swapped[2:], ())
    assert str(one).splitlines()[0] == "replace_norms swapped 1 norm, kept 0:"
