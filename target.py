"""The GPU target: the single source of what the GPU is and what it can do.

A :class:`Target` is frozen and built from a TVM-style string::

    Target("cuda")                 # the present GPU's architecture, or sm_90 without a GPU
    Target("cuda -arch=sm_80")     # an A100, whatever this machine has
    Target("cuda -arch=sm_90a")    # Hopper with wgmma and setmaxnreg
    Target("sim")                  # the CPU simulator of an sm_90 GPU

Everything that checks a limit (verify, validate_gpu, the simulator), models performance
(the estimator, the sketch policy's ``HardwareParams``, the default schedules) or picks an
instruction (codegen, tensor-core intrinsics) asks the target; no module keeps its own
constants. Where a GPU is present, ``Target("cuda")`` reads its attributes
(``cuDeviceGetAttribute``); otherwise the figures are an H100 SXM's.

``with Target("cuda -arch=sm_80"):`` makes a target current (as TVM's ``with target``);
:func:`current_target` returns it, or ``Target("cuda")``.

This module imports nothing of the project, so every layer may depend on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from dataclasses import dataclass, field
from types import MappingProxyType


class TargetError(ValueError):
    """A target string, architecture or option this project cannot compile for."""


@dataclass(frozen=True)
class Arch:
    """One GPU architecture: the facts that do not depend on the particular chip."""

    name: str
    """The sm name (``"sm_90a"``)."""
    capability: tuple[int, int]
    ptx_version: tuple[int, int]
    """The ``.version`` LLVM 22 writes for this architecture by default."""
    max_shared_per_block_optin: int
    """Shared memory one block may use with the dynamic opt-in (bytes)."""
    shared_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    label: str
    mma_shapes: tuple[str, ...] = ()
    """mma.sync shapes with their input types, ``"m16n8k16.f16"`` and so on."""
    wgmma: bool = False
    tma: bool = False
    cp_async: bool = False
    ldmatrix: bool = False
    # Figures the performance models use (the estimator, the default schedules' tile
    # chooser, the sketch policy). They are per SM and per clock, so they hold for every
    # chip of the architecture; they steer choices and need not be exact.
    fp32_lanes_per_sm: int = 128
    """float32 FMA lanes per SM (64 on GA100, 128 from sm_86 and on Hopper)."""
    int32_lanes_per_sm: int = 64
    """Integer (index arithmetic) lanes per SM."""
    schedulers_per_sm: int = 4
    """Warp schedulers per SM: warp instructions issued per clock (the issue rate)."""
    shared_bytes_per_clock: int = 128
    """Shared-memory bandwidth of one SM: 32 banks of 4 bytes a clock."""
    l2_to_sm_bytes_per_clock: int = 64
    """What one SM can receive from L2 in a clock."""
    global_latency_cycles: int = 700
    """Clocks from a global load (an L2 hit or a DRAM access) to its use."""
    barrier_cycles: int = 40
    """Clocks one ``__syncthreads()`` costs a block whose warps arrive together."""
    shuffle_cycles: int = 30
    """Clocks from a warp shuffle (``shfl.sync``) to a dependent use: one butterfly step of
    a cross-thread reduction (the shuffle's latency plus the combining op)."""
    tile_copy_bytes_per_clock: int = 26
    """What the ``cp.async`` copies of one SM's GEMM tiles receive from L2 in a clock
    (below ``l2_to_sm_bytes_per_clock``: the copies of a block's stage are issued together
    and wait together). Fitted with ``mma_sync_peak_fraction`` to 2,300 measured
    tensor-core GEMM configurations on an H200 (see ``gemm_time``)."""
    mma_sync_peak_fraction: float = 1.0
    """The share of the tensor-core peak (:meth:`Target.peak_flops`, Hopper's counting
    wgmma) that ``mma.sync`` reaches in a block of 4 warps. Hopper: 0.2 (the fit above;
    the best mma.sync 4096^3 fp16 GEMM, with blocks sharing each SM, reaches 0.3)."""


_MMA_SM80 = ("m16n8k16.f16", "m16n8k16.bf16", "m16n8k8.tf32", "m16n8k8.f16")
_MMA_SM75 = ("m16n8k8.f16",)

ARCHS = MappingProxyType({
    a.name: a
    for a in (
        Arch("sm_75", (7, 5), (6, 3), 64 * 1024, 64 * 1024, 1024, 16, "Turing (T4, RTX 20xx)",
             _MMA_SM75, ldmatrix=True, fp32_lanes_per_sm=64),
        Arch("sm_80", (8, 0), (7, 0), 163 * 1024, 164 * 1024, 2048, 32, "Ampere (A100)",
             _MMA_SM80, cp_async=True, ldmatrix=True, fp32_lanes_per_sm=64),
        Arch("sm_86", (8, 6), (7, 1), 99 * 1024, 100 * 1024, 1536, 16,
             "Ampere (A10, RTX 30xx)", _MMA_SM80, cp_async=True, ldmatrix=True),
        Arch("sm_87", (8, 7), (7, 4), 163 * 1024, 164 * 1024, 1536, 16, "Ampere (Orin)",
             _MMA_SM80, cp_async=True, ldmatrix=True),
        Arch("sm_89", (8, 9), (7, 8), 99 * 1024, 100 * 1024, 1536, 24,
             "Ada (L4, L40, RTX 40xx)", _MMA_SM80, cp_async=True, ldmatrix=True),
        Arch("sm_90", (9, 0), (7, 8), 227 * 1024, 228 * 1024, 2048, 32, "Hopper (H100, H200)",
             _MMA_SM80, tma=True, cp_async=True, ldmatrix=True, mma_sync_peak_fraction=0.2),
        Arch("sm_90a", (9, 0), (8, 0), 227 * 1024, 228 * 1024, 2048, 32,
             "Hopper with wgmma and setmaxnreg", _MMA_SM80, wgmma=True, tma=True,
             cp_async=True, ldmatrix=True, mma_sync_peak_fraction=0.2),
        Arch("sm_100", (10, 0), (8, 6), 227 * 1024, 228 * 1024, 2048, 32, "Blackwell (B200)",
             _MMA_SM80, tma=True, cp_async=True, ldmatrix=True),
        Arch("sm_103", (10, 3), (8, 8), 227 * 1024, 228 * 1024, 2048, 32, "Blackwell (B300)",
             _MMA_SM80, tma=True, cp_async=True, ldmatrix=True),
        Arch("sm_120", (12, 0), (8, 7), 99 * 1024, 100 * 1024, 1536, 32,
             "Blackwell (RTX 50xx)", _MMA_SM80, tma=True, cp_async=True, ldmatrix=True),
        Arch("sm_121", (12, 1), (8, 8), 99 * 1024, 100 * 1024, 1536, 32,
             "Blackwell (DGX Spark)", _MMA_SM80, tma=True, cp_async=True, ldmatrix=True),
    )
})
"""Architectures both LLVM 22 and CUDA 13's ptxas accept (ptxas 13 dropped sm_70 and older)."""

DEFAULT_ARCH = "sm_90"
"""The architecture of ``Target("cuda")`` on a machine without a GPU."""

KINDS = ("cuda", "sim")


def resident_blocks(threads, registers, shared_bytes, *, warp_size: int,
                    max_threads_per_sm: int, registers_per_sm: int, shared_memory_per_sm: int,
                    max_blocks_per_sm: int, max_threads_per_block: int,
                    max_registers_per_thread: int, max_shared_per_block: int):
    """The occupancy rule, the one place it is written: blocks resident on an SM with these
    figures (see :meth:`Target.blocks_per_sm`, which passes its own). Elementwise on numpy
    arrays; 0 where one block does not fit."""
    import numpy as np

    threads, registers, shared = (np.asarray(x) for x in (threads, registers, shared_bytes))
    warps = -(-threads // warp_size)
    lanes = np.maximum(warps * warp_size, 1)
    regs = -(-registers // 8) * 8
    by_shared = np.where(shared > 0, shared_memory_per_sm // np.maximum(shared, 1),
                         max_blocks_per_sm)
    blocks = np.minimum(np.minimum(max_threads_per_sm // lanes, by_shared),
                        np.minimum(registers_per_sm // np.maximum(regs * lanes, 1),
                                   max_blocks_per_sm))
    fits = ((threads <= max_threads_per_block) & (registers <= max_registers_per_thread)
            & (shared <= max_shared_per_block))
    out = np.where(fits, np.maximum(blocks, 0), 0)
    return int(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class TargetKind:
    """The kind of a target, as TVM's ``target.kind`` (``.name`` is ``"cuda"`` or ``"sim"``)."""

    name: str


# Peak throughput of an H100 SXM (dense, per second), scaled per SM and clock below so that
# a target of another SM count or clock gets figures of the same shape.
_H100_SMS = 132
_H100_CLOCK = 1.755e9
_CUDA_CORE_FLOPS = {  # FLOP per SM per clock on CUDA cores (an FMA counts 2)
    "float64": 128, "float16": 512, "bfloat16": 512, "int32": 128,
}
_TENSOR_CORE_FLOPS = {  # FLOP per SM per clock on tensor cores, dense
    "float16": 4096, "bfloat16": 4096, "tf32": 2048, "int8": 8192, "float64": 256,
    "float8_e4m3fn": 8192, "float8_e5m2": 8192,
}
_AMPERE_TENSOR_SCALE = 0.5  # an sm_8x tensor core does half of Hopper's work per clock
_MODEL_FIGURES = ("fp32_lanes_per_sm", "int32_lanes_per_sm", "schedulers_per_sm",
                  "shared_bytes_per_clock", "l2_to_sm_bytes_per_clock",
                  "global_latency_cycles", "barrier_cycles", "shuffle_cycles",
                  "tile_copy_bytes_per_clock", "mma_sync_peak_fraction")


@dataclass(frozen=True)
class Target:
    """A GPU target, frozen. Build it from a string: ``Target("cuda -arch=sm_80")``.

    Options of the string (``-key=value``): ``-arch`` (an sm name), ``-max_threads_per_block``,
    ``-max_shared_memory_per_block``, ``-num_sms``, ``-registers_per_block`` and
    ``-clock_hz``; ``-device``, ``-model`` and ``-libs`` are accepted and kept, as TVM's are.
    """

    spec: str = "cuda"
    kind: TargetKind = field(init=False)
    arch: str = field(init=False)
    from_device: bool = field(init=False)
    """Whether the figures were read off a present GPU."""
    num_sms: int = field(init=False)
    warp_size: int = field(init=False, default=32)
    max_threads_per_block: int = field(init=False)
    max_block_dim: tuple[int, int, int] = field(init=False, default=(1024, 1024, 64))
    max_grid_dim: tuple[int, int, int] = field(init=False, default=(2**31 - 1, 65535, 65535))
    max_shared_memory_per_block: int = field(init=False)
    """Static shared memory one block may declare (48 KiB on every architecture here)."""
    max_shared_memory_per_block_optin: int = field(init=False)
    """Shared memory one block may use as dynamic shared memory after the opt-in."""
    shared_memory_per_sm: int = field(init=False)
    max_local_memory_per_thread: int = field(init=False, default=512 * 1024)
    max_threads_per_sm: int = field(init=False)
    max_blocks_per_sm: int = field(init=False)
    registers_per_sm: int = field(init=False, default=65536)
    registers_per_block: int = field(init=False, default=65536)
    max_registers_per_thread: int = field(init=False, default=255)
    clock_hz: float = field(init=False)
    dram_bytes_per_s: float = field(init=False)
    l2_bytes_per_s: float = field(init=False)
    l2_bytes: int = field(init=False)
    global_memory_bytes: int = field(init=False)
    launch_seconds: float = field(init=False, default=2.5e-6)
    """What the driver and the GPU spend to start one kernel (an empty kernel's time)."""
    dependent_launch_seconds: float = field(init=False, default=0.3e-6)
    """What one more kernel adds right behind another in the same stream or CUDA graph
    (the first drains, the second fills the SMs); the host's share of ``launch_seconds``
    overlaps the first kernel."""
    fp32_lanes_per_sm: int = field(init=False)
    int32_lanes_per_sm: int = field(init=False)
    schedulers_per_sm: int = field(init=False)
    shared_bytes_per_clock: int = field(init=False)
    l2_to_sm_bytes_per_clock: int = field(init=False)
    global_latency_cycles: int = field(init=False)
    barrier_cycles: int = field(init=False)
    shuffle_cycles: int = field(init=False)
    tile_copy_bytes_per_clock: int = field(init=False)
    mma_sync_peak_fraction: float = field(init=False)
    options: MappingProxyType = field(init=False)

    def __post_init__(self):
        spec = self.spec.spec if isinstance(self.spec, Target) else self.spec
        if not isinstance(spec, str):
            raise TargetError(f"a target is a string such as 'cuda -arch=sm_80', got {spec!r}")
        kind, opts = _parse(spec)
        arch_name = opts.get("arch")
        dev = None
        if arch_name is None:
            dev = _device_facts() if kind == "cuda" else None
            arch_name = dev["arch"] if dev else DEFAULT_ARCH
        if arch_name not in ARCHS:
            raise TargetError(
                f"unknown architecture {arch_name!r} in target {spec!r}; known: "
                f"{', '.join(ARCHS)}"
            )
        arch = ARCHS[arch_name]
        facts = {
            "num_sms": _H100_SMS, "max_threads_per_block": 1024,
            "max_shared_memory_per_block": 48 * 1024,
            "max_shared_memory_per_block_optin": arch.max_shared_per_block_optin,
            "shared_memory_per_sm": arch.shared_per_sm,
            "max_threads_per_sm": arch.max_threads_per_sm,
            "max_blocks_per_sm": arch.max_blocks_per_sm, "registers_per_sm": 65536,
            "registers_per_block": 65536, "clock_hz": _H100_CLOCK,
            "dram_bytes_per_s": 3.0e12, "l2_bytes_per_s": 5.5e12, "l2_bytes": 50 * 2**20,
            "global_memory_bytes": 80 * 2**30,
        }
        facts.update({k: getattr(arch, k) for k in _MODEL_FIGURES})
        if dev is not None:
            facts.update({k: v for k, v in dev.items() if k in facts})
        for key in ("max_threads_per_block", "max_shared_memory_per_block", "num_sms",
                    "registers_per_block"):
            if key in opts:
                facts[key] = _int_option(spec, key, opts[key])
        if "clock_hz" in opts:
            facts["clock_hz"] = float(_int_option(spec, "clock_hz", opts["clock_hz"]))
        kv = object.__setattr__
        kv(self, "spec", spec)
        kv(self, "kind", TargetKind(kind))
        kv(self, "arch", arch_name)
        kv(self, "from_device", dev is not None)
        for key, value in facts.items():
            kv(self, key, value)
        kv(self, "options", MappingProxyType(dict(opts)))

    # --- architecture facts ------------------------------------------------------------

    @property
    def arch_info(self) -> Arch:
        return ARCHS[self.arch]

    @property
    def capability(self) -> tuple[int, int]:
        return self.arch_info.capability

    @property
    def sm(self) -> int:
        """The compute capability as one number (90 for sm_90 and sm_90a)."""
        major, minor = self.capability
        return major * 10 + minor

    @property
    def ptx_version(self) -> tuple[int, int]:
        return self.arch_info.ptx_version

    @property
    def has_cp_async(self) -> bool:
        return self.arch_info.cp_async

    @property
    def has_ldmatrix(self) -> bool:
        return self.arch_info.ldmatrix

    @property
    def has_dependent_launch(self) -> bool:
        """Programmatic dependent launch (``griddepcontrol``, sm_90 and later): a kernel may
        start while the one before it in its stream finishes, and waits for it in its first
        instruction (backend_ptx.codegen)."""
        return self.sm >= 90

    @property
    def has_l2_prefetch(self) -> bool:
        """``cp.async.bulk.prefetch.L2`` (sm_90 and later, PTX ISA 8.0: sm_90a here)."""
        return self.has_dependent_launch and self.ptx_version >= (8, 0)

    @property
    def has_wgmma(self) -> bool:
        return self.arch_info.wgmma

    @property
    def has_tma(self) -> bool:
        return self.arch_info.tma

    @property
    def mma_shapes(self) -> tuple[str, ...]:
        return self.arch_info.mma_shapes

    def has_mma(self, shape: str, in_dtype: str) -> bool:
        """Whether mma.sync of ``shape`` (``"m16n8k16"``) on ``in_dtype`` inputs exists."""
        short = {"float16": "f16", "bfloat16": "bf16", "tf32": "tf32"}.get(in_dtype, in_dtype)
        return f"{shape}.{short}" in self.arch_info.mma_shapes

    @property
    def features(self) -> frozenset[str]:
        """Names of what the architecture has: cp.async, ldmatrix, mma, wgmma, tma."""
        a = self.arch_info
        names = {n for n, on in (("cp.async", a.cp_async), ("ldmatrix", a.ldmatrix),
                                 ("mma", bool(a.mma_shapes)), ("wgmma", a.wgmma),
                                 ("tma", a.tma)) if on}
        return frozenset(names)

    # --- rates ---------------------------------------------------------------------------

    def peak_flops(self, dtype: str = "float32", tensor_core: bool = False) -> float:
        """Dense peak FLOP/s of the whole GPU for ``dtype`` (``"tf32"`` for TF32) on CUDA
        cores or tensor cores; 0.0 where the unit does not take that dtype."""
        if tensor_core:
            if not self.arch_info.mma_shapes:
                return 0.0
            per_clock = _TENSOR_CORE_FLOPS.get(dtype, 0)
            if self.capability[0] < 9:
                per_clock *= _AMPERE_TENSOR_SCALE
        elif dtype in ("float32", "tf32"):
            per_clock = 2 * self.fp32_lanes_per_sm  # an FMA is two FLOP
        else:
            per_clock = _CUDA_CORE_FLOPS.get(dtype, 0)
        return float(per_clock) * self.num_sms * self.clock_hz

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    def blocks_per_sm(self, threads, registers, shared_bytes):
        """Blocks of a kernel resident on one SM at once (its occupancy): the least of the
        SM's block slots and what its threads, registers and shared memory allow; 0 where
        one block does not fit at all (too many threads, registers per thread or shared
        memory per block). ``registers`` are per thread, allocated in units of 8 (256 per
        warp). Works on ints and, elementwise, on numpy arrays."""
        return resident_blocks(
            threads, registers, shared_bytes, warp_size=self.warp_size,
            max_threads_per_sm=self.max_threads_per_sm, registers_per_sm=self.registers_per_sm,
            shared_memory_per_sm=self.shared_memory_per_sm,
            max_blocks_per_sm=self.max_blocks_per_sm,
            max_threads_per_block=self.max_threads_per_block,
            max_registers_per_thread=self.max_registers_per_thread,
            max_shared_per_block=self.max_shared_memory_per_block_optin)

    @property
    def warps_to_hide_latency(self) -> int:
        """Resident warps per SM that keep every scheduler issuing (two per scheduler)."""
        return 2 * self.schedulers_per_sm

    @property
    def shared_words_per_clock(self) -> int:
        """4-byte words one SM's shared memory delivers per clock (its banks)."""
        return self.shared_bytes_per_clock // 4

    @property
    def l2_bytes_per_clock(self) -> float:
        """L2 bandwidth of the whole GPU in bytes per SM clock."""
        return self.l2_bytes_per_s / self.clock_hz

    @property
    def label(self) -> str:
        """A name for messages: ``"sm_80 (Ampere (A100))"``."""
        return f"{self.arch} ({self.arch_info.label})"

    # --- TVM compatibility ----------------------------------------------------------------

    def __str__(self) -> str:
        return self.spec

    def __enter__(self) -> Target:
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _stack().pop()

    @staticmethod
    def current(allow_none: bool = True) -> Target | None:
        """The innermost target of a ``with`` block (TVM's ``Target.current``)."""
        stack = _stack()
        if stack:
            return stack[-1]
        if allow_none:
            return None
        raise TargetError("no target is current; use `with Target('cuda'):` or pass target=")

    def with_arch(self, arch: str) -> Target:
        """This target for another architecture."""
        opts = dict(self.options)
        opts["arch"] = arch
        return Target(_unparse(self.kind.name, opts))

    @property
    def is_sim(self) -> bool:
        return self.kind.name == "sim"

    @property
    def record_spec(self) -> str:
        """The target string records store: ``"cuda"`` plus the options, for the simulator
        too (a simulated candidate is one of the GPU it models), so logs written for
        ``"cuda"`` match ``Target("cuda")`` and ``Target("sim")`` alike."""
        return _unparse("cuda", dict(self.options))

    def __reduce__(self):
        return (Target, (self.spec,))

    def __hash__(self) -> int:
        # the options mapping is not hashable; equal targets have equal strings
        return hash(self.spec)


def as_target(target: str | Target | None) -> Target:
    """``target`` as a :class:`Target`: a string is parsed, None is :func:`current_target`."""
    if target is None:
        return current_target()
    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        return _cached(target)
    raise TargetError(
        f"a target is a string such as 'cuda -arch=sm_80' or a Target, got {target!r}"
    )


def arch_for_capability(major: int, minor: int) -> str:
    """The sm name of a device's compute capability (9.0 -> ``"sm_90"``), or a
    :class:`TargetError` naming the supported ones."""
    for name, arch in ARCHS.items():
        if arch.capability == (major, minor) and not name.endswith("a"):
            return name
    raise TargetError(
        f"compute capability {major}.{minor} (sm_{major}{minor}) is not supported; "
        f"supported: {', '.join(n for n in ARCHS if not n.endswith('a'))}"
    )


def arch_of(target: str | Target | None) -> str:
    """The sm name ``target`` compiles for: ``"sm_80"`` for ``"cuda -arch=sm_80"``, a
    :class:`Target` or a bare ``"sm_80"``."""
    return as_target(target).arch


def current_target() -> Target:
    """The target of the innermost ``with Target(...)`` block, else ``Target("cuda")``."""
    stack = _stack()
    return stack[-1] if stack else _cached("cuda")


@functools.lru_cache(maxsize=64)
def _cached(spec: str) -> Target:
    return Target(spec)


_local = threading.local()


def _stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _parse(spec: str) -> tuple[str, dict]:
    parts = spec.split()
    if not parts:
        raise TargetError("empty target string; use 'cuda' or 'cuda -arch=sm_90'")
    kind = parts[0]
    opts: dict = {}
    if kind == "nvptx":
        kind = "cuda"
    elif kind.startswith("sm_"):  # a bare architecture: "sm_80" is "cuda -arch=sm_80"
        kind, opts["arch"] = "cuda", kind
    if kind not in KINDS:
        raise TargetError(
            f"unknown target kind {kind!r} in {spec!r}; this project compiles for 'cuda' "
            "(and runs 'sim', the CPU simulator of a GPU)"
        )
    for part in parts[1:]:
        if not part.startswith("-") or "=" not in part:
            if part.startswith("-") and part.lstrip("-"):
                opts[part.lstrip("-")] = "1"
                continue
            raise TargetError(
                f"target option {part!r} in {spec!r} is not of the form -key=value"
            )
        key, value = part.lstrip("-").split("=", 1)
        if key == "mcpu":
            key = "arch"
        opts[key] = value
    return kind, opts


def _unparse(kind: str, opts: dict) -> str:
    return " ".join([kind] + [f"-{k}={v}" for k, v in opts.items()])


def _int_option(spec: str, key: str, value: str) -> int:
    try:
        n = int(float(value))
    except ValueError:
        raise TargetError(f"target option -{key}={value} in {spec!r} is not a number") from None
    if n <= 0:
        raise TargetError(f"target option -{key}={value} in {spec!r} must be positive")
    return n


@functools.lru_cache(maxsize=1)
def _device_facts() -> dict | None:
    """Figures of GPU 0 read through the CUDA driver, or None without a GPU."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # type: ignore[no-redef]
        except ImportError:
            return None
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return None
        err, n = driver.cuDeviceGetCount()
        if int(err) != 0 or n < 1:
            return None
        err, dev = driver.cuDeviceGet(0)
        if int(err) != 0:
            return None
        A = driver.CUdevice_attribute

        def attr(name: str) -> int:
            e, v = driver.cuDeviceGetAttribute(getattr(A, name), dev)
            if int(e) != 0:
                raise RuntimeError(name)
            return int(v)

        major = attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
        minor = attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
        arch = f"sm_{major}{minor}"
        if arch not in ARCHS:
            return None
        if arch == "sm_90":
            arch = "sm_90a"  # every sm_90 part has wgmma; sm_90a code runs on it
        mem_clock_khz = attr("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE")
        bus_bits = attr("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH")
        e, total = driver.cuDeviceTotalMem(dev)
        facts = {
            "arch": arch,
            "num_sms": attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            "max_threads_per_block": attr("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            "max_shared_memory_per_block": attr(
                "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
            "max_shared_memory_per_block_optin": attr(
                "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            "shared_memory_per_sm": attr(
                "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            "max_threads_per_sm": attr("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR"),
            "max_blocks_per_sm": attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR"),
            "registers_per_sm": attr("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR"),
            "registers_per_block": attr("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK"),
            "clock_hz": attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE") * 1e3,
            "l2_bytes": attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
            # double data rate: two transfers a memory clock
            "dram_bytes_per_s": 2.0 * mem_clock_khz * 1e3 * bus_bits / 8,
        }
        if int(e) == 0:
            facts["global_memory_bytes"] = int(total)
        return facts
    except Exception:  # a broken driver reads as no GPU: the defaults then apply
        return None


def replace(target: Target, **facts) -> Target:
    """A copy of ``target`` with some figures changed (for tests and what-if models)."""
    new = Target(target.spec)
    for key, value in facts.items():
        if key not in {f.name for f in dataclasses.fields(Target)} or key in ("spec", "kind"):
            raise TargetError(f"{key!r} is not a figure of a Target")
        object.__setattr__(new, key, value)
    return new


@contextlib.contextmanager
def using(target: str | Target):
    """``with using("cuda -arch=sm_80"):`` is ``with Target("cuda -arch=sm_80"):``."""
    with as_target(target) as t:
        yield t
