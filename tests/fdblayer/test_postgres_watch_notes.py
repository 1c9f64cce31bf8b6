"""A PostgreSQL commit's notification names the keys it changed, so that a
process's watch hub reads only when a watched key may have changed, and
fires a watch whose key certainly changed (a nonzero add, a versionstamped
value) without reading at all. A real server; the hub's reads are counted
at the backend's value reader."""

from __future__ import annotations

import fdb.tuple
import pytest

import fdblayer
from fdblayer.backends import postgres_backend
from fdblayer.watches import UNPLACED, WatchHub, Watch, change_note, note_names
from tests.procs import wait_until

WAIT = 5.0


@pytest.fixture
def handles(pg_url):
    writer, watcher = fdblayer.open(pg_url), fdblayer.open(pg_url)
    yield writer, watcher
    writer.close()
    watcher.close()


@pytest.fixture
def reads(monkeypatch):
    calls: list[list[bytes]] = []
    original = postgres_backend._ValueReader.read

    def counted(self, keys, force):
        found = original(self, keys, force)
        calls.append(list(keys))  # once done: a test that waits for a read waits for its answer too
        return found

    monkeypatch.setattr(postgres_backend._ValueReader, "read", counted)
    return calls


def _armed(db, key: bytes, reads: list) -> Watch:
    """A watch on ``key``, armed and its first read (the hub's forced one) done."""
    before = len(reads)
    tr = db.create_transaction()
    tr.get(key)
    watch = tr.watch(key)
    tr.commit()
    wait_until(lambda: len(reads) > before, WAIT, "the new watch's first read")
    return watch


def _add(db, key: bytes, n: int = 1) -> None:
    tr = db.create_transaction()
    tr.add(key, n.to_bytes(8, "little"))
    tr.commit()


def _stamp(db, key: bytes) -> None:
    tr = db.create_transaction()
    tr.set_versionstamped_value(key, fdb.tuple.pack_with_versionstamp((fdb.tuple.Versionstamp(),)))
    tr.commit()


@pytest.mark.parametrize("change", [_add, _stamp], ids=["add", "stamped-value"])
def test_a_certain_change_fires_the_watch_without_a_read(handles, reads, change):
    writer, watcher = handles
    watch = _armed(watcher, b"certain", reads)
    before = len(reads)
    change(writer, b"certain")
    assert watch.wait(WAIT)
    assert len(reads) == before


def test_a_commit_of_other_keys_neither_reads_nor_fires(handles, reads):
    """Other keys' commits, then one to the watched key: the hub takes the
    notifications in commit order, so when the watch fires the others have
    been sifted, and none of them read."""
    writer, watcher = handles
    watch = _armed(watcher, b"watched", reads)
    before = len(reads)
    for i in range(5):
        writer.set(b"other%d" % i, b"x")
        _add(writer, b"other-counter")
        assert not watch.is_ready()
    _add(writer, b"watched")
    assert watch.wait(WAIT)
    assert len(reads) == before


def test_a_set_is_read_and_fires_only_when_the_value_differs(handles, reads):
    writer, watcher = handles
    writer.set(b"k", b"same")
    watch = _armed(watcher, b"k", reads)
    before = len(reads)
    writer.set(b"k", b"same")
    wait_until(lambda: len(reads) > before, WAIT, "a read for the set")
    assert not watch.is_ready()
    writer.set(b"k", b"new")
    assert watch.wait(WAIT)


def test_a_cleared_range_cannot_be_placed_and_is_read(handles, reads):
    writer, watcher = handles
    writer.set(b"r/1", b"v")
    watch = _armed(watcher, b"r/1", reads)
    before = len(reads)
    tr = writer.create_transaction()
    tr.clear_range(b"r/", b"r0")
    tr.commit()
    assert watch.wait(WAIT)
    assert len(reads) > before


def test_an_add_in_this_process_fires_the_watch_too(pg_url, reads):
    db = fdblayer.open(pg_url)
    try:
        watch = _armed(db, b"local", reads)
        _add(db, b"local", 3)
        assert watch.wait(WAIT)
    finally:
        db.close()


# ------------------------------------------------------------------ the hub's part


def test_a_certain_change_older_than_the_watch_does_not_fire_it():
    """A notification still queued from a commit the watch's value already
    includes (its version at or below the watch's) fires nothing; a later
    one fires it."""
    hub = WatchHub(lambda keys, force: None, None, name="notes")
    try:
        watch = Watch(b"k")
        hub.register(b"k", b"v", watch, 10)
        [name] = note_names(10, change_note(([b"k"], [])))
        assert hub._sift({name}) == set() and not watch.is_ready()
        [name] = note_names(11, change_note(([b"k"], [])))
        assert hub._sift({name}) == set() and watch.fired()
        unversioned = Watch(b"u")
        hub.register(b"u", b"v", unversioned)  # a value of no known version: a read compares it
        [name] = note_names(99, change_note(([b"u"], [])))
        assert hub._sift({name}) == {UNPLACED} and not unversioned.is_ready()
    finally:
        hub.close()


def test_notes_that_name_a_watched_key_maybe_changed_or_nothing_ask_for_a_read():
    hub = WatchHub(lambda keys, force: None, None, name="notes")
    try:
        hub.register(b"k", b"v", Watch(b"k"), 10)
        assert hub._sift(note_names(11, change_note(([], [b"k"])))) == {UNPLACED}
        assert hub._sift(note_names(11, change_note(([], [b"other"])))) == set()
        assert hub._sift(note_names(11, change_note(None))) == {UNPLACED}
        assert hub._sift({UNPLACED}) == {UNPLACED}
        assert change_note(([b"k%d" % i for i in range(40)], [])) == "*"
    finally:
        hub.close()


@pytest.mark.parametrize(
    "note",
    ["", "*", "zz -", "0123456789abcdef:9 -", "0123456789abcdef", "0123456789abcdeg -", "a b c"],
)
def test_a_malformed_note_asks_for_a_read_and_names_nothing(note):
    """A note that is not two lists of digests (another program's, a damaged
    one) is a change the hub cannot place: it reads, and no watch fires on it."""
    names = note_names(7, note)
    assert names == {UNPLACED}
    hub = WatchHub(lambda keys, force: None, None, name="notes")
    try:
        watch = Watch(b"k")
        hub.register(b"k", b"v", watch, 1)
        assert hub._sift(names) == {UNPLACED} and not watch.is_ready()
    finally:
        hub.close()
