"""What the cache holds and clearing it (pyrms.cache.report/clear, python -m pyrms.cache, python -m pyrms.info
--clear-cache): only pyrms's own entries are counted and removed; other files in the directory stay."""
import json
import subprocess
import sys

import pytest

from pyrms import cache, compiler, info
from pyrms.cache import cli
from tests.support.child_env import child_env

NVRTC = ".".join(map(str, compiler.nvrtc_version()))


def _entry(key: str, source: str, arch: str, nbytes: int, **meta) -> None:
    assert cache.store(key, {"source_name": source, "arch": arch, **meta}, b"\0" * nbytes) is not None


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYRMS_DISABLE_CACHE", raising=False)
    _entry("a" * 64, "rms_norm.cu", "sm_90", 1000)
    _entry("b" * 64, "rms_norm.cu", "sm_90", 2000, nvrtc=NVRTC)
    _entry("c" * 64, "layer_norm.cu", "sm_100", 10, nvrtc="12.8")
    (tmp_path / "notes.txt").write_text("mine")  # not pyrms's
    (tmp_path / ("d" * 64 + ".cubin")).write_bytes(b"not an entry")  # named like one, but not one
    (tmp_path / "short.cubin").write_bytes(cache._MAGIC + b"\0" * 8)  # marked, but not named like one
    (tmp_path / ("e" * 64 + ".cubin")).write_bytes(cache._MAGIC + (5).to_bytes(8, "little") + b"{nope")
    return tmp_path


def test_report_counts_pyrms_entries_by_source_and_arch(folder):
    r = cache.report()
    sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
    assert r["directory"] == str(folder) and r["enabled"] and r["entries"] == 4  # three, and one unreadable
    assert r["bytes"] == sum(sizes[k * 64 + ".cubin"] for k in "abce")
    assert r["by_source"] == {
        "(unreadable)": {"entries": 1, "bytes": sizes["e" * 64 + ".cubin"]},
        "layer_norm.cu sm_100": {"entries": 1, "bytes": sizes["c" * 64 + ".cubin"]},
        "rms_norm.cu sm_90": {"entries": 2, "bytes": sizes["a" * 64 + ".cubin"] + sizes["b" * 64 + ".cubin"]}}
    assert r["by_nvrtc"] == {  # "?": stored before the version was recorded
        "(unreadable)": {"entries": 1, "bytes": sizes["e" * 64 + ".cubin"]},
        "NVRTC 12.8 sm_100": {"entries": 1, "bytes": sizes["c" * 64 + ".cubin"]},
        f"NVRTC {NVRTC} sm_90": {"entries": 1, "bytes": sizes["b" * 64 + ".cubin"]},
        "NVRTC ? sm_90": {"entries": 1, "bytes": sizes["a" * 64 + ".cubin"]}}
    assert cache.report(folder / "missing") == {"directory": str(folder / "missing"), "enabled": True, "entries": 0,
                                                "bytes": 0, "by_nvrtc": {}, "by_source": {}}


def test_clear_removes_only_pyrms_entries_and_temporaries(folder):
    (folder / ".abc-1.tmp").write_bytes(b"x" * 7)  # a writer's leftover
    expected = sum((folder / (k * 64 + ".cubin")).stat().st_size for k in "abce") + 7
    assert cache.clear() == (5, expected)
    assert sorted(p.name for p in folder.iterdir()) == sorted(["notes.txt", "d" * 64 + ".cubin", "short.cubin"])
    assert cache.clear() == (0, 0) and cache.report()["entries"] == 0
    assert cache.load("a" * 64) is None


def test_info_reports_and_clears(folder, capsys):
    assert info.main(["--json"]) == 0
    reported = json.loads(capsys.readouterr().out)["cache"]
    assert reported["entries"] == 4 and reported["by_source"]["rms_norm.cu sm_90"]["entries"] == 2
    assert info.main([]) == 0
    text = capsys.readouterr().out
    assert "by source and arch:       (unreadable): 1 entries" in text and "rms_norm.cu sm_90: 2 entries" in text
    assert info.main(["--clear-cache"]) == 0
    assert capsys.readouterr().out.startswith(f"pyrms.info: removed 4 cached kernel files (0.0 MiB) from {folder}")
    assert cache.report()["entries"] == 0 and (folder / "notes.txt").exists()


def test_compiles_record_their_nvrtc(small):
    compiler.compile_source("small.cu", arch="sm_90", name_expressions=["k<3>"])
    [(_, meta)] = cache.entries()
    assert meta["nvrtc"] == NVRTC and meta["source_name"] == "small.cu"


def test_cache_command_reports_and_clears(folder, capsys):
    assert cli.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["pyrms kernel cache", f"  directory: {folder} (enabled)", "  entries:   4, 0.0 MiB"]
    assert "  by NVRTC version and arch:" in lines and "  by kernel source and arch:" in lines
    assert f"    NVRTC {NVRTC} sm_90: 1 entries, 0.0 MiB (the installed NVRTC's)" in lines
    assert "    NVRTC 12.8 sm_100: 1 entries, 0.0 MiB (never read by the installed NVRTC)" in lines
    assert "    rms_norm.cu sm_90: 2 entries, 0.0 MiB" in lines and lines[-1] == "  python -m pyrms.cache --clear removes them"
    assert cli.main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out) == cache.report()
    assert cli.main(["--clear"]) == 0
    assert capsys.readouterr().out.startswith(f"pyrms.cache: removed 4 cached kernel files (0.0 MiB) from {folder}")
    assert cache.report()["entries"] == 0 and (folder / "notes.txt").exists()
    assert cli.main([]) == 0
    assert capsys.readouterr().out.splitlines()[2:] == ["  entries:   0, 0.0 MiB"]


def test_python_m_pyrms_cache_runs_without_a_warning(folder):
    # pyrms imports pyrms.cache: the command is pyrms/cache/__main__.py, so runpy never runs an imported module.
    env = child_env(PYRMS_CACHE_DIR=str(folder))
    done = subprocess.run([sys.executable, "-W", "error", "-m", "pyrms.cache"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(f"pyrms kernel cache\n  directory: {folder} (enabled)\n  entries:   4,")
