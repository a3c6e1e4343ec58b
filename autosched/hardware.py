"""The GPU limits and rates the search checks states against and its cost features use.

They are read off a :class:`~ptxforge.target.Target`: ``HardwareParams()`` is the current
target's (an H100 / H200 without a GPU), ``HardwareParams.from_target("cuda -arch=sm_80")``
another's. Only the two search limits (``max_vthread_extent``,
``max_accumulators_per_thread``) are the search's own choices rather than facts of the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..target import Target, as_target

_FROM_TARGET = {
    "num_sms": "num_sms",
    "warp_size": "warp_size",
    "max_threads_per_block": "max_threads_per_block",
    "max_threads_per_sm": "max_threads_per_sm",
    "max_blocks_per_sm": "max_blocks_per_sm",
    "max_shared_memory_per_block": "max_shared_memory_per_block",
    "max_shared_memory_per_sm": "shared_memory_per_sm",
    "max_registers_per_sm": "registers_per_sm",
    "clock_hz": "clock_hz",
    "fma_per_sm_per_clock": "fp32_lanes_per_sm",
    "issue_per_sm_per_clock": "schedulers_per_sm",
    "dram_bytes_per_s": "dram_bytes_per_s",
    "shared_words_per_sm_per_clock": "shared_words_per_clock",
    "l2_bytes_per_s": "l2_bytes_per_s",
    "launch_s": "launch_seconds",
    "global_latency_cycles": "global_latency_cycles",
    "barrier_cycles": "barrier_cycles",
    "shuffle_cycles": "shuffle_cycles",
}
"""Each figure of :class:`HardwareParams` and the :class:`Target` figure it is."""


def _default(name: str):
    return field(default_factory=lambda: getattr(as_target(None), _FROM_TARGET[name]))


def _tensor_rate(t: Target) -> float:
    return t.peak_flops("float16", tensor_core=True) / (t.num_sms * t.clock_hz)


@dataclass(frozen=True)
class HardwareParams:
    """Per-GPU limits (checked before measuring) and rough rates (for the features and
    the analytical estimate that ranks states before any measurement).

    Every figure not given is the current target's (see :meth:`from_target` for another
    target); a figure given overrides it (``HardwareParams(num_sms=108)``).
    """

    num_sms: int = _default("num_sms")
    warp_size: int = _default("warp_size")
    max_threads_per_block: int = _default("max_threads_per_block")
    max_threads_per_sm: int = _default("max_threads_per_sm")
    max_blocks_per_sm: int = _default("max_blocks_per_sm")
    max_shared_memory_per_block: int = _default("max_shared_memory_per_block")
    max_shared_memory_per_sm: int = _default("max_shared_memory_per_sm")
    max_registers_per_sm: int = _default("max_registers_per_sm")
    max_vthread_extent: int = 8
    """The search's own limit on virtual threads per axis."""
    max_accumulators_per_thread: int = 128
    """The search's own limit on a thread's register tile."""
    clock_hz: float = _default("clock_hz")
    fma_per_sm_per_clock: int = _default("fma_per_sm_per_clock")
    issue_per_sm_per_clock: int = _default("issue_per_sm_per_clock")
    shared_words_per_sm_per_clock: int = _default("shared_words_per_sm_per_clock")
    dram_bytes_per_s: float = _default("dram_bytes_per_s")
    l2_bytes_per_s: float = _default("l2_bytes_per_s")
    launch_s: float = _default("launch_s")
    global_latency_cycles: int = _default("global_latency_cycles")
    barrier_cycles: int = _default("barrier_cycles")
    shuffle_cycles: int = _default("shuffle_cycles")
    tensor_flops_per_sm_per_clock: float = field(
        default_factory=lambda: _tensor_rate(as_target(None)))
    """Dense fp16 / bf16 tensor-core FLOP per SM per clock (0 without mma.sync)."""

    @classmethod
    def from_target(cls, target: Target | str | None = None, **overrides) -> HardwareParams:
        """The figures of ``target`` (a string such as ``"cuda -arch=sm_80"`` or a
        :class:`Target`; default: the current target), some replaced by ``overrides``."""
        t = as_target(target)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"HardwareParams has no figure {', '.join(unknown)}; "
                            f"known: {', '.join(sorted(known))}")
        figures = {name: getattr(t, attr) for name, attr in _FROM_TARGET.items()}
        figures["tensor_flops_per_sm_per_clock"] = _tensor_rate(t)
        figures.update(overrides)
        return cls(**figures)
