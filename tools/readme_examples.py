#!/usr/bin/env python3
"""Run every ```python block of README.md and docs/usage.md, each in a fresh interpreter, from the checkout:
their examples must work as written. Exit status 0 when all ran; prints each block's outcome.

    python -m tools.readme_examples
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md", "docs/usage.md")  # the user's documents with examples to run


def blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def examples() -> list[tuple[str, int, str]]:
    """(document, number of the block in it, code) of every python block of DOCUMENTS."""
    return [(document, i, code) for document in DOCUMENTS
            for i, code in enumerate(blocks((ROOT / document).read_text()), 1)]


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    failed = 0
    found = examples()
    for document, i, code in found:
        # From the checkout's root, whose pyrms ``-c`` then imports first, installed or not.
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
        status = "ok" if done.returncode == 0 else f"FAILED (rc {done.returncode})"
        print(f"{document} python block {i} ({code.splitlines()[0]!r} ...): {status}")
        if done.returncode:
            failed += 1
            print(done.stderr[-3000:])
    print(f"readme_examples: {failed} of {len(found)} blocks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
