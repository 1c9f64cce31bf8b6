"""Several real processes on one SQLite store: serializability, stamps, watches, crashes."""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from typing import List

import fdb.tuple
import pytest

import fdblayer
from fdblayer.exceptions import DiskFull, ReadOnlyStore
from fdblayer.backends.sqlite_backend import SqliteDatabase

WAIT = 30.0  # seconds: deadline of every wait on a process or an event

WORKER = r"""
import json, os, sys, time
import fdb.tuple
import fdblayer

role, url = sys.argv[1], sys.argv[2]
args = json.loads(sys.argv[3])
db = fdblayer.open(url)
pack = fdb.tuple.pack

@fdblayer.transactional
def increment(tr):
    value = tr.get(b"counter")
    tr[b"counter"] = str(int(value or b"0") + 1).encode()

@fdblayer.transactional
def claim_one(tr):
    rows = tr.get_range_startswith(pack(("pending",)), limit=1)
    if not rows:
        return None
    key, _ = rows[0]
    item = fdb.tuple.unpack(key)[1]
    tr.clear(key)
    if tr.get(pack(("claimed", item))) is not None:
        raise AssertionError("claimed twice: %r" % item)
    tr[pack(("claimed", item))] = str(os.getpid()).encode()
    return item

@fdblayer.transactional
def stamp(tr, seq):
    key = fdb.tuple.pack_with_versionstamp(("vs", fdb.tuple.Versionstamp(), os.getpid()))
    tr.set_versionstamped_key(key, str(seq).encode())
    return tr.get_versionstamp()

out = {"pid": os.getpid()}
if role == "increment":
    for _ in range(args["n"]):
        increment(db)
elif role == "claim":
    claimed = []
    while True:
        item = claim_one(db)
        if item is None:
            break
        claimed.append(item)
    out["claimed"] = claimed
elif role == "stamp":
    futures = [stamp(db, i) for i in range(args["n"])]
    out["stamps"] = [f.wait(10).hex() for f in futures]
elif role == "set":
    db.set(args["key"].encode(), args["value"].encode())
elif role == "hold":
    db.set(b"committed", b"yes")
    tr = db.create_transaction()
    tr[b"uncommitted"] = b"no"
    tr.add(b"counter-in-flight", b"\x01")
    print("holding", flush=True)
    sys.stdin.read()
db.close()
print(json.dumps(out), flush=True)
"""


