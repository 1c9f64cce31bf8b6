"""The store contract: every interface method, run on every backend present."""

from __future__ import annotations

import os
import random

import threading

import fdb.tuple
import pytest

import fdblayer
from fdblayer import KeySelector, transactional
from fdblayer.exceptions import (
    ConflictError,
    InvalidStoreURL,
    InvalidTransactionState,
    InvalidVersionstampOffset,
    KeyOutsideLegalRange,
    KeyTooLarge,
    NoCommitVersion,
    RetryLimitExceeded,
    ServerGone,
    StoreError,
    StoreTypeError,
    TransactionTooLarge,
    ValueTooLarge,
    is_retryable,
)
from fdblayer.interface import add_little_endian

pack = fdb.tuple.pack
WAIT = 10.0  # seconds: deadline of every wait on an event


def fill(db, n=10, prefix="k"):
    @transactional
    def body(tr):
        for i in range(n):
            tr[pack((prefix, i))] = b"v%d" % i

    body(db)
    return [pack((prefix, i)) for i in range(n)]


# ------------------------------------------------------------------ basic reads and writes


class TestBasics:
    def test_set_get_clear(self, db):
        tr = db.create_transaction()
        assert tr.get(b"a") is None
        tr[b"a"] = b"1"
        assert tr[b"a"] == b"1"  # read your writes
        tr.commit()
        assert db.get(b"a") == b"1"
        tr = db.create_transaction()
        del tr[b"a"]
        tr.commit()
        assert db.get(b"a") is None

    def test_non_bytes_key_or_value_is_a_type_error(self, db):
        tr = db.create_transaction()
        with pytest.raises(TypeError):
            tr.set("a", b"1")
        with pytest.raises(StoreTypeError):
            tr.set(b"a", "1")
        with pytest.raises(TypeError):
            tr.get(1)

    def test_write_in_system_keyspace_is_refused(self, db):
        with pytest.raises(KeyOutsideLegalRange):
            db.set(b"\xff\x01", b"x")

    def test_empty_value_is_kept(self, db):
        db.set(b"e", b"")
        assert db.get(b"e") == b""

    def test_cancel_discards_and_closes(self, db):
        tr = db.create_transaction()
        tr[b"a"] = b"1"
        tr.cancel()
        with pytest.raises(InvalidTransactionState):
            tr.get(b"a")
        tr.reset()
        assert tr.get(b"a") is None
        tr.commit()
        assert db.get(b"a") is None

    def test_use_after_commit_is_refused_until_reset(self, db):
        tr = db.create_transaction()
        tr[b"a"] = b"1"
        tr.commit()
        with pytest.raises(InvalidTransactionState):
            tr.set(b"b", b"2")
        tr.reset()
        tr[b"b"] = b"2"
        tr.commit()
        assert db.get(b"b") == b"2"


# ------------------------------------------------------------------ ranges and selectors


class TestOneSnapshot:
    def test_a_read_only_transaction_sees_one_state_while_others_commit(self, db, store_url):
        """Reads after another handle's commits still see the transaction's
        first state, and a read-only transaction never fails for it (as on
        FoundationDB: reads are at one read version)."""
        db.set(b"s1", b"old")
        db.set(b"s2", b"old")
        other = fdblayer.open(store_url)
        try:
            for view in ("plain", "snapshot"):
                tr = db.create_transaction()
                reader = tr if view == "plain" else tr.snapshot
                assert reader.get(b"s1") == b"old"
                other.set(b"s1", b"new")
                other.set(b"s2", b"new")
                assert reader.get(b"s2") == b"old", view
                assert [kv.value for kv in reader.get_range(b"s1", b"s3")] == [b"old", b"old"]
                tr.commit()  # read-only: nothing to conflict
                assert db.get(b"s2") == b"new"
                other.set(b"s1", b"old")
                other.set(b"s2", b"old")
        finally:
            other.close()


