"""A node, at the top of ``actors``: ``root`` (the root tree of every
subsystem and the foreground run) and ``app`` (a user's app module). Its
settings are :mod:`actors.settings`.
"""
