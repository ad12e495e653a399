#!/usr/bin/env python3
"""Check that ``python -m pyrms.demo --seed N`` prints what the seed's C++ program prints.

Extracts the C++ program from the seed document, patches a copy to call ``srand(N)`` instead of
``srand(time(nullptr))``, builds it with nvcc for this GPU, runs both, and compares line by line.
The demo's standard output must equal the C++ program's exactly (its max |GPU - CPU| line goes to
standard error). Needs a GPU and nvcc. Exit status 0 when the two outputs are identical; with
``--out DIR`` both outputs are kept there (``cpp.txt``, ``demo.txt``) for ``diff``.

    python tools/compare_seed_demo.py --seed-doc .carry/000_a564d65ec8370cc8.txt --seed 42
"""
from __future__ import annotations

import argparse
import itertools
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
    parser.add_argument("--out", type=Path, default=None, help="keep both outputs in this directory")
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
        cpp = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    demo = subprocess.run([sys.executable, "-m", "pyrms.demo", "--seed", str(args.seed)], check=True,
                          capture_output=True, text=True, env=env).stdout
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cpp.txt").write_text(cpp)
        (args.out / "demo.txt").write_text(demo)

    cpp_lines, demo_lines = cpp.splitlines(), demo.splitlines()
    print(f"C++ seed program: {len(cpp_lines)} lines; pyrms.demo: {len(demo_lines)} lines")
    pairs = enumerate(itertools.zip_longest(cpp_lines, demo_lines, fillvalue="<missing>"), 1)
    for line, c, d in itertools.islice(((n, c, d) for n, (c, d) in pairs if c != d), 20):
        print(f"line {line} differs:\n  C++ : {c}\n  demo: {d}")
    if demo != cpp:
        print("FAIL: the outputs differ")
        return 1
    print(f"OK: pyrms.demo's output is identical to the C++ program's: {len(cpp_lines)} lines (srand({args.seed}))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