class TestGetMany:
    def test_values_in_order_with_own_writes_and_adds(self, db):
        db.set(b"a", b"1")
        db.set(b"b", b"2")
        db.set(b"n", (5).to_bytes(8, "little"))

        @transactional
        def read(tr):
            tr.set(b"b", b"changed")
            tr.clear(b"a")
            tr.add(b"n", (1).to_bytes(8, "little"))
            tr.set(b"w", b"new")
            return tr.get_many([b"b", b"a", b"missing", b"n", b"w", b"b"]), tr.snapshot.get_many([b"w"])

        values, snap = read(db)
        assert values == [b"changed", None, None, (6).to_bytes(8, "little"), b"new", b"changed"]
        assert snap == [b"new"]
        assert db.get(b"n") == (6).to_bytes(8, "little")

    def test_many_keys(self, db):
        @transactional
        def fill(tr):
            for i in range(0, 1200, 2):
                tr.set(b"k%05d" % i, b"%d" % i)

        fill(db)

        @transactional
        def read(tr):
            return tr.get_many([b"k%05d" % i for i in range(1200)])

        assert read(db) == [b"%d" % i if i % 2 == 0 else None for i in range(1200)]

    def test_bad_key_is_a_type_error(self, db):
        tr = db.create_transaction()
        with pytest.raises(StoreTypeError):
            tr.get_many([b"ok", "not bytes"])
        tr.cancel()


class TestRanges:
    def test_range_limit_reverse(self, db):
        keys = fill(db, 10)
        tr = db.create_transaction()
        rows = tr.get_range(keys[2], keys[7])
        assert [k for k, _ in rows] == keys[2:7]
        assert [r.key for r in tr.get_range(keys[2], keys[7], limit=2)] == keys[2:4]
        assert [r.key for r in tr.get_range(keys[2], keys[7], reverse=True)] == keys[6:1:-1]
        assert [r.key for r in tr.get_range(keys[2], keys[7], limit=2, reverse=True)] == [
            keys[6],
            keys[5],
        ]
        assert rows[0].value == b"v2"
        assert tr.get_range(keys[7], keys[2]) == []
        assert [r.key for r in tr[keys[8] :]] == keys[8:]

    def test_range_startswith_and_clear(self, db):
        a = fill(db, 5, "a")
        b = fill(db, 5, "b")
        tr = db.create_transaction()
        assert [r.key for r in tr.get_range_startswith(pack(("a",)))] == a
        assert [r.key for r in tr.get_range_startswith(pack(("a",)), limit=1, reverse=True)] == [a[-1]]
        r = fdb.tuple.range(("b",))
        assert [kv.key for kv in tr.get_range(r.start, r.stop)] == b
        tr.clear_range(a[1], a[3])
        assert [kv.key for kv in tr.get_range_startswith(pack(("a",)))] == [a[0], a[3], a[4]]
        tr.clear_range_startswith(pack(("b",)))
        tr.commit()
        assert db.get_range(b"", b"\xff") == [(a[0], b"v0"), (a[3], b"v3"), (a[4], b"v4")]

    def test_selectors_resolve_like_foundationdb(self, db):
        db.set(b"b", b"")
        db.set(b"d", b"")
        db.set(b"f", b"")
        tr = db.create_transaction()
        assert tr.get_key(KeySelector.first_greater_or_equal(b"d")) == b"d"
        assert tr.get_key(KeySelector.first_greater_than(b"d")) == b"f"
        assert tr.get_key(KeySelector.last_less_than(b"d")) == b"b"
        assert tr.get_key(KeySelector.last_less_or_equal(b"d")) == b"d"
        assert tr.get_key(KeySelector.last_less_or_equal(b"c")) == b"b"
        assert tr.get_key(KeySelector.first_greater_or_equal(b"c") + 1) == b"f"
        assert tr.get_key(KeySelector.first_greater_or_equal(b"f") - 1) == b"d"
        assert tr.get_key(KeySelector.first_greater_than(b"f")) == b"\xff"
        assert tr.get_key(KeySelector.last_less_than(b"b")) == b""
        assert tr.get_key(KeySelector.first_greater_or_equal(b"a") - 5) == b""

    def test_range_with_selectors(self, db):
        for k in (b"b", b"d", b"f", b"h"):
            db.set(k, k)
        tr = db.create_transaction()
        rows = tr.get_range(KeySelector.first_greater_than(b"b"), KeySelector.last_less_or_equal(b"h"))
        assert [r.key for r in rows] == [b"d", b"f"]
        rows = tr.get_range(KeySelector.last_less_than(b"c"), KeySelector.first_greater_than(b"f"))
        assert [r.key for r in rows] == [b"b", b"d", b"f"]
        rows = tr.get_range(KeySelector.first_greater_or_equal(b"") + 1, b"\xff", reverse=True)
        assert [r.key for r in rows] == [b"h", b"f", b"d"]

    def test_selector_arithmetic_and_equality(self):
        s = KeySelector.first_greater_or_equal(b"x")
        assert s + 2 == KeySelector(b"x", False, 3)
        assert s - 1 == KeySelector(b"x", False, 0)
        assert tuple(KeySelector.last_less_or_equal(b"x")) == (b"x", True, 0)


