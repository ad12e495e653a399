"""The package as a new user meets it: its name, entry points, license, typing marker, changelog, the
README's fresh-machine test command being the one CI runs, and a wheel without the tests' or the lab's
modules."""
import ast
import importlib
import re
from pathlib import Path

import pytest

import pyrms

ROOT = Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib")  # Python 3.11+


@pytest.fixture(scope="module")
def project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_distribution_name_and_version(project):
    assert project["name"] == "pyrms-cuda"  # "pyrms" on PyPI is an unrelated project
    assert project["version"] == pyrms.__version__


def test_console_scripts_are_the_module_commands(project):
    scripts = project["scripts"]
    assert scripts == {"pyrms-demo": "pyrms.demo:main", "pyrms-precompile": "pyrms.precompile:main",
                       "pyrms-info": "pyrms.info:main"}
    readme = (ROOT / "README.md").read_text()
    for name, target in scripts.items():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function))
        assert f"`{name}`" in readme and f"python -m {module}" in readme


def test_extras_pin_one_cuda_major_each_and_the_base_none(project):
    """cu12 and cu13 bring cuda-bindings, NVRTC, CCCL and the runtime headers of their own major, with ranges that
    cannot meet (pip refuses the pair rather than mixing majors); the base brings no NVIDIA wheel, so either
    extra installs that major's alone."""
    from packaging.requirements import Requirement

    def pins(requirements):
        return {(r := Requirement(text)).name: r.specifier for text in requirements}

    base = pins(project["dependencies"])
    assert not [name for name in base if name.startswith("nvidia-")], base
    assert base["cuda-bindings"].contains("12.9.10") and base["cuda-bindings"].contains("13.5.0")
    extras = project["optional-dependencies"]
    wheels = {12: ("nvidia-cuda-nvrtc-cu12", "nvidia-cuda-cccl-cu12", "nvidia-cuda-runtime-cu12"),
              13: ("nvidia-cuda-nvrtc", "nvidia-cuda-cccl", "nvidia-cuda-runtime")}
    for major, names in wheels.items():
        extra = pins(extras[f"cu{major}"])
        assert set(extra) == {"cuda-bindings", *names}
        for name, specifier in extra.items():
            assert specifier.contains(f"{major}.9.0") and not specifier.contains(f"{25 - major}.9.0"), (name, specifier)
    assert not any(pins(extras["cu12"])["cuda-bindings"].contains(v) for v in ("13.0.0", "13.5.0"))


def test_python_versions_declared(project):
    assert project["requires-python"] == ">=3.10"
    declared = [c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert declared == ["3.10", "3.11", "3.12", "3.13"]


def test_license_matches(project):
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "the pyrms developers" in text


def test_typing_marker_is_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["pyrms"]
    assert (ROOT / "pyrms" / "py.typed").is_file()


def test_changelog_has_unreleased_and_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "\n## Unreleased\n" in text
    assert re.search(rf"^## {re.escape(pyrms.__version__)} - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.MULTILINE)


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    match = re.search(r"# install and pass the tests[^\n]*\n(.+)\n", readme)
    assert match, "the README lost its fresh-machine test command"
    venv, _, command = match.group(1).partition(" && . .venv/bin/activate && ")
    assert venv == "python3 -m venv .venv"
    assert f"\n{command}\n" in ci, command
    install = re.search(r"# install and run the main job[^\n]*\n(.+)\n", readme).group(1)
    assert install == "python3 -m venv .venv && . .venv/bin/activate && pip install '.[cu13]' && python -m pyrms.demo --seed 42"


def _wheel_modules():
    """The modules ``pip wheel .`` packs, as setuptools finds them: every .py file in the folder of each
    package that [tool.setuptools] lists (its package-dir, else the package's own path)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = setuptools.get("package-dir", {})
    for package in setuptools["packages"]:
        folder = ROOT / folders.get(package, package.replace(".", "/"))
        for path in sorted(folder.glob("*.py")):
            yield package if path.stem == "__init__" else f"{package}.{path.stem}"


def test_the_wheel_holds_no_test_or_lab_module():
    """What only pyrms's own tests and the checkout's tools use lives in tests/ and tools/, which are not
    installed (the checkers, the case matrix, the randomized check, the fake driver, the hostile inputs)."""
    modules = list(_wheel_modules())
    assert "pyrms.ops" in modules and "pyrms.reference" in modules and len(modules) > 40
    outside = [name for name in modules if name.split(".")[0] != "pyrms"]
    assert not outside, f"the wheel would hold modules outside pyrms: {outside}"
    lab = re.compile(r"testing|case_matrix|random_\w*|fake_\w*|hostile_\w*|small_sources|validation_calls"
                     r"|conftest|test_\w*")
    found = [name for name in modules if lab.fullmatch(name.rpartition(".")[2])]
    assert not found, f"test or lab modules in the wheel: {found} (they belong in tests/support/ or tools/)"


def test_the_package_imports_nothing_from_tests_or_tools():
    """An installed pyrms has neither folder: no module of it may import them, at the top or inside a function."""
    for path in sorted((ROOT / "pyrms").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                assert name.split(".")[0] not in ("tests", "tools"), f"{where} imports {name}"
