"""Nothing of a node listens beyond 127.0.0.1 by default.

A node started as a user starts it (``python -m actors node start``, default
settings but for free ports: ``--port``, ``--http-port 0``, a store in a
temporary directory), running a permanent document and a transient job (so
the doc processor and two job actors have their processes too): every
process of the node's process group, and every descendant of those (in case
one left the group), has its TCP listening sockets (IPv4 and IPv6) on
127.0.0.1 only and no UDP socket bound beyond loopback. After SIGTERM no
such process is left.

(``tests/actors/test_node_cli.py`` checks the TCP listeners of an idle
node's group; this adds the job and doc processes, descendants outside the
group, IPv6 and UDP.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from actors.http.server import HTTP_SERVER_NAME, GetHttpInfo
from supervision import connect
from tests.procs import free_port, group_pids, listening_addresses, pid_alive, proc_stat, wait_until

from .http import describe, request
from .node import IDLE

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def descendants(pids: set[int]) -> set[int]:
    """``pids`` and every live process whose parent chain leads to one of them."""
    found = set(pids)
    while True:
        more = set()
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in found:
                st = proc_stat(int(name))
                if st and st[1] in found and st[0] not in ("Z", "X"):
                    more.add(int(name))
        if not more:
            return found
        found |= more


def socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


#: Loopback as /proc/net/udp and /proc/net/udp6 write it (hex, host byte order).
LOOPBACK_HEX = {"0100007F", "00000000000000000000000001000000"}


def udp_bound(pids: set[int]) -> set[str]:
    """``hexip:hexport`` of the UDP sockets of ``pids``, as /proc/net/udp* writes them."""
    inodes = socket_inodes(pids)
    out = set()
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[9] in inodes:
                out.add(cols[1])
    return out


@pytest.fixture
def node(tmp_path):
    port = free_port()
    env = dict(os.environ, OTPJOBS_RUNTIME_DIR=str(tmp_path / "run"), THESPLOG_FILE=str(tmp_path / "thespian.log"))
    log = tmp_path / "node.log"
    ini = tmp_path / "node.ini"  # the job policy allows the test handler (none by default)
    ini.write_text(f"[replicator]\nhandlers = {IDLE.partition(':')[0]}\n")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actors",
                "node",
                "start",
                "--port",
                str(port),
                "--store",
                f"sqlite:///{tmp_path / 'store.db'}",
                "--http-port",
                "0",
                "--config",
                str(ini),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
        )
    runtime = tmp_path / "run" / f"node-{port}.json"
    pgid = None
    try:
        wait_until(lambda: "node_up" in log.read_text() or proc.poll() is not None, 60, "node_up")
        assert proc.poll() is None, log.read_text()
        pgid = json.loads(runtime.read_text())["pgid"]
        yield proc, port, pgid
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        if pgid is not None:
            for pid in group_pids(pgid):  # only if the node failed to stop them
                os.kill(pid, signal.SIGKILL)


def test_every_process_of_a_busy_default_node_listens_on_loopback_only(node) -> None:
    proc, port, pgid = node
    http_port = connect(port).call(HTTP_SERVER_NAME, GetHttpInfo(), 10)["port"]
    put = request(http_port, "PUT", "/_replicator/listen", {"handler": IDLE, "continuous": True})
    assert put.status == 201, describe(put)
    post = request(http_port, "POST", "/_replicate", {"replication_id": "listen", "handler": IDLE, "continuous": True})
    assert post.status == 202, describe(post)

    def both_running() -> bool:
        jobs = request(http_port, "GET", "/_scheduler/jobs").json()["jobs"]
        return len(jobs) == 2 and all(j["pid"] not in (None, "<starting>") for j in jobs)

    wait_until(both_running, 60, "the document's job and the transient job running")
    pids = descendants(group_pids(pgid) | {proc.pid})
    addresses = listening_addresses(pids)
    assert f"127.0.0.1:{port}" in addresses and f"127.0.0.1:{http_port}" in addresses, addresses
    assert all(a.startswith("127.0.0.1:") for a in addresses), addresses
    assert all(a.split(":")[0] in LOOPBACK_HEX for a in udp_bound(pids)), udp_bound(pids)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    wait_until(
        lambda: not any(pid_alive(p) and (proc_stat(p) or ("Z",))[0] not in ("Z", "X") for p in pids),
        15,
        "every process of the node gone",
    )
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", http_port)) != 0
