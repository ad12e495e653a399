"""PTX inspection (pyrms.ptx_inspect) on hand-written PTX, and tools/ptx_dump.py end to end (no GPU).

The hand-written snippets hold every form the parser has to tell apart: vector and scalar,
.nc and plain, predicated, nested scopes, a prototype without a body, generic and shared
accesses, so the expected counts below are exact.
"""
import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pyrms import dtypes, ptx_inspect
from pyrms.ptx_inspect import Resources

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "ptx_dump.py"

PTX = """\
.version 8.8
.target sm_90
.address_size 64

.global .align 4 .u32 some_global = 1;

	// .globl	first
.visible .entry first(
	.param .u64 first_param_0
)
{
	.reg .b32 	%r<9>;
	ld.param.u64 	%rd1, [first_param_0];
	ld.global.nc.v4.u32 	{%r1, %r2, %r3, %r4}, [%rd1];
	ld.global.v2.u32 	{%r5, %r6}, [%rd1+16];
	@%p1 ld.global.u16 	%rs1, [%rd1+24];
	ld.global.nc.v2.u16 	{%rs2, %rs3}, [%rd1+26];
	ld.global.f32 	%f1, [%rd1+32];
	st.global.v4.u32 	[%rd2], {%r1, %r2, %r3, %r4};
	@!%p2 st.global.b16 	[%rd2+16], %rs1;
	ld.shared.f32 	%f2, [%r7];
	st.shared.f32 	[%r7], %f2;
	ld.u32 	%r8, [%rd3];
	{ // a nested scope: its closing brace must not end the function
	.reg .b16 %tmp;
	st.global.v2.f32 	[%rd2+20], {%f1, %f2};
	}
	ret;
}
.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.weak .entry second(
	.param .u64 second_param_0
)
.maxntid 256, 1, 1
{
	ld.global.u8 	%rs1, [%rd1];
	st.global.u64 	[%rd1], %rd2;
	ret;
}
"""

LOG = """\
ptxas info    : 4 bytes gmem
ptxas info    : Compiling entry function 'first' for 'sm_90'
ptxas info    : Function properties for first
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 128 bytes smem
ptxas info    : Compile time = 12.345 ms
ptxas info    : Function properties for helper
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'second' for 'sm_90'
ptxas info    : Function properties for second
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers
"""


@pytest.mark.parametrize("opcode, lanes, width", [
    ("ld.global.nc.v4.u32", 4, 16),
    ("ld.global.v4.u32", 4, 16),
    ("ld.global.v2.u32", 2, 8),
    ("ld.global.nc.v2.u16", 2, 4),
    ("ld.global.u16", 1, 2),
    ("ld.global.f32", 1, 4),
    ("ld.global.v2.f64", 2, 16),
    ("ld.global.b128", 1, 16),
    ("ld.global.v8.f32", 8, 32),
    ("ld.global.nc.L1::no_allocate.L2::128B.v4.f32", 4, 16),
    ("ld.relaxed.gpu.global.u64", 1, 8),
    ("st.global.v4.u32", 4, 16),
    ("ld.global.cs.v4.u32", 4, 16),
    ("st.global.cs.v4.u32", 4, 16),
    ("st.global.b16", 1, 2),
    ("st.global.u8", 1, 1),
])
def test_access_width(opcode, lanes, width):
    assert ptx_inspect.access_width(opcode) == (lanes, width)


def test_access_width_rejects_a_form_without_a_type():
    with pytest.raises(ValueError, match="ld.global.v4"):
        ptx_inspect.access_width("ld.global.v4")


def test_memory_op_classifies_lines():
    op = ptx_inspect.memory_op("\t@%p3 ld.global.nc.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd1];", 7)
    assert op == ptx_inspect.MemoryOp("ld.global.nc.v4.u32", 7, True, "global", 4, 16)
    assert op.vectorized
    assert ptx_inspect.memory_op("\tst.global.b16 \t[%rd2], %rs1;").is_load is False
    assert ptx_inspect.memory_op("\tld.u32 \t%r8, [%rd3];").space == "generic"
    for other in ("\tld.shared.f32 \t%f2, [%r7];", "\tld.param.u64 \t%rd1, [p];", "\tcvta.to.global.u64 \t%rd1, %rd2;",
                  ".global .align 4 .u32 some_global = 1;", "\tatom.global.add.u32 \t%r1, [%rd1], 1;"):
        assert ptx_inspect.memory_op(other) is None, other


