"""Many idle or slow HTTP clients must not keep the others out (issue 14, item 3).

waitress serves every connection from one event loop (``wasyncore``), so an
idle or slow connection costs a file descriptor and a turn of the loop, not a
thread. What let a hundred of them keep everyone out is its bookkeeping:

* ``connection_limit`` (100): with that many sockets in its map (the
  listening socket and the trigger pipe count), the server stops accepting;
  newcomers wait in the kernel's listen queue until a connection closes.
* ``channel_timeout`` (120 s, checked every ``cleanup_interval``, 30 s)
  counts from the last byte received: one byte now and then keeps a
  connection open for ever, and a silent one stays two minutes or more.
* The loop uses ``select()`` unless ``asyncore_use_poll``: a descriptor
  numbered 1024 (FD_SETSIZE) or more makes ``select()`` raise ValueError,
  which ends the serving loop; the limit could not simply be raised.

What this module adds (:func:`server_adjustments` for ``create_server``,
:class:`SlowClientChannel` as the channel class, :func:`accept_in_batches`
on each listening server):

* ``poll()`` instead of ``select()``, and :data:`CONNECTION_LIMIT`
  connections (fewer when the process cannot get the file descriptors: the
  soft ``RLIMIT_NOFILE`` is raised toward what they need).
* :data:`HEAD_TIMEOUT`: while the server waits on a client for a request
  head (from the accept, or from the end of the previous answer on a
  kept-alive connection), the whole head must be in within that many
  seconds, however the client trickles bytes; else the connection is closed.
  This is also the keep-alive idle timeout. Checked on every turn of the
  loop, which turns at least once a second (``asyncore_loop_timeout``). A
  body on its way is left to waitress's ``channel_timeout``.
* At the limit a newcomer is still accepted: the connections that have owed
  a head longest are closed to make room (else the bodies stalled longest,
  else the answers stalled longest); never one with a request queued or in
  service. They go :data:`EVICT_BATCH` at a time, and the server accepts up
  to :data:`ACCEPT_BATCH` connections a turn (waitress takes one), so that a
  newcomer queued behind an attacker's reconnections is reached in a few
  turns.
"""

from __future__ import annotations

import heapq
import logging
import resource
import socket
import time
import types

from waitress.channel import HTTPChannel

log = logging.getLogger(__name__)

#: Seconds a client may take to send a whole request head (and may stay idle between requests).
HEAD_TIMEOUT = 10.0
#: Connections served at once (at the limit, newcomers take the places of those that have waited
#: longest for a head).
CONNECTION_LIMIT = 1000
#: Connections closed at once when the limit is reached (one scan of them all for several newcomers).
EVICT_BATCH = 32
#: Connections accepted on one turn of the loop.
ACCEPT_BATCH = 16
#: File descriptors kept for the rest of the process: the store, the node's client, pipes.
FD_RESERVE = 256
#: Sockets waitress may hold beyond the limit before it stops accepting: its listening sockets and
#: trigger pipe, connections closed on the loop's next turn, connections that could not be evicted.
HEADROOM = 64
#: Seconds between two warnings that connections are being evicted.
EVICTION_WARNING_EVERY = 60.0


def raise_fd_limit(want: int) -> int:
    """Raise the soft RLIMIT_NOFILE toward ``want`` (up to the hard limit); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return want
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def connection_limit(limit: int = CONNECTION_LIMIT) -> int:
    """How many connections this process can serve: ``limit``, or fewer if the file descriptors it
    can get do not allow it (each connection may hold two: its socket, and a request or an answer
    spilled to a temporary file)."""
    fds = raise_fd_limit(2 * (limit + HEADROOM) + FD_RESERVE)
    return max(16, min(limit, (fds - FD_RESERVE) // 2 - HEADROOM))


def server_adjustments(limit: int = CONNECTION_LIMIT) -> dict:
    """The ``waitress.create_server`` keywords for many slow clients (with :class:`SlowClientChannel`)."""
    return {"asyncore_use_poll": True, "connection_limit": connection_limit(limit) + HEADROOM}


def accept_in_batches(server) -> None:
    """Make a listening server (a ``BaseWSGIServer``) accept up to :data:`ACCEPT_BATCH` connections
    each time its socket is readable, not one: a turn of the loop costs time in proportion to the
    connections open, and a newcomer waits for those queued before it."""
    accept_one = type(server).handle_accept

    def handle_accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            size = len(self._map)
            accept_one(self)  # adds a channel to the map, or nothing (none queued, or an error logged)
            if len(self._map) == size or len(self._map) >= self.adj.connection_limit:
                return

    server.handle_accept = types.MethodType(handle_accept, server)


class SlowClientChannel(HTTPChannel):
    """waitress's connection, with a deadline for each request head, and room made for it at the
    connection limit (see the module's documentation)."""

    head_timeout = HEAD_TIMEOUT
    #: Monotonic time the server began waiting on this client for a head; None while it does not
    #: (a request queued or in service, an answer being sent).
    head_since: float | None = None

    def __init__(self, server, sock, addr, adj, map=None) -> None:
        make_room(server, adj.connection_limit - HEADROOM)
        self.head_since = time.monotonic()
        super().__init__(server, sock, addr, adj, map=map)

    def readable(self) -> bool:
        if not super().readable():
            self.head_since = None  # the server is not waiting on the client: no clock
            return False
        now = time.monotonic()
        if self.head_since is None:
            self.head_since = now  # waiting again, after an answer
        elif self.request is not None and self.request.headers_finished:
            return True  # a body on its way: waitress's channel_timeout
        elif now - self.head_since > self.head_timeout:
            self.drop()
            return False
        return True

    def eviction_key(self) -> tuple | None:
        """What to close first at the connection limit (the smallest key); None: not this one."""
        if self.requests or self.will_close:
            return None
        if self.request is not None and self.request.headers_finished:
            return (1, self.last_activity)  # a body stalled (last_activity: waitress's, time.time())
        if self.total_outbufs_len or self.close_when_flushed:
            return (2, self.last_activity)  # an answer stalled
        return (0, time.monotonic() if self.head_since is None else self.head_since)  # owes a head

    def drop(self) -> None:
        """Close the connection on the loop's next turn, whether or not its socket can be written
        (``will_close`` alone waits for a write event, which a client that reads nothing never
        gives): shut the socket down, so that poll() reports it hung up."""
        self.will_close = True
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


_last_eviction_warning = 0.0


def make_room(server, limit: int) -> None:
    """Before a connection is added: if ``limit`` connections are open, close at least
    :data:`EVICT_BATCH`, first in :meth:`SlowClientChannel.eviction_key` order. (The map is shared
    by all the listening sockets of a server; it also holds them, the trigger pipe and the
    connections closed on the next turn, hence the quick test first.)"""
    global _last_eviction_warning
    if len(server._map) < limit:
        return
    channels = [c for c in server._map.values() if isinstance(c, SlowClientChannel) and not c.will_close]
    if len(channels) < limit:
        return
    keyed = [(key, id(c), c) for c in channels if (key := c.eviction_key()) is not None]
    for _, _, channel in heapq.nsmallest(max(len(channels) - limit + 1, EVICT_BATCH), keyed):
        channel.drop()
    now = time.monotonic()
    if now - _last_eviction_warning >= EVICTION_WARNING_EVERY:
        _last_eviction_warning = now
        log.warning("http_connection_limit open=%d action=close_longest_waiting", len(channels))
