"""A cache of compiled kernels: in process, and optionally in a folder on disk.

Keys hash the printed device IR together with the target and every option that changes the
output (see :func:`cache_key`), so a kernel met twice (re-measured configs, repeated tasks of
a network) is compiled once. The disk form is one JSON file per kernel, written atomically,
so several builder processes can share a folder. Each file holds its key and a digest of its
contents; an entry that does not match its key or digest (stale, corrupt, or copied over
another), or that does not have the expected shape, is ignored with a warning and the
kernel is rebuilt (and the entry rewritten).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import warnings
from collections import OrderedDict

import llvmlite

from .assemble import ResourceUsage
from .kernel import CompiledKernel
from .launch import LaunchInfo, ParamInfo

FORMAT_VERSION = 4
"""Bumped when the generated code or an entry's fields change for the same device IR (3:
kernels for sm_90 and later wait for their grid dependencies first; 4: the launch records
that wait), so older entries are rebuilt."""


def cache_key(device_ir_text: str, *parts) -> str:
    """A hex digest of the device IR text and the given option values."""
    h = hashlib.sha256()
    h.update(f"ptxforge-ptx/{FORMAT_VERSION}/llvmlite-{llvmlite.__version__}\0".encode())
    h.update(device_ir_text.encode())
    for p in parts:
        h.update(b"\0" + repr(p).encode())
    return h.hexdigest()


class KernelCache:
    """Compiled kernels by key: an LRU dict of ``max_entries``, plus ``directory`` if set."""

    def __init__(self, directory: str | None = None, max_entries: int = 2048):
        self.directory = directory
        self.max_entries = max_entries
        self._mem: OrderedDict[str, CompiledKernel] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> CompiledKernel | None:
        k = self._mem.get(key)
        if k is None and self.directory:
            k = self._load(key)
            if k is not None:
                self._remember(key, k)
        if k is None:
            self.misses += 1
            return None
        self._mem.move_to_end(key)
        self.hits += 1
        return k

    def put(self, key: str, kernel: CompiledKernel) -> None:
        self._remember(key, kernel)
        if self.directory:
            self._store(key, kernel)

    def clear(self) -> None:
        """Forget the in-process entries (the disk folder is left alone)."""
        self._mem.clear()

    def __len__(self):
        return len(self._mem)

    def _remember(self, key: str, kernel: CompiledKernel) -> None:
        self._mem[key] = kernel
        self._mem.move_to_end(key)
        while len(self._mem) > self.max_entries:
            self._mem.popitem(last=False)

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".json")

    def _store(self, key: str, k: CompiledKernel) -> None:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        la = k.launch
        data = {
            "format": FORMAT_VERSION, "key": key, "name": k.name, "target": k.target,
            "launch": {"name": la.name, "symbol": la.symbol, "grid": la.grid,
                       "block": la.block, "static_shared_bytes": la.static_shared_bytes,
                       "dynamic_shared_bytes": la.dynamic_shared_bytes,
                       "dependent_launch": la.dependent_launch,
                       "params": [vars(p) for p in la.params]},
            "sources": k.sources,
            "cubin": None if k.cubin is None else base64.b64encode(k.cubin).decode(),
            "resources": None if k.resources is None else vars(k.resources),
            "assembler": k.assembler, "assembler_log": k.assembler_log,
            "started_from": k.started_from,
        }
        data["digest"] = _digest(data)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)

    def _load(self, key: str) -> CompiledKernel | None:
        path = self._path(key)
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as e:
            _ignore(path, f"unreadable: {e}")
            return None
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
            return None  # another version's entry: rebuilt and replaced
        if data.get("key") != key or data.get("digest") != _digest(data):
            _ignore(path, "its contents do not match its key")
            return None
        try:
            la = data["launch"]
            launch = LaunchInfo(la["name"], la["symbol"],
                                tuple(ParamInfo(**p) for p in la["params"]),
                                tuple(la["grid"]), tuple(la["block"]),
                                la["static_shared_bytes"], la["dynamic_shared_bytes"],
                                bool(la["dependent_launch"]))
            res = data["resources"]
            return CompiledKernel(
                name=data["name"], target=data["target"], launch=launch,
                sources=data["sources"],
                cubin=None if data["cubin"] is None else base64.b64decode(data["cubin"]),
                resources=None if res is None else ResourceUsage(**res),
                assembler=data["assembler"], assembler_log=data["assembler_log"],
                started_from=data["started_from"], cache_hit=True)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            _ignore(path, f"malformed ({type(e).__name__}: {e})")
            return None


def _digest(data: dict) -> str:
    """A digest of an entry's contents (everything but the digest itself)."""
    body = {k: v for k, v in data.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _ignore(path: str, why: str) -> None:
    warnings.warn(f"ignoring kernel cache entry {path} ({why}); the kernel is rebuilt",
                  RuntimeWarning, stacklevel=4)


_default = KernelCache(os.environ.get("PTXFORGE_KERNEL_CACHE") or None)


def default_cache() -> KernelCache:
    """The process-wide cache (on disk too when ``$PTXFORGE_KERNEL_CACHE`` names a folder)."""
    return _default