# ------------------------------------------------------------------ atomic add


class TestAdd:
    @pytest.mark.parametrize(
        "existing, param, expected",
        [
            (None, b"\x01\x00", b"\x01\x00"),
            (b"\xff\x00", b"\x01\x00", b"\x00\x01"),  # carry
            (b"\xff\xff", b"\x01\x00", b"\x00\x00"),  # overflow wraps
            (b"\x05", b"\x01\x00\x00", b"\x06\x00\x00"),  # existing padded to len(param)
            (b"\x05\x07\x09", b"\x01", b"\x06"),  # existing truncated to len(param)
            (b"\x05", b"", b""),
        ],
    )
    def test_add_is_little_endian_sized_by_param(self, db, existing, param, expected):
        if existing is not None:
            db.set(b"n", existing)
        tr = db.create_transaction()
        tr.add(b"n", param)
        assert tr.get(b"n") == expected
        tr.commit()
        assert db.get(b"n") == expected

    def test_blind_adds_match_the_reference_for_every_width_and_carry(self, db):
        """Adds to keys whose value the transaction never read are applied by
        the store (on PostgreSQL in its commit function, the 8-byte ones on a
        fast path, many keys in one statement): the results are the
        reference's, carries across bytes and halves and the wrap included,
        and a key added to at two widths in one transaction gets both adds."""
        rng = random.Random(28)
        edges = [0, 1, 255, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]
        cases = [(a, b) for a in edges for b in edges[:6]]
        cases += [(rng.getrandbits(64), rng.getrandbits(64)) for _ in range(40)]
        tr = db.create_transaction()
        for i, (a, _) in enumerate(cases):
            tr.set(b"a%03d" % i, a.to_bytes(8, "little"))
        tr.set(b"odd", b"\xff\x01\x02")
        tr.commit()
        tr = db.create_transaction()
        for i, (_, b) in enumerate(cases):
            tr.add(b"a%03d" % i, b.to_bytes(8, "little"))
        tr.add(b"odd", b"\x01\x00")
        tr.add(b"odd", b"\x01\x00\x00\x00")
        tr.add(b"fresh", (5).to_bytes(8, "little"))
        tr.commit()
        for i, (a, b) in enumerate(cases):
            assert db.get(b"a%03d" % i) == ((a + b) % 2**64).to_bytes(8, "little"), (a, b)
        assert db.get(b"odd") == add_little_endian(add_little_endian(b"\xff\x01\x02", b"\x01\x00"), b"\x01\x00\x00\x00")
        assert db.get(b"fresh") == (5).to_bytes(8, "little")

    def test_add_accumulates_across_transactions(self, db):
        for _ in range(5):
            tr = db.create_transaction()
            tr.add(b"n", (3).to_bytes(8, "little"))
            tr.commit()
        assert int.from_bytes(db.get(b"n"), "little") == 15


# ------------------------------------------------------------------ versionstamps


