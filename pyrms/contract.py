"""A kernel's contract, read from its ``.cu`` source: the template parameters and the launch parameters.

The ``template <...> __global__ void name(...)`` declaration in ``cuda_src/`` is the one place where a
kernel's parameters are written. The NVRTC name expression of an instantiation (``Contract.expression``)
and the argument kinds the launch packs (``Contract.signature``) are derived from it here, so a plan and an
op never repeat the parameter order. Pure and cached: reading a source costs a regex pass, once per
process.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from . import compiler

# Launch argument kinds (pyrms.launch.ARG_KINDS) by the C++ type of a kernel parameter; every pointer is "ptr".
_SCALARS = {"float": "f32", "int": "i32", "long long": "i64", "unsigned": "u32", "unsigned int": "u32"}
_DECLARATION = re.compile(r"template\s*<(?P<template>[^{;]*?)>\s*__global__\s+void\s+")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_NAMESPACE = re.compile(r"\bnamespace\s+(\w+)\s*\{")


@dataclass(frozen=True)
class TemplateParam:
    name: str
    kind: str  # "typename", "int" or "bool"
    default: str | None  # the default as written ("T": the value of another parameter), or None


@dataclass(frozen=True)
class Contract:
    """One ``__global__`` kernel template: ``namespace::name<template...>(params...)``."""

    source: str
    namespace: str
    name: str
    template: tuple[TemplateParam, ...]
    params: tuple[tuple[str, str], ...]  # (name, launch kind)

    @property
    def signature(self) -> tuple[str, ...]:
        """The launch argument kinds, in parameter order (pyrms.launch packs them)."""
        return tuple(kind for _, kind in self.params)

    def expression(self, **values) -> str:
        """The NVRTC name expression of the instantiation with these template arguments, by parameter name:
        types as C++ type names (or anything with a ``ctype``), ints, bools. A parameter with a default may
        be left out; trailing arguments equal to their defaults are not written, so an expression is spelled
        one way only. KeyError naming a missing or unknown parameter."""
        unknown = set(values) - {p.name for p in self.template}
        if unknown:
            raise KeyError(f"{self.name} has no template parameter {sorted(unknown)[0]!r}; "
                           f"its parameters: {', '.join(p.name for p in self.template)}")
        spelled: dict[str, str] = {}
        for p in self.template:
            if p.name in values:
                spelled[p.name] = _spell(p, values[p.name])
            elif p.default is not None:
                spelled[p.name] = spelled.get(p.default, p.default)
            else:
                raise KeyError(f"{self.name}: template parameter {p.name!r} has no default and was not given")
        args = [spelled[p.name] for p in self.template]
        while self.template and len(args) > 0:
            p = self.template[len(args) - 1]
            if p.default is None or args[-1] != spelled.get(p.default, p.default):
                break
            args.pop()
        return f"{self.namespace}::{self.name}<{', '.join(args)}>"


class KernelPlan:
    """What a plan of one kernel derives from its contract: a plan class names its kernel's ``source`` and
    ``kernel`` (attributes or properties), and gets the contract and the launch signature from them."""

    @property
    def contract(self) -> Contract:
        """The kernel's template and launch parameters, as its .cu declares them."""
        return contract(self.source, self.kernel)

    @property
    def signature(self) -> tuple[str, ...]:
        """The launch argument kinds of the kernel."""
        return self.contract.signature


def _spell(p: TemplateParam, value) -> str:
    if p.kind == "bool":
        if type(value) is not bool:
            raise TypeError(f"template parameter {p.name} is a bool, got {value!r}")
        return "true" if value else "false"
    if p.kind == "typename":
        return getattr(value, "ctype", value)
    if type(value) is not int:
        raise TypeError(f"template parameter {p.name} is an int, got {value!r}")
    return str(value)


def _closing(text: str, start: int) -> int:
    """The index just past the parenthesis that closes the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    raise ValueError("unbalanced parentheses")


def _split(text: str) -> list[str]:
    """``text`` split at the commas outside any <...> or (...): one item per declaration."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(c, 0)
        if c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item.strip()]


def _template_params(text: str) -> tuple[TemplateParam, ...]:
    params = []
    for item in _split(text):
        declaration, _, default = item.partition("=")
        kind, name = declaration.split()[-2:]
        params.append(TemplateParam(name, "typename" if kind in ("typename", "class") else kind,
                                    default.strip() or None))
    return tuple(params)


def _launch_kind(declaration: str) -> str:
    declaration = " ".join(declaration.replace("__restrict__", "").split())
    if "*" in declaration:  # any pointer, also to a template type (const Bias<T, W>*)
        return "ptr"
    type_name = declaration.rsplit(" ", 1)[0].removeprefix("const ")
    try:
        return _SCALARS[type_name]
    except KeyError:
        raise ValueError(f"no launch kind for a kernel parameter of type {type_name!r}") from None


def parse(text: str, source: str = "") -> dict[str, Contract]:
    """Every ``__global__`` kernel template of a source text, by name."""
    text = _COMMENT.sub(" ", text)
    found = {}
    for match in _DECLARATION.finditer(text):
        at = match.end()
        if text.startswith("__launch_bounds__", at):
            at = _closing(text, text.index("(", at))
        name_match = re.compile(r"\s*(\w+)\s*\(").match(text, at)
        if name_match is None:
            continue
        open_at = name_match.end() - 1
        params_text = text[open_at + 1:_closing(text, open_at) - 1]
        namespaces = _NAMESPACE.findall(text, 0, match.start())
        params = tuple((item.split()[-1], _launch_kind(item)) for item in _split(params_text))
        name = name_match.group(1)
        found[name] = Contract(source, namespaces[-1] if namespaces else "", name,
                               _template_params(match.group("template")), params)
    return found


@functools.lru_cache(maxsize=None)
def _of_source(source: str) -> dict[str, Contract]:
    return parse((compiler.source_dir() / source).read_text(encoding="utf-8"), source)


def contract(source: str, name: str) -> Contract:
    """The contract of kernel template ``name`` in ``cuda_src/<source>``; KeyError naming the kernels there."""
    kernels = _of_source(source)
    try:
        return kernels[name]
    except KeyError:
        raise KeyError(f"{source} has no __global__ kernel template {name!r}; it has {', '.join(kernels)}") from None
