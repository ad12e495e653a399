"""pyrms.torch is optional: pyrms never imports torch, and without torch ``import pyrms.torch`` says
what to install. Both run in a child process, with torch made unimportable there, so they hold with
or without torch installed."""
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # the checkout


def run_child(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_import_pyrms_never_imports_torch():
    child = run_child("import sys, pyrms, pyrms.ops, pyrms.reference\nprint('torch' in sys.modules)")
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "False"


def test_import_pyrms_torch_without_torch_says_to_install_it():
    child = run_child("import sys\nsys.modules['torch'] = None  # as if torch were not installed\n"
                      "try:\n    import pyrms.torch\nexcept ImportError as exc:\n    print(exc)\n")
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "pyrms.torch needs PyTorch: pip install torch"