class TestVersionstamps:
    def test_versionstamped_key_matches_the_transaction_stamp(self, db):
        tr = db.create_transaction()
        tr.set_versionstamped_key(
            fdb.tuple.pack_with_versionstamp(("vs", fdb.tuple.Versionstamp(user_version=7))), b"x"
        )
        future = tr.get_versionstamp()
        tr.commit()
        stamp = future.wait(WAIT)
        assert len(stamp) == 10
        ((key, value),) = _startswith(db, pack(("vs",)))
        assert value == b"x"
        assert fdb.tuple.unpack(key) == ("vs", fdb.tuple.Versionstamp(stamp, 7))

    def test_versionstamped_value(self, db):
        tr = db.create_transaction()
        tr.set_versionstamped_value(b"v", b"pre" + b"\x00" * 10 + b"post" + (3).to_bytes(4, "little"))
        future = tr.get_versionstamp()
        tr.commit()
        assert db.get(b"v") == b"pre" + future.wait(WAIT) + b"post"

    def test_many_stamped_writes_in_one_transaction_and_a_key_written_twice(self, db):
        """Many versionstamped keys and values in one commit all land (on
        PostgreSQL in one statement each); a stamped key or value written
        twice keeps its last value."""
        tr = db.create_transaction()
        for i in range(50):
            tr.set_versionstamped_key(
                fdb.tuple.pack_with_versionstamp(("vs", fdb.tuple.Versionstamp(user_version=i))), b"k%d" % i
            )
            tr.set_versionstamped_value(b"val/%02d" % i, fdb.tuple.pack_with_versionstamp((fdb.tuple.Versionstamp(),)))
        twice = fdb.tuple.pack_with_versionstamp(("twice", fdb.tuple.Versionstamp(user_version=0)))
        tr.set_versionstamped_key(twice, b"first")
        tr.set_versionstamped_key(twice, b"last")
        tr.set_versionstamped_value(b"val/twice", fdb.tuple.pack_with_versionstamp(("a", fdb.tuple.Versionstamp())))
        tr.set_versionstamped_value(b"val/twice", fdb.tuple.pack_with_versionstamp(("b", fdb.tuple.Versionstamp())))
        future = tr.get_versionstamp()
        tr.commit()
        stamp = future.wait(WAIT)
        keys = db.get_range(pack(("vs",)), pack(("vs",)) + b"\xff")
        assert [fdb.tuple.unpack(kv.key)[1].user_version for kv in keys] == list(range(50))
        assert [kv.value for kv in keys] == [b"k%d" % i for i in range(50)]
        assert all(fdb.tuple.unpack(kv.key)[1].tr_version == stamp for kv in keys)
        values = db.get_range(b"val/", b"val/\xff")
        assert len(values) == 51
        assert all(fdb.tuple.unpack(kv.value)[-1].tr_version == stamp for kv in values)
        assert fdb.tuple.unpack(db.get(b"val/twice"))[0] == "b"
        [(key, value)] = db.get_range(pack(("twice",)), pack(("twice",)) + b"\xff")
        assert value == b"last"

    def test_a_later_set_or_clear_of_a_stamped_value_wins(self, db):
        """The last write of a key wins, a versionstamped value's too."""
        db.set(b"cleared", b"before")
        tr = db.create_transaction()
        template = fdb.tuple.pack_with_versionstamp((fdb.tuple.Versionstamp(),))
        for key in (b"set", b"cleared", b"in-range"):
            tr.set_versionstamped_value(key, template)
        tr.set(b"set", b"plain")
        tr.clear(b"cleared")
        tr.clear_range(b"in-", b"in.")
        tr.commit()
        assert db.get(b"set") == b"plain"
        assert db.get(b"cleared") is None
        assert db.get(b"in-range") is None

    def test_stamps_increase_across_transactions(self, db):
        stamps = []
        for i in range(5):
            tr = db.create_transaction()
            tr[b"k%d" % i] = b""
            stamps.append(tr.get_versionstamp())
            tr.commit()
        values = [f.wait(WAIT) for f in stamps]
        assert values == sorted(values) and len(set(values)) == 5

    def test_bad_offset_is_refused(self, db):
        tr = db.create_transaction()
        with pytest.raises(InvalidVersionstampOffset):
            tr.set_versionstamped_key(b"abc" + (2).to_bytes(4, "little"), b"")
        with pytest.raises(InvalidVersionstampOffset):
            tr.set_versionstamped_value(b"k", b"\x00")

    def test_no_stamp_without_writes(self, db):
        tr = db.create_transaction()
        tr.get(b"a")
        future = tr.get_versionstamp()
        tr.commit()
        with pytest.raises(NoCommitVersion):
            future.wait(WAIT)


def _startswith(db, prefix):
    tr = db.create_transaction()
    rows = tr.get_range_startswith(prefix)
    tr.commit()
    return rows


# ------------------------------------------------------------------ watches


