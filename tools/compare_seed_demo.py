#!/usr/bin/env python3
"""Check that ``python -m pyrms.demo --seed N`` prints what the seed's C++ program prints.

Extracts the C++ program from the seed document, patches a copy to call ``srand(N)`` instead of
``srand(time(nullptr))``, builds it with nvcc for this GPU, runs both, and compares line by line.
The demo prints one extra closing line (the max |GPU - CPU|), which is not compared.
Needs a GPU and nvcc. Exit status 0 when every line matches.

    python tools/compare_seed_demo.py --seed-doc .carry/000_a564d65ec8370cc8.txt --seed 42
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOCS = (ROOT / ".carry" / "000_a564d65ec8370cc8.txt", ROOT.parent / "shared" / "seeds" / "000_a564d65ec8370cc8.txt")


def extract_program(doc: str, seed: int) -> str:
    """The complete C++ source that follows the '完整源码' (full source) heading, with srand(seed)."""
    start = doc.index("完整源码") + len("完整源码")
    end = doc.index("nvcc rmsnorm.cu", start)
    code = doc[start:end].strip()
    if "srand(time(nullptr));" not in code:
        raise ValueError("the seed program has no srand(time(nullptr)) to patch")
    return code.replace("srand(time(nullptr));", f"srand({seed});") + "\n"


def gpu_arch() -> str:
    sys.path.insert(0, str(ROOT))
    from pyrms import driver

    return driver.current_device().arch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed-doc", type=Path, default=next((p for p in DEFAULT_DOCS if p.is_file()), DEFAULT_DOCS[0]),
                        help="the seed document holding the C++ program (default: .carry/ or ../shared/seeds/)")
    parser.add_argument("--seed", type=int, default=42, help="srand() seed for both programs (default 42)")
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    args = parser.parse_args()
    if not args.seed_doc.is_file():
        print(f"seed document not found: {args.seed_doc}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "rmsnorm.cu")
        source.write_text(extract_program(args.seed_doc.read_text(encoding="utf-8"), args.seed))
        binary = Path(tmp, "rmsnorm")
        # The seed's own build line, with this GPU's arch.
        build = [args.nvcc, str(source), "-o", str(binary), "-std=c++17", "-O3", f"-arch={gpu_arch()}", "-lcuda"]
        subprocess.run(build, check=True, capture_output=True, text=True)
        cpp = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout.splitlines()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    demo = subprocess.run([sys.executable, "-m", "pyrms.demo", "--seed", str(args.seed)], check=True,
                          capture_output=True, text=True, env=env).stdout.splitlines()

    mismatches = [(i + 1, c, d) for i, (c, d) in enumerate(zip(cpp, demo + [""] * len(cpp))) if c != d]
    print(f"C++ seed program: {len(cpp)} lines; pyrms.demo: {len(demo)} lines "
          f"(+1 closing line expected: {demo[-1] if demo else '-'})")
    for line, c, d in mismatches[:20]:
        print(f"line {line} differs:\n  C++ : {c}\n  demo: {d}")
    if mismatches or len(demo) != len(cpp) + 1:
        print(f"FAIL: {len(mismatches)} of {len(cpp)} lines differ")
        return 1
    print(f"OK: all {len(cpp)} lines of the C++ program's output equal the demo's (srand({args.seed}))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
