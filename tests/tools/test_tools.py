"""The checkout's tools as users run them (no GPU): each answers ``python -m tools.NAME --help`` from
the root with nothing on PYTHONPATH, and none edits ``sys.path`` to find pyrms or its siblings."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = sorted(path.stem for path in (ROOT / "tools").glob("*.py") if path.stem != "__init__")


def test_the_tools_are_all_here():
    assert len(TOOLS) >= 14 and "ptx_dump" in TOOLS and "sanitize_all" in TOOLS


@pytest.mark.parametrize("name", TOOLS)
def test_no_tool_edits_sys_path(name):
    tree = ast.parse((ROOT / "tools" / f"{name}.py").read_text())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == "path"
                and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            pytest.fail(f"tools/{name}.py:{node.lineno} uses sys.path: import through the tools package instead")


def test_each_tool_answers_help_as_a_module_of_the_checkout():
    """One interpreter per tool, from the root and with PYTHONPATH unset: ``-m`` finds the checkout's pyrms
    and tools there, installed or not. Started together: each one's imports take a second or so."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    runs = {name: subprocess.Popen([sys.executable, "-m", f"tools.{name}", "--help"], cwd=ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in TOOLS}
    for name, run in runs.items():
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, f"python -m tools.{name} --help: rc {run.returncode}\n{err}"
        assert out.startswith("usage:"), (name, out[:200])
