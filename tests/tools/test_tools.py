"""The checkout's tools as users run them (no GPU): each answers ``python -m tools.NAME --help`` (an op's own
tools: ``tools.OP.NAME``) from the root with nothing on PYTHONPATH, and none edits ``sys.path`` to find pyrms or
its siblings."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Module names under tools: NAME, or OP.NAME for the tools in an op's folder (tools/OP/NAME.py).
TOOLS = sorted(".".join(path.relative_to(ROOT / "tools").with_suffix("").parts)
               for path in (ROOT / "tools").rglob("*.py") if path.stem != "__init__")


def test_the_tools_are_all_here():
    assert len(TOOLS) >= 14 and "ptx_dump" in TOOLS and "sanitize_all" in TOOLS and "norm_backward.tune" in TOOLS


@pytest.mark.parametrize("name", TOOLS)
def test_no_tool_edits_sys_path(name):
    tree = ast.parse((ROOT / "tools" / f"{name.replace('.', '/')}.py").read_text())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == "path"
                and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            pytest.fail(f"tools/{name.replace('.', '/')}.py:{node.lineno} uses sys.path: import through the tools package instead")


# One interpreter runs every tool as ``python -m`` does (runpy, as __main__, with ``--help`` as its arguments):
# a fresh interpreter per tool costs a second of imports each.
_HELP_OF_EACH = """
import contextlib, io, json, runpy, sys
answers = {}
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(f"tools.{name}", run_name="__main__", alter_sys=True)
            code = "returned without exiting"
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:
            code = f"{type(exc).__name__}: {exc}"
    answers[name] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(answers))
"""


def test_each_tool_answers_help_as_a_module_of_the_checkout():
    """From the root with PYTHONPATH unset: ``-m`` finds the checkout's pyrms and tools there, installed or not."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", _HELP_OF_EACH, *TOOLS], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert sorted(answers) == TOOLS
    for name, (code, out, err) in answers.items():
        assert code in (0, None), f"python -m tools.{name} --help: exit {code!r}\n{err}"
        assert out.startswith("usage:"), (name, out[:200])
