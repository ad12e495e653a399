"""Compiling kernels for sm_90 with ptxas's resource report (-v), and the check every kernel-compiling test makes
of it: exactly the kernels asked for, none spilling or keeping a stack."""
from __future__ import annotations

from pyrms import compiler, ptx_inspect


def compile_with_report(source: str, names) -> compiler.CompiledProgram:
    """``names`` of cuda_src/``source`` compiled for sm_90 now (not from a cache), with the PTX and ptxas's report."""
    return compiler.compile_source(source, arch="sm_90", name_expressions=names, options=["--ptxas-options=-v"],
                                   use_cache=False, want_ptx=True)


def assert_no_spills(program: compiler.CompiledProgram, names) -> dict:
    """Assert that ``program`` holds exactly the kernels ``names`` and that none spills or keeps a stack; returns
    its PTX functions by lowered name (ptx_inspect's), for the caller's checks of each."""
    resources = ptx_inspect.parse_ptxas_log(program.log)
    assert set(program.lowered_names) == set(names)
    for expression, lowered in program.lowered_names.items():
        r = resources[lowered]
        assert (r.spill_stores, r.spill_loads, r.stack) == (0, 0, 0), (expression, r)
    return {fn.name: fn for fn in ptx_inspect.parse_functions(program.ptx)}
