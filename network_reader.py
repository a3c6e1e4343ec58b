"""How the tuners read a network: a function the graph layer installs.

The tuners stand below the graph layer (docs/architecture.md, "Packages and their one
job"), yet ``autosched.extract_tasks`` takes a network. The graph package installs its
``extract_fused_functions`` here when it is imported, which every network handed to a tuner
has done; the tuners call :func:`read_network`. This module imports nothing of the project,
so that installing the reader loads nothing of the tuners.
"""

from __future__ import annotations

from collections.abc import Callable

# the installed reader: (net, params, *, layout, winograd, precision, pad_channels)
# -> the network's distinct fused functions
_reader: list[Callable] = []


def install_network_reader(read: Callable) -> None:
    """Make ``read`` the way tuners list a network's distinct fused functions:
    ``read(net, params, *, layout, winograd, precision, pad_channels)`` (``ptxforge.graph``
    installs ``extract_fused_functions`` when imported)."""
    _reader[:] = [read]


def read_network(net, params: dict | None = None, **options) -> list:
    """The distinct fused functions of ``net`` as the installed reader lists them."""
    if not _reader:
        raise TypeError(f"a tuner reads networks of ptxforge.graph, got {type(net).__name__}; "
                        "build the network with ptxforge.graph")
    return _reader[0](net, params, **options)
