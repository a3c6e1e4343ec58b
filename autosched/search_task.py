"""SearchTask: one computation to tune, as the auto-scheduler tutorial creates it."""

from __future__ import annotations

import functools

import numpy as np

from ..passes.schedule.dag import ScheduleDAG as ComputeDAG
from ..target import Target, as_target
from .dag_analysis import DAGAnalysis
from .hardware import HardwareParams
from .workload_registry import WORKLOADS, make_workload_key, register_workload, workload_tensors


class SearchTask:
    """A computation to tune for a target (a string such as ``"cuda"``,
    ``"cuda -arch=sm_80"`` or ``"sim"``, or a :class:`~ptxforge.target.Target`; ``target``
    is then the Target). Records name the target by :attr:`Target.record_spec`: ``"cuda"``
    for ``"cuda"`` and ``"sim"`` alike, so logs written for ``"cuda"`` keep loading.

    Give ``func`` (a workload function, registered or not, or a registered name) and
    ``args``, as the tutorial does; or a ``compute_dag`` (with an optional
    ``workload_key``); or only a ``workload_key`` of a registered workload.

    ``compute_dag`` is the computation as declared; ``tensors`` (inputs then outputs) the
    tensors that schedules of this task are made for (:meth:`apply_best` returns them as
    ``args``): the same computation, with axes renamed where two stages' loops would
    otherwise share a name.
    """

    def __init__(self, func=None, args=None, compute_dag: ComputeDAG | None = None,
                 workload_key: str | None = None, target: Target | str = "cuda",
                 hardware_params: HardwareParams | None = None, desc: str = ""):
        self.target = as_target(target)
        self.hardware_params = hardware_params or HardwareParams.from_target(self.target)
        if func is not None:
            if isinstance(func, str):
                if func not in WORKLOADS:
                    raise KeyError(f"no workload named {func!r} is registered")
                fn = WORKLOADS[func]
            else:
                fn = func
                if WORKLOADS.get(fn.__name__) is not fn:
                    register_workload(fn, override=True)
            args = tuple(args or ())
            self.workload_key = workload_key or make_workload_key(fn, args)
            self.tensors = list(fn(*args))
            self.compute_dag = ComputeDAG(self.tensors)
        elif compute_dag is not None:
            # an IR ComputeDAG becomes a ScheduleDAG, which knows the schedule states
            self.compute_dag = compute_dag if isinstance(compute_dag, ComputeDAG) else (
                ComputeDAG(compute_dag.tensors))
            self.tensors = list(compute_dag.tensors)
            self.workload_key = workload_key or compute_dag.workload_key()
        elif workload_key is not None:
            self.workload_key = workload_key
            self.tensors = workload_tensors(workload_key)
            self.compute_dag = ComputeDAG(self.tensors)
        else:
            raise TypeError("SearchTask needs func= and args=, a compute_dag=, or a "
                            "workload_key= of a registered workload")
        for op in self.compute_dag.compute_ops:
            if op.num_outputs > 1:
                raise ValueError(
                    f"the auto-scheduler does not search tuple computes: stage {op.name} has "
                    f"{op.num_outputs} outputs; schedule it by hand (te.create_schedule) or "
                    "declare one compute per output")
        self.desc = desc or self.compute_dag.outputs[-1].name
        self.flop_ct = self.compute_dag.flop_count()
        # the DAG schedules are written for (to_ir gives its loops names that the IR's text
        # form keeps, so builders that parse the task's text see the same loops)
        self.ir_dag = ComputeDAG(self.tensors)

    def __repr__(self):
        return f"SearchTask({self.workload_key}, target={str(self.target)!r})"

    # -- derived, computed on first use ------------------------------------------------------
    @functools.cached_property
    def analysis(self) -> DAGAnalysis:
        return DAGAnalysis(self.ir_dag)

    @functools.cached_property
    def sketches(self) -> list:
        """The sketches the GPU rules generate for this computation (an attention's
        fused kernel among them)."""
        from .attention import attention_sketches
        from .fused_rows import fused_rows_sketches
        from .gemm_rows import gemm_rows_sketches
        from .sketch_rules import generate_sketches
        from .tensorcore import tensorcore_sketches

        fused = attention_sketches(self)
        if fused:
            # an attention the fused kernel runs gets that sketch alone: the unfused stages
            # on CUDA cores measured 18-28x slower (HF BERT s128 on an H200: 53-81 us
            # against 2.9) and took 8x the build time (3.7 s a candidate, some past the
            # builders' 10 s timeout), half of a 1,000-trial BERT run's build time
            return fused
        return (generate_sketches(self.analysis) + tensorcore_sketches(self)
                + fused_rows_sketches(self) + gemm_rows_sketches(self))

    @functools.cached_property
    def models(self) -> list:
        """One static model per sketch (features, validity, analytical estimate)."""
        from .kernel_model import SketchModel

        return [SketchModel(sk, self.analysis, self.hardware_params) for sk in self.sketches]

    @property
    def state_width(self) -> int:
        """Columns of a population row: the sketch index and the most slots of a sketch."""
        return 1 + max(len(sk.slots) for sk in self.sketches)

    @functools.cached_property
    def task_spec(self):
        """The measure-layer description builders and runners work from."""
        from ..measure import TaskSpec

        return TaskSpec.from_tensors(self.tensors, self.workload_key,
                                     self.target.record_spec, name=self.desc)

    def features(self, pop: np.ndarray) -> tuple:
        """``(features, valid, estimate)`` of a population (see
        :func:`~ptxforge.autosched.features.population_features`)."""
        from .features import population_features

        return population_features(self.models, pop, self.flop_ct,
                                   self.hardware_params.num_sms)

    # -- the tutorial's flow -----------------------------------------------------------------
    def tune(self, tuning_options, search_policy=None):
        """Search for a fast schedule, measuring ``tuning_options.num_measure_trials``
        candidates; records go to the options' callbacks (e.g. RecordToFile)."""
        from .search_policy import SketchPolicy
        from .tuner import run_tuning

        if search_policy is None:
            from .cost_model import XGBModel

            search_policy = SketchPolicy(self, XGBModel(), verbose=tuning_options.verbose)
        return run_tuning(self, search_policy, tuning_options)

    def apply_best(self, log_file: str, layout_rewrite_option=None):
        """``(schedule, args)`` of the best record of this task in ``log_file``; the
        schedule is a ptxforge te schedule that ``ptxforge.build(sch, args, target)``
        accepts. A best record whose pipeline no longer applies (or holds a pass a schedule
        cannot hold, such as a lowering pass) is skipped with a warning for the next best
        (see :class:`~ptxforge.autosched.ApplyHistoryBest`)."""
        _, sch = self._best_applicable(log_file)
        return sch, list(self.tensors)

    def _best_applicable(self, log_file: str) -> tuple:
        """``(MeasureInput, schedule)`` of the best record of ``log_file`` whose pipeline
        applies to this task, warning of each better one that does not."""
        import warnings

        from ..measure.record import ranked_records
        from .dispatch import MAX_TRIED
        from .printer import schedule_from_pipeline
        from .records import load_records

        ranked = ranked_records(load_records(log_file, self.workload_key),
                                key=lambda inp, res: "all").get("all", [])
        if not ranked:
            raise ValueError(f"{log_file} has no successful record of workload "
                             f"{self.workload_key}")
        errors = []
        for n, (inp, _) in enumerate(ranked[:MAX_TRIED]):
            try:
                return inp, schedule_from_pipeline(self, inp.pipeline_text)
            except Exception as e:  # noqa: BLE001 - any failure means the record is unusable
                errors.append(f"#{n + 1}: {type(e).__name__}: {e}")
                warnings.warn(f"{self.workload_key}: record #{n + 1} of {log_file} does not "
                              f"apply ({type(e).__name__}: {e}); trying the next best",
                              RuntimeWarning, stacklevel=3)
        raise ValueError(f"none of the {len(errors)} best records of {self.workload_key} in "
                         f"{log_file} applies: " + "; ".join(errors))

    def print_best(self, log_file: str, print_mode: str = "schedule") -> str:
        """The best record of this task as Python schedule code (``"schedule"``), PTX
        (``"ptx"``; ``"cuda"`` is accepted for the tutorial and also gives PTX), LLVM IR
        (``"llvm"``) or device IR (``"ir"``): the record :meth:`apply_best` uses (the best
        one that applies). When none applies, the schedule code of the best one is printed
        with a warning; the other modes raise."""
        from .printer import python_schedule_code

        modes = {"ptx": "ptx", "cuda": "ptx", "llvm": "llvm", "ir": "ir"}
        if print_mode != "schedule" and print_mode not in modes:
            raise ValueError(f"print_mode must be one of schedule, ptx, llvm, ir (or cuda, "
                             f"which prints PTX); got {print_mode!r}")
        # the record apply_best would use, so that what is printed is what is built
        try:
            inp, sch = self._best_applicable(log_file)
        except ValueError as e:
            from .records import load_best_record

            best, _ = load_best_record(log_file, self.workload_key)
            if print_mode != "schedule" or best is None:
                raise
            # none applies: the code of the best one still shows what was recorded
            import warnings

            warnings.warn(f"{e}; printing the best record's schedule as recorded, which "
                          "apply_best refuses", RuntimeWarning, stacklevel=2)
            return python_schedule_code(self, best.pipeline_text)
        if print_mode == "schedule":
            return python_schedule_code(self, inp.pipeline_text)
        from ..driver import build

        args = list(self.tensors)
        # PTX for the GPU the task targets; device IR needs only lowering, as for "sim"
        target = self.target.record_spec
        if modes[print_mode] == "ir":
            target = target.replace("cuda", "sim", 1)
        return build(sch, args, target=target).get_source(modes[print_mode])
