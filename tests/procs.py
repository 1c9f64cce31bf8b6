"""Process and socket helpers shared by the tests (all read /proc; Linux only)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from supervision.procs import pid_alive

__all__ = ["free_port", "group_pids", "kill_groups", "listening_addresses", "pid_alive", "proc_stat", "wait_until"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, below the
    kernel's ephemeral range: the sockets every actor and client opens (port
    0) come from that range, so none of them can take the port between this
    call and the node binding it (a node restarted on its port relies on it)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # the range below is crowded: any free port then
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 15.0,
    what: str = "condition",
    step: float = 0.01,
    ignore: tuple[type[BaseException], ...] = (),
) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned) or fail.

    Exceptions of the ``ignore`` types count as "not yet" (say, NoProc while
    an actor is between two lives).
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
        except ignore as exc:
            last_exc, value = exc, None
        else:
            last_exc = None  # the last failure is the one reported: a falsy answer replaces an old error
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc!r})")
        time.sleep(step)


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process, or None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1]), int(fields[2])


def pss_mb(pids: Iterable[int]) -> float:
    """Total proportional set size (shared pages split among sharers) of
    ``pids``, in MB: the memory they cost together."""
    total_kb = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total_kb += next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
        except OSError:
            pass  # exited meanwhile
    return total_kb / 1024


def open_fds(pids: Iterable[int]) -> int:
    """Open descriptors of ``pids`` together."""
    count = 0
    for pid in pids:
        try:
            count += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            pass
    return count


def group_pids(pgid: int) -> set[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st and st[2] == pgid and st[0] not in ("Z", "X"):
                out.add(int(name))
    return out


def _socket_inodes(pids: Iterable[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def _tcp_sockets(pids: Iterable[int]) -> Iterator[tuple[int, list[str]]]:
    """``(family, columns of /proc/net/tcp*)`` of every TCP socket ``pids`` hold."""
    inodes = _socket_inodes(pids)
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[9] in inodes:
                yield family, cols


def client_ports(pids: Iterable[int]) -> set[int]:
    """Local TCP ports of the sockets that ``pids`` hold (connected or not)."""
    return {int(cols[1].rsplit(":", 1)[1], 16) for _, cols in _tcp_sockets(pids)}


def listening_addresses(pids: Iterable[int]) -> set[str]:
    """``ip:port`` of every listening TCP socket owned by ``pids`` (IPv6 as ``ipv6:<hex>:port``)."""
    found = set()
    for family, cols in _tcp_sockets(pids):
        if cols[3] != "0A":
            continue
        hexip, hexport = cols[1].split(":")
        if family == socket.AF_INET:
            ip = socket.inet_ntop(family, bytes.fromhex(hexip)[::-1])
        else:
            ip = "ipv6:" + hexip
        found.add(f"{ip}:{int(hexport, 16)}")
    return found


def kill_groups(procs: Iterable[subprocess.Popen], pids: Iterable[int], what: str) -> None:
    """SIGKILL the process group of each of ``procs`` (SIGCONT first, so a
    stopped one dies too), reap them, then wait until no process is left in
    the group of any of ``pids`` (every process those groups ever had).

    A group is signalled only while its leader (the Popen, started in a
    session of its own) is not reaped yet: its number cannot name another
    group then. A reaped one's group is left to die with it (a node dies
    with the command that started it)."""
    procs = list(procs)
    for proc in procs:
        if proc.returncode is not None:
            continue
        try:
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
    pids = list(pids)
    wait_until(lambda: not any(group_pids(pid) for pid in pids), 10, f"no {what} left")
