"""The package as a new user meets it: its name, entry points, license, typing marker, changelog, and
the README's fresh-machine test command being the one CI runs."""
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
    assert install == "python3 -m venv .venv && . .venv/bin/activate && pip install . && python -m pyrms.demo --seed 42"
