"""The environment variables pyrms reads: PYRMS_QUIET (only a true-ish value silences), the cache
directory (PYRMS_CACHE_DIR, else XDG_CACHE_HOME, else ~/.cache)."""
import os
from pathlib import Path

import pytest

from pyrms import cache, compiler

SILENT = ("1", "true", "TRUE", " yes ", "on")
LOUD = ("0", "", "false", "no", "off", "2")


@pytest.mark.parametrize("value", SILENT + LOUD)
def test_quiet_only_when_true_ish(small, monkeypatch, capsys, value):
    monkeypatch.setattr(compiler, "SLOW_COMPILE_SECONDS", 0)  # every compile counts as slow
    monkeypatch.setenv("PYRMS_QUIET", value)
    program = compiler.compile_source("small.cu", arch="sm_90", name_expressions=["k<5>"])
    assert program.from_cache == "none"
    err = capsys.readouterr().err
    if value in SILENT:
        assert err == ""
    else:
        assert err.startswith("pyrms: compiled small.cu (1 kernels) for sm_90 in "), err


def test_quiet_unset_reports(small, monkeypatch, capsys):
    monkeypatch.setattr(compiler, "SLOW_COMPILE_SECONDS", 0)
    compiler.compile_source("small.cu", arch="sm_90", name_expressions=["k<6>"])
    assert "pyrms: compiled small.cu" in capsys.readouterr().err


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home directory of its own, and none of the cache variables set."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("PYRMS_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


def test_default_cache_directory(home):
    assert cache.directory() == home / ".cache" / "pyrms"


def test_xdg_cache_home_is_honoured(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.directory() == tmp_path / "xdg" / "pyrms"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG specification: ignore it
    assert cache.directory() == home / ".cache" / "pyrms"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert cache.directory() == home / ".cache" / "pyrms"


def test_pyrms_cache_dir_wins_and_expands_the_home(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.directory() == tmp_path / "mine"
    monkeypatch.setenv("PYRMS_CACHE_DIR", "~/kernels")
    assert cache.directory() == home / "kernels"


def test_a_compile_lands_under_xdg_cache_home(small, home, tmp_path, monkeypatch):  # small first, then home
    assert "PYRMS_CACHE_DIR" not in os.environ  # set by the small fixture, unset by home
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    program = compiler.compile_source("small.cu", arch="sm_90", name_expressions=["k<7>"])
    assert Path(tmp_path, "xdg", "pyrms", f"{program.key}.cubin").is_file()
    assert not (home / ".cache").exists()
