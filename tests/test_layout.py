"""The package's shape, read from its source (no GPU): no import cycles, the driver package as the
only importer of cuda.bindings.driver with every call's status through errors.check, its one public
surface, and every package installed."""
import ast
from pathlib import Path

import pytest

from pyrms import driver

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pyrms"
# pyrms.bench.host times a bare cuLaunchKernel with nothing of pyrms in between (README, Layout).
BINDING_IMPORTERS_OUTSIDE_DRIVER = {"pyrms.bench.host"}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The pyrms modules ``name`` imports anywhere in its source (inside functions too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names)
    return {module for module in found if module in MODULES and module != name}


def test_no_import_cycles():
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    state: dict[str, str] = {}  # "open" while on the walk's path, "done" after

    def walk(name, path):
        state[name] = "open"
        for imported in sorted(graph[name]):
            if state.get(imported) == "open":
                cycle = path[path.index(imported):] + [imported]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if imported not in state:
                walk(imported, path + [imported])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])


def _binding_aliases(tree) -> set[str]:
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "cuda.bindings":
            aliases.update(alias.asname or alias.name for alias in node.names if alias.name == "driver")
        elif isinstance(node, ast.Import):
            aliases.update(alias.asname or alias.name for alias in node.names if alias.name == "cuda.bindings.driver")
    return aliases


def test_only_the_driver_package_imports_the_binding_and_binds_it_as_cu():
    for name, path in MODULES.items():
        aliases = _binding_aliases(ast.parse(path.read_text()))
        if name.startswith("pyrms.driver."):
            # tests/support/fake_driver.py swaps its stand-in into every driver module's _cu
            assert aliases <= {"_cu"}, f"{name} binds cuda.bindings.driver as {aliases}, not _cu"
        elif name not in BINDING_IMPORTERS_OUTSIDE_DRIVER:
            assert not aliases, f"{name} imports cuda.bindings.driver: only pyrms.driver may"


def _driver_calls(tree):
    """(call, enclosing function) for every ``_cu.cuX(...)`` call of a driver function."""
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "_cu"
                        and node.func.attr[:2] == "cu" and node.func.attr[2:3].isupper()):  # not cuuint64_t
                    yield node, function


def test_every_driver_call_goes_through_check():
    """Each call's status is handed to check, either directly or, on the hot paths and where one status
    is an answer rather than an error (CUDA_ERROR_NOT_FOUND), through a variable that check receives."""
    counted = 0
    for path in sorted((PACKAGE / "driver").glob("*.py")):
        tree = ast.parse(path.read_text())
        for call, function in _driver_calls(tree):
            if function.name == "_describe":  # errors.check's own describer: calling check would recurse
                continue
            counted += 1
            checked = [arg for node in ast.walk(function) if isinstance(node, ast.Call)
                       and isinstance(node.func, ast.Name) and node.func.id == "check" for arg in node.args]
            assigned = {target.id for node in ast.walk(function) if isinstance(node, ast.Assign) and node.value is call
                        for target in node.targets if isinstance(target, ast.Name)}
            assert any(arg is call or (isinstance(arg, ast.Name) and arg.id in assigned) for arg in checked), (
                f"{path.name}:{call.lineno}: _cu.{call.func.attr} in {function.name}() does not reach errors.check")
    assert counted > 50


def test_the_driver_surface_is_one_package():
    for name in driver.__all__:
        assert getattr(driver, name) is not None, name
    # The hot path reads the selection through the package (ops/rms_norm.py): the very object
    # selected_device and set_device use, never a copy.
    from pyrms.driver import _process

    assert driver._selected is _process._selected


def test_every_package_is_installed():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert packages | {"pyrms.cuda_src"} == listed


def _named_paths(text: str) -> set[str]:
    """The repository paths a document names in backticks: a token with a slash or a file suffix
    (``pyrms/plan.py``, ``cuda_src/``, ``CHANGELOG.md``), not a module, call or command."""
    import re

    found = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        if re.fullmatch(r"[\w.-]+(/[\w.-]*)*", token) and ("/" in token or re.search(r"\.(py|cuh?|md|sh|json|toml)$", token)):
            found.add(token)
    return found


@pytest.mark.parametrize("document, section", [("README.md", "## Layout"), ("docs/architecture.md", None)])
def test_every_path_the_layout_names_exists(document, section):
    text = (ROOT / document).read_text()
    if section is not None:  # from the heading to the next one
        text = text[text.index(section):]
        text = text[:text.find("\n## ", len(section))] if "\n## " in text[len(section):] else text
    named = _named_paths(text)
    assert len(named) > 15, sorted(named)
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"{document} names paths that do not exist: {missing}"
