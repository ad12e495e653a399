"""pyrms.dtypes.get: the names, aliases and numpy types it accepts, what it refuses and how it says so;
and the command lines that parse dtypes through it (the demo, the benchmark, the tools)."""
import argparse
import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from pyrms import dtypes
from pyrms.bench import config

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("value, name", [
    ("bfloat16", "bfloat16"), ("bf16", "bfloat16"), ("BF16", "bfloat16"), (" bf16 ", "bfloat16"),
    ("float16", "float16"), ("fp16", "float16"), ("half", "float16"), ("Half", "float16"),
    ("float32", "float32"), ("fp32", "float32"), ("float", "float32"),
    ("f2", "float16"), ("<f4", "float32"),
    (np.float16, "float16"), (np.float32, "float32"), (np.dtype("float16"), "float16"),
    (np.dtype(np.float32), "float32"), (ml_dtypes.bfloat16, "bfloat16"), (np.dtype(ml_dtypes.bfloat16), "bfloat16"),
    (dtypes.FLOAT16, "float16"),
])
def test_accepted(value, name):
    assert dtypes.get(value).name == name


@pytest.mark.parametrize("value, exc, start", [
    ("int8", ValueError, "dtype 'int8' is not supported; allowed: "),
    ("float64", ValueError, "dtype 'float64' is not supported; allowed: "),
    ("bf17", ValueError, "dtype 'bf17' is not supported; allowed: "),
    ("", ValueError, "dtype '' is not supported; allowed: "),
    (np.float64, ValueError, "dtype float64 is not supported; allowed: "),
    (np.dtype(np.int16), ValueError, "dtype int16 is not supported; allowed: "),
    (None, TypeError, "dtype must be a string, numpy dtype or pyrms DType, got None; allowed: "),
    (3, TypeError, "dtype must be a string, numpy dtype or pyrms DType, got 3"),
])
def test_refused_with_what_is_allowed(value, exc, start):
    with pytest.raises(exc) as info:
        dtypes.get(value)
    message = str(info.value)
    assert message.startswith(start), message
    if "allowed" in start:
        assert "bfloat16, float16, float32 (aliases: bf16, fp16, half, fp32, float;" in message, message


def test_every_alias_is_listed_in_the_message():
    message = dtypes.allowed()
    for alias in dtypes.ALIASES:
        assert alias in message


def test_argparse_type():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", type=dtypes.argument, default="bfloat16")
    parser.add_argument("--dtypes", type=dtypes.argument_list, default="fp16")
    args = parser.parse_args([])
    assert args.dtype is dtypes.BFLOAT16 and args.dtypes == (dtypes.FLOAT16,)
    args = parser.parse_args(["--dtype", "half", "--dtypes", "bf16, fp32,bfloat16,"])
    assert args.dtype is dtypes.FLOAT16 and args.dtypes == (dtypes.BFLOAT16, dtypes.FLOAT32)
    with pytest.raises(argparse.ArgumentTypeError, match=r"dtype 'int8' is not supported; allowed: bfloat16"):
        dtypes.argument("int8")


def test_demo_takes_the_aliases(monkeypatch, capsys):
    """--dtype bf16 gets past the argument parser (the demo then stops at the missing GPU, made so here)."""
    from pyrms import demo, driver

    monkeypatch.setattr(driver, "unavailable_reason", lambda: "no GPU in this test")
    assert demo.main(["--dtype", "bf16"]) == 2
    assert "pyrms.demo: no CUDA GPU available: no GPU in this test" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        demo.main(["--dtype", "int8"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --dtype: dtype 'int8' is not supported; allowed: bfloat16, float16, float32 (aliases: bf16" in err


def test_bench_dtypes_resolve_through_pyrms_dtypes():
    assert config.parse_dtypes("fp32,bf16, half") == ("bfloat16", "float16", "float32")
    assert config.parse_dtypes("all") == ("bfloat16", "float16", "float32")
    assert config.parse_dtypes("<f2") == ("float16",)
    with pytest.raises(ValueError, match=r"^--dtypes: dtype 'int8' is not supported; allowed: bfloat16"):
        config.parse_dtypes("bf16,int8")
    with pytest.raises(ValueError, match="^--dtypes: empty list$"):
        config.parse_dtypes(" , ")


def test_ptx_dump_takes_the_aliases(monkeypatch):
    ptx_dump = importlib.import_module("tools.ptx_dump")
    args = ptx_dump.build_parser().parse_args(["--dtype", "fp16"])
    assert args.dtype is dtypes.FLOAT16