def start(role: str, url: str, **args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, role, url, json.dumps(args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(procs: List[subprocess.Popen]) -> List[dict]:
    """Wait for every worker (bounded), kill leftovers, return their JSON results."""
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=WAIT)
            assert proc.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(WAIT)
    return results


@pytest.mark.slow
def test_concurrent_read_modify_write_loses_no_update(sqlite_db, sqlite_url):
    procs = [start("increment", sqlite_url, n=150) for _ in range(4)]
    finish(procs)
    assert sqlite_db.get(b"counter") == b"600"


@pytest.mark.slow
def test_each_item_claimed_exactly_once(sqlite_db, sqlite_url):
    pack = fdb.tuple.pack

    @fdblayer.transactional
    def seed(tr):
        for i in range(300):
            tr[pack(("pending", i))] = b""

    seed(sqlite_db)
    results = finish([start("claim", sqlite_url) for _ in range(4)])
    claims = [item for r in results for item in r["claimed"]]
    assert sorted(claims) == list(range(300))
    claimed = fdb.tuple.range(("claimed",))
    rows = sqlite_db.get_range(claimed.start, claimed.stop)
    owners = {fdb.tuple.unpack(k)[1]: int(v) for k, v in rows}
    assert len(owners) == 300
    for r in results:
        assert all(owners[item] == r["pid"] for item in r["claimed"])
    assert sqlite_db.get_range(pack(("pending",)), pack(("pending",)) + b"\xff") == []


@pytest.mark.slow
def test_versionstamps_strictly_increase_across_processes(sqlite_db, sqlite_url):
    results = finish([start("stamp", sqlite_url, n=60) for _ in range(3)])
    all_stamps = [s for r in results for s in r["stamps"]]
    assert len(set(all_stamps)) == len(all_stamps) == 180
    for r in results:
        assert r["stamps"] == sorted(r["stamps"])  # in each process's commit order
    rows = sqlite_db.get_range(fdb.tuple.pack(("vs",)), fdb.tuple.pack(("vs",)) + b"\xff")
    by_pid: dict = {}
    for key, value in rows:  # key order == stamp order
        _, stamp, pid = fdb.tuple.unpack(key)
        by_pid.setdefault(pid, []).append((int(value), stamp.tr_version.hex()))
    for r in results:
        seqs = [seq for seq, _ in by_pid[r["pid"]]]
        assert seqs == list(range(60))
        assert [s for _, s in by_pid[r["pid"]]] == r["stamps"]


def test_watch_fired_by_another_process(sqlite_db, sqlite_url):
    sqlite_db.set(b"w", b"before")
    tr = sqlite_db.create_transaction()
    watch = tr.watch(b"w")
    tr.commit()
    finish([start("set", sqlite_url, key="unrelated", value="x")])
    assert not watch.is_ready() or not watch.fired()
    finish([start("set", sqlite_url, key="w", value="after")])
    assert watch.wait(WAIT)
    assert sqlite_db.hub().mode == "inotify"


@pytest.mark.slow
def test_sigkill_mid_transaction_leaves_store_consistent(sqlite_db, sqlite_url):
    proc = start("hold", sqlite_url)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], WAIT)
        assert ready and proc.stdout.readline().strip() == "holding"
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(WAIT) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(WAIT)
        proc.communicate()
    sqlite_db.close()
    path = fdblayer.parse_store_url(sqlite_url).path
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        raw.close()
    db = fdblayer.open(sqlite_url)
    try:
        assert db.get(b"committed") == b"yes"
        assert db.get(b"uncommitted") is None
        assert db.get(b"counter-in-flight") is None
        tr = db.create_transaction()
        tr.deadline = time.monotonic() + 5  # the dead holder's locks are gone
        tr[b"after"] = b"ok"
        tr.commit()
        assert db.get(b"after") == b"ok"
    finally:
        db.close()


def _child_uses_inherited_handle(db: fdblayer.Database, queue) -> None:
    db.set(b"child", str(os.getpid()).encode())
    queue.put(db.get(b"parent"))


def test_handle_reopens_after_fork(sqlite_db):
    sqlite_db.set(b"parent", b"1")
    tr = sqlite_db.create_transaction()
    tr.get(b"parent")  # a connection is checked out and idle in the pool afterwards
    tr.commit()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_uses_inherited_handle, args=(sqlite_db, queue))
    child.start()
    try:
        assert queue.get(timeout=WAIT) == b"1"
        child.join(WAIT)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
            child.join(WAIT)
    assert sqlite_db.get(b"child") == str(child.pid).encode()
    sqlite_db.set(b"parent", b"2")
    assert sqlite_db.get(b"parent") == b"2"


def test_disk_full_is_a_clear_error(tmp_path):
    db = SqliteDatabase(str(tmp_path / "small.db"), extra_pragmas={"max_page_count": 12})
    try:
        db.set(b"ok", b"1")
        with pytest.raises(DiskFull):

            @fdblayer.transactional
            def grow(tr):
                for i in range(50):
                    tr[b"big%d" % i] = b"x" * 50_000

            grow(db)
        assert db.get(b"ok") == b"1" and db.get(b"big0") is None
    finally:
        db.close()


def test_read_only_store_is_a_clear_error(sqlite_url):
    fdblayer.open(sqlite_url).close()
    db = fdblayer.open(sqlite_url + "?mode=ro")
    try:
        assert db.get(b"a") is None
        with pytest.raises(ReadOnlyStore):
            db.set(b"a", b"1")
    finally:
        db.close()
