"""OTP-style supervision on Thespian: gen_servers, links, monitors, supervisors.

A general library (it knows nothing of jobs). Start a node with
:func:`start_node`, reach one with :func:`connect`, write actors as
:class:`GenServer` subclasses and trees as :class:`Supervisor` subclasses or
plain :class:`ChildSpec` lists.
"""

from . import loopback  # noqa: F401 - patch Thespian's bind address first
from . import drain  # noqa: F401 - and its drain of an exiting actor's last messages
from .childspec import BRUTAL_KILL, INFINITY, ChildSpec, ChildType, Restart, Strategy, SupFlags
from .client import Client
from .clock import Clock, ManualClock
from .exceptions import (
    AlreadyStarted,
    BadCall,
    BadCast,
    BadChildSpec,
    BadInfo,
    BadMessage,
    CallFailed,
    CallTimeout,
    NodeDown,
    NoProc,
    RuntimeDirError,
    StartError,
    SupervisionError,
)
from .gen_server import DEFER_START, IGNORE, NOREPLY, From, GenServer, Request
from .messages import Down, Exit
from .reasons import KILLED, NOPROC, NORMAL, SHUTDOWN, is_normal, reason_name
from .registry import NodeSupervisor
from .supervisor import ChildInfo, Supervisor
from .system import Node, NodeAlreadyRunning, connect, start_node, stop_node

__all__ = [
    "AlreadyStarted",
    "BadCall",
    "BadCast",
    "BadChildSpec",
    "BadInfo",
    "BadMessage",
    "BRUTAL_KILL",
    "CallFailed",
    "CallTimeout",
    "ChildInfo",
    "ChildSpec",
    "ChildType",
    "Client",
    "Clock",
    "DEFER_START",
    "Down",
    "Exit",
    "From",
    "GenServer",
    "IGNORE",
    "INFINITY",
    "KILLED",
    "ManualClock",
    "NOPROC",
    "NOREPLY",
    "NORMAL",
    "Node",
    "Request",
    "NodeAlreadyRunning",
    "NodeDown",
    "NodeSupervisor",
    "NoProc",
    "Restart",
    "RuntimeDirError",
    "SHUTDOWN",
    "StartError",
    "Strategy",
    "SupFlags",
    "Supervisor",
    "SupervisionError",
    "connect",
    "is_normal",
    "reason_name",
    "start_node",
    "stop_node",
]
