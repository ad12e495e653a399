"""What the cache holds and clearing it (pyrms.cache.report/clear, python -m pyrms.info --clear-cache): only
pyrms's own entries are counted and removed; other files in the directory stay."""
import json

import pytest

from pyrms import cache, info


def _entry(key: str, source: str, arch: str, nbytes: int) -> None:
    assert cache.store(key, {"source_name": source, "arch": arch}, b"\0" * nbytes) is not None


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYRMS_DISABLE_CACHE", raising=False)
    _entry("a" * 64, "rms_norm.cu", "sm_90", 1000)
    _entry("b" * 64, "rms_norm.cu", "sm_90", 2000)
    _entry("c" * 64, "layer_norm.cu", "sm_100", 10)
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
    assert cache.report(folder / "missing") == {"directory": str(folder / "missing"), "enabled": True, "entries": 0,
                                                "bytes": 0, "by_source": {}}


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
