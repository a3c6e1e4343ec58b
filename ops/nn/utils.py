"""Argument handling shared by the convolution and pooling operators."""

from __future__ import annotations

from ..utils import fail


def get_pad_tuple(padding, kernel: tuple[int, int]) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` padding, as TOPI's ``get_pad_tuple``.

    ``padding`` is an int (all four sides), a pair ``(height, width)`` (both sides of each),
    a 4-tuple ``(top, left, bottom, right)``, ``"VALID"`` (none) or ``"SAME"`` (enough for
    the output to keep the input size at stride 1; the odd pixel goes to the top/left, as
    TOPI does). ``kernel`` is the dilated kernel size ``(height, width)``.
    """
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return 0, 0, 0, 0
        if padding.upper() == "SAME":
            pad_h, pad_w = kernel[0] - 1, kernel[1] - 1
        else:
            raise ValueError(f"unknown padding {padding!r}; use an int, a 2- or 4-tuple, "
                             "'SAME' or 'VALID'")
    elif isinstance(padding, (tuple, list)):
        if len(padding) == 4:
            return tuple(_pad_int(p) for p in padding)  # type: ignore[return-value]
        if len(padding) != 2:
            raise ValueError(f"padding must have 2 or 4 entries, got {list(padding)}")
        pad_h, pad_w = _pad_int(padding[0]) * 2, _pad_int(padding[1]) * 2
    else:
        pad_h = pad_w = _pad_int(padding) * 2
    top, left = (pad_h + 1) // 2, (pad_w + 1) // 2
    return top, left, pad_h - top, pad_w - left


def _pad_int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"padding sizes must be non-negative ints, got {value!r}")
    return int(value)


def pad_tuple(op: str, padding, kernel: tuple[int, int]) -> tuple[int, int, int, int]:
    """:func:`get_pad_tuple` with its errors reported as the operator's TEError."""
    try:
        return get_pad_tuple(padding, kernel)
    except ValueError as err:
        fail(op, str(err))


def conv_output_size(
    op: str, in_size: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
    dilation: tuple[int, int], pads: tuple[int, int, int, int], extra: tuple[int, int] = (0, 0),
) -> tuple[int, int]:
    """Output height and width of a sliding window; a TEError when the window does not fit.

    ``extra`` is added to the bottom/right padding (pooling's ceil mode).
    """
    top, left, bottom, right = pads
    out = []
    for size, k, s, d, before, after, more, what in (
        (in_size[0], kernel[0], stride[0], dilation[0], top, bottom, extra[0], "height"),
        (in_size[1], kernel[1], stride[1], dilation[1], left, right, extra[1], "width"),
    ):
        dilated = (k - 1) * d + 1
        padded = size + before + after + more
        if dilated > padded:
            fail(
                op,
                f"the window {what} {k} (dilated to {dilated}) is larger than the padded "
                f"input {what} {padded} ({size} + padding {before}+{after})",
            )
        out.append((padded - dilated) // s + 1)
    return out[0], out[1]