class TestWatches:
    def test_watch_fires_on_change_by_another_handle(self, db, store_url):
        db.set(b"w", b"1")
        tr = db.create_transaction()
        watch = tr.watch(b"w")
        tr.commit()
        assert not watch.is_ready()
        other = fdblayer.open(store_url)
        try:
            other.set(b"w", b"2")
        finally:
            other.close()
        assert watch.wait(WAIT)
        assert watch.fired() and watch.is_ready()

    def test_watch_on_missing_key_fires_when_created(self, db):
        tr = db.create_transaction()
        watch = tr.watch(b"new")
        tr.commit()
        db.set(b"new", b"")
        assert watch.wait(WAIT)

    def test_watch_ignores_other_keys_and_same_value(self, db):
        db.set(b"w", b"1")
        tr = db.create_transaction()
        watch = tr.watch(b"w")
        tr.commit()
        db.set(b"other", b"x")
        db.set(b"w", b"1")
        sentinel = db.create_transaction()
        probe = sentinel.watch(b"other")
        sentinel.commit()
        db.set(b"other", b"y")
        assert probe.wait(WAIT)  # the hub has checked after both commits
        assert not watch.is_ready()
        watch.cancel()

    def test_watch_sees_own_transaction_write(self, db):
        tr = db.create_transaction()
        tr[b"w"] = b"mine"
        watch = tr.watch(b"w")
        tr.commit()
        db.set(b"w", b"mine")
        db.set(b"w", b"theirs")
        assert watch.wait(WAIT)

    def test_cancel_and_callbacks(self, db):
        tr = db.create_transaction()
        watch = tr.watch(b"w")
        tr.commit()
        seen = threading.Event()
        watch.on_ready(lambda w: seen.set())
        watch.cancel()
        assert seen.wait(WAIT)
        assert watch.cancelled() and not watch.wait(0)
        db.set(b"w", b"x")
        assert not watch.fired()

    def test_watch_of_cancelled_transaction_is_cancelled(self, db):
        tr = db.create_transaction()
        watch = tr.watch(b"w")
        tr.cancel()
        assert watch.cancelled()

    def test_wait_times_out(self, db):
        tr = db.create_transaction()
        watch = tr.watch(b"w")
        tr.commit()
        assert watch.wait(0.01) is False
        watch.cancel()


# ------------------------------------------------------------------ limits


class TestLimits:
    def test_key_too_large_writes_nothing(self, db):
        @transactional
        def body(tr):
            tr[b"ok"] = b"1"
            tr[b"k" * 10_001] = b"1"

        with pytest.raises(KeyTooLarge) as info:
            body(db)
        assert info.value.code == 2102
        assert db.get(b"ok") is None

    def test_value_too_large_writes_nothing(self, db):
        @transactional
        def body(tr):
            tr[b"ok"] = b"1"
            tr[b"big"] = b"v" * 100_001

        with pytest.raises(ValueTooLarge):
            body(db)
        assert db.get(b"ok") is None and db.get(b"big") is None

    def test_limits_are_inclusive(self, db):
        key = b"k" * db.max_key_size  # 10,000 bytes, less the FoundationDB subspace prefix
        db.set(key, b"v" * 100_000)
        assert len(db.get(key)) == 100_000

    def test_transaction_too_large_writes_nothing(self, db):
        tr = db.create_transaction()
        tr[b"first"] = b"1"
        with pytest.raises(TransactionTooLarge) as info:
            for i in range(110):
                tr[b"big%03d" % i] = b"v" * 99_990
        assert isinstance(info.value, StoreError) and info.value.code == 2101
        with pytest.raises(TransactionTooLarge):
            tr.commit()
        assert db.get(b"first") is None and db.get(b"big000") is None


# ------------------------------------------------------------------ transactional


class TestTransactional:
    def test_returns_result_and_commits(self, db):
        @transactional
        def body(tr, value):
            tr[b"a"] = value
            return "done"

        assert body(db, b"1") == "done"
        assert db.get(b"a") == b"1"

    def test_only_outermost_call_commits(self, db, store_url):
        observer = fdblayer.open(store_url)

        @transactional
        def inner(tr):
            tr[b"inner"] = b"1"

        @transactional
        def outer(tr):
            inner(tr)
            assert observer.get(b"inner") is None  # not committed by the inner call
            raise RuntimeError("boom")

        try:
            with pytest.raises(RuntimeError):
                outer(db)
            assert db.get(b"inner") is None
        finally:
            observer.close()

    def test_tr_parameter_found_by_name(self, db):
        class Store:
            @transactional
            def put(self, tr, key):
                tr[key] = b"1"

        Store().put(db, b"m")
        Store().put(tr=db, key=b"n")
        assert db.get(b"m") == b"1" and db.get(b"n") == b"1"

    def test_conflict_is_retried(self, db, store_url):
        other = fdblayer.open(store_url)
        attempts = []

        @transactional
        def body(tr):
            value = tr.get(b"c")
            attempts.append(value)
            if len(attempts) == 1:
                other.set(b"c", b"other")
            tr[b"c"] = (value or b"") + b"+mine"

        try:
            body(db)
        finally:
            other.close()
        assert attempts == [None, b"other"]
        assert db.get(b"c") == b"other+mine"

    def test_retry_limit(self, db):
        calls = []

        @transactional(retry_limit=3)
        def body(tr):
            calls.append(1)
            raise ConflictError("forced")

        with pytest.raises(RetryLimitExceeded) as info:
            body(db)
        assert len(calls) == 3 and info.value.attempts == 3
        assert isinstance(info.value.last_error, ConflictError)

    def test_waiting_for_the_server_is_bounded_by_the_deadline_not_the_retry_limit(self, db):
        """README: ``transactional`` waits for a server it cannot reach up to
        its deadline; 100 quick refusals (4.5 s) used to end the wait."""
        calls = []

        @transactional(retry_limit=3, timeout=30)
        def body(tr):
            calls.append(1)
            if len(calls) <= 5:
                raise ServerGone("forced: the server refuses connections")
            tr[b"after"] = b"1"

        body(db)
        assert len(calls) == 6 and db.get(b"after") == b"1"

    def test_deadline(self, db):
        @transactional(timeout=0.05)
        def body(tr):
            raise ConflictError("forced")

        with pytest.raises(RetryLimitExceeded):
            body(db)

    def test_exception_discards_writes(self, db):
        @transactional
        def body(tr):
            tr[b"x"] = b"1"
            raise KeyError("not a store error")

        with pytest.raises(KeyError):
            body(db)
        assert db.get(b"x") is None

    def test_generator_rejected(self):
        with pytest.raises(TypeError):

            @transactional
            def gen(tr):
                yield tr

    def test_needs_database_or_transaction(self):
        @transactional
        def body(tr):
            return 1

        with pytest.raises(TypeError):
            body("not a db")

    def test_snapshot_reads(self, db):
        db.set(b"s", b"1")

        @transactional
        def body(tr):
            return tr.snapshot.get(b"s"), tr.snapshot.get_range(b"", b"\xff"), tr.snapshot[b"s"]

        assert body(db) == (b"1", [(b"s", b"1")], b"1")


