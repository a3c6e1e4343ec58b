"""The tensor-core GEMM template: one schedule, :func:`~.schedule.schedule_gemm`, for every
product the tensor cores run (dense, matmul, batch_matmul, conv2d NHWC as an implicit GEMM;
mma.sync and wgmma), built from shared pieces; one module per job (``forms``, ``knobs``,
``rules``, ``estimate``, ``choice``, ``chooser``, ``stages``, ``pieces``, ``schedule``: see
``docs/tensor_cores.md``)."""

from .forms import GemmForm, conv_gemm_form, gemm_form
from .knobs import TensorCoreConfig, WgmmaScheduleConfig, mma_sync_choices, wgmma_choices
from .schedule import schedule_gemm

__all__ = ["GemmForm", "TensorCoreConfig", "WgmmaScheduleConfig", "conv_gemm_form",
           "gemm_form", "mma_sync_choices", "schedule_gemm", "wgmma_choices"]
