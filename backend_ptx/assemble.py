"""PTX -> cubin with ptxas (a subprocess) or nvJitLink (in process), and the resource report.

Both assemblers are asked for their verbose report, which says per kernel how many
registers it uses, how many bytes it spills, its stack frame and its shared memory. The
report is parsed into :class:`ResourceUsage` and kept with the compiled kernel: spills and
register counts are what a tuner looks at first when a kernel is slow.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass

ASSEMBLERS = ("ptxas", "nvjitlink")


class AssemblerError(RuntimeError):
    """The PTX did not assemble (or no assembler could be found); carries the log."""


@dataclass(frozen=True)
class ResourceUsage:
    """Per-kernel resources as the assembler (or the driver) reports them."""

    registers: int
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_frame_bytes: int = 0
    shared_bytes: int = 0
    constant_bytes: int = 0
    barriers: int = 0
    local_bytes: int = 0
    source: str = "ptxas"

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0

    def __str__(self):
        return (f"{self.registers} registers, {self.spill_store_bytes} B spill stores, "
                f"{self.spill_load_bytes} B spill loads, {self.stack_frame_bytes} B stack, "
                f"{self.shared_bytes} B shared, {self.barriers} barriers ({self.source})")


class AssemblyCache:
    """The assembler's output (cubin and report) by its whole input, in this process.

    The kernel cache (``backend_ptx/cache.py``) finds a kernel by its device IR; two
    candidates whose device IR differs (a loop named otherwise, an index written another
    way) may still make the same PTX, and then the same cubin: the assembler is
    deterministic, so its output is reused by a digest of the assembler, its executable,
    the architecture, the flags and every PTX text, in order. An LRU of ``max_entries``;
    ``hits`` and ``misses`` count the lookups.
    """

    def __init__(self, max_entries: int = 64):
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[bytes, str]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(assembler: str, sm: str, flags: tuple, ptxs: list[str]) -> str:
        """The digest naming one assembler run."""
        exe = find_ptxas() if assembler == "ptxas" else ""
        h = hashlib.sha256(repr((assembler, exe, sm, tuple(flags), len(ptxs))).encode())
        for ptx in ptxs:
            h.update(b"\0" + ptx.encode())
        return h.hexdigest()

    def get(self, key: str) -> tuple[bytes, str] | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return hit

    def put(self, key: str, value: tuple[bytes, str]) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry and the counts."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


_assembled = AssemblyCache()


def assembly_cache() -> AssemblyCache:
    """This process's :class:`AssemblyCache` (what ``compile_kernels`` with a kernel cache
    uses)."""
    return _assembled


def find_ptxas() -> str | None:
    """Path of ptxas: ``$PTXFORGE_PTXAS``, then ``PATH``, then the usual CUDA folders."""
    env = os.environ.get("PTXFORGE_PTXAS")
    if env:
        return env if os.path.exists(env) else None
    found = shutil.which("ptxas")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "ptxas")):
            return os.path.join(root, "bin", "ptxas")
    # the nvidia-cuda-nvcc wheel (the test extra) ships ptxas inside site-packages
    import sys

    for entry in sys.path:
        cand = os.path.join(entry, "nvidia", "cuda_nvcc", "bin", "ptxas")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def nvjitlink_available() -> bool:
    """Whether ``cuda.bindings.nvjitlink`` can load libnvJitLink."""
    try:
        from cuda.bindings import nvjitlink

        nvjitlink.version()
        return True
    except Exception:  # the library is optional; any failure to load means "not here"
        return False


_PROPS = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")
_BARRIERS = re.compile(r"used (\d+) barriers")
_LMEM = re.compile(r"(\d+) bytes lmem")


def parse_report(log: str, symbol: str, source: str = "ptxas") -> ResourceUsage:
    """Parse the verbose report of ptxas (or nvJitLink) for kernel ``symbol``."""
    lines = log.splitlines()
    start = None
    # the whole name: a report of several kernels names main_kernel1 and main_kernel10
    props = re.compile(rf"Function properties for {re.escape(symbol)}\s*$")
    for i, line in enumerate(lines):
        if props.search(line) or f"Compiling entry function '{symbol}'" in line:
            start = i
            break
    if start is None:
        raise AssemblerError(
            f"the assembler report has no entry for kernel {symbol!r}:\n{log}")
    stack = stores = loads = 0
    used = None
    for line in lines[start:]:
        m = _PROPS.search(line)
        if m:
            stack, stores, loads = (int(g) for g in m.groups())
        m = _USED.search(line)
        if m:
            used = line
            break
    if used is None:
        raise AssemblerError(f"the assembler report has no register count for {symbol}:\n{log}")
    regs = int(_USED.search(used).group(1))

    def grab(rx: re.Pattern) -> int:
        m = rx.search(used)
        return int(m.group(1)) if m else 0

    return ResourceUsage(regs, stores, loads, stack, grab(_SMEM), grab(_CMEM), grab(_BARRIERS),
                         grab(_LMEM), source)


def run_ptxas(ptx: str, sm: str, flags: tuple[str, ...] = (), ptxas: str | None = None,
              timeout: float = 600.0) -> tuple[bytes, str]:
    """Assemble ``ptx`` for ``sm`` with ``ptxas -O3 -v``; return the cubin and the log."""
    return run_ptxas_many([ptx], sm, flags, ptxas, timeout)


def run_ptxas_many(ptxs: list[str], sm: str, flags: tuple[str, ...] = (),
                   ptxas: str | None = None, timeout: float = 600.0) -> tuple[bytes, str]:
    """Assemble several PTX texts for ``sm`` with one ``ptxas -O3 -v`` process into one
    cubin holding all their kernels (their top-level names must differ); return the cubin
    and the log, which reports every kernel."""
    exe = ptxas or find_ptxas()
    if exe is None:
        raise AssemblerError(
            "ptxas was not found (set PTXFORGE_PTXAS, put CUDA's bin folder on PATH, or "
            "compile with assembler='nvjitlink')")
    with tempfile.TemporaryDirectory(prefix="ptxforge-") as tmp:
        srcs = []
        for i, ptx in enumerate(ptxs):
            srcs.append(os.path.join(tmp, f"kernel{i}.ptx" if len(ptxs) > 1 else "kernel.ptx"))
            with open(srcs[-1], "w") as f:
                f.write(ptx)
        out = os.path.join(tmp, "kernel.cubin")
        cmd = [exe, f"-arch={sm}", "-O3", "-v", *flags, *srcs, "-o", out]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise AssemblerError(f"ptxas took more than {timeout:.0f} s: {' '.join(cmd)}") from e
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            context = _with_context(log, ptxs[0]) if len(ptxs) == 1 else log
            raise AssemblerError(f"ptxas failed ({' '.join(cmd)}):\n{context}")
        with open(out, "rb") as f:
            return f.read(), log


def run_nvjitlink(ptx: str, sm: str, flags: tuple[str, ...] = ()) -> tuple[bytes, str]:
    """Assemble ``ptx`` for ``sm`` in process with nvJitLink (``flags`` are ptxas flags, as
    :func:`run_ptxas` takes them); return the cubin and the log."""
    return run_nvjitlink_many([ptx], sm, flags)


def nvjitlink_options(sm: str, flags: tuple[str, ...] = ()) -> list[str]:
    """nvJitLink's options for what ``ptxas -arch=<sm> -O3 -v <flags>`` does: the
    assembler's flags pass through ``-Xptxas``, so both assemblers get the same ones."""
    return [f"-arch={sm}", "-O3", "-verbose", *(f"-Xptxas={f}" for f in flags)]


