"""Fused attention on tensor cores: the workload, the knob space and the kernel builder
(see ``docs/attention.md``)."""

from .knobs import (
    AttentionConfig,
    attention_candidates,
    attention_time,
    check_attention_config,
    choose_attention_config,
    shared_layout,
)
from .module import attention_module
from .workload import AttentionError, AttentionMask, AttentionWorkload, check_workload

__all__ = [
    "AttentionConfig",
    "AttentionError",
    "AttentionMask",
    "AttentionWorkload",
    "attention_candidates",
    "attention_module",
    "attention_time",
    "check_attention_config",
    "check_workload",
    "choose_attention_config",
    "shared_layout",
]
