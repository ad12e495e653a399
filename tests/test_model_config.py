"""pyrms.model_config, reading a Hugging Face config.json without transformers, and ``python -m pyrms.precompile
--model``: the norms a model runs, as the units it compiles."""
import dataclasses
import json

import pytest

from pyrms import dtypes, model_config, model_norms, precompile
from pyrms.ops import registry

QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "head_dim": 128,
         "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16"}
GEMMA3 = {"model_type": "gemma3", "torch_dtype": "bfloat16",  # the multimodal config: the text model's inside
          "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "head_dim": 256, "num_attention_heads": 8}}
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "dtype": "float16"}
OLMO2 = {"model_type": "olmo2", "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4,
         "torch_dtype": "float32"}


@pytest.fixture
def write(tmp_path):
    def write(config, name="config.json"):
        path = tmp_path / name
        path.write_text(json.dumps(config) if isinstance(config, dict) else config)
        return path
    return write


def test_families_widths_and_dtypes(write):
    qwen = model_config.read(write(QWEN3))
    assert (qwen.class_name, dict(qwen.options), qwen.dtype, qwen.widths) == \
        ("Qwen3RMSNorm", {}, dtypes.BFLOAT16, (4096, 128))  # QK-norm per head
    gemma = model_config.read(write(GEMMA3))
    assert (gemma.class_name, dict(gemma.options), gemma.widths) == \
        ("Gemma3RMSNorm", dict(model_norms.GEMMA), (2560, 256))
    llama = model_config.read(write(LLAMA))  # no QK-norm; the dtype under its newer name
    assert (llama.class_name, llama.dtype, llama.widths) == ("LlamaRMSNorm", dtypes.FLOAT16, (4096,))
    olmo = model_config.read(write(OLMO2))  # QK-norm over every head at once: 16 and 4 heads of 2048 / 16
    assert (olmo.class_name, dict(olmo.options), olmo.widths) == ("Olmo2RMSNorm", dict(model_norms.ROUND_ONCE),
                                                                 (2048, 512))
    assert model_config.read(write({**LLAMA, "dtype": None})).dtype is None
    assert model_config.read(write({**QWEN3, "model_type": "qwen3_vl"})).class_name == "Qwen3VLTextRMSNorm"


