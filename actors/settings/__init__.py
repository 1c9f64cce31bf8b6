"""A node's settings, at the bottom of ``actors``: ``schema`` (every setting,
its type, default and range: the only place a default is written),
``config`` (the INI file and its values), ``keeper`` (the settings keeper
actor, :class:`~actors.settings.keeper.ConfigServer`, and the fan-out of a
change to the actors that apply it) and ``policy`` (which handlers a node
runs). It imports nothing of the subsystems; they and the node's root
(:mod:`actors.node`) import it.
"""
