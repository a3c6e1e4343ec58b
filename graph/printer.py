"""The text form of graphs, modelled on Relay's::

    def @main(%data: Tensor[(1, 3, 32, 32), float32], %w: Tensor[(8, 3, 3, 3), float32]) {
      %0 = nn.conv2d(%data, %w, padding=[1, 1, 1, 1], kernel_layout="OIHW") /* ty=... */;
      nn.relu(%0) /* ty=Tensor[(1, 8, 32, 32), float32] */
    }

Attributes print when they differ from the operator's defaults. Constants print as a
literal when they are 0-D, else as ``meta[name]``, with their types listed after the
function. Fused (primitive) functions print first, as their own ``def``, and the main graph
calls them by name.
"""

from __future__ import annotations

from .ir import Call, Constant, Graph, Node, Var, attr_text, post_order


def _scalar_text(c: Constant) -> str:
    v = c.value.reshape(()).item()
    if c.dtype == "float32":
        return f"{v:g}f"
    if c.dtype == "bool":
        return str(bool(v))
    return f"{v}" if c.dtype == "int32" else f"{v}{c.dtype}"


def _attrs_text(call: Call) -> str:
    if isinstance(call.op, Graph):
        return ""
    from .op import get_op

    defaults = get_op(call.op).defaults
    parts = []
    for k, v in call.attrs.items():
        if k in defaults and v == defaults[k]:
            continue
        parts.append(f"{k}={attr_text(v)}")
    return ", ".join(parts)


class _Printer:
    def __init__(self):
        self.func_names: dict[int, str] = {}
        self.used_func_names: set[str] = set()
        self.const_names: dict[int, str] = {}
        self.used_const_names: set[str] = set()
        self.consts: list[Constant] = []
        self.blocks: list[str] = []

    def func_name(self, fn: Graph) -> str:
        name = self.func_names.get(id(fn))
        if name is None:
            name, k = fn.name, 1
            while name in self.used_func_names:
                name = f"{fn.name}_{k}"
                k += 1
            self.used_func_names.add(name)
            self.func_names[id(fn)] = name
            self.blocks.append(self.function(fn, name))
        return name

    def const_name(self, c: Constant) -> str:
        name = self.const_names.get(id(c))
        if name is None:
            base = c.name or "const"
            name, k = base, 1
            while name in self.used_const_names:
                name = f"{base}_{k}"
                k += 1
            self.used_const_names.add(name)
            self.const_names[id(c)] = name
            self.consts.append(c)
        return name

    def function(self, fn: Graph, name: str) -> str:
        names: dict[int, str] = {}
        used: set[str] = set()
        params = []
        for p in fn.params:
            pname, k = p.name, 1
            while pname in used:
                pname = f"{p.name}_{k}"
                k += 1
            used.add(pname)
            names[id(p)] = f"%{pname}"
            params.append(f"%{pname}: {p.ty}")
        if fn.is_primitive:
            params.append("Primitive=1")
        lines = []
        counter = 0
        nodes = post_order(fn.outputs)
        last = fn.outputs[0] if len(fn.outputs) == 1 else None
        for node in nodes:
            if isinstance(node, Var):
                names.setdefault(id(node), f"%{node.name}")
            elif isinstance(node, Constant):
                names[id(node)] = (_scalar_text(node) if node.ndim == 0
                                   else f"meta[{self.const_name(node)}]")
            elif isinstance(node, Call):
                callee = (f"@{self.func_name(node.op)}" if isinstance(node.op, Graph)
                          else node.op)
                args = [names[id(a)] for a in node.args]
                attrs = _attrs_text(node)
                text = f"{callee}({', '.join(args + ([attrs] if attrs else []))})"
                text += f" /* ty={node.ty} */"
                if node is last:
                    lines.append(text)
                else:
                    names[id(node)] = f"%{counter}"
                    lines.append(f"%{counter} = {text};")
                    counter += 1
        if last is None or not isinstance(last, Call):
            outs = ", ".join(names[id(o)] for o in fn.outputs)
            lines.append(outs if len(fn.outputs) == 1 else f"({outs})")
        ret = (str(fn.outputs[0].ty) if len(fn.outputs) == 1
               else "(" + ", ".join(str(o.ty) for o in fn.outputs) + ")")
        body = "\n".join("  " + line for line in lines)
        return f"def @{name}({', '.join(params)}) -> {ret} {{\n{body}\n}}"


def print_graph(graph: Graph) -> str:
    """The text of ``graph`` and of the fused functions it calls."""
    p = _Printer()
    p.used_func_names.add(graph.name)
    main = p.function(graph, graph.name)
    parts = p.blocks + [main]
    if p.consts:
        meta = "\n".join(f"// meta[{p.const_names[id(c)]}]: {c.ty}" for c in p.consts)
        parts.append(meta)
    return "\n\n".join(parts) + "\n"


def node_summary(node: Node) -> str:
    """A one-line description of a node (its repr)."""
    if isinstance(node, Var):
        return f"Var(%{node.name}: {node.ty})"
    if isinstance(node, Constant):
        return f"Constant({node.name or 'const'}: {node.ty})"
    if isinstance(node, Call):
        return f"Call({node.op_name}, {len(node.args)} args) -> {node.ty}"
    return f"<{type(node).__name__}>"
