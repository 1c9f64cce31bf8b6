"""A node's supervisor asked for a name before its own ``Init`` arrives.

A client that connects while the node starts (``connect(port)`` then a
call by name, as the guide's start loop does) can reach the node
supervisor before its starter's ``Init``: Thespian orders messages per
sender only. The supervisor serves names even while its tree starts, and
it crashed on that early ``WhereIs`` (its registry was made in ``init``),
failing the node's start (seen in CI: ``'NodeSupervisor' object has no
attribute '_names'``, then ``child 'supervision.node' failed to start``).
"""

from __future__ import annotations

from thespian.actors import ActorAddress

from supervision import messages as m
from supervision.registry import NodeSupervisor


def test_a_name_asked_before_init_is_answered_not_found_and_registers_later():
    node = NodeSupervisor()  # outside Thespian: what it sends is recorded
    sent: list = []
    node.send = lambda to, msg: sent.append((to, msg))
    client = ActorAddress("client")
    node._route(m.Call("r1", m.WhereIs("alice"), reply_to=client), client)
    assert sent == [(client, m.Reply("r1", None))], "an empty answer: the client asks again"
    alice = ActorAddress("alice")
    node._route(m.Cast(m.Register("alice", alice, None)), alice)
    node._route(m.Call("r2", m.WhereIs("alice"), reply_to=client), client)
    assert sent[-1] == (client, m.Reply("r2", alice))
