"""What a measurement takes and gives: tasks, inputs, build and measure results, error codes.

Both tuners describe a candidate the same way: a :class:`TaskSpec` (the unscheduled tensor IR
of a computation, as text) plus a schedule as pass pipeline text. Builders and runners work
from that alone, so they serve AutoTVM and the auto-scheduler alike, and a record on disk
replays without the tuner that made it.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

ERROR_COST = 1e10
"""The cost recorded for a failed measurement (as TVM does), in seconds."""


class MeasureErrorNo(IntEnum):
    """Why a measurement failed (0: it did not)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the schedule cannot be applied or lowered, or breaks a GPU limit
    COMPILE_HOST = 2  # the host side of the module is malformed
    COMPILE_DEVICE = 3  # LLVM codegen or the assembler (ptxas) failed
    RUNTIME_DEVICE = 4  # a fault or a refused launch
    WRONG_ANSWER = 5  # the results differ from the reference
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


_PARSED: OrderedDict = OrderedDict()
_PARSED_MAX = 16


@dataclass(frozen=True)
class TaskSpec:
    """An unscheduled computation to tune, in a form any process can rebuild.

    ``module_text`` is the printed tensor IR from ``to_ir`` (parsing it back is exact);
    ``flop`` the floating-point work of one run; ``reference_pipeline_text`` an optional schedule
    (pass text) whose results the runners take as the right answer when they check
    correctness (empty: a plain one-thread-per-output schedule, see
    :func:`ptxforge.measure.reference.default_reference_pipeline`).
    """

    workload_key: str
    target: str
    module_text: str
    flop: float
    name: str = ""
    reference_pipeline_text: str = ""

    @classmethod
    def from_tensors(cls, tensors, workload_key: str | None = None, target: str = "cuda",
                     name: str = "", reference_pipeline_text: str = "") -> TaskSpec:
        """A task from the argument tensors of a compute declaration (inputs and outputs,
        in parameter order). ``workload_key`` defaults to the DAG's structural key."""
        from ..ir.compute_dag import ComputeDAG
        from ..ir.to_ir import to_ir

        dag = ComputeDAG(list(tensors))
        return cls(
            workload_key=workload_key or dag.workload_key(),
            target=target,
            module_text=str(to_ir(dag)),
            flop=dag.flop_count(),
            name=name or dag.outputs[-1].name,
            reference_pipeline_text=reference_pipeline_text,
        )

    @property
    def text_hash(self) -> str:
        """A short digest of ``module_text`` (names the computation in caches)."""
        return hashlib.sha256(self.module_text.encode()).hexdigest()[:16]

    def module(self):
        """The unscheduled tensor IR, parsed once per process (modules are immutable)."""
        key = self.text_hash
        hit = _PARSED.get(key)
        if hit is not None:
            _PARSED.move_to_end(key)
            return hit
        from ..ir.parser import parse_module

        mod = parse_module(self.module_text)
        _PARSED[key] = mod
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
        return mod

    def to_json(self) -> dict:
        """The identifying part of the task, as records store it."""
        return {"key": self.workload_key, "target": self.target, "name": self.name,
                "flop": self.flop}


@dataclass(frozen=True)
class MeasureInput:
    """One candidate: a task plus a schedule as pass pipeline text (:attr:`pipeline_text`:
    the form in which a candidate is stored in records and replayed; builders parse it with
    :meth:`~ptxforge.passes.pipeline.Pipeline.parse`), or a plan of it.

    ``payload`` is what the tuner stores in the record next to the pipeline (AutoTVM: the
    config entity; the auto-scheduler: its state); it must be JSON-able.

    ``scheduled_text``: the scheduled tensor IR as text, when the tuner has it already; the
    builder then parses it instead of applying the pipeline a second time. Records do not
    store it, and it takes no part in comparisons.

    ``plan``: a :class:`~ptxforge.measure.plan.SchedulePlan` the builder makes the schedule
    from, in its worker (the one-way path: the tuner sends the search state, not text).
    The pipeline text is then what the build returns (:meth:`learn_pipeline`); a reader that
    asks for it before (a builder that ignores plans) has the plan make it. Takes no part
    in comparisons.
    """

    task: TaskSpec
    _pipeline_text: str = ""
    payload: dict | None = None
    scheduled_text: str = field(default="", compare=False, repr=False)
    plan: Any = field(default=None, compare=False, repr=False)

    @property
    def pipeline_text(self) -> str:
        """The schedule as pass pipeline text (for a plan: the text its build returned, or
        made now when no build returned one; empty when the plan does not schedule)."""
        if self._pipeline_text or self.plan is None:
            return self._pipeline_text
        return self.plan.pipeline_text()

    def learn_pipeline(self, text: str, failed: bool = False) -> None:
        """Take the pipeline text the builder made from :attr:`plan` (``failed``: the build
        failed without making one, e.g. the schedule does not apply: the record then holds
        no pipeline, and the text is not made again here)."""
        if self.plan is not None and not self._pipeline_text:
            self.plan.learn(text, failed)

    @property
    def state(self):
        """The candidate's schedule as a pass pipeline (TVM's ``inp.state``; what
        ``ComputeDAG.print_python_code_from_state`` prints)."""
        from ..passes.pipeline import SchedulePipeline

        return SchedulePipeline.parse(self.pipeline_text)

    def __repr__(self) -> str:
        text = self._pipeline_text or (self.plan.known_text() if self.plan is not None else "")
        plan = f", plan={self.plan!r}" if self.plan is not None else ""
        return (f"MeasureInput(task={self.task!r}, pipeline_text={text!r}, "
                f"payload={self.payload!r}{plan})")


