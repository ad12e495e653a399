"""``python -m pyrms.cache``: what the compiled-kernel cache holds, and ``--clear`` to empty it.

The directory, whether the cache is on, its entries and bytes by NVRTC version and arch (entries of an NVRTC
other than the installed one are never read again: ``--clear`` frees them) and by kernel source and arch.
Needs no GPU. ``--json`` prints ``pyrms.cache.report()``; ``--clear`` removes pyrms's entries and nothing
else in the directory (``pyrms.cache.clear``).
"""
from __future__ import annotations

import argparse
import json
from typing import Sequence

from . import clear, directory, report


def _installed_nvrtc() -> str | None:
    """The installed NVRTC's version ("13.0"), or None where it cannot be loaded."""
    try:
        from .. import compiler

        return ".".join(map(str, compiler.nvrtc_version()))
    except Exception:  # the report still lists what is on disk
        return None


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def format_report(held: dict, nvrtc: str | None) -> str:
    """``report()`` as text; ``nvrtc`` (the installed version, or None) marks the groups it reads."""
    state = "enabled" if held["enabled"] else "disabled (PYRMS_DISABLE_CACHE)"
    lines = ["pyrms kernel cache", f"  directory: {held['directory']} ({state})",
             f"  entries:   {held['entries']}, {_size(held['bytes'])}"]
    for title, groups in (("by NVRTC version and arch", held["by_nvrtc"]),
                          ("by kernel source and arch", held["by_source"])):
        if groups:
            lines.append(f"  {title}:")
        for name, group in groups.items():
            mark = ""
            if nvrtc is not None and groups is held["by_nvrtc"] and name != "(unreadable)":
                mark = " (the installed NVRTC's)" if name.split()[1] == nvrtc else " (never read by the installed NVRTC)"
            lines.append(f"    {name}: {group['entries']} entries, {_size(group['bytes'])}{mark}")
    if held["entries"]:
        lines.append("  python -m pyrms.cache --clear removes them")
    return "\n".join(lines)


def clear_and_say(prog: str) -> int:
    """Clear the cache and print what went, as ``prog`` (this command, and ``pyrms.info --clear-cache``)."""
    removed, freed = clear()
    print(f"{prog}: removed {removed} cached kernel file{'s' if removed != 1 else ''} ({_size(freed)}) "
          f"from {directory()}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command; returns its exit status."""
    parser = argparse.ArgumentParser(prog="python -m pyrms.cache", description=(__doc__ or "").split(": ", 1)[1].splitlines()[0])
    parser.add_argument("--json", action="store_true", help="the report as one JSON object")
    parser.add_argument("--clear", action="store_true",
                        help="remove pyrms's compiled kernels from the cache directory (and nothing else there)")
    args = parser.parse_args(argv)
    if args.clear:
        return clear_and_say("pyrms.cache")
    held = report()
    print(json.dumps(held, indent=2) if args.json else format_report(held, _installed_nvrtc()))
    return 0

