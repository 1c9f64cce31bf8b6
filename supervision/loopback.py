"""Make every Thespian socket bind 127.0.0.1 instead of 0.0.0.0.

Thespian 4.0.1 binds every listening socket (admin, actors, external
clients) to all interfaces and offers no setting to change it. Importing
this module patches the address class so that an unspecified bind address
becomes 127.0.0.1, and makes actors advertise 127.0.0.1. It must be imported
before the ActorSystem is created, in the node and in every client; actors
inherit it through fork. ``bind_host`` changes the address (for a node told
to listen elsewhere).
"""

from __future__ import annotations

import os
import socket
import struct

os.environ.setdefault("THESPIAN_BASE_IPADDR", "127.0.0.1")

import thespian.system.transport.IPBase as _ipbase  # noqa: E402, N813 - Thespian's module name

#: The unspecified addresses Thespian binds to: "" and INADDR_ANY.
_WILDCARDS = ("", socket.inet_ntoa(struct.pack("!I", socket.INADDR_ANY)))
_state = {"host": "127.0.0.1"}
_original_init = _ipbase.IPActorAddress.__init__


def _patched_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    _original_init(self, *args, **kwargs)
    if self.bindname and self.bindname[0] in _WILDCARDS:
        self.bindname = (_state["host"],) + tuple(self.bindname[1:])


if not getattr(_ipbase.IPActorAddress.__init__, "_loopback_patched", False):
    _patched_init._loopback_patched = True  # type: ignore[attr-defined]
    _ipbase.IPActorAddress.__init__ = _patched_init


def bind_host() -> str:
    """The address sockets bind to (127.0.0.1 unless changed)."""
    return _state["host"]