@dataclass(frozen=True)
class BuildResult:
    """What a builder made of one :class:`MeasureInput`.

    ``artifact`` (a :class:`~ptxforge.measure.artifact.BuildArtifact`, picklable) is None on
    error; ``time_cost`` is the seconds the build took; ``stage_seconds`` splits that time
    by stage (``schedule`` when the builder made the schedule from a plan, else ``parse``
    and ``apply``; ``lower``, ``analyze``, ``llvm_ir``, ``llvm_opt``, ``ptx``, ``ptxas``, and
    whatever finer stages the compiler reports through :mod:`ptxforge.stages`);
    ``pipeline_text``: the text of the pipeline the builder made from the input's plan
    (empty for an input that came with its text, or whose plan did not schedule).
    """

    artifact: Any
    error_no: int
    error_msg: str
    time_cost: float
    stage_seconds: dict = field(default_factory=dict)
    pipeline_text: str = ""


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of measuring one candidate.

    ``costs``: seconds per run, one per repeat (``(1e10,)`` on error); ``all_cost``: seconds
    the whole measurement took (build and run); ``estimated``: True when the costs come
    from the analytical model of the simulator runner rather than a GPU; ``correctness``:
    ``""`` (not checked), ``"passed"``, or ``"skipped: <why>"``.
    """

    costs: tuple
    error_no: int
    error_msg: str
    all_cost: float
    timestamp: float
    estimated: bool = False
    device: str = ""
    correctness: str = ""

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR

    @property
    def mean(self) -> float:
        """Mean cost in seconds (``1e10`` for a failed measurement)."""
        if not self.ok or not self.costs:
            return ERROR_COST
        return float(sum(self.costs) / len(self.costs))

    def __repr__(self) -> str:
        if self.ok:
            costs = "(" + ", ".join(repr(float(c)) for c in self.costs) + ",)"
        else:
            first = self.error_msg.strip().splitlines()[0] if self.error_msg.strip() else ""
            name = MeasureErrorNo(self.error_no).name if self.error_no in set(
                MeasureErrorNo) else str(self.error_no)
            costs = f"({name}({first[:300]!r}),)"
        extra = ", estimated=True" if self.estimated else ""
        if self.correctness:
            extra += f", correctness={self.correctness!r}"
        return (f"MeasureResult(costs={costs}, error_no={int(self.error_no)}, "
                f"all_cost={self.all_cost!r}, timestamp={self.timestamp!r}{extra})")

    def to_json(self) -> dict:
        """The JSON form stored in records."""
        out = {"costs": [float(c) for c in self.costs], "error_no": int(self.error_no),
               "error_msg": self.error_msg, "all_cost": float(self.all_cost),
               "timestamp": float(self.timestamp), "estimated": bool(self.estimated)}
        if self.device:
            out["device"] = self.device
        if self.correctness:
            out["correctness"] = self.correctness
        return out

    @classmethod
    def from_json(cls, d: dict) -> MeasureResult:
        costs = tuple(float(c) for c in d["costs"])
        if not all(math.isfinite(c) for c in costs):
            raise ValueError(f"costs must be finite numbers, got {d['costs']!r}")
        return cls(costs=costs, error_no=int(d["error_no"]), error_msg=str(d.get("error_msg", "")),
                   all_cost=float(d.get("all_cost", 0.0)),
                   timestamp=float(d.get("timestamp", 0.0)),
                   estimated=bool(d.get("estimated", False)), device=str(d.get("device", "")),
                   correctness=str(d.get("correctness", "")))


def error_result(error_no: int, error_msg: str, all_cost: float = 0.0,
                 device: str = "", estimated: bool = False) -> MeasureResult:
    """A failed measurement, stamped now."""
    return MeasureResult((ERROR_COST,), int(error_no), error_msg, all_cost, time.time(),
                         estimated=estimated, device=device)
