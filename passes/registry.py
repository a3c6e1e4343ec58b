"""The pass registry: names to pass classes.

Passes are found by name in three places, in this order:

1. classes registered with :func:`register_pass` / :func:`register_function_pass`;
2. the built-in passes, every module of ``ptxforge.passes.schedule`` and
   ``ptxforge.passes.lower`` (imported on the first lookup that needs them);
3. plug-ins: entry points in the group ``ptxforge.passes`` of installed packages, loaded
   lazily when a name is not found otherwise or when all passes are listed. An entry point
   loads either a Pass subclass or a module whose import registers passes.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import inspect
import pkgutil
import types
import warnings
from collections.abc import Callable
from typing import Any

from .base import FunctionPass, Pass
from .errors import PassRegistryError, UnknownPassError
from .params import param_specs
from .text import is_identifier

ENTRY_POINT_GROUP = "ptxforge.passes"
BUILTIN_PACKAGES = ("ptxforge.passes.schedule", "ptxforge.passes.lower")


class PassRegistry:
    """A mapping from pass names to pass classes.

    ``builtin_packages``: packages whose modules are imported before the first lookup miss
    (their passes register themselves). ``entry_point_group``: the plug-in group searched
    on a miss (None for none). The module-level functions use :data:`DEFAULT_REGISTRY`;
    separate instances are for isolated tools and tests.
    """

    def __init__(self, *, builtin_packages: tuple[str, ...] = (),
                 entry_point_group: str | None = None):
        self._passes: dict[str, type[Pass]] = {}
        self.builtin_packages = tuple(builtin_packages)
        self.entry_point_group = entry_point_group
        self._builtins_loaded = not self.builtin_packages
        self._loading_builtins = False
        self._loaded_entry_points: set[tuple[str, str]] = set()
        self._overrides: set[str] = set()
        self._conflicts: list[str] = []

    # -- registration -----------------------------------------------------------------------

    def register(self, cls: type, *, override: bool = False) -> type:
        """Register a pass class under its ``name``; returns the class.

        A class that is not yet a dataclass is made a frozen one. Raises
        :class:`PassRegistryError` when the name is taken by another class (unless
        ``override``), is not an identifier, or the class is not a Pass subclass. Built-in
        passes load later than user passes; a user pass named like a built-in one is
        reported when the built-ins load, unless it was registered with ``override``.
        """
        if not (isinstance(cls, type) and issubclass(cls, Pass)):
            raise PassRegistryError(
                f"only Pass subclasses can be registered as passes, got {cls!r}")
        if "__dataclass_fields__" not in cls.__dict__:
            cls = dataclasses.dataclass(frozen=True)(cls)
        if any(f.name == "name" for f in dataclasses.fields(cls)):
            raise PassRegistryError(
                f"pass class {cls.__qualname__} declares 'name' as a field; write it as a "
                "plain class attribute without a type annotation: name = \"my_pass\"")
        name = cls.__dict__.get("name") or ""
        if not isinstance(name, str) or not is_identifier(name):
            raise PassRegistryError(
                f"pass class {cls.__qualname__} needs a class attribute 'name' that is an "
                f"identifier (letters, digits, '_'), got {name!r}")
        if inspect.isabstract(cls):
            raise PassRegistryError(
                f"pass class {cls.__qualname__} ('{name}') does not implement "
                f"{', '.join(sorted(cls.__abstractmethods__))}")
        param_specs(cls)  # resolve the field types now, so a bad annotation fails here
        old = self._passes.get(name)
        if old is not None and old is not cls and not _same_definition(old, cls):
            if self._is_builtin(cls) and not self._is_builtin(old):
                # built-ins load lazily, after the user's passes: a user's pass registered
                # with override=True wins; otherwise the clash is reported once loading ends
                if name not in self._overrides:
                    self._conflicts.append(
                        f"the pass '{name}' registered by {_where(old)} has the name of the "
                        f"built-in pass {_where(cls)}; choose another name, or register it "
                        "with override=True to replace the built-in one")
                return cls
            if not override:
                raise PassRegistryError(
                    f"a pass named '{name}' is already registered ({_where(old)}); choose "
                    f"another name, or pass override=True to replace it with {_where(cls)}")
        if override:
            self._overrides.add(name)
        self._passes[name] = cls
        return cls

    def unregister(self, name: str) -> type[Pass]:
        """Remove a pass by name and return its class."""
        self._overrides.discard(name)
        try:
            return self._passes.pop(name)
        except KeyError:
            raise self._unknown(name) from None

    # -- lookup -----------------------------------------------------------------------------

    def get(self, name: str) -> type[Pass]:
        """The pass class registered as ``name``.

        Raises :class:`UnknownPassError` with close matches: ``unknown pass 'splt'; did you
        mean 'split'?``.
        """
        cls = self._passes.get(name)
        if cls is not None:
            return cls
        self.load_builtins()
        self._raise_conflicts()
        if name not in self._passes:
            self.load_entry_points(name)
        cls = self._passes.get(name)
        if cls is None:
            raise self._unknown(name)
        return cls

    def names(self) -> list[str]:
        """Every pass name (built-ins and plug-ins included), sorted."""
        self.load_builtins()
        self._raise_conflicts()
        self.load_entry_points()
        return sorted(self._passes)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except UnknownPassError:
            return False
        return True

    def _unknown(self, name: str) -> UnknownPassError:
        known = sorted(self._passes)
        close = tuple(difflib.get_close_matches(name, known, n=3, cutoff=0.6))
        if close:
            hint = "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
        elif known:
            hint = "known passes: " + ", ".join(known)
        else:
            hint = "no passes are registered"
        where = (f" or an entry point in group '{self.entry_point_group}'"
                 if self.entry_point_group else "")
        return UnknownPassError(
            f"unknown pass '{name}'; {hint} (custom passes plug in with @register_pass"
            f"{where})", name, close)

    # -- lazy loading -----------------------------------------------------------------------

    def _is_builtin(self, cls: type) -> bool:
        mod = getattr(cls, "__module__", "") or ""
        return any(mod == p or mod.startswith(p + ".") for p in self.builtin_packages)

    def load_builtins(self) -> None:
        """Import every module of the built-in pass packages (once; a failed import is
        raised, and retried by the next lookup)."""
        if self._builtins_loaded or self._loading_builtins:
            return  # the imported modules register passes, which comes back here
        self._loading_builtins = True
        try:
            for pkg_name in self.builtin_packages:
                pkg = importlib.import_module(pkg_name)
                for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
                    if not info.name.startswith("_"):
                        importlib.import_module(f"{pkg_name}.{info.name}")
            self._builtins_loaded = True
        finally:
            self._loading_builtins = False
        self._raise_conflicts()

    def _raise_conflicts(self) -> None:
        if self._conflicts:
            raise PassRegistryError("; ".join(self._conflicts))

    def load_entry_points(self, name: str | None = None) -> None:
        """Load plug-in entry points not loaded yet.

        With ``name``, the entry points called ``name`` load first and their errors raise;
        then (if the name is still unknown) the others, whose errors become warnings so one
        broken plug-in does not hide the rest.
        """
        if self.entry_point_group is None:
            return
        eps = list(importlib.metadata.entry_points(group=self.entry_point_group))
        if name is not None:
            for ep in eps:
                if ep.name == name:
                    self._load_entry_point(ep)
            if name in self._passes:
                return
        for ep in eps:
            if ep.name == name:
                continue
            try:
                self._load_entry_point(ep)
            except PassRegistryError as e:
                warnings.warn(str(e), stacklevel=3)

    def _load_entry_point(self, ep: Any) -> None:
        key = (ep.name, ep.value)
        if key in self._loaded_entry_points:
            return
        self._loaded_entry_points.add(key)
        try:
            obj = ep.load()
        except Exception as e:
            raise PassRegistryError(
                f"cannot load pass plug-in '{ep.name}' ({ep.value}) from entry point group "
                f"'{self.entry_point_group}': {type(e).__name__}: {e}") from e
        if isinstance(obj, types.ModuleType):
            return  # importing it registered its passes
        if isinstance(obj, type) and issubclass(obj, Pass):
            if self._passes.get(getattr(obj, "name", "")) is not obj:
                self.register(obj)
            return
        raise PassRegistryError(
            f"pass plug-in '{ep.name}' ({ep.value}) in entry point group "
            f"'{self.entry_point_group}' loads {obj!r}; expected a Pass subclass or a module "
            "that registers passes")


def _same_definition(a: type, b: type) -> bool:
    # the same class statement run again (a module reloaded) replaces the old class
    return a.__module__ == b.__module__ and a.__qualname__ == b.__qualname__


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


DEFAULT_REGISTRY = PassRegistry(builtin_packages=BUILTIN_PACKAGES,
                                entry_point_group=ENTRY_POINT_GROUP)
"""The registry behind :func:`register_pass`, :func:`get_pass` and pipeline text."""


def register_pass(cls: type | None = None, *, override: bool = False,
                  registry: PassRegistry | None = None) -> Any:
    """Class decorator: register a pass class under its ``name``.

    Use as ``@register_pass`` or ``@register_pass(override=True)``, above ``@dataclass``.
    """
    reg = registry or DEFAULT_REGISTRY

    def deco(c: type) -> type:
        return reg.register(c, override=override)

    return deco if cls is None else deco(cls)


def register_function_pass(name: str, *, override: bool = False,
                           registry: PassRegistry | None = None
                           ) -> Callable[[Callable[[Any, Any], Any]], type[Pass]]:
    """Decorator turning ``def f(module, ctx) -> module`` into a registered pass class
    without parameters (the function's docstring becomes the pass's). Returns the class::

        @register_function_pass("strip_annotations")
        def strip_annotations(module, ctx):
            ...

        Pipeline.parse("strip_annotations()")
    """
    if not isinstance(name, str):
        raise PassRegistryError(
            "register_function_pass needs the pass name: @register_function_pass(\"my_pass\")")

    def deco(fn: Callable[[Any, Any], Any]) -> type[Pass]:
        if not callable(fn):
            raise PassRegistryError(f"register_function_pass({name!r}) decorates a function, "
                                    f"got {fn!r}")
        class_name = "".join(p.capitalize() for p in fn.__name__.split("_") if p) or "Pass"
        ns = {
            "name": name,
            "function": staticmethod(fn),
            "__doc__": fn.__doc__ or f"The function pass {name}.",
            "__module__": fn.__module__,
            # pickling finds the class under the function's name, which the decorator binds
            "__qualname__": fn.__qualname__,
        }
        cls = dataclasses.dataclass(frozen=True)(type(class_name, (FunctionPass,), ns))
        return (registry or DEFAULT_REGISTRY).register(cls, override=override)

    return deco


def get_pass(name: str) -> type[Pass]:
    """The pass class registered as ``name`` (see :meth:`PassRegistry.get`)."""
    return DEFAULT_REGISTRY.get(name)


def list_passes() -> list[str]:
    """Every registered pass name, built-ins and plug-ins included, sorted."""
    return DEFAULT_REGISTRY.names()
