"""AutoTVM: tune schedule templates.

The flow of TVM's tutorial, with ptxforge underneath::

    from ptxforge import autotvm, te

    @autotvm.template("tutorial/conv2d_no_batching")
    def conv2d_no_batching(N, H, W, CO, CI, KH, KW, stride, padding):
        ...
        cfg = autotvm.get_config()
        cfg.define_split("tile_f", f, num_outputs=4)
        ...
        return s, [raw_data, kernel, conv]

    task = autotvm.task.create("tutorial/conv2d_no_batching", args=(...), target="cuda")
    print(task.config_space)
    measure_option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                            runner=autotvm.LocalRunner(repeat=3))
    tuner = autotvm.tuner.XGBTuner(task)
    tuner.tune(n_trial=20, measure_option=measure_option,
               callbacks=[autotvm.callback.log_to_file("conv2d.log")])
    with autotvm.apply_history_best("conv2d.log"):
        s, args = conv2d_no_batching(...)

Without a GPU, ``runner=autotvm.SimRunner()`` checks candidates on the simulator and
reports estimated times.
"""

from . import callback, feature, record, task, tuner
from .dispatch import (
    ApplyConfig,
    ApplyHistoryBest,
    DispatchContext,
    FallbackContext,
    apply_history_best,
    get_config,
    workload_key,
)
from .measure import LocalBuilder, LocalRunner, SimRunner, measure_option
from .space import (
    ConfigEntity,
    ConfigSpace,
    FallbackConfigEntity,
    InstantiationError,
    VirtualAxis,
)
from .task import MeasureInput, Task, template

__all__ = [
    "ApplyConfig",
    "ApplyHistoryBest",
    "ConfigEntity",
    "ConfigSpace",
    "DispatchContext",
    "FallbackConfigEntity",
    "FallbackContext",
    "InstantiationError",
    "LocalBuilder",
    "LocalRunner",
    "MeasureInput",
    "SimRunner",
    "Task",
    "VirtualAxis",
    "apply_history_best",
    "callback",
    "feature",
    "get_config",
    "measure_option",
    "record",
    "task",
    "template",
    "tuner",
    "workload_key",
]