def test_parse_functions_counts_exactly():
    first, second = ptx_inspect.parse_functions(PTX)
    assert (first.name, first.kind, first.first_line, first.last_line) == ("first", "entry", 8, 29)
    assert (second.name, second.kind, second.first_line, second.last_line) == ("second", "entry", 36, 44)
    assert first.widths(True) == Counter({16: 1, 8: 1, 2: 1, 4: 2})
    assert first.widths(False) == Counter({16: 1, 2: 1, 8: 1})
    assert first.widths(True, "generic") == Counter({4: 1})
    assert first.vectorized_opcodes() == Counter({"ld.global.nc.v4.u32": 1, "ld.global.v2.u32": 1,
                                                  "ld.global.nc.v2.u16": 1, "st.global.v4.u32": 1,
                                                  "st.global.v2.f32": 1})
    assert [op.line for op in first.ops] == [14, 15, 16, 17, 18, 19, 20, 23, 26]
    assert second.widths(True) == Counter({1: 1}) and second.widths(False) == Counter({8: 1})
    assert second.vectorized_opcodes() == Counter()


def test_parse_ptxas_log():
    assert ptx_inspect.parse_ptxas_log(LOG) == {
        "first": Resources(registers=64, stack=16, spill_stores=8, spill_loads=4, shared=128, barriers=1),
        "helper": Resources(stack=0, spill_stores=0, spill_loads=0),
        "second": Resources(registers=12, stack=0, spill_stores=0, spill_loads=0),
    }


def test_format_summary():
    first = ptx_inspect.parse_functions(PTX)[0]
    resources = ptx_inspect.parse_ptxas_log(LOG)["first"]
    assert ptx_inspect.format_summary(first, resources, "first<int>") == (
        ".entry first\n"
        "  = first<int>\n"
        "  global loads : 2 B ×1  4 B ×2  8 B ×1  16 B ×1  (total 5)\n"
        "  global stores: 2 B ×1  4 B ×0  8 B ×1  16 B ×1  (total 3)\n"
        "  vectorized   : ld.global.nc.v2.u16 ×1 (4 B), ld.global.nc.v4.u32 ×1 (16 B), ld.global.v2.u32 ×1 (8 B), "
        "st.global.v2.f32 ×1 (8 B), st.global.v4.u32 ×1 (16 B)\n"
        "  generic      : 1 ld/st through generic addresses (may be global)\n"
        "  ptxas        : registers 64, stack 16 B, spill stores 8 B, spill loads 4 B, smem 128 B, barriers 1"
    )
    second = ptx_inspect.parse_functions(PTX)[1]
    assert ptx_inspect.format_summary(second, None).splitlines()[1:] == [
        "  global loads : 1 B ×1  2 B ×0  4 B ×0  8 B ×0  16 B ×0  (total 1)",
        "  global stores: 2 B ×0  4 B ×0  8 B ×1  16 B ×0  (total 1)",
        "  vectorized   : none",
        "  ptxas        : not in the ptxas log",
    ]


def test_memory_listing_with_context():
    first, second = ptx_inspect.parse_functions(PTX)
    assert ptx_inspect.memory_listing(PTX, second, 1) == (
        "    40: {\n"
        "    41> ld.global.u8 \t%rs1, [%rd1];\n"
        "    42> st.global.u64 \t[%rd1], %rd2;\n"
        "    43: ret;"
    )
    # Context stops at the function's own lines; '--' separates groups that do not touch.
    assert ptx_inspect.memory_listing(PTX, first, 0).splitlines()[-3:] == [
        "    20> @!%p2 st.global.b16 \t[%rd2+16], %rs1;",
        "--",
        "    26> st.global.v2.f32 \t[%rd2+20], {%f1, %f2};",
    ]


