"""Tensor intrinsics: fragment layouts, the registry, and matching loop nests to them."""

from .keys import IntrinKey, intrin_name
from .layout import ROLES, WARP, FragmentRole, tile_slot
from .registry import IntrinError, TensorIntrin, get_intrin, list_intrins, lookup, register

ANNOTATION = "tensor_intrin"
"""The loop annotation ``tensorize`` sets: the name of the intrinsic the nest becomes."""

__all__ = ["ANNOTATION", "ROLES", "WARP", "FragmentRole", "IntrinError", "IntrinKey",
           "TensorIntrin", "get_intrin", "intrin_name", "list_intrins", "lookup", "register",
           "tile_slot"]
