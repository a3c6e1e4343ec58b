"""The names of the mma.sync dense schedule, where callers import them: the schedule is
:func:`~.gemm.schedule.schedule_gemm` (see :mod:`.gemm`)."""

from .gemm.forms import _b_is_kn, _is_cast  # noqa: F401
from .gemm.knobs import TensorCoreConfig, tile_limit  # noqa: F401
from .gemm.pieces import (  # noqa: F401
    SPLIT_SUM_THREADS,
    schedule_split_sum,
    split_k_partials,
    tile_warp_product,
)
from .gemm.rules import split_k_rule  # noqa: F401
from .gemm.schedule import dense_tensorcore_compute, schedule_dense_tensorcore  # noqa: F401
