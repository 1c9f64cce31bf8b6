"""The SQLite store's watch thread under a stream of commits.

Every write commit wakes the thread of every process that watches a key;
it must not read the watched keys once per commit (a busy worker with one
idle watch would give half its time to that thread), and grouping the
wake-ups must lose none. Real store files, real commits.
"""

from __future__ import annotations

import time

import fdblayer
from tests.fdblayer.watching import arm
from fdblayer.watches import WatchHub

WAIT = 10.0


def _count_reads(db) -> list:
    """Wrap the hub's reader: the list grows by one per read of the watched keys."""
    hub = db.hub()
    reads: list = []
    read = hub._read_values

    def counting(keys, force):
        reads.append(time.monotonic())
        return read(keys, force)

    hub._read_values = counting
    return reads


def test_a_stream_of_commits_is_served_by_spaced_reads(tmp_path):
    db = fdblayer.open(f"sqlite:///{tmp_path}/s.db?synchronous=NORMAL")
    try:
        reads = _count_reads(db)
        watch = arm(db, b"\x01watched")
        deadline = time.monotonic() + WAIT
        while not reads and time.monotonic() < deadline:  # the new watch's own first read
            time.sleep(0.001)
        commits = 600
        started = time.monotonic()
        for i in range(commits):
            db.set(b"\x01other%05d" % i, b"v")
        elapsed = time.monotonic() - started
        time.sleep(2 * WatchHub.MIN_CHECK_INTERVAL)  # the last pause ends
        assert not watch.is_ready()  # other keys never fire it
        during = [t for t in reads if t >= started]
        assert len(during) <= elapsed / WatchHub.MIN_CHECK_INTERVAL + 3
        assert len(during) < commits / 4  # not one read per commit
        gaps = [b - a for a, b in zip(during, during[1:])]
        assert all(gap >= WatchHub.MIN_CHECK_INTERVAL * 0.9 for gap in gaps)
    finally:
        db.close()


def test_a_key_changed_again_and_again_wakes_its_waiter_at_once(tmp_path):
    """A read that fires a watch starts no pause: re-armed after each change,
    a watch on a key that keeps changing is served by one read per change."""
    db = fdblayer.open(f"sqlite:///{tmp_path}/s.db?synchronous=NORMAL")
    try:
        reads = _count_reads(db)
        latencies = []
        for i in range(50):
            watch = arm(db, b"\x01hot")
            changed = time.monotonic()
            db.set(b"\x01hot", b"%d" % i)
            assert watch.wait(WAIT)
            latencies.append(time.monotonic() - changed)
        latencies.sort()
        assert latencies[len(latencies) // 2] < WatchHub.MIN_CHECK_INTERVAL / 2
        assert len(reads) <= 2 * 50 + 2  # the arming read and the firing read, per round
    finally:
        db.close()


def test_a_change_after_a_stream_still_fires_its_watch(tmp_path):
    """The pause only groups wake-ups: the change that ends a stream of other
    commits is seen, whenever it falls in the pause."""
    db = fdblayer.open(f"sqlite:///{tmp_path}/s.db?synchronous=NORMAL")
    try:
        watch = arm(db, b"\x01watched")
        for i in range(200):
            db.set(b"\x01other%05d" % i, b"v")
        db.set(b"\x01watched", b"new")  # at once after the stream: inside a pause
        assert watch.wait(WAIT)
        assert watch.fired()
    finally:
        db.close()
