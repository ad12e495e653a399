"""The public API's types: every name pyrms exports is fully annotated, and ``mypy --strict`` passes on code that
uses it as users write it (tests/typecheck/usage.py, each call form's exact result type) and on the python examples
of README.md and docs/usage.md, with the package checked as pyproject's [tool.mypy] says."""
import importlib.util
import inspect
import subprocess
import sys

import pytest

import pyrms
from tools.readme_examples import ROOT, examples


def _unannotated(function) -> list[str]:
    signature = inspect.signature(function)
    missing = [p.name for p in signature.parameters.values()
               if p.annotation is inspect.Parameter.empty and p.name not in ("self", "cls")]
    return missing + (["return"] if signature.return_annotation is inspect.Signature.empty else [])


def _public_callables():
    """(name, function) of every exported function, and of the public methods (and __init__) of exported classes."""
    for name in pyrms.__all__:
        obj = getattr(pyrms, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attribute, member in vars(obj).items():
                if attribute.startswith("_") and attribute not in ("__init__", "__enter__", "__exit__"):
                    continue
                member = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if callable(member):
                    yield f"{name}.{attribute}", member
        elif inspect.isfunction(obj):
            yield name, obj


def test_every_exported_name_is_fully_annotated():
    unannotated = {name: missing for name, function in _public_callables() if (missing := _unannotated(function))}
    assert unannotated == {}
    assert dict(_public_callables()).keys() >= {"rms_norm", "layer_norm", "Tensor.to_numpy", "Stream.__init__"}


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is not installed (pip install -e '.[typecheck]')")
def test_mypy_strict_passes_on_the_public_api_and_the_documents_examples(tmp_path):
    files = []
    for document, i, code in examples():
        files.append(tmp_path / f"{document.replace('/', '_').replace('.', '_')}_block_{i}.py")
        files[-1].write_text(code)
    documents = {document for document, _, _ in examples()}
    assert documents == {"README.md", "docs/usage.md"} and len(files) >= 5  # the README's quick starts, usage's API
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--config-file", str(ROOT / "pyproject.toml"),
                           "pyrms/__init__.py", "tests/typecheck/usage.py", *map(str, files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
