"""The fused attention sketch rule: an ``ops.attention`` task as the one fused kernel.

A task whose output is an ``ops.attention`` (tag ``attention``, its inputs the task's
placeholders) gets the sketch ``fused_attention(<output>)``. Its one step,
:class:`AttentionStep`, chooses one of the legal configurations of the kernel's knob space
(:func:`~ptxforge.ops.schedules.attention.attention_candidates`: warps, ``block_kv``,
stages) and emits the ``fused_attention`` schedule step with it, so a state is recorded,
printed and replayed like any other; :func:`attention_model` ranks the states by
:func:`~ptxforge.ops.schedules.attention.attention_time`, the default chooser's estimate.
Such a task gets this sketch alone (``SearchTask.sketches``): its general sketches, the
unfused stages on CUDA cores, measured 18-28x slower and cost 8x the build time of a fused
candidate (HF BERT at sequence 128, H200: 53-81 against 2.9 us, 3.7 against 0.44 s a
build; ``docs/tuning.md``). Where the rule does not apply (an attention the kernel cannot
run, stages fused before it) the general sketches stay. The kernel model
(``autosched/kernel_model.py``) dispatches :class:`AttentionStep` to
:func:`attention_model`. The usual builders (:class:`~ptxforge.measure.LocalBuilder`)
build a state's ``fused_attention`` step as the fused kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..passes.schedule.names import slot_name
from .sketch import ChoiceSlot, Sketch


@dataclass(frozen=True)
class AttentionStep:
    """The attention output stage ``stage``; ``configs``: the kernel configurations a state
    chooses among (by index); ``workload``: the
    :class:`~ptxforge.ops.schedules.attention.AttentionWorkload`."""

    stage: str
    configs: tuple
    workload: object = field(compare=False, hash=False)
    target: object = field(default=None, compare=False, hash=False)

    def slot(self, kind: str) -> str:
        return slot_name(self.stage, "attention", kind)

    def slots(self) -> list:
        return [ChoiceSlot(self.slot("config"), tuple(range(len(self.configs))))]

    def step_pass(self, cfg):
        """The ``fused_attention`` schedule step of configuration ``cfg``."""
        from ..ops.schedules.attention.schedule_pass import FusedAttention, views_param

        w = self.workload
        return FusedAttention(cfg.warps, cfg.block_kv, cfg.stages, w.causal, w.scale,
                              cfg.mma, w.layout, views_param(w), cfg.scores, cfg.p_operand,
                              cfg.overlap)

    def emit(self, vals, out) -> None:
        cfg = self.configs[int(vals[self.slot("config")])]
        out["structure"].append(self.step_pass(cfg))


def attention_step(task) -> AttentionStep | None:
    """The attention step of ``task``, or None when the rule does not apply (no
    ``ops.attention`` output over the task's placeholders, or no configuration of the
    kernel runs it on the task's target)."""
    from ..ops.attention import TAG, attention_inputs, attention_workload
    from ..ops.schedules.attention import AttentionError, attention_candidates

    outs = list(task.ir_dag.outputs)
    if len(outs) != 1 or getattr(outs[0].op, "tag", "") != TAG:
        return None
    (out,) = outs
    try:
        ins = attention_inputs(out)
        w = attention_workload(out)
    except AttentionError:
        return None
    params = list(task.tensors)
    # the kernel reads placeholders only (q, k and v may be one: a combined projection's)
    if {id(t) for t in ins} != {id(t) for t in params[:-1]} or params[-1] is not out:
        return None  # stages fused before the attention
    configs = tuple(attention_candidates(w, task.target))
    if configs and task.target.has_wgmma:
        from ..ops.schedules.attention.knobs_wgmma import overlap_candidates

        # the overlapped register form, which the default chooser leaves out until timed
        configs += tuple(overlap_candidates(w, task.target))
    if not configs:
        return None
    return AttentionStep(out.op.name, configs, w, task.target)


def attention_sketches(task) -> list:
    """The fused attention sketch of ``task`` (empty when the rule does not apply)."""
    step = attention_step(task)
    return [Sketch(f"fused_attention({step.stage})", [step])] if step is not None else []


def _config_table(step: AttentionStep) -> dict:
    """Per configuration of ``step`` (by index): threads, registers, shared bytes, blocks
    and the estimate, computed once per step (a population indexes them: the time model is
    Python, too slow to run per state)."""
    table = _TABLES.get(id(step))
    if table is not None and table[0] is step:
        return table[1]
    from ..ops.schedules.attention import attention_time, shared_layout
    from ..ops.schedules.attention.knobs import registers_estimate

    w = step.workload
    cfgs = step.configs
    out = {
        "threads": np.array([c.threads for c in cfgs], dtype=np.int64),
        "regs": np.array([registers_estimate(w, c) for c in cfgs], dtype=np.int64),
        "shared_bytes": np.array([shared_layout(w, c).total for c in cfgs], dtype=np.int64),
        "blocks": np.array([-(-w.q_len // c.block_q) * w.heads * w.batch for c in cfgs],
                           dtype=np.int64),
        "est": np.array([attention_time(w, c, step.target) for c in cfgs]),
    }
    if len(_TABLES) > 64:
        _TABLES.clear()
    _TABLES[id(step)] = (step, out)
    return out


_TABLES: dict = {}


def attention_model(step: AttentionStep, V, hw, n: int) -> dict:
    """Validity, resource use and the analytical time of attention states (vectorized over
    the configurations a population picks): every configuration is legal (the rule offers
    only those), the time is :func:`~ptxforge.ops.schedules.attention.attention_time`."""
    from .kernel_model import _occupancy

    w = step.workload
    idx = np.asarray(V[step.slot("config")], dtype=np.int64)
    table = _config_table(step)
    threads, regs, shared, blocks = (table[k][idx] for k in
                                     ("threads", "regs", "shared_bytes", "blocks"))
    occ = _occupancy(threads, regs, shared, blocks, hw)
    est = table["est"][idx]
    io = 2.0 * (w.batch * w.heads * w.q_len * (w.head_dim + w.v_dim)
                + 2 * w.batch * w.kv_heads * w.kv_len * (w.head_dim + w.v_dim) / 2)
    return {"valid": np.ones(n, dtype=bool), "blocks": blocks, "threads": threads,
            "regs": regs, "shared_bytes": shared, "unique_bytes": np.full(n, io),
            "global_bytes": np.full(n, io), "est": est, **occ}