@pytest.mark.parametrize("config, message", [
    ("[1, 2]", "a config.json holds a JSON object, got list"),
    ("{nope", "as a config.json"),
    ({**LLAMA, "model_type": "bert"}, "model_type 'bert': pyrms knows the RMSNorm of these families only: "),
    ({**LLAMA, "model_type": None}, "no model_type (got None)"),
    ({**LLAMA, "hidden_size": "4096"}, "hidden_size must be a positive integer, got '4096'"),
    ({**QWEN3, "head_dim": 0}, "head_dim must be a positive integer, got 0"),
    ({**LLAMA, "dtype": "int8"}, "torch_dtype 'int8' is not one pyrms runs; allowed: bfloat16, float16, float32"),
])
def test_bad_configs_name_the_value(write, config, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        model_config.read(write(config))


def test_norm_calls():
    qwen = model_config.ModelNorms("Qwen3RMSNorm", {}, dtypes.BFLOAT16, (4096, 128))
    assert model_config.norm_calls(qwen, dtypes.BFLOAT16) == [
        ("rms_norm", 4096, {"weight_dtype": None}), ("rms_norm", 128, {"weight_dtype": None}),
        ("fused_add_rms_norm", 4096, {})]
    training = model_config.norm_calls(qwen, dtypes.BFLOAT16, training=True)
    assert ("rms_norm", 128, {"weight_dtype": "float32"}) in training
    assert ("rms_norm_backward", 4096, {"gemma": False, "weight_dtype": "float32"}) in training and len(training) == 9
    fp32 = model_config.norm_calls(qwen, dtypes.FLOAT32, training=True)  # no fp32 weight beside fp32 rows: the same
    assert [c for c in fp32 if c[0] == "rms_norm_backward"] == [
        ("rms_norm_backward", 4096, {"gemma": False, "weight_dtype": None}),
        ("rms_norm_backward", 128, {"gemma": False, "weight_dtype": None})]


def test_norm_calls_are_each_ops_own_declaration(monkeypatch):
    """norm_calls asks every op (OpSpec.model_calls) in the registry's order: an op that declares calls is called."""
    qwen = model_config.ModelNorms("Qwen3RMSNorm", {}, dtypes.BFLOAT16, (4096, 128))
    declared = [name for name, spec in registry.REGISTRY.items() if spec.model_calls is not None]
    training = model_config.norm_calls(qwen, dtypes.BFLOAT16, training=True)
    assert list(dict.fromkeys(op for op, _, _ in training)) == declared
    last = next(reversed(registry.REGISTRY))
    spec = dataclasses.replace(registry.get(last), model_calls=lambda widths, options, weights, training:
                               [(widths[-1], {"weights": tuple(weights), "training": training})])
    monkeypatch.setitem(registry.REGISTRY, last, spec)
    assert model_config.norm_calls(qwen, dtypes.BFLOAT16)[-1] == (last, 128, {"weights": (None,), "training": False})


def test_model_units_are_the_units_its_calls_compile():
    gemma = model_config.ModelNorms("Gemma3RMSNorm", model_norms.GEMMA, dtypes.BFLOAT16, (2560, 256))
    units = precompile.model_units(gemma, [dtypes.BFLOAT16])
    assert [u.label for u in units] == ["fused_add_rms_norm.cu bfloat16 gemma round_once",
                                        "rms_norm.cu bfloat16 gemma round_once", "rms_norm.cu bfloat16 nd gemma round_once"]
    assert units[1] == precompile.unit("rms_norm", "bf16", 2560, gemma=True, round_once=True)
    assert set(units) <= set(precompile.every_unit(["rms_norm", "rms_norm_nd", "fused_add_rms_norm"], [dtypes.BFLOAT16]))
    llama = model_config.ModelNorms("LlamaRMSNorm", model_norms.LLAMA, dtypes.FLOAT16, (4096,))  # rows too long to pack
    assert [u.label for u in precompile.model_units(llama, ["fp16"])] == ["fused_add_rms_norm.cu float16",
                                                                          "rms_norm.cu float16"]
    trained = precompile.model_units(llama, ["fp16"], training=True)
    assert {"rms_norm_backward.cu float16", "rms_norm_backward.cu float16 weight=float32",
            "rms_norm.cu float16 weight=float32"} <= {u.label for u in trained} and len(trained) == 5


def test_precompile_list_for_a_model(write, capsys):
    assert precompile.main(["--list", "--model", str(write(QWEN3))]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "fused_add_rms_norm.cu bfloat16: 14 kernels", "rms_norm.cu bfloat16: 14 kernels",
        "rms_norm.cu bfloat16 nd: 14 kernels", "precompile: 3 compile units for Qwen3RMSNorm (bfloat16, rows of 4096, 128)"]
    assert precompile.main(["--list", "--model", str(write(QWEN3)), "--dtypes", "fp16,fp32", "--training"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "precompile: 11 compile units for Qwen3RMSNorm (float16, float32, rows of 4096, 128, training)"


@pytest.mark.parametrize("argv, message", [
    (["--training"], "--training goes with --model"),
    (["--model", "MODEL", "--ops", "rms_norm"], "give --ops or --model, not both"),
    (["--model", "NO_DTYPE"], "gives no torch_dtype: give --dtypes"),
    (["--model", "BERT"], "model_type 'bert'"),
])
def test_precompile_model_refusals(write, capsys, argv, message):
    paths = {"MODEL": write(QWEN3), "NO_DTYPE": write({**LLAMA, "dtype": None}, "b.json"),
             "BERT": write({**LLAMA, "model_type": "bert"}, "c.json")}
    with pytest.raises(SystemExit) as exited:
        precompile.main(["--list", *(str(paths.get(a, a)) for a in argv)])
    assert exited.value.code == 2 and message in capsys.readouterr().err
