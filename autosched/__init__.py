"""The auto-scheduler (Ansor-style): search tasks, sketch rules, annotation, evolutionary
search, features and cost models, with the names of TVM's ``auto_scheduler``.

Example (the tutorial's flow)::

    from ptxforge import autosched

    @autosched.register_workload
    def conv2d_layer(N, H, W, CO, CI, KH, KW, stride, padding): ...

    task = autosched.SearchTask(func=conv2d_layer, args=(1, 7, 7, 512, 512, 3, 3,
                                (1, 1), (1, 1)), target="cuda")
    print(task.compute_dag)
    ctx = autosched.LocalRPCMeasureContext(min_repeat_ms=300)
    opts = autosched.TuningOptions(num_measure_trials=1000, runner=ctx.runner,
                                   measure_callbacks=[autosched.RecordToFile("conv2d.json")])
    task.tune(opts)
    sch, args = task.apply_best("conv2d.json")
"""

from .cost_model import CostModel, RandomModel, XGBModel
from .dag_analysis import DAGAnalysis
from .dispatch import ApplyHistoryBest
from .features import FEATURE_NAMES
from .hardware import HardwareParams
from .options import LocalRPCMeasureContext, TuningOptions
from .records import RecordToFile, load_best_record, load_records
from .relay_integration import extract_tasks
from .search_policy import PreloadMeasuredStates, SearchCallback, SketchPolicy
from .search_task import SearchTask
from .sketch import Sketch
from .state import State
from .task_scheduler import (
    LogEstimatedLatency,
    PrintTableInfo,
    TaskScheduler,
    TaskSchedulerCallback,
)
from .tuner import TuningSummary
from .workload_registry import make_workload_key, register_workload

__all__ = [
    "CostModel", "RandomModel", "XGBModel", "DAGAnalysis", "FEATURE_NAMES", "HardwareParams",
    "LocalRPCMeasureContext", "TuningOptions", "RecordToFile", "load_best_record",
    "load_records", "PreloadMeasuredStates", "SearchCallback", "SketchPolicy", "SearchTask",
    "Sketch", "State", "TuningSummary", "make_workload_key", "register_workload",
]
__all__ += ["ApplyHistoryBest", "extract_tasks", "LogEstimatedLatency", "PrintTableInfo",
            "TaskScheduler", "TaskSchedulerCallback"]
