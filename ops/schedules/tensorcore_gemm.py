"""The names of the tensor-core GEMM schedule of dense, matmul and batch_matmul, where
callers import them: the schedule is :func:`~.gemm.schedule.schedule_gemm` (see
:mod:`.gemm` and ``docs/tensor_cores.md``)."""

from .gemm.chooser import (  # noqa: F401
    _BLOCKS,
    DEFAULT_STAGES,
    NEAR_TIE,
    SPLIT_K_CHOICES,
    _best,
    _first_legal,
    choose_gemm_config,
    gemm_candidates,
    remap_config,
    unsplit_gemm_config,
    wgmma_choice,
)
from .gemm.estimate import gemm_time  # noqa: F401
from .gemm.forms import (  # noqa: F401
    GEMM_TAGS,
    MIN_N,
    GemmForm,
    _inputs,
    _is_cast_of,
    copies_from_memory,
    gemm_form,
)
from .gemm.pieces import EPILOGUE_UNROLL, schedule_tile_copy, schedule_tile_epilogue  # noqa: F401
from .gemm.rules import (  # noqa: F401
    _round_up,
    check_gemm_config,
    gemm_shared_bytes,
    needs_padding,
    padded_extents,
)
from .gemm.schedule import schedule_gemm_tensorcore, schedule_matmul  # noqa: F401
from .gemm.stages import GemmStages, gemm_stages  # noqa: F401
