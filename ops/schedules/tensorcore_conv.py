"""The names of the tensor-core conv2d NHWC schedules (the implicit GEMM on mma.sync and
on wgmma), where callers import them: the schedule is
:func:`~.gemm.schedule.schedule_gemm` of the convolution's
:func:`~.gemm.forms.conv_gemm_form` (see :mod:`.gemm`)."""

from .gemm.choice import wgmma_conv_refusal  # noqa: F401
from .gemm.chooser import (  # noqa: F401
    BLOCK_CHOICES,
    _valid_config,
    choose_conv_config,
    choose_wgmma_conv_config,
    wgmma_conv_choice,
)
from .gemm.forms import (  # noqa: F401
    conv_gemm_form,
    conv_gemm_shape,
    tensorcore_conv_unsupported,
)
from .gemm.pieces import bind_conv_output  # noqa: F401
from .gemm.rules import C_TILE_BYTES, check_conv_config, check_wgmma_conv, copy_vectors  # noqa: F401
from .gemm.rules import conv_shared_bytes as shared_bytes  # noqa: F401
from .gemm.schedule import (  # noqa: F401
    schedule_conv2d_nhwc,
    schedule_conv2d_nhwc_tensorcore,
    schedule_conv2d_nhwc_wgmma,
)
