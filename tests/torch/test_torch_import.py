"""pyrms.torch is optional: pyrms never imports torch, and without torch ``import pyrms.torch`` says
what to install. Both run in a child process, with torch made unimportable there, so they hold with
or without torch installed."""
import ast
import subprocess
import sys
from pathlib import Path

from pyrms.ops import registry
from tests.support.child_env import ROOT, child_env


def run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(), capture_output=True,
                          text=True, timeout=120)


def test_import_pyrms_never_imports_torch():
    child = run_child("import importlib, sys, pyrms, pyrms.ops, pyrms.reference\nfrom pyrms.ops import registry\n"
                      "for spec in registry.REGISTRY.values():\n    importlib.import_module(spec.module)\n"
                      "print('torch' in sys.modules)")
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "False"


def test_import_pyrms_torch_without_torch_says_to_install_it():
    child = run_child("import sys\nsys.modules['torch'] = None  # as if torch were not installed\n"
                      "try:\n    import pyrms.torch\nexcept ImportError as exc:\n    print(exc)\n")
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "pyrms.torch needs PyTorch: pip install torch"


def _imported(path: Path, package: str) -> set[str]:
    """The absolute names of the modules a source file imports anywhere (relative imports resolved; for
    ``from a import b``, both ``a`` and ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _sources(folder: str):
    """(module name, its package, path) of every Python file under ``folder`` of the repository."""
    for path in sorted(Path(ROOT, folder).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, name if path.name == "__init__.py" else name.rpartition(".")[0], path


def test_under_ops_only_the_registered_torch_bindings_import_torch():
    """Each op's torch binding lies in its own folder and is the registry's (OpSpec.torch); no other module
    of pyrms.ops imports torch but the shared machinery's torch launches (``torch_launch``, as the norm
    backward's), which only the bindings import; and only pyrms.torch and the bindings import a binding."""
    bindings = {spec.torch for spec in registry.REGISTRY.values() if spec.torch}
    for spec in registry.REGISTRY.values():
        if spec.torch:
            assert spec.torch.rpartition(".")[0] == spec.module.rpartition(".")[0], (spec.name, spec.torch)
    importers = {name for name, package, path in _sources("pyrms/ops")
                 if any(m == "torch" or m.startswith("torch.") for m in _imported(path, package))}
    shared = {name for name in importers - bindings if name.split(".")[2].startswith("_")
              and name.rpartition(".")[2] == "torch_launch"}
    assert shared and importers == bindings | shared
    for folder in ("pyrms", "tools"):
        for name, package, path in _sources(folder):
            if name in bindings or name in shared:
                continue
            imported = _imported(path, package)
            assert not imported & shared, f"{name} imports a shared torch launch: only the bindings may"
            if not name.startswith("pyrms.torch"):
                assert not imported & bindings, f"{name} imports a torch binding: only pyrms.torch may"