class TestConflicts:
    def test_read_modify_write_race_has_one_winner(self, db, store_url):
        other = fdblayer.open(store_url)
        try:
            first, second = db.create_transaction(), other.create_transaction()
            assert first.get(b"job") is None and second.get(b"job") is None
            first[b"job"] = b"first"
            first.commit()
            with pytest.raises(ConflictError) as info:
                second[b"job"] = b"second"
                second.commit()
            assert is_retryable(info.value) and info.value.code == 1020
        finally:
            other.close()
        assert db.get(b"job") == b"first"

    def test_read_conflict_key(self, db, store_url):
        other = fdblayer.open(store_url)
        try:
            tr = db.create_transaction()
            tr.add_read_conflict_key(b"guard")
            other.set(b"guard", b"changed")
            with pytest.raises(ConflictError):
                tr[b"elsewhere"] = b"1"
                tr.commit()
        finally:
            other.close()

    def test_blind_writes_do_not_conflict(self, db, store_url):
        """A set and an atomic add of keys the transaction never read commit
        although another handle wrote those keys after the transaction was
        created; the add applies to the other's value. (A writer on SQLite
        holds the write lock from its first write, so the other commit comes
        before the blind writes begin; the read case is the next test.)"""
        other = fdblayer.open(store_url)
        try:
            tr = db.create_transaction()
            other.set(b"blind", b"theirs")
            other.set(b"n", (5).to_bytes(8, "little"))
            tr.set(b"blind", b"mine")
            tr.add(b"n", (1).to_bytes(8, "little"))
            tr.commit()
        finally:
            other.close()
        assert db.get(b"blind") == b"mine"
        assert int.from_bytes(db.get(b"n"), "little") == 6

    def test_prefetched_keys_read_as_without_it_and_conflict_when_read(self, db, store_url):
        """``prefetch`` is a hint: a later read of a prefetched key answers the
        snapshot's value (not a write committed since) and adds its conflict."""
        db.set(b"pre-a", b"1")
        other = fdblayer.open(store_url)
        try:
            tr = db.create_transaction()
            assert tr.get(b"pre-start") is None  # the snapshot is taken
            tr.prefetch([b"pre-a", b"pre-missing"])
            other.set(b"pre-a", b"theirs")
            assert tr.get_many([b"pre-a", b"pre-missing"]) == [b"1", None]
            tr.set(b"pre-out", b"x")
            with pytest.raises(ConflictError):
                tr.commit()
        finally:
            other.close()
        assert db.get(b"pre-a") == b"theirs" and db.get(b"pre-out") is None

    def test_prefetch_alone_adds_no_conflict(self, db, store_url):
        """A prefetched key written elsewhere, never read, does not fail the commit."""
        db.set(b"pre-a", b"1")
        other = fdblayer.open(store_url)
        try:
            tr = db.create_transaction()
            assert tr.get(b"pre-start") is None
            tr.prefetch([b"pre-a"])
            other.set(b"pre-a", b"theirs")
            tr.set(b"pre-out", b"x")
            tr.commit()
        finally:
            other.close()
        assert db.get(b"pre-out") == b"x"

    def test_a_prefetched_key_reads_this_transactions_own_writes(self, db):
        db.set(b"pre-a", b"1")
        db.set(b"pre-c", b"3")
        tr = db.create_transaction()
        tr.set(b"pre-a", b"mine")
        tr.clear(b"pre-c")
        tr.prefetch([b"pre-a", b"pre-c", b"pre-a"])
        assert tr.get_many([b"pre-a", b"pre-c"]) == [b"mine", None]
        tr.commit()
        assert db.get(b"pre-a") == b"mine" and db.get(b"pre-c") is None

    def test_a_prefetched_range_reads_the_snapshot_for_any_limit_and_conflicts_when_read(self, db, store_url):
        """A range given to ``prefetch`` reads what the snapshot holds (not a
        write committed since), for a smaller or a larger limit than it was
        prefetched with; read with conflicts, it conflicts."""
        for n in range(6):
            db.set(b"pr-%d" % n, b"v%d" % n)
        other = fdblayer.open(store_url)
        try:
            tr = db.create_transaction()
            assert tr.get(b"pr-start") is None  # the snapshot is taken
            tr.prefetch([b"pr-key"], [(b"pr-", b"pr.", 3), (b"pr-9", b"pr.", 1)])
            other.set(b"pr-2", b"theirs")
            other.set(b"pr-7", b"theirs")
            want = [(b"pr-%d" % n, b"v%d" % n) for n in range(6)]
            assert [(kv.key, kv.value) for kv in tr.snapshot.get_range(b"pr-", b"pr.", limit=2)] == want[:2]
            assert [(kv.key, kv.value) for kv in tr.snapshot.get_range(b"pr-", b"pr.")] == want
            assert tr.snapshot.get_range(b"pr-9", b"pr.", limit=1) == []
            assert [kv.key for kv in tr.get_range(b"pr-", b"pr.", limit=5)] == [k for k, _ in want[:5]]
            tr.set(b"pr-out", b"x")
            with pytest.raises(ConflictError):
                tr.commit()
        finally:
            other.close()
        assert db.get(b"pr-out") is None

    def test_a_prefetched_range_reads_this_transactions_own_writes(self, db):
        for n in range(6):
            db.set(b"pr-%d" % n, b"v%d" % n)
        tr = db.create_transaction()
        tr.set(b"pr-1", b"mine")
        tr.prefetch([], [(b"pr-", b"pr.", 3)])
        tr.clear(b"pr-4")
        tr.set(b"pr-45", b"new")
        got = [(kv.key, kv.value) for kv in tr.snapshot.get_range(b"pr-", b"pr.", limit=5)]
        assert got == [(b"pr-0", b"v0"), (b"pr-1", b"mine"), (b"pr-2", b"v2"), (b"pr-3", b"v3"), (b"pr-45", b"new")]
        tr.commit()
        assert db.get(b"pr-4") is None and db.get(b"pr-45") == b"new"

    def test_a_right_guess_commits_and_reads_as_the_key(self, db):
        """``expect_many``: what a transaction takes the keys to hold is what
        they hold, guessed or read; its writes commit."""
        db.set(b"exp-a", b"1")
        tr = db.create_transaction()
        assert tr.expect_many([b"exp-a", b"exp-none"], [b"1", None]) == [b"1", None]
        assert tr.get(b"exp-a") == b"1"
        tr.set(b"exp-out", b"x")
        tr.commit()
        assert db.get(b"exp-out") == b"x"

    def test_a_wrong_guess_never_commits_and_the_retry_reads(self, db):
        """A transaction that takes a key to hold what it does not either read
        it (and sees the truth) or fails its commit as a conflict; through
        ``transactional`` the retry reads, so the body sees the real value and
        its write lands once."""
        db.set(b"exp-a", b"real")
        tr = db.create_transaction()
        (seen,) = tr.expect_many([b"exp-a"], [b"guess"])
        tr.set(b"exp-out", seen)
        if seen == b"guess":
            with pytest.raises(ConflictError):
                tr.commit()
            assert db.get(b"exp-out") is None
        else:
            assert seen == b"real"
            tr.commit()
        seen_by_body = []

        @fdblayer.transactional
        def body(tr):
            (value,) = tr.expect_many([b"exp-a"], [b"guess"])
            seen_by_body.append(value)
            tr.set(b"exp-out", value)

        body(db)
        assert seen_by_body[-1] == b"real" and db.get(b"exp-out") == b"real"

    def test_a_guess_changed_by_another_commit_fails_the_commit(self, db, store_url):
        """A right guess that another transaction makes wrong before this one
        commits: the commit fails (nothing of it lands), on every backend."""
        db.set(b"exp-a", b"1")
        other = fdblayer.open(store_url)
        try:
            tr = db.create_transaction()
            assert tr.expect_many([b"exp-a"], [b"1"]) == [b"1"]
            other.set(b"exp-a", b"2")
            tr.set(b"exp-out", b"x")
            with pytest.raises(ConflictError):
                tr.commit()
        finally:
            other.close()
        assert db.get(b"exp-out") is None

    def test_a_read_only_transaction_checks_its_guesses(self, db):
        db.set(b"exp-a", b"real")
        tr = db.create_transaction()
        (seen,) = tr.expect_many([b"exp-a"], [b"guess"])
        if seen == b"guess":
            with pytest.raises(ConflictError):
                tr.commit()
        else:
            assert seen == b"real"
            tr.commit()

    def test_a_guess_that_is_not_bytes_is_refused(self, db):
        tr = db.create_transaction()
        with pytest.raises(StoreTypeError):
            tr.expect_many([b"exp-a"], ["not bytes"])
        with pytest.raises(ValueError):
            tr.expect_many([b"exp-a", b"exp-b"], [None])
        tr.cancel()

    def test_a_read_of_another_key_adds_no_conflict_to_blind_writes(self, db, store_url):
        """A blind write conflicts with nothing; a read of a key nobody
        changed adds no conflict, though another commit came after it (on
        SQLite, whose snapshot went stale: its reads are checked again)."""
        other = fdblayer.open(store_url)
        try:
            tr = db.create_transaction()
            assert tr.get(b"unrelated") is None  # the transaction's snapshot is taken
            tr.set(b"blind", b"mine")
            other.set(b"blind", b"theirs")  # committed after that snapshot
            tr.commit()
        finally:
            other.close()
        assert db.get(b"blind") == b"mine"


