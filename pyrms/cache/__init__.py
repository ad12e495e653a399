"""On-disk cache of compiled kernels.

One file per key: a magic line, a JSON header (lowered names and metadata), the
CUBIN bytes and a SHA-256 of everything before it. Entries are written to a
temporary file in the same directory and moved into place with ``os.replace``,
so readers see either nothing or a whole entry, even when two processes write
the same key at once or a writer is killed half-way. Anything unreadable (bad
magic, truncated, checksum mismatch, bad JSON) counts as a miss.

``PYRMS_CACHE_DIR`` picks the directory (default ``$XDG_CACHE_HOME/pyrms`` or
``~/.cache/pyrms``); ``PYRMS_DISABLE_CACHE=1`` (or true, yes, on) turns the disk cache off.

``python -m pyrms.cache`` reports what the cache holds (entries and bytes, by NVRTC version and arch and by
kernel source and arch: ``report``); ``python -m pyrms.cache --clear`` removes pyrms's entries (``clear``: only
files named and marked as pyrms's entries, and leftover temporaries). The command is ``pyrms/cache/cli.py``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path

_MAGIC = b"PYRMS-CUBIN-1\n"
_DIGEST = 32
# A temporary file this old belongs to a writer that was killed: no store takes a day.
_STALE_SECONDS = 86400


def enabled() -> bool:
    return os.environ.get("PYRMS_DISABLE_CACHE", "").strip().lower() not in ("1", "true", "yes", "on")


def directory() -> Path:
    """``$PYRMS_CACHE_DIR``, else ``$XDG_CACHE_HOME/pyrms``, else ``~/.cache/pyrms``. A relative
    XDG_CACHE_HOME is ignored, as the XDG base directory specification says."""
    explicit = os.environ.get("PYRMS_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "pyrms")


def _path(key: str) -> Path:
    return directory() / f"{key}.cubin"


def load(key: str) -> tuple[dict, bytes] | None:
    """The (metadata, cubin) stored under ``key``, or None on a miss or an unreadable entry."""
    try:
        blob = _path(key).read_bytes()
    except OSError:
        return None
    if len(blob) < len(_MAGIC) + 8 + _DIGEST or not blob.startswith(_MAGIC):
        return None
    body, digest = blob[:-_DIGEST], blob[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        return None
    offset = len(_MAGIC)
    header_len = int.from_bytes(body[offset:offset + 8], "little")
    header_bytes = body[offset + 8:offset + 8 + header_len]
    if len(header_bytes) != header_len:
        return None
    try:
        meta = json.loads(header_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None
    return meta, body[offset + 8 + header_len:]


def store(key: str, meta: dict, cubin: bytes) -> Path | None:
    """Write an entry atomically; returns its path, or None if the directory is not writable."""
    header = json.dumps({**meta, "key": key}, sort_keys=True).encode("utf-8")
    body = _MAGIC + len(header).to_bytes(8, "little") + header + cubin
    blob = body + hashlib.sha256(body).digest()
    target = _path(key)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=target.parent)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return None
    _sweep_stale_temporaries(target.parent)
    return target


def _sweep_stale_temporaries(folder: Path) -> None:
    """Remove temporary files left by killed writers (stores are rare, so this costs nothing)."""
    cutoff = time.time() - _STALE_SECONDS
    for tmp in folder.glob(".*.tmp"):
        try:
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
        except OSError:  # another process swept it first, or it is not ours to remove
            pass


# An entry's file name: its key, a SHA-256 in hex (compiler.py), then .cubin.
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.cubin")


def entries(folder: Path | None = None) -> list[tuple[Path, dict | None]]:
    """pyrms's entries in the cache directory (or ``folder``): (path, its metadata, or None where the entry is
    unreadable but named and marked as pyrms's), sorted by name. Files of any other name or content are not
    pyrms's and are left out."""
    folder = directory() if folder is None else folder
    found = []
    for path in sorted(folder.glob("*.cubin")) if folder.is_dir() else ():
        if not _ENTRY_NAME.fullmatch(path.name):
            continue
        try:
            with path.open("rb") as f:
                head = f.read(len(_MAGIC) + 8)
                if not head.startswith(_MAGIC):
                    continue
                header = f.read(int.from_bytes(head[len(_MAGIC):], "little"))
            meta = json.loads(header.decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            meta = None
        found.append((path, meta if isinstance(meta, dict) else None))
    return found


def report(folder: Path | None = None) -> dict:
    """What the cache holds: its directory, whether it is enabled, its entries' count and bytes, and both
    by "NVRTC <version> <arch>" (``by_nvrtc``: an NVRTC other than the installed one never reads its entries;
    "NVRTC ?" for entries stored before pyrms recorded it) and by "<kernel source> <arch>" (``by_source``)."""
    folder = directory() if folder is None else folder
    by_nvrtc: dict[str, dict[str, int]] = {}
    by_source: dict[str, dict[str, int]] = {}
    total = 0
    held = entries(folder)
    for path, meta in held:
        size = path.stat().st_size
        total += size
        if meta is None:
            names = ("(unreadable)", "(unreadable)")
        else:
            arch = meta.get("arch", "?")
            names = (f"NVRTC {meta.get('nvrtc', '?')} {arch}", f"{meta.get('source_name', '?')} {arch}")
        for groups, name in zip((by_nvrtc, by_source), names):
            group = groups.setdefault(name, {"entries": 0, "bytes": 0})
            group["entries"] += 1
            group["bytes"] += size
    return {"directory": str(folder), "enabled": enabled(), "entries": len(held), "bytes": total,
            "by_nvrtc": dict(sorted(by_nvrtc.items())), "by_source": dict(sorted(by_source.items()))}


def clear(folder: Path | None = None) -> tuple[int, int]:
    """Remove pyrms's entries and leftover temporaries from the cache directory; (files removed, bytes freed).
    Files that are not pyrms's stay."""
    folder = directory() if folder is None else folder
    removed = freed = 0
    targets = [path for path, _ in entries(folder)] + (list(folder.glob(".*.tmp")) if folder.is_dir() else [])
    for path in targets:
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:  # another process removed it first
            continue
        removed, freed = removed + 1, freed + size
    return removed, freed

