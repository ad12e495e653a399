"""Static inspection of PTX and ptxas logs: how wide each kernel's global loads and stores are.

RMSNorm is memory-bound, so the first thing to check about a kernel is that its body moves
16 bytes per instruction (``ld.global.v4.u32``, ``ld.global.nc.v4.u32``, ``st.global.v4.u32``, or
with a cache hint such as the streaming ``ld.global.cs.v4.u32`` / ``st.global.cs.v4.u32``),
and the second that ptxas fitted it in registers without spilling. Both are visible without a
GPU: the first in the PTX, the second in the log of ``--ptxas-options=-v``.

Counts are static (instructions in the PTX text), not executed counts: a 16-byte load inside
the body loop counts once, like a scalar load in the prefix that runs once per row. Accesses
through generic addresses (``ld.u32``, no state space) may also touch global memory; they are
counted apart, since the PTX does not say where they go.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_FUNCTION_RE = re.compile(r"^\s*(?:\.(?:visible|weak|extern)\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$.]+)")
_MEMORY_RE = re.compile(r"^\s*(?:@!?%\w+\s+)?((?:ld|ldu|st)(?:\.[\w:]+)+)\s")
_TYPE_RE = re.compile(r"^(?:[bsuf]|bf)(\d+)(?:x(\d+))?$")
# State spaces other than global: an access naming none of these (or global) is generic.
_OTHER_SPACES = {"shared", "local", "param", "const", "tex"}
_STACK_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


@dataclass(frozen=True)
class MemoryOp:
    """One ld/st instruction that may touch global memory."""

    opcode: str  # as written, e.g. "ld.global.nc.v4.u32"
    line: int  # 1-based line number in the PTX text
    is_load: bool
    space: str  # "global" or "generic"
    lanes: int  # vector lanes: 1, 2, 4 or 8
    width: int  # bytes one thread moves with this instruction

    @property
    def vectorized(self) -> bool:
        return self.lanes > 1


@dataclass(frozen=True)
class PtxFunction:
    """A function with a body in the PTX: a kernel (``.entry``) or a device function (``.func``)."""

    name: str
    kind: str  # "entry" or "func"
    first_line: int  # 1-based, the header line
    last_line: int  # 1-based, the closing brace
    ops: tuple[MemoryOp, ...]
    grid_controls: tuple[tuple[str, int], ...] = ()  # ("wait" | "launch_dependents", line) of griddepcontrol

    def waits_before_memory(self) -> bool:
        """Programmatic dependent launch is safe: griddepcontrol.wait, then .launch_dependents, come
        before the first global load or store (in PTX order; the kernels' prologue is straight-line)."""
        lines = {name: line for name, line in reversed(self.grid_controls)}  # the first of each
        first_access = min((op.line for op in self.ops if op.space == "global"), default=self.last_line)
        return "wait" in lines and "launch_dependents" in lines and \
            lines["wait"] < lines["launch_dependents"] < first_access

    def widths(self, is_load: bool, space: str = "global") -> Counter:
        """Instruction count by access width in bytes."""
        return Counter(op.width for op in self.ops if op.is_load == is_load and op.space == space)

    def vectorized_opcodes(self) -> Counter:
        """Count of each vectorized global opcode (``.v2``/``.v4``/``.v8``, with or without ``.nc``)."""
        return Counter(op.opcode for op in self.ops if op.vectorized and op.space == "global")


@dataclass(frozen=True)
class Resources:
    """What ptxas reported for one function; None where the log did not say."""

    registers: int | None = None
    stack: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    shared: int | None = None
    barriers: int | None = None


def access_width(opcode: str) -> tuple[int, int]:
    """(vector lanes, bytes per thread) of an ld/st opcode: 'ld.global.nc.v4.u32' -> (4, 16)."""
    parts = opcode.split(".")
    lanes = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d+", p)), 1)
    match = _TYPE_RE.match(parts[-1])
    if match is None:  # PTX grammar puts the type last; anything else is a form we do not know
        raise ValueError(f"no PTX type at the end of {opcode!r}")
    bits = int(match.group(1)) * int(match.group(2) or 1)
    return lanes, lanes * bits // 8


def memory_op(text: str, line: int = 0) -> MemoryOp | None:
    """The global or generic ld/st on one PTX line, or None for anything else."""
    match = _MEMORY_RE.match(text)
    if match is None:
        return None
    opcode = match.group(1)
    parts = set(opcode.split(".")[1:])
    if "global" in parts:
        space = "global"
    elif parts & _OTHER_SPACES:
        return None
    else:
        space = "generic"
    lanes, width = access_width(opcode)
    return MemoryOp(opcode, line, not opcode.startswith("st"), space, lanes, width)


_GRID_CONTROL_RE = re.compile(r"\bgriddepcontrol\.(wait|launch_dependents)\b")


def _code(text: str) -> str:
    """A line without its comment and quoted strings, so braces in them are not counted."""
    return re.sub(r'"[^"]*"', '""', text.split("//", 1)[0])


def parse_functions(ptx: str) -> list[PtxFunction]:
    """Every function with a body, in order; declarations (``.extern .func ...;``) are skipped."""
    functions: list[PtxFunction] = []
    header = None  # (kind, name, line) of a header whose body has not opened yet
    body = None  # [kind, name, first line, brace depth, ops, grid controls] while inside a body
    for number, text in enumerate(ptx.splitlines(), 1):
        code = _code(text)
        if body is None:
            found = _FUNCTION_RE.match(code)
            if found:
                header = (found.group(1), found.group(2), number)
            if header is None:
                continue
            if "{" not in code:
                if ";" in code:  # a prototype: no body follows
                    header = None
                continue
            kind, name, first = header
            header = None
            body = [kind, name, first, 0, [], []]
            code = code[code.index("{"):]
        body[3] += code.count("{") - code.count("}")
        op = memory_op(code, number)
        if op is not None:
            body[4].append(op)
        control = _GRID_CONTROL_RE.search(code)
        if control:
            body[5].append((control.group(1), number))
        if body[3] == 0:
            kind, name, first, _, ops, controls = body
            functions.append(PtxFunction(name, kind, first, number, tuple(ops), tuple(controls)))
            body = None
    return functions


def parse_ptxas_log(log: str) -> dict[str, Resources]:
    """Registers, stack, spills, shared memory and barriers per function, from ``ptxas -v`` output.

    ptxas prints "Compiling entry function 'X'" (registers follow on the "Used ..." line) and
    "Function properties for X" (the stack and spill line follows), so each figure is credited
    to the function named last by the matching kind of line.
    """
    found: dict[str, dict] = {}
    compiling = properties = None
    for text in log.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", text):
            compiling = m.group(1)
        elif m := re.search(r"Function properties for (\S+)", text):
            properties = m.group(1)
        elif (m := _STACK_RE.search(text)) and properties:
            stack, stores, loads = map(int, m.groups())
            found.setdefault(properties, {}).update(stack=stack, spill_stores=stores, spill_loads=loads)
        elif (m := _USED_RE.search(text)) and compiling:
            registers, barriers, shared = (None if g is None else int(g) for g in m.groups())
            found.setdefault(compiling, {}).update(registers=registers, barriers=barriers, shared=shared)
    return {name: Resources(**figures) for name, figures in found.items()}


def _widths_line(counts: Counter) -> str:
    """'2 B ×10  4 B ×0  8 B ×0  16 B ×3  (total 13)': the usual widths always, others when present."""
    widths = sorted({2, 4, 8, 16} | set(counts))
    return "  ".join(f"{w} B ×{counts[w]}" for w in widths) + f"  (total {sum(counts.values())})"


def _resources_line(res: Resources | None) -> str:
    if res is None:
        return "not in the ptxas log"
    fields = (("registers", res.registers, ""), ("stack", res.stack, " B"), ("spill stores", res.spill_stores, " B"),
              ("spill loads", res.spill_loads, " B"), ("smem", res.shared, " B"), ("barriers", res.barriers, ""))
    return ", ".join(f"{name} {value}{unit}" for name, value, unit in fields if value is not None)


def format_summary(fn: PtxFunction, resources: Resources | None, label: str | None = None) -> str:
    """A few lines on one function: global accesses by width, the vectorized ones, ptxas figures."""
    lines = [f".{fn.kind} {fn.name}" + (f"\n  = {label}" if label else "")]
    lines.append(f"  global loads : {_widths_line(fn.widths(True))}")
    lines.append(f"  global stores: {_widths_line(fn.widths(False))}")
    vectorized = fn.vectorized_opcodes()
    listed = ", ".join(f"{op} ×{n} ({access_width(op)[1]} B)" for op, n in sorted(vectorized.items()))
    lines.append(f"  vectorized   : {listed or 'none'}")
    generic = sum(1 for op in fn.ops if op.space == "generic")
    if generic:
        lines.append(f"  generic      : {generic} ld/st through generic addresses (may be global)")
    lines.append(f"  ptxas        : {_resources_line(resources)}")
    return "\n".join(lines)


def memory_listing(ptx: str, fn: PtxFunction, context: int = 0) -> str:
    """The function's global ld/st lines with `context` lines around each, grep style.

    Matching lines are marked '>', context lines ':', and '--' separates non-adjacent groups.
    """
    lines = ptx.splitlines()
    hits = {op.line for op in fn.ops if op.space == "global"}
    shown: list[int] = sorted({n for hit in hits
                               for n in range(max(fn.first_line, hit - context), min(fn.last_line, hit + context) + 1)})
    out: list[str] = []
    for i, n in enumerate(shown):
        if i and n != shown[i - 1] + 1:
            out.append("--")
        out.append(f"{n:6d}{'>' if n in hits else ':'} {lines[n - 1].strip()}")
    return "\n".join(out)
