#!/usr/bin/env python3
"""Check that ``python -m pyrms.demo --seed N`` prints what the seed's C++ program prints.

Takes the seed's C++ program: its source file, or the seed document that holds it (the source
after the '完整源码' heading, up to its nvcc line). This repository does not ship either: the seed
is "vLLM RMSNorm算子实现解析", a Chinese write-up of vLLM's RMSNorm kernel with a complete C++
program (the project keeps it as 000_a564d65ec8370cc8.txt beside the checkout, in ../shared/seeds/).
Patches a copy to call ``srand(N)`` instead of ``srand(time(nullptr))``, builds it with nvcc for this
GPU, runs both, and compares: the demo's standard output must equal the C++ program's exactly (its
max |GPU - CPU| line goes to standard error); ``--out DIR`` keeps both (``cpp.txt``, ``demo.txt``) for
``diff``. Needs a GPU and nvcc. Exit status 0 when the outputs are identical, 1 when they differ, 2
when the program, nvcc or a GPU is missing.

    python -m tools.compare_seed_demo ../shared/seeds/000_a564d65ec8370cc8.txt --seed 42
    python -m tools.compare_seed_demo rmsnorm.cu --seed 42
"""
from __future__ import annotations

import argparse
import itertools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC_HEADING = "完整源码"  # "full source": the heading before the program in the seed document
WHERE = ("the seed's C++ program: pass its source (rmsnorm.cu) or the seed document holding it "
         "(000_a564d65ec8370cc8.txt, \"vLLM RMSNorm算子实现解析\"); this repository does not ship them")


def patch_program(code: str, seed: int) -> str:
    """The C++ source with srand(seed) in place of srand(time(nullptr))."""
    if "srand(time(nullptr));" not in code:
        raise ValueError("the seed program has no srand(time(nullptr)) to patch")
    return code.replace("srand(time(nullptr));", f"srand({seed});") + "\n"


def extract_program(doc: str, seed: int) -> str:
    """The complete C++ source that follows the '完整源码' (full source) heading, with srand(seed)."""
    start = doc.index(DOC_HEADING) + len(DOC_HEADING)
    end = doc.index("nvcc rmsnorm.cu", start)
    return patch_program(doc[start:end].strip(), seed)


def load_program(path: Path, seed: int) -> str:
    """The program from a seed document or a C++ source file, patched; ValueError if it is neither."""
    text = path.read_text(encoding="utf-8")
    if DOC_HEADING in text:
        return extract_program(text, seed)
    if "rms_norm_kernel" not in text or "int main" not in text:
        raise ValueError(f"{path} is neither the seed document nor the seed's C++ program (no rms_norm_kernel "
                         "and main())")
    return patch_program(text.strip(), seed)


def gpu_arch() -> str:
    from pyrms import driver

    return driver.current_device().arch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("program", type=Path, nargs="?",
                        help="the seed's C++ source (rmsnorm.cu) or the seed document that holds it")
    parser.add_argument("--seed", type=int, default=42, help="srand() seed for both programs (default 42)")
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    parser.add_argument("--out", type=Path, default=None, help="keep both outputs in this directory")
    args = parser.parse_args(argv)
    if args.program is None:
        print(f"compare_seed_demo: needs {WHERE}", file=sys.stderr)
        return 2
    if not args.program.is_file():
        print(f"compare_seed_demo: {args.program} not found; needs {WHERE}", file=sys.stderr)
        return 2
    try:
        program = load_program(args.program, args.seed)
    except (ValueError, UnicodeDecodeError) as exc:
        print(f"compare_seed_demo: {exc}", file=sys.stderr)
        return 2
    if not Path(args.nvcc).is_file():
        print(f"compare_seed_demo: nvcc not found at {args.nvcc}; pass --nvcc", file=sys.stderr)
        return 2
    try:
        arch = gpu_arch()
    except Exception as exc:  # NoDriverError, no device
        print(f"compare_seed_demo: needs a GPU: {exc}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "rmsnorm.cu")
        source.write_text(program)
        binary = Path(tmp, "rmsnorm")
        # The seed's own build line, with this GPU's arch.
        build = [args.nvcc, str(source), "-o", str(binary), "-std=c++17", "-O3", f"-arch={arch}", "-lcuda"]
        subprocess.run(build, check=True, capture_output=True, text=True)
        cpp = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    # From the checkout's root, whose pyrms ``-m`` then imports first, installed or not.
    demo = subprocess.run([sys.executable, "-m", "pyrms.demo", "--seed", str(args.seed)], check=True,
                          capture_output=True, text=True, cwd=ROOT).stdout
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