def run_nvjitlink_many(ptxs: list[str], sm: str, flags: tuple[str, ...] = ()) -> tuple[bytes,
                                                                                      str]:
    """Assemble several PTX texts for ``sm`` in this process with nvJitLink into one cubin
    holding all their kernels (their top-level names must differ), as
    :func:`run_ptxas_many` does with one ptxas process (``flags`` are ptxas flags); return
    the cubin and the log, which reports every kernel. No process is started: a builder
    saves the assembler's start-up (about 13 ms of a small kernel's 60) per candidate."""
    try:
        from cuda.bindings import nvjitlink
    except ImportError as e:
        raise AssemblerError("cuda.bindings.nvjitlink is not importable") from e
    opts = nvjitlink_options(sm, flags)
    try:
        handle = nvjitlink.create(len(opts), opts)
    except Exception as e:  # library missing or refused the options
        raise AssemblerError(f"nvJitLink is not usable here: {e}") from e
    try:
        try:
            for i, ptx in enumerate(ptxs):
                data = ptx.encode()
                nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data),
                                   f"kernel{i}.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            size = nvjitlink.get_error_log_size(handle)
            buf = bytearray(size)
            nvjitlink.get_error_log(handle, buf)
            text = buf.decode(errors="replace").rstrip(chr(0))
            raise AssemblerError(f"nvJitLink failed ({e}):\n"
                                 f"{_with_context(text, ptxs[0]) if len(ptxs) == 1 else text}"
                                 ) from e
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        log = bytearray(nvjitlink.get_info_log_size(handle))
        nvjitlink.get_info_log(handle, log)
        return bytes(cubin), log.decode(errors="replace").rstrip("\0")
    finally:
        nvjitlink.destroy(handle)


def _with_context(log: str, ptx: str) -> str:
    """The log, plus the PTX lines it points at (``line N``)."""
    lines = ptx.splitlines()
    extra = []
    for m in re.finditer(r"line (\d+)", log):
        n = int(m.group(1))
        if 0 < n <= len(lines):
            extra.append(f"  {n:5d} | {lines[n - 1]}")
    return log if not extra else log + "\nPTX:\n" + "\n".join(dict.fromkeys(extra))
