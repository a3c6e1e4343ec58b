"""Run the host function of a device-IR module: check the arrays, allocate temporaries,
launch the kernels in order."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..ir import dtype as dt
from ..ir.attrs import Level
from ..ir.expr import IRError
from ..ir.stmt import Alloc, Launch, Module, PrimFunc, Seq, Stmt
from .codegen import CompiledKernel, compile_kernel
from .errors import SimArgumentError, SimIRError
from .exprgen import storage_dtype
from .runtime import fill_value

CACHE_SIZE = 256
_cache: OrderedDict = OrderedDict()


def compiled(func: PrimFunc, check_races: bool = True) -> CompiledKernel:
    """The compiled form of a kernel, made once per kernel object and kept in a small
    least-recently-used cache."""
    key = (id(func), check_races)
    hit = _cache.get(key)
    if hit is not None and hit[0] is func:
        _cache.move_to_end(key)
        return hit[1]
    kernel = compile_kernel(func, check_races)
    _cache[key] = (func, kernel)  # holding func keeps its id from being reused
    while len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return kernel


def run(module: Module, args: list, check_races: bool = True) -> None:
    """Execute ``module``'s host function on ``args`` (one numpy array per host param,
    with its shape and dtype); outputs are written into the arrays in place.

    ``check_races`` turns the shared-memory race checker on or off.
    Raises a :class:`~ptxforge.backend_sim.errors.SimError` subclass for what a GPU would
    reject: out-of-bounds accesses, launch limits, missing barriers.
    """
    host = host_function(module)
    params = host.params
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise SimArgumentError(
            f"{host.name} takes {len(params)} arrays ({names}), got {len(args)}"
        )
    env: dict = {}
    copies = []
    for p, a in zip(params, args):
        env[p] = _bind(p, a, copies)
    with np.errstate(all="ignore"):
        _execute(host.body, env, module, check_races)
    for p, original, work in copies:
        if p.dtype == "bfloat16":
            work = dt.to_bfloat16(work)
        if original.flags.writeable:
            original[...] = work.reshape(original.shape)
        elif not _same(original.reshape(-1), work):
            raise SimArgumentError(
                f"the array for {p.name} is read-only, but the kernels write to it"
            )


def host_function(module: Module) -> PrimFunc:
    main = module.functions.get("main")
    if main is not None and main.level is Level.HOST:
        return main
    host = module.host
    if host is not None:
        return host
    raise SimIRError(
        "the module has no host function (level host); lower it to device IR first "
        f"(functions: {', '.join(module.functions)})"
    )


def _bind(param, array, copies: list) -> np.ndarray:
    """The flat array a kernel sees for host param ``param``."""
    if not isinstance(array, np.ndarray):
        raise SimArgumentError(
            f"{param.name}: expected a numpy array, got {type(array).__name__}"
        )
    want = dt.to_numpy(param.dtype)
    if array.shape != param.shape or array.dtype != want:
        raise SimArgumentError(
            f"{param.name}: expected an array of shape {param.shape} and dtype {want}, got "
            f"shape {array.shape} and dtype {array.dtype}"
        )
    if param.strides is not None and param.strides != _compact(param.shape):
        raise SimArgumentError(
            f"{param.name}: host buffers with padded strides {param.strides} cannot be bound "
            f"to a numpy array of shape {param.shape}"
        )
    if param.dtype == "bfloat16":
        # kernels keep bfloat16 values in float32 (see exprgen.np_type); copied back after
        work = dt.from_bfloat16(np.ascontiguousarray(array)).reshape(-1)
        copies.append((param, array, work))
        return work
    if array.flags.c_contiguous and array.flags.writeable:
        return array.reshape(-1)
    work = np.ascontiguousarray(array).reshape(-1).copy()
    copies.append((param, array, work))
    return work


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values (NaN equal to NaN); bfloat16 arrays compare bit patterns."""
    if a.dtype.itemsize == 2 and a.dtype.kind != "f":
        return np.array_equal(a.view(np.uint16), b.view(np.uint16))
    return np.array_equal(a, b, equal_nan=True)


def _compact(shape: tuple) -> tuple:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def _execute(s: Stmt, env: dict, module: Module, check_races: bool) -> None:
    if isinstance(s, Seq):
        for c in s.stmts:
            _execute(c, env, module, check_races)
    elif isinstance(s, Alloc):
        b = s.buffer
        if b.scope != "global":
            raise SimIRError(f"the host function allocates {b.name} in {b.scope} memory; "
                             "only global temporaries live on the host side")
        d = np.dtype(storage_dtype(b.dtype))
        env[b] = np.full(b.size, fill_value(d), d)
        try:
            _execute(s.body, env, module, check_races)
        finally:
            del env[b]
    elif isinstance(s, Launch):
        _launch(s, env, module, check_races)
    else:
        raise SimIRError(
            f"the host function may hold only allocations and launches, not a "
            f"{type(s).__name__}"
        )


def _launch(s: Launch, env: dict, module: Module, check_races: bool) -> None:
    try:
        func = module[s.kernel]
    except IRError as e:
        raise SimIRError(f"launch of {s.kernel}: {e}") from None
    if func.level is not Level.KERNEL:
        raise SimIRError(f"launch of {s.kernel}, which is not a kernel "
                         f"(a {func.level.describe()} function)")
    if len(s.args) != len(func.params):
        raise SimIRError(f"launch of {s.kernel} passes {len(s.args)} buffers for "
                         f"{len(func.params)} params")
    arrays = []
    for param, arg in zip(func.params, s.args):
        array = env.get(arg)
        if array is None:
            raise SimIRError(
                f"launch of {s.kernel} passes {getattr(arg, 'name', arg)}, which the host "
                "function neither takes nor allocates"
            )
        if array.size != param.size or array.dtype != storage_dtype(param.dtype):
            raise SimIRError(
                f"launch of {s.kernel}: param {param.name} ({param.dtype}, {param.size} "
                f"elements) is bound to {arg.name} ({array.dtype}, {array.size} elements)"
            )
        arrays.append(array)
    compiled(func, check_races).launch(arrays)
