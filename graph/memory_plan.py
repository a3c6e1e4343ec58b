"""The static memory plan of a compiled network.

Every value the executor handles is a :class:`TensorSlot` living in a :class:`Storage`
(one device allocation). Inputs, weights and outputs get storages of their own;
intermediate results share storages whose lifetimes do not overlap, in the order the
fused functions run (best fit among the free storages, growing the largest free one when
none is big enough). A reshape-only function gets no kernel: its output is the same
storage as its input. One that gives a graph output is a view too where its argument is a
kernel's result that nothing else reads: that kernel writes straight into the output's
storage (a language model's logits, reshaped to ``[batch, seq, vocab]`` on their way out),
where a copy would read and write the whole output once more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Call, Constant, Graph, GraphError, TensorType, Var

ALIGN = 256


def _aligned(nbytes: int) -> int:
    return max(ALIGN, -(-nbytes // ALIGN) * ALIGN)


@dataclass
class Storage:
    """One device allocation; ``kind`` is input, param, output or temp."""

    nbytes: int
    kind: str


@dataclass
class TensorSlot:
    """A value: its type, the storage holding it, and what it is (``name`` for inputs and
    params)."""

    ty: TensorType
    storage: int
    kind: str
    name: str = ""


@dataclass
class Step:
    """One call of a fused function: argument and output slots; ``view`` when it runs no
    kernel."""

    call: Call
    args: list[int]
    out: int
    view: bool = False


@dataclass
class MemoryPlan:
    """Slots, storages and steps of a fused network."""

    slots: list[TensorSlot] = field(default_factory=list)
    storages: list[Storage] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    inputs: dict[str, int] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)
    outputs: list[int] = field(default_factory=list)

    @property
    def temp_bytes(self) -> int:
        """Bytes of the shared intermediate storages."""
        return sum(s.nbytes for s in self.storages if s.kind == "temp")

    def summary(self) -> str:
        temps = [s for s in self.storages if s.kind == "temp"]
        n_temp_slots = sum(1 for t in self.slots if t.kind == "temp")
        return (f"{len(self.steps)} steps, {n_temp_slots} intermediate tensors in "
                f"{len(temps)} storages ({self.temp_bytes / 2**20:.2f} MiB)")


def plan_memory(fused: Graph, constant_name) -> MemoryPlan:
    """Plan the memory of ``fused`` (a fused main graph). ``constant_name(c)`` gives each
    constant its unique parameter name."""
    plan = MemoryPlan()
    slot_of: dict[int, int] = {}
    nodes = fused.nodes()
    output_ids = {id(o) for o in fused.outputs}

    def new_storage(nbytes: int, kind: str) -> int:
        plan.storages.append(Storage(_aligned(nbytes), kind))
        return len(plan.storages) - 1

    def new_slot(ty: TensorType, storage: int, kind: str, name: str = "") -> int:
        plan.slots.append(TensorSlot(ty, storage, kind, name))
        return len(plan.slots) - 1

    remaining: dict[int, int] = {}
    for n in nodes:
        if isinstance(n, Call):
            for a in dict.fromkeys(map(id, n.args)):
                remaining[a] = remaining.get(a, 0) + 1
    live: dict[int, int] = {}  # temp storage -> live slots in it
    free: list[int] = []
    aliased = _output_views(fused, remaining)  # producer id -> its output view

    def take(nbytes: int) -> int:
        need = _aligned(nbytes)
        fitting = [s for s in free if plan.storages[s].nbytes >= need]
        if fitting:
            s = min(fitting, key=lambda k: plan.storages[k].nbytes)
        elif free:
            s = max(free, key=lambda k: plan.storages[k].nbytes)
            plan.storages[s].nbytes = need
        else:
            return new_storage(nbytes, "temp")
        free.remove(s)
        return s

    def release(slot: int) -> None:
        st = plan.slots[slot].storage
        if plan.storages[st].kind != "temp":
            return
        live[st] -= 1
        if live[st] == 0:
            free.append(st)

    for n in nodes:
        if isinstance(n, Var):
            slot_of[id(n)] = new_slot(n.ty, new_storage(n.ty.nbytes, "input"), "input", n.name)
            plan.inputs[n.name] = slot_of[id(n)]
        elif isinstance(n, Constant):
            name = constant_name(n)
            slot_of[id(n)] = new_slot(n.ty, new_storage(n.ty.nbytes, "param"), "param", name)
            plan.params[name] = slot_of[id(n)]
        elif isinstance(n, Call):
            args = [slot_of[id(a)] for a in n.args]
            view = bool(n.op.attrs.get("view")) and (id(n) not in output_ids
                                                     or id(n) in aliased.values())
            if view and id(n) in output_ids:
                out = new_slot(n.ty, plan.slots[args[0]].storage, "output")
            elif id(n) in output_ids or id(n) in aliased:
                out = new_slot(n.ty, new_storage(n.ty.nbytes, "output"), "output")
            elif view:
                st = plan.slots[args[0]].storage
                out = new_slot(n.ty, st, "temp")
                if plan.storages[st].kind == "temp":
                    live[st] += 1
            else:
                st = take(n.ty.nbytes)
                live[st] = 1
                out = new_slot(n.ty, st, "temp")
            slot_of[id(n)] = out
            plan.steps.append(Step(n, args, out, view))
            for a_node in dict.fromkeys(n.args):
                remaining[id(a_node)] -= 1
                if remaining[id(a_node)] == 0:
                    release(slot_of[id(a_node)])
            if remaining.get(id(n), 0) == 0 and plan.slots[out].kind == "temp":
                release(out)  # computed but never read
        else:
            raise GraphError(f"unexpected node {n!r} in a fused graph")
    plan.outputs = [slot_of[id(o)] for o in fused.outputs]
    return plan


def _output_views(fused: Graph, readers: dict[int, int]) -> dict[int, int]:
    """``{id(producer): id(view)}`` for each graph output that is a view function (reshapes
    only) of a kernel's result (``producer``: a call of a function that is no view) which no
    other call reads and which is no graph output itself; ``readers`` counts the calls
    reading each node. Each output storage belongs to one output."""
    outputs = {id(o) for o in fused.outputs}
    out: dict[int, int] = {}
    for o in dict.fromkeys(fused.outputs):
        if not (isinstance(o, Call) and isinstance(o.op, Graph) and o.op.attrs.get("view")):
            continue
        (src,) = o.args
        if (isinstance(src, Call) and isinstance(src.op, Graph) and not src.op.attrs.get("view")
                and id(src) not in outputs and readers.get(id(src)) == 1
                and id(src) not in out):
            out[id(src)] = id(o)
    return out