# --- the command line ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tool():
    """tools/ptx_dump.py imported as a module of the checkout's tools package."""
    return importlib.import_module("tools.ptx_dump")


def _run(args, tmp_path, path_prefix=None):
    """The CLI as the README runs it, ``python tools/ptx_dump.py``, from another directory, with a throwaway
    cache; PYTHONPATH names the checkout, as its ``pip install -e .`` would (whatever else is installed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYRMS_ARCH", "PYRMS_DISABLE_CACHE")}
    env["PYTHONPATH"] = str(ROOT)
    env["PYRMS_CACHE_DIR"] = str(tmp_path / "cache")
    if path_prefix:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([sys.executable, str(TOOL), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_seed_kernel_end_to_end(tmp_path):
    # A stand-in cuobjdump first on PATH: proves the SASS step runs the tool on the CUBIN and keeps its output.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "cuobjdump"
    fake.write_text('#!/bin/sh\necho "FAKE SASS $@"\n')
    fake.chmod(0o755)
    done = _run(["--kernel", "seed_rms_norm", "--dtype", "bfloat16", "--hidden", "5120", "--arch", "sm_90",
                 "--out", "dump", "--show-loads", "--context", "1"], tmp_path, fake_bin)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    stem = tmp_path / "dump" / "seed_rms_norm-bfloat16-h5120-sm_90"
    lowered = "_ZN11transformer15rms_norm_kernelI13__nv_bfloat16Li8ELi5120ELi2ELi640EEEvPT_PKS2_S5_f"
    assert f".entry {lowered}\n  = transformer::rms_norm_kernel<__nv_bfloat16, 8, 5120, 2, 640>\n" in out
    loads = re.search(r"global loads : .*16 B ×(\d+)", out)
    stores = re.search(r"global stores: .*16 B ×(\d+)", out)
    assert loads and int(loads.group(1)) >= 1, out
    assert stores and int(stores.group(1)) >= 1, out
    assert re.search(r"vectorized   : .*ld\.global(\.nc)?\.v4\.u32 ×\d+ \(16 B\)", out)
    assert re.search(r"ptxas        : registers \d+, stack 0 B, spill stores 0 B, spill loads 0 B", out)
    assert re.search(r"^\s+\d+> ld\.global(\.nc)?\.v4\.u32\s", out, re.MULTILINE)  # the --show-loads listing
    assert f"PTX:       {stem}.ptx" in out
    assert f".entry {lowered}(" in Path(f"{stem}.ptx").read_text()
    assert Path(f"{stem}.cubin").read_bytes()[:4] == b"\x7fELF"
    assert f"Compiling entry function '{lowered}' for 'sm_90'" in Path(f"{stem}.ptxas.txt").read_text()
    assert Path(f"{stem}.sass").read_text() == f"FAKE SASS --dump-sass {stem}.cubin\n"
    assert "Traceback" not in done.stderr


def test_cli_production_kernel_has_16_byte_loads_and_stores(tool, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYRMS_ARCH", raising=False)
    assert tool.main(["--out", str(tmp_path / "dump"), "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "= pyrms::rms_norm_kernel<__nv_bfloat16, 4, 1, false, false, false, false>" in out  # the plan for hidden 5120
    assert re.search(r"global loads : .*16 B ×[1-9]", out), out
    assert re.search(r"global stores: .*16 B ×[1-9]", out), out
    assert re.search(r"st\.global\.cs\.v4\.u32 ×\d+ \(16 B\)", out), out  # streaming stores (rms_norm.cu)
    assert re.search(r"ld\.global\.cs\.v4\.u32 ×\d+ \(16 B\)", out), out  # and the cached input vectors
    assert (tmp_path / "dump" / "rms_norm-bfloat16-h5120-sm_90-cache4.ptx").is_file()
    assert not (tmp_path / "cache").exists()  # --no-cache


def test_cli_help(tmp_path):
    done = _run(["--help"], tmp_path)
    assert done.returncode == 0
    for option in ("--kernel", "--dtype", "--hidden", "--arch", "--variant", "--out", "--show-loads",
                   "--context", "--no-cache"):
        assert option in done.stdout


@pytest.mark.parametrize("args, names", [
    (["--dtype", "int8"], "int8"),
    (["--hidden", "0"], "'0'"),
    (["--hidden", "-5"], "'-5'"),
    (["--hidden", "abc"], "'abc'"),
    (["--arch", "banana"], "'banana'"),
    (["--arch", "sm_1"], "'sm_1'"),
    (["--kernel", "nope"], "'nope'"),
    (["--variant", "cache=3"], "'3'"),
    (["--variant", "fast=1"], "'fast'"),
    (["--kernel", "seed_rms_norm", "--variant", "gemma"], "no variants"),
    (["--context", "-1"], "'-1'"),
])
def test_cli_bad_arguments_one_line(tool, args, names, capsys):
    # In this process (a fresh one per case costs a second of imports; test_cli_help starts the script itself):
    # any exception but argparse's exit fails the test, as a traceback would.
    with pytest.raises(SystemExit) as exited:
        tool.main(args)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ptx_dump.py: error: ") and names in lines[0]
    assert out == ""


def test_resolve_variant_and_stem(tool):
    family = tool.FAMILIES["rms_norm"]
    planned = {"few": False, "aligned": False, "gemma": False, "round_once": False, "weight": "same", "out": "same"}
    assert tool.resolve_variant(family, None, dtypes.BFLOAT16, 5120) == {"cache": 4, **planned}
    assert tool.resolve_variant(family, None, dtypes.BFLOAT16, 65536) == {"cache": 0, **planned}
    variant = tool.resolve_variant(family, "cache=0, gemma,round_once=off", dtypes.FLOAT16, 5120)
    assert variant == {"cache": 0, "few": False, "aligned": False, "gemma": True, "round_once": False, "weight": "same",
                       "out": "same"}
    stem = tool.output_stem("rms_norm", dtypes.FLOAT16, 5120, "sm_90", variant)
    assert stem == "rms_norm-float16-h5120-sm_90-cache0-gemma"
    mixed = tool.resolve_variant(family, "out=float32,weight=float32", dtypes.BFLOAT16, 5120)
    assert tool.output_stem("rms_norm", dtypes.BFLOAT16, 5120, "sm_90", mixed) == \
        "rms_norm-bfloat16-h5120-sm_90-cache4-weightfloat32-outfloat32"
    assert family.expression(dtypes.BFLOAT16, 5120, mixed).endswith(", float, float>")
    few = tool.resolve_variant(family, "few", dtypes.BFLOAT16, 5120)
    assert tool.output_stem("rms_norm", dtypes.BFLOAT16, 5120, "sm_90", few) == "rms_norm-bfloat16-h5120-sm_90-cache4-few"
    assert family.expression(dtypes.BFLOAT16, 5120, few) == \
        "pyrms::rms_norm_kernel<__nv_bfloat16, 4, 4, false, false, true, false>"
    aligned = tool.resolve_variant(family, "few,aligned", dtypes.BFLOAT16, 5120)
    assert family.expression(dtypes.BFLOAT16, 5120, aligned) == \
        "pyrms::rms_norm_kernel<__nv_bfloat16, 4, 4, false, false, true, true>"
    with pytest.raises(ValueError, match="aligned is a variant of the few-row kernel"):
        family.expression(dtypes.BFLOAT16, 5120, tool.resolve_variant(family, "aligned", dtypes.BFLOAT16, 5120))
    seed = tool.FAMILIES["seed_rms_norm"].expression(dtypes.FLOAT32, 1000, {})
    assert seed == "transformer::rms_norm_kernel<float, 4, 1000, 2, 250>"  # VEC = gcd(4, 1000), BLOCK = 1000 / 4


def test_sass_tool_lookup(tool, tmp_path):
    assert tool.find_sass_tool(str(tmp_path)) is None
    assert tool.write_sass(tmp_path / "k.cubin", None) == (
        "SASS skipped: neither cuobjdump nor nvdisasm found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    nvdisasm = tmp_path / "nvdisasm"
    nvdisasm.write_text("#!/bin/sh\nexit 3\n")
    nvdisasm.chmod(0o755)
    assert tool.find_sass_tool(str(tmp_path)) == nvdisasm
    failed = tool.write_sass(tmp_path / "k.cubin", nvdisasm)
    assert failed == f"SASS failed: {nvdisasm} exited with status 3: no message"


def _entry(*lines: str) -> ptx_inspect.PtxFunction:
    return ptx_inspect.parse_functions("\n".join([".visible .entry k(", ")", "{", *lines, "}"]))[0]


def test_waits_before_memory():
    wait, trigger = "\tgriddepcontrol.wait;", "\tgriddepcontrol.launch_dependents;"
    load, store = "\tld.global.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd1];", "\tst.global.u32 \t[%rd2], %r1;"
    assert _entry(wait, trigger, load, store).waits_before_memory()
    assert _entry(wait, trigger).waits_before_memory()  # no memory at all
    assert not _entry(load, wait, trigger, store).waits_before_memory()  # read before the wait
    assert not _entry(store, wait, trigger).waits_before_memory()  # written before the wait
    assert not _entry(trigger, wait, load).waits_before_memory()  # triggered before waiting
    assert not _entry(wait, load).waits_before_memory()  # never lets the next kernel launch early
    assert not _entry(load).waits_before_memory()


def test_quant_families_select_mode_and_output(tool):
    """The quantizing kernels' variants: out_dtype and mode beside the row family's; per_group names the group
    kernel (no MODE argument), fused the fused add's, whose fp32_sum is its FP32_SUM kernels."""
    family = tool.FAMILIES["rms_norm_quant"]
    default = tool.resolve_variant(family, None, dtypes.BFLOAT16, 5120)
    assert default == {"cache": 4, "few": False, "aligned": False, "round_input": False, "norm_out": False,
                       "out_dtype": "float8_e4m3fn", "mode": "static"}
    assert family.expression(dtypes.BFLOAT16, 5120, default) == \
        "pyrms::rms_norm_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, 0, false, false, 4, 1, false, false>"
    v = tool.resolve_variant(tool.FAMILIES["fused_add_rms_norm_quant"], "mode=per_group,out_dtype=int8,few,round_input",
                             dtypes.FLOAT32, 7168)
    assert tool.FAMILIES["fused_add_rms_norm_quant"].expression(dtypes.FLOAT32, 7168, v) == \
        "pyrms::fused_add_rms_norm_group_quant_kernel<float, signed char, true, false, false, 4, 2, true, false>"
    fp32_sum = tool.resolve_variant(tool.FAMILIES["fused_add_rms_norm_quant"], "mode=per_token,fp32_sum",
                                    dtypes.BFLOAT16, 5120)
    assert tool.FAMILIES["fused_add_rms_norm_quant"].expression(dtypes.BFLOAT16, 5120, fp32_sum) == \
        "pyrms::fused_add_rms_norm_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, 1, false, false, true, 4, 1, false, false>"
    assert "fp32_sum" not in default  # the plain op has one sum: none
    with_norm = tool.resolve_variant(family, "mode=per_token,norm_out", dtypes.BFLOAT16, 5120)
    assert family.expression(dtypes.BFLOAT16, 5120, with_norm) == \
        "pyrms::rms_norm_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, 1, false, true, 4, 1, false, false>"
    assert tool.output_stem("rms_norm_quant", dtypes.FLOAT32, 7168, "sm_90", v) == \
        "rms_norm_quant-float32-h7168-sm_90-cache4-few-round_input-out_dtypeint8-modeper_group"
    for text, message in (("mode=per_block", "expected mode=static|per_token|per_group"),
                          ("out_dtype=bf16", "quantized output dtype 'bf16' is not supported")):
        with pytest.raises(ValueError, match=message):
            tool.resolve_variant(family, text, dtypes.BFLOAT16, 5120)
