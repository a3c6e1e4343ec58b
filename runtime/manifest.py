"""The schema of an exported module's manifest (:mod:`.schema`), one per kind.

Every field the loader reads is described here with its type and range; the loader
validates the whole manifest against it first, so the code that builds the loaded module
never meets a missing key, a wrong type, a float where a size belongs or an index out of
its range, and every such fault is a ``ModuleFormatError`` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import dtype as dt
from .schema import Bool, Int, List, Map, Nullable, Obj, Schema, SchemaError, Str

MAX_BYTES = 1 << 40
"""The largest size in bytes a manifest may state for one buffer (1 TiB: more than any GPU
holds)."""

MAX_DIM = 1 << 40
"""The largest extent of one axis of a tensor."""

MAX_RANK = 16

MAX_GRID = (1 << 31) - 1
"""CUDA's limit on ``gridDim.x`` (the other two are smaller; the target checks those)."""

MAX_BLOCK = 1024
"""CUDA's limit on the threads of a block (and on ``blockDim.x``)."""

MEMBER = Str(max_len=512, pattern=r"(?!.*\.\.)[A-Za-z0-9_][A-Za-z0-9_./+-]*")
"""A member name: a relative path without ``..``."""

ARCH = Str(max_len=16, pattern=r"sm_\d+\da?")
IDENT = Str(max_len=512, pattern=r"[A-Za-z_$][A-Za-z0-9_$.]*")
KIND = Str(choices=("input", "param", "temp", "output"))


@dataclass(frozen=True)
class DType(Schema):
    """The name of a dtype the IR knows."""

    def check(self, value, path):
        try:
            dt.check(value)
        except (TypeError, ValueError):
            text = repr(value)[:40]
            raise SchemaError(path, f"{text} is not a dtype") from None


SHAPE = List(Int(0, MAX_DIM), 0, MAX_RANK)

LAUNCH = Obj({
    "name": IDENT, "symbol": IDENT, "arch": ARCH,
    "params": List(Obj({"name": Str(max_len=512), "dtype": DType(),
                        "size": Int(0, MAX_BYTES), "readonly": Bool(), "writeonly": Bool()})),
    "grid": List(Int(1, MAX_GRID), 3, 3),
    "block": List(Int(1, MAX_BLOCK), 3, 3),
    "static_shared_bytes": Int(0, MAX_BYTES),
    "dynamic_shared_bytes": Int(0, MAX_BYTES),
}, optional={"dependent_launch": Bool()})

CODE = Obj({
    "device_ir": MEMBER,
    "builds": Map(ARCH, Map(IDENT, Obj({"ptx": MEMBER, "cubin": Nullable(MEMBER),
                                        "launch": LAUNCH}))),
})

ARRAY = Obj({"member": MEMBER, "dtype": DType(), "shape": SHAPE})

COMMON = {
    "format": Str(), "version": Int(), "kind": Str(choices=("kernel", "network")),
    "target": Str(max_len=256), "sha256": Map(MEMBER, Str(pattern=r"[0-9a-f]{64}")),
}

KERNEL = Obj({
    **COMMON,
    "entry_name": IDENT,
    "params": List(Obj({"name": Str(max_len=512), "dtype": DType(), "shape": SHAPE})),
    "code": CODE,
})

SLOT = Int(0, 1 << 31)
"""An index of a slot or storage (checked against the plan's sizes afterwards)."""

PLAN = Obj({
    "slots": List(Obj({"shape": SHAPE, "dtype": DType(), "nbytes": Int(0, MAX_BYTES),
                       "storage": SLOT, "kind": KIND},
                      optional={"name": Str(max_len=1024)})),
    "storages": List(Obj({"nbytes": Int(0, MAX_BYTES), "kind": KIND})),
    "steps": List(Obj({"args": List(SLOT), "out": SLOT}, optional={"view": Bool()})),
    "inputs": Map(Str(max_len=1024), SLOT),
    "params": Map(Str(max_len=1024), SLOT),
    "outputs": List(SLOT),
})

NETWORK = Obj({
    **COMMON,
    "is_sim": Bool(),
    "plan": PLAN,
    "call_keys": List(Nullable(Str(max_len=1 << 16))),
    "functions": Map(Str(max_len=1 << 16), CODE),
    "params": Map(Str(max_len=1024), ARRAY),
})

SCHEMAS = {"kernel": KERNEL, "network": NETWORK}
