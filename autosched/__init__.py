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

import importlib

# Imported on first use (PEP 562), as the root package does: the graph layer installs its
# network reader in .relay_integration when imported, without loading the whole search.
_EXPORTS = {
    "CostModel": "cost_model", "RandomModel": "cost_model", "XGBModel": "cost_model",
    "DAGAnalysis": "dag_analysis", "ApplyHistoryBest": "dispatch",
    "FEATURE_NAMES": "features", "HardwareParams": "hardware",
    "LocalRPCMeasureContext": "options", "TuningOptions": "options",
    "RecordToFile": "records", "load_best_record": "records", "load_records": "records",
    "extract_tasks": "relay_integration", "PreloadMeasuredStates": "search_policy",
    "SearchCallback": "search_policy", "SketchPolicy": "search_policy",
    "SearchTask": "search_task", "Sketch": "sketch", "State": "state",
    "LogEstimatedLatency": "task_scheduler", "PrintTableInfo": "task_scheduler",
    "TaskScheduler": "task_scheduler", "TaskSchedulerCallback": "task_scheduler",
    "TuningSummary": "tuner", "make_workload_key": "workload_registry",
    "register_workload": "workload_registry",
}

__all__ = [
    "CostModel", "RandomModel", "XGBModel", "DAGAnalysis", "FEATURE_NAMES", "HardwareParams",
    "LocalRPCMeasureContext", "TuningOptions", "RecordToFile", "load_best_record",
    "load_records", "PreloadMeasuredStates", "SearchCallback", "SketchPolicy", "SearchTask",
    "Sketch", "State", "TuningSummary", "make_workload_key", "register_workload",
]
__all__ += ["ApplyHistoryBest", "extract_tasks", "LogEstimatedLatency", "PrintTableInfo",
            "TaskScheduler", "TaskSchedulerCallback"]


_SUBMODULES = frozenset({
    "cost_model", "dag_analysis", "dispatch", "evolution", "factorization", "features",
    "fused_rows", "gemm_rows", "hardware", "kernel_model", "options", "printer", "records",
    "relay_integration", "search_policy", "search_task", "sketch", "sketch_rules", "state",
    "steps", "task_scheduler", "tensorcore", "tuner", "workload_registry"})


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)
