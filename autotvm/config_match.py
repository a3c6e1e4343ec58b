"""Which config of a space a recorded config denotes.

A template may add knobs to its space, always after the existing ones and with the
behaviour of the records written before them as their first candidate (the attention
template's ``scores`` and ``p_operand`` knobs, "shared" first): an old record's entity
list is then a prefix of the space's knobs, and it means the config with those values and
every missing trailing knob at its first candidate, the default the template applies when
such a record is dispatched. Its index is unchanged too (the first knob varies fastest, so
knobs appended at their first candidate add nothing to it)."""

from __future__ import annotations

from .space import ConfigEntity, ConfigSpace


def config_in_space(space: ConfigSpace, config: ConfigEntity) -> ConfigEntity | None:
    """The config of ``space`` that the recorded ``config`` denotes: the one at its index
    when their knobs agree; else, for a record written before knobs were appended to the
    space (its knob names a strict prefix of the space's), the config with its knob values
    and every missing trailing knob at its first candidate. None when neither holds (a
    value that is no candidate any more, knobs renamed or reordered, an index outside)."""
    index = config.index
    if 0 <= index < len(space):
        at = space.get(index)
        if at == config:
            return at
    names = list(config)
    knobs = list(space.space_map)
    if len(names) >= len(knobs) or names != knobs[:len(names)]:
        return None
    values = {name: config[name] for name in names}
    for name in knobs[len(names):]:
        values[name] = space.space_map[name][0]
    try:
        return space.get(space.index_of(values))
    except (ValueError, IndexError):  # a recorded value the knob no longer offers
        return None


__all__ = ["config_in_space"]
