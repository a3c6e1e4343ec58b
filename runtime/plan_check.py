"""The consistency of a loaded network's memory plan.

A plan read from a file is trusted by nothing: on a GPU, ``GraphModule`` allocates each
storage at the size the plan states and points each slot's array at its storage, so a slot
larger than its storage, or a storage smaller than the tensor a kernel writes into it, would
make kernels and weight uploads write past the allocation. :func:`check_plan` checks every
size, shape, dtype and index against each other (the manifest's schema has checked their
types and ranges already) and raises ``ModuleFormatError`` naming the first fault.
"""

from __future__ import annotations

import math

from ..ir import dtype as dt
from .archive import ModuleFormatError

MAX_TOTAL_BYTES = 1 << 40
"""The most bytes all storages of a plan may add up to."""


def check_plan(path: str, plan, call_keys: list, functions: dict, weights: dict) -> None:
    """Check ``plan`` (a ``LoadedPlan``) read from ``path`` against itself, the steps'
    ``call_keys``, the loaded ``functions`` and the manifest's ``weights`` entries (before
    any weight is read; the archive checks each weight against its entry): each slot's
    ``nbytes`` is its shape times its dtype's size and fits its storage; indices are in
    range; inputs and weights are slots of their kind that no step writes; a view step
    aliases its argument's storage, any other step writes a storage it does not read and
    passes its function the shapes and dtypes it takes; every weight has its slot's shape
    and dtype."""
    def fail(what: str):
        raise ModuleFormatError(f"{path}: the network's memory plan is inconsistent: {what}")

    n_slots, n_storages = len(plan.slots), len(plan.storages)
    if sum(s.nbytes for s in plan.storages) > MAX_TOTAL_BYTES:
        fail(f"its storages add up to more than {MAX_TOTAL_BYTES} bytes")
    for k, t in enumerate(plan.slots):
        if not 0 <= t.storage < n_storages:
            fail(f"slot {k} is in storage {t.storage} of {n_storages}")
        size = math.prod(t.ty.shape) * dt.nbytes(t.ty.dtype)
        if t.ty.nbytes != size:
            fail(f"slot {k} states {t.ty.nbytes} bytes, but {list(t.ty.shape)} "
                 f"{t.ty.dtype} takes {size}")
        if t.ty.nbytes > plan.storages[t.storage].nbytes:
            fail(f"slot {k} ({t.ty.nbytes} bytes) does not fit storage {t.storage} "
                 f"({plan.storages[t.storage].nbytes} bytes)")
    used = [*plan.inputs.values(), *plan.params.values(), *plan.outputs]
    for step in plan.steps:
        used += [*step.args, step.out]
    if any(not 0 <= s < n_slots for s in used):
        fail(f"a slot index is outside [0, {n_slots})")
    for what, slots in (("input", plan.inputs), ("param", plan.params)):
        for name, s in slots.items():
            if plan.slots[s].kind != what:
                fail(f"{what} {name!r} is slot {s}, a slot of kind {plan.slots[s].kind!r}")
    constant = {plan.slots[s].storage for s in (*plan.inputs.values(), *plan.params.values())}
    if len(call_keys) != len(plan.steps):
        fail(f"{len(plan.steps)} steps but {len(call_keys)} call keys")
    for i, (step, key) in enumerate(zip(plan.steps, call_keys)):
        out = plan.slots[step.out]
        if step.view:
            if key is not None or len(step.args) != 1:
                fail(f"step {i} is a view: it takes one argument and calls no function")
            src = plan.slots[step.args[0]]
            if out.storage != src.storage or out.ty.nbytes != src.ty.nbytes:
                fail(f"step {i} is a view whose result is not its argument's storage and size")
            continue
        if key is None:
            fail(f"step {i} calls no function and is not a view")
        if out.storage in constant:
            fail(f"step {i} writes storage {out.storage}, which holds an input or a weight")
        if any(plan.slots[a].storage == out.storage for a in step.args):
            fail(f"step {i} writes storage {out.storage}, which it also reads")
        if key not in functions:
            fail(f"step {i} calls {key[:80]}, which the file has no function for")
        have = [(list(plan.slots[s].ty.shape), plan.slots[s].ty.dtype)
                for s in (*step.args, step.out)]
        want = [(list(b.shape), b.dtype) for b in functions[key].device_module.host.params]
        if have != want:
            fail(f"step {i} passes {have} to a function that takes {want}")
    if set(weights) != set(plan.params):
        fail(f"the plan's weights {sorted(plan.params)[:8]} are not the file's "
             f"{sorted(weights)[:8]}")
    for name, slot in plan.params.items():
        ty, entry = plan.slots[slot].ty, weights[name]
        if list(entry["shape"]) != list(ty.shape) or entry["dtype"] != ty.dtype:
            fail(f"weight {name} has shape {entry['shape']} and dtype {entry['dtype']}, its "
                 f"slot {list(ty.shape)} {ty.dtype}")