# ------------------------------------------------------------------ open()


class TestOpen:
    @pytest.mark.parametrize(
        "url",
        [
            "mysql://x",
            "nourl",
            "sqlite:///tmp/x.db?synchronous=SOMETIMES",
            "sqlite:///tmp/x.db?bogus=1",
            "sqlite://remotehost/x.db",
            "sqlite:///tmp/",
            "fdb://?bogus=1",
        ],
    )
    def test_bad_urls(self, url):
        with pytest.raises(InvalidStoreURL):
            fdblayer.parse_store_url(url)
        with pytest.raises(ValueError):
            fdblayer.open(url)

    def test_url_forms(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        parse = fdblayer.parse_store_url
        assert parse(None).path == str(tmp_path / "otpjobs.db")
        assert parse("sqlite:////abs/dir/f.db").path == "/abs/dir/f.db"
        assert parse("sqlite:///rel/dir/f.db").path == os.path.abspath("rel/dir/f.db")
        assert parse("sqlite:///otpjobs.db").path == os.path.abspath("otpjobs.db")
        assert parse("sqlite:///./rel.db").path == str(tmp_path / "rel.db")
        assert parse("sqlite:rel.db").path == str(tmp_path / "rel.db")
        assert parse("sqlite:///a.db?synchronous=normal").params["synchronous"] == "NORMAL"
        assert parse("sqlite:///a.db").params["synchronous"] == "FULL"
        assert parse("fdb://").path is None
        assert parse("fdb:///etc/fdb.cluster?prefix=p").path == "/etc/fdb.cluster"
        assert parse("fdb:///etc/fdb.cluster?prefix=p").params["prefix"] == "p"

    def test_default_store_in_cwd(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        db = fdblayer.open()
        try:
            db.set(b"a", b"1")
        finally:
            db.close()
        assert (tmp_path / "otpjobs.db").exists()


def test_missing_foundationdb_library_is_store_unavailable():
    """Where libfdb_c is installed this checks nothing; here it checks the message."""
    from fdblayer.exceptions import StoreUnavailable

    try:
        handle = fdblayer.open("fdb://?prefix=otpjobs-probe")
    except StoreUnavailable as exc:
        assert "FoundationDB" in str(exc)
    else:
        handle.close()
