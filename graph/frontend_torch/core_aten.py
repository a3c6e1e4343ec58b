"""The Core ATen operator set of the installed torch, computed from torch itself.

PyTorch tags the overloads of its Core ATen IR (what ``torch.export``'s default
decompositions leave) with ``torch.Tag.core``; this module lists them and says, for each,
what this importer maps it to. ``python -m ptxforge.graph.frontend_torch.core_aten`` prints
the table of ``docs/torch.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

UNSUPPORTED_WHY = {
    "backward": "a gradient without a converter yet",
    "random": "random numbers; a compiled graph is deterministic",
    "data-dependent": "an output shape that depends on the data",
    "complex": "complex tensors",
}


def core_aten_overloads() -> list[str]:
    """Every overload of ``torch.ops.aten`` tagged ``core``, as ``"aten.add.Tensor"``,
    sorted."""
    import torch
    import torch._ops

    names = []
    for attr in dir(torch.ops.aten):
        try:
            packet = getattr(torch.ops.aten, attr)
        except (AttributeError, RuntimeError):
            continue
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for ov in packet.overloads():
            op = getattr(packet, ov)
            if torch.Tag.core in op.tags:
                names.append(str(op))
    return sorted(names)


def _reason(name: str) -> str:
    if "backward" in name:
        return UNSUPPORTED_WHY["backward"]
    if name.split(".")[1] in ("rand", "randn", "randperm"):
        return UNSUPPORTED_WHY["random"]
    if name.split(".")[1] in ("nonzero", "_local_scalar_dense", "masked_scatter"):
        return UNSUPPORTED_WHY["data-dependent"]
    if "fft" in name:
        return UNSUPPORTED_WHY["complex"]
    return "no converter yet"


@dataclass(frozen=True)
class CoverageRow:
    """One Core ATen overload: whether it imports, what it maps to, why not."""

    overload: str
    supported: bool
    maps_to: str
    note: str


def coverage() -> list[CoverageRow]:
    """A row per Core ATen overload of the installed torch."""
    from .registry import lookup

    rows = []
    for name in core_aten_overloads():
        conv = lookup(name)
        if conv is None:
            rows.append(CoverageRow(name, False, "", _reason(name)))
            continue
        missing = conv.missing_ops()
        note = conv.note
        if missing:
            note = "needs graph op(s) " + ", ".join(missing) + (f"; {note}" if note else "")
        rows.append(CoverageRow(name, not missing, conv.maps_to, note))
    return rows


def coverage_markdown() -> str:
    """The coverage table as markdown, with the count on its first line."""
    import torch

    rows = coverage()
    n = sum(r.supported for r in rows)
    lines = [f"{n} of the {len(rows)} Core ATen overloads of torch {torch.__version__} "
             "import.", "", "| overload | imports | maps to | note |", "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| `{r.overload}` | {'yes' if r.supported else 'no'} | {r.maps_to} | "
                     f"{r.note} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(coverage_markdown())
