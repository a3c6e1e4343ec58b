"""Writing LLVM IR as text: unique names, literals, a function body writer, module parts.

Codegen emits textual LLVM IR rather than building it with ``llvmlite.ir``: the builder
costs about 15 us per instruction in Python, string formatting about 1 us, and LLVM parses
text in a fraction of the build time (DESIGN.md, "Compile cost").
"""

from __future__ import annotations

import re
import struct

import numpy as np

from ..ir import dtype as dt

_NAME_OK = re.compile(r"[^-a-zA-Z$._0-9]")


def sanitize(hint: str) -> str:
    """A legal LLVM identifier body from a name hint (``"ff.outer.inner"`` stays as is)."""
    s = _NAME_OK.sub("_", hint) or "v"
    if s[0].isdigit() or s[0] == "-":
        s = "_" + s
    return s


class NameTable:
    """Hands out identifiers unique within one scope: ``i``, ``i_1``, ``i_2``, ..."""

    __slots__ = ("_used", "_next")

    def __init__(self):
        self._used: set[str] = set()
        self._next: dict[str, int] = {}

    def fresh(self, hint: str) -> str:
        base = sanitize(hint)
        name = base
        n = self._next.get(base, 0)
        while name in self._used:
            n += 1
            name = f"{base}_{n}"
        self._next[base] = n
        self._used.add(name)
        return name


# literals ------------------------------------------------------------------------------


def float_literal(value: float, llvm_type: str) -> str:
    """An exact LLVM literal of ``value`` rounded to ``llvm_type`` (hex, so never inexact)."""
    if llvm_type == "double":
        return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"
    if llvm_type == "float":
        as_f32 = float(np.float32(value))
        return f"0x{struct.unpack('<Q', struct.pack('<d', as_f32))[0]:016X}"
    if llvm_type == "half":
        return f"0xH{int(np.array(value, dtype=np.float16).view(np.uint16)):04X}"
    if llvm_type == "bfloat":
        return f"0xR{int(dt.bfloat16_bits(np.float64(value))):04X}"
    raise ValueError(f"no float literal for LLVM type {llvm_type}")


def int_literal(value: int, llvm_type: str) -> str:
    """An integer literal; ``i1`` is written ``true``/``false``."""
    if llvm_type == "i1":
        return "true" if value else "false"
    bits = int(llvm_type[1:])
    value = int(value) & ((1 << bits) - 1)
    if value >= 1 << (bits - 1):
        value -= 1 << bits
    return str(value)


# function bodies -------------------------------------------------------------------------


class FunctionWriter:
    """The body of one LLVM function: basic blocks of instructions with unique names.

    Instructions are appended to ``lines``; :meth:`placeholder` reserves a line to be filled
    in later (a loop header's phi, whose latch block is known only after the body).
    """

    def __init__(self):
        self.lines: list[str] = []
        self.names = NameTable()
        self.labels = NameTable()
        self.block = "entry"
        self.lines.append("entry:")

    def label(self, hint: str) -> str:
        """A fresh basic-block label (without the leading ``%``)."""
        return self.labels.fresh(hint)

    def start_block(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    def value(self, text: str, hint: str) -> str:
        """Append ``%name = text`` and return ``%name``."""
        name = "%" + self.names.fresh(hint)
        self.lines.append(f"  {name} = {text}")
        return name

    def op(self, text: str) -> None:
        """Append an instruction without a result (store, br, call void)."""
        self.lines.append("  " + text)

    def placeholder(self) -> int:
        self.lines.append("")
        return len(self.lines) - 1

    def fill(self, index: int, text: str) -> None:
        self.lines[index] = text

    def text(self) -> str:
        return "\n".join(self.lines)


def pointer_type(addrspace: int) -> str:
    """``ptr`` or ``ptr addrspace(N)``."""
    return "ptr" if addrspace == 0 else f"ptr addrspace({addrspace})"


class ModuleParts:
    """What a module collects besides function bodies: declarations, globals, metadata."""

    def __init__(self):
        self.declarations: dict[str, str] = {}
        self.globals: list[str] = []
        self.global_names = NameTable()
        self.metadata: list[str] = []
        self._shared_nodes: dict[str, str] = {}
        self.helpers: dict[str, str] = {}

    def declare(self, name: str, signature: str) -> str:
        """Declare ``@name`` once; ``signature`` is ``"ret (args)"``. Returns ``@name``."""
        if name not in self.declarations:
            ret, args = signature.split(" ", 1)
            self.declarations[name] = f"declare {ret} @{name}{args}"
        return "@" + name

    def metadata_node(self, body: str, distinct: bool = False) -> str:
        """Add ``!N = [distinct ]!{body}`` (``{self}`` in ``body`` names the node itself).

        Non-distinct nodes with the same body are shared."""
        if not distinct and body in self._shared_nodes:
            return self._shared_nodes[body]
        ref = f"!{len(self.metadata)}"
        if not distinct:
            self._shared_nodes[body] = ref
        body = body.replace("{self}", ref)
        self.metadata.append(f"{ref} = {'distinct ' if distinct else ''}!{{{body}}}")
        return ref
