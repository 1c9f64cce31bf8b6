"""The PostgreSQL store's tables, functions and statements, and what its
errors mean.

Shared by the handle (:mod:`fdblayer.backends.postgres_backend`) and its
transactions (:mod:`fdblayer.backends.postgres_transaction`), so neither imports the
other for them. psycopg is imported where an error is mapped, so this
module loads without it.
"""

from __future__ import annotations

import re
from typing import List

from fdblayer.backends.postgres_arrays import ByteaArray

from fdblayer.exceptions import (
    CommitUnknownResult,
    ConflictError,
    DiskFull,
    InvalidStoreURL,
    LockTimeout,
    ReadOnlyStore,
    ServerGone,
    StoreError,
    StoreUnavailable,
    TransactionTooOld,
)

__all__ = [
    "SCHEMA_VERSION",
    "UPGRADABLE_FROM",
    "OLDEST_READER",
    "KEY_PREFIX_BYTES",
    "check_prefix",
    "schema_sql",
    "upgrade_sql",
    "map_pg_error",
    "connection_is_broken",
    "first_line",
    "Statements",
    "key_prefixes",
    "MAX_TRANSACTION_AGE",
    "PRUNE_EVERY",
]

SCHEMA_VERSION = 5
#: Older stores a program of this version upgrades when it opens them. They
#: gain this version's commit function: it checks the guesses of
#: ``expect_many`` (since version 2), its notification names the keys a
#: commit changed (version 3), its versions never go back after a
#: server crash (version 4: see ``_COMMIT_FUNCTION``), and its conflict
#: check joins keys by hash (version 5: the same answers, so it replaces
#: version 4's in place). Version 3's is an overload: the older one stays
#: for older programs still running, whose empty notifications make every
#: hub read. The atomic add is replaced in place
#: (faster in version 3, the same results).
UPGRADABLE_FROM = (1, 2, 3, 4)
#: A store of a later version than this program's is opened only if its
#: ``meta`` row ``oldest_reader`` (the oldest schema version whose programs
#: may still use it: the later version kept what they call, as version 5
#: kept version 3's commit function) is at most :data:`SCHEMA_VERSION`, so
#: a rolling upgrade's older processes can restart while it lasts. Absent,
#: it is the store's own version. Written by a version that keeps older
#: ones working; this one has no row to write.
OLDEST_READER = "oldest_reader"
#: Bytes of a key in the index's ordering column (btree entries must stay
#: under a third of a page); longer keys add their sha256 for uniqueness.
KEY_PREFIX_BYTES = 1024
#: Seconds the conflict log keeps a commit's write ranges: a transaction
#: whose reads are older than that cannot commit (``TransactionTooOld``).
MAX_TRANSACTION_AGE = 30
#: Commits between two prunings of the conflict log.
PRUNE_EVERY = 256
_PREFIX_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,39}$")

KP = f"substring(k from 1 for {KEY_PREFIX_BYTES})"
KH = f"(CASE WHEN length(k) > {KEY_PREFIX_BYTES} THEN sha256(k) ELSE ''::bytea END)"


def check_prefix(prefix: str, url: str = "") -> str:
    """Validate a table prefix (letters, digits, ``_`` and ``-``; at most 40).

    Raises:
        InvalidStoreURL: when it is not such a name.
    """
    if not _PREFIX_RE.match(prefix or ""):
        raise InvalidStoreURL(
            f"store URL {url!r}: prefix {prefix!r} must be a letter or _ then up to 39 letters, digits, _ or -"
        )
    return prefix


def schema_sql(p: str) -> List[str]:
    """The statements creating a store's tables and functions under prefix ``p``."""
    kv, meta, writes, marks = (f'"{p}_{name}"' for name in ("kv", "meta", "writes", "marks"))
    return [
        f"CREATE TABLE IF NOT EXISTS {kv} (k bytea NOT NULL, v bytea NOT NULL)",
        f'CREATE UNIQUE INDEX IF NOT EXISTS "{p}_kv_key" ON {kv} (({KP}), ({KH}))',
        f"CREATE TABLE IF NOT EXISTS {meta} (name text PRIMARY KEY, value bigint NOT NULL)",
        f"INSERT INTO {meta} VALUES ('commit_version', 0), ('pruned_version', 0), "
        f"('schema_version', {SCHEMA_VERSION}) ON CONFLICT DO NOTHING",
        f"CREATE UNLOGGED TABLE IF NOT EXISTS {writes} (version bigint NOT NULL, b bytea NOT NULL, e bytea NOT NULL)",
        f'CREATE INDEX IF NOT EXISTS "{p}_writes_version" ON {writes} (version)',
        f"CREATE TABLE IF NOT EXISTS {marks} (version bigint PRIMARY KEY, at timestamptz NOT NULL)",
        *_add_functions(p),
        _commit_function(p),
    ]


def upgrade_sql(p: str) -> List[str]:
    """The statements that make a store under prefix ``p`` of a version in
    :data:`UPGRADABLE_FROM` a version :data:`SCHEMA_VERSION` one: the current
    add and commit functions (see :data:`UPGRADABLE_FROM`)."""
    meta = f'"{p}_meta"'
    return [
        *_add_functions(p),
        _commit_function(p),
        f"UPDATE {meta} SET value = {SCHEMA_VERSION} WHERE name = 'schema_version'",
    ]


def _commit_function(p: str) -> str:
    kv, meta, writes, marks = (f'"{p}_{name}"' for name in ("kv", "meta", "writes", "marks"))
    return _COMMIT_FUNCTION.format(
        p=p, kv=kv, meta=meta, writes=writes, marks=marks, KP=KP, KH=KH, age=MAX_TRANSACTION_AGE, every=PRUNE_EVERY
    )


def _add_functions(p: str) -> List[str]:
    return [f.format(p=p) for f in (_ADD_BYTES_FUNCTION, _ADD_FUNCTION)]


#: FoundationDB's atomic add of any width: little-endian, wrapping, sized by the parameter.
_ADD_BYTES_FUNCTION = """
CREATE OR REPLACE FUNCTION "{p}_add_bytes"(cur bytea, param bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE AS $f$
DECLARE
  n int := length(param);
  m int := coalesce(length(cur), 0);
  digits int[] := '{{}}';
  carry int := 0;
  s int;
BEGIN
  FOR i IN 0 .. n - 1 LOOP
    s := get_byte(param, i) + carry + CASE WHEN i < m THEN get_byte(cur, i) ELSE 0 END;
    digits := digits || (s & 255);
    carry := s >> 8;
  END LOOP;
  RETURN coalesce((SELECT decode(string_agg(lpad(to_hex(d), 2, '0'), '' ORDER BY o), 'hex')
                   FROM unnest(digits) WITH ORDINALITY AS t(d, o)), ''::bytea);
END $f$
"""

#: FoundationDB's atomic add, as the commit function calls it: two 8-byte
#: values (the counters' width) are added here in 32-bit halves, so that no
#: bigint overflows (a third of the general function's time); other widths
#: by the general function.
_ADD_FUNCTION = """
CREATE OR REPLACE FUNCTION "{p}_add"(cur bytea, param bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE AS $f$
DECLARE
  lo bigint;
  hi bigint;
  l bytea;
  h bytea;
BEGIN
  IF length(param) <> 8 OR length(cur) <> 8 OR cur IS NULL THEN
    RETURN "{p}_add_bytes"(cur, param);
  END IF;
  lo := get_byte(cur, 0) + get_byte(param, 0) + (get_byte(cur, 1) + get_byte(param, 1)) * 256
        + (get_byte(cur, 2) + get_byte(param, 2)) * 65536
        + (get_byte(cur, 3) + get_byte(param, 3))::bigint * 16777216;
  hi := get_byte(cur, 4) + get_byte(param, 4) + (get_byte(cur, 5) + get_byte(param, 5)) * 256
        + (get_byte(cur, 6) + get_byte(param, 6)) * 65536
        + (get_byte(cur, 7) + get_byte(param, 7))::bigint * 16777216;
  l := int8send(lo & 4294967295);
  h := int8send((hi + (lo >> 32)) & 4294967295);
  RETURN substr(l, 8, 1) || substr(l, 7, 1) || substr(l, 6, 1) || substr(l, 5, 1)
      || substr(h, 8, 1) || substr(h, 7, 1) || substr(h, 6, 1) || substr(h, 5, 1);
END $f$
"""

#: The commit: conflict check, writes, conflict log, notification; one statement.
_COMMIT_FUNCTION = """
CREATE OR REPLACE FUNCTION "{p}_commit"(
  rv bigint, rb bytea[], re bytea[],
  cb bytea[], ce bytea[], sk bytea[], sv bytea[], dk bytea[], ak bytea[], ap bytea[],
  vk bytea[], vkpos int[], vkval bytea[], vvk bytea[], vv bytea[], vvpos int[],
  xk bytea[], xv bytea[], note text
) RETURNS bigint LANGUAGE plpgsql
-- Every statement here wants an index: the conflict log, unanalysed while it
-- grows, was otherwise scanned whole (1.2 ms a commit at 3,000 rows).
SET enable_seqscan = off AS $f$
DECLARE
  ver bigint;
  stamp bytea;
  old bigint;
  stamped bytea[] := '{{}}';
BEGIN
  -- Never below the server's start in microseconds: a commit that other
  -- clients read before it was durable (flush=apart) and a crash then took
  -- back may have shown them a version; the server's next life numbers
  -- after it (fewer than one commit a microsecond in a life), so versions
  -- and versionstamps never go back as they are seen.
  UPDATE {meta} SET value = greatest(value + 1, (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint)
    WHERE name = 'commit_version' RETURNING value INTO ver;
  IF rv IS NOT NULL THEN
    IF rv < (SELECT value FROM {meta} WHERE name = 'pruned_version') THEN
      RAISE EXCEPTION 'transaction too old' USING ERRCODE = '40001', HINT = 'too_old';
    END IF;
    -- Two ranges overlap when they start alike, or one is more than a key
    -- and overlaps the other: a hash join for the keys, pairs only for the
    -- few ranges (every pair cost 80 ms a commit when a step read 1,000
    -- keys beside another step's 1,300 writes).
    IF EXISTS (
        WITH w AS MATERIALIZED (SELECT b, e FROM {writes} WHERE version > rv),
             r AS MATERIALIZED (SELECT b, e FROM unnest(rb, re) AS r(b, e)),
             wr AS MATERIALIZED (SELECT b, e FROM w WHERE e <> b || '\\x00'::bytea),
             rr AS MATERIALIZED (SELECT b, e FROM r WHERE e <> b || '\\x00'::bytea)
        SELECT 1 FROM w JOIN r ON w.b = r.b
        UNION ALL SELECT 1 FROM w, rr WHERE w.b < rr.e AND w.e > rr.b
        UNION ALL SELECT 1 FROM wr, r WHERE wr.b < r.e AND wr.e > r.b) THEN
      RAISE EXCEPTION 'conflict' USING ERRCODE = '40001', HINT = 'conflict';
    END IF;
  END IF;
  -- The guesses (expect_many): each key holds its value now, under the lock.
  IF cardinality(xk) > 0 AND EXISTS (
      SELECT 1 FROM unnest(xk, xv) AS x(k, v)
      WHERE (SELECT c.v FROM {kv} c WHERE substring(c.k from 1 for 1024) = substring(x.k from 1 for 1024)
               AND c.k = x.k) IS DISTINCT FROM x.v) THEN
    RAISE EXCEPTION 'guess' USING ERRCODE = '40001', HINT = 'guess';
  END IF;
  IF cardinality(cb) > 0 THEN
    DELETE FROM {kv} USING unnest(cb, ce) AS r(b, e)
      WHERE {KP} >= substring(r.b from 1 for 1024) AND {KP} <= substring(r.e from 1 for 1024)
        AND k >= r.b AND k < r.e;
  END IF;
  IF cardinality(dk) > 0 THEN
    DELETE FROM {kv} WHERE k = ANY(dk)
      AND {KP} = ANY(ARRAY(SELECT substring(d from 1 for 1024) FROM unnest(dk) AS d));
  END IF;
  IF cardinality(sk) > 0 THEN
    INSERT INTO {kv} (k, v) SELECT * FROM unnest(sk, sv)
      ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = EXCLUDED.v;
  END IF;
  -- The adds in one statement, unless a key has several (of several
  -- widths): one statement may not change a row twice.
  IF cardinality(ak) = 1 OR cardinality(ak) > 1 AND NOT EXISTS (
      SELECT 1 FROM unnest(ak) AS a(k) GROUP BY a.k HAVING count(*) > 1) THEN
    INSERT INTO {kv} (k, v) SELECT * FROM unnest(ak, ap)
      ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = "{p}_add"({kv}.v, EXCLUDED.v);
  ELSE
    FOR i IN 1 .. coalesce(cardinality(ak), 0) LOOP
      INSERT INTO {kv} (k, v) VALUES (ak[i], ap[i])
        ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = "{p}_add"({kv}.v, EXCLUDED.v);
    END LOOP;
  END IF;
  -- Versionstamped keys and values: one statement each, unless a key comes
  -- twice (then one at a time, the last write winning).
  IF cardinality(vk) > 0 OR cardinality(vvk) > 0 THEN
    stamp := int8send(ver) || '\\x0000'::bytea;
    stamped := ARRAY(SELECT overlay(t.k placing stamp from t.pos + 1 for 10)
                     FROM unnest(vk, vkpos) WITH ORDINALITY AS t(k, pos, o) ORDER BY t.o);
    IF cardinality(stamped) > 0 AND NOT EXISTS (
        SELECT 1 FROM unnest(stamped) AS a(k) GROUP BY a.k HAVING count(*) > 1) THEN
      INSERT INTO {kv} (k, v) SELECT * FROM unnest(stamped, vkval)
        ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = EXCLUDED.v;
    ELSE
      FOR i IN 1 .. coalesce(cardinality(stamped), 0) LOOP
        INSERT INTO {kv} (k, v) VALUES (stamped[i], vkval[i])
          ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = EXCLUDED.v;
      END LOOP;
    END IF;
    IF cardinality(vvk) > 0 AND NOT EXISTS (
        SELECT 1 FROM unnest(vvk) AS a(k) GROUP BY a.k HAVING count(*) > 1) THEN
      INSERT INTO {kv} (k, v)
        SELECT t.k, overlay(t.v placing stamp from t.pos + 1 for 10) FROM unnest(vvk, vv, vvpos) AS t(k, v, pos)
        ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = EXCLUDED.v;
    ELSE
      FOR i IN 1 .. coalesce(cardinality(vvk), 0) LOOP
        INSERT INTO {kv} (k, v) VALUES (vvk[i], overlay(vv[i] placing stamp from vvpos[i] + 1 for 10))
          ON CONFLICT (({KP}), ({KH})) DO UPDATE SET v = EXCLUDED.v;
      END LOOP;
    END IF;
  END IF;
  INSERT INTO {writes} (version, b, e)
    SELECT ver, x, x || '\\x00'::bytea FROM unnest(dk || sk || ak || vvk || stamped) AS x
    UNION ALL SELECT ver, b, e FROM unnest(cb, ce) AS r(b, e);
  IF ver % {every} = 0 THEN
    INSERT INTO {marks} VALUES (ver, clock_timestamp());
    SELECT max(version) INTO old FROM {marks}
      WHERE at < clock_timestamp() - interval '{age} seconds';
    IF old IS NOT NULL THEN
      DELETE FROM {writes} WHERE version <= old;
      DELETE FROM {marks} WHERE version < old;
      UPDATE {meta} SET value = old WHERE name = 'pruned_version';
    END IF;
  END IF;
  -- The keys it changed, for the watch hubs (watches.change_note), after its version.
  PERFORM pg_notify('{p}_commits', ver::text || ' ' || note);
  RETURN ver;
END $f$
"""


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (libpq's run over several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def map_pg_error(exc: BaseException, where: str, committing: bool = False) -> StoreError:
    """Turn a psycopg error into the named store error it stands for.

    Args:
        exc: the psycopg error.
        where: the store's description, for the message.
        committing: the error ended a commit call (a lost connection then
            leaves the outcome unknown).
    """
    import psycopg

    diag = getattr(exc, "diag", None)
    state = getattr(diag, "sqlstate", None) or ""
    message = first_line(exc)
    if state == "40001" and getattr(diag, "message_hint", None) == "too_old":
        return TransactionTooOld(f"store {where}: the transaction's reads are too old to check")
    if state in ("40001", "40P01"):
        return ConflictError(f"store {where}: concurrent commit ({message})")
    if state == "55P03":
        return LockTimeout(f"store {where}: lock wait timed out ({message})")
    if state in ("53100",):
        return DiskFull(f"store {where}: disk full ({message})")
    if state == "25006":
        return ReadOnlyStore(f"store {where}: cannot write ({message})")
    if state.startswith(("57P", "08")) or isinstance(exc, psycopg.OperationalError) and not state:
        if committing:
            return CommitUnknownResult(
                f"store {where}: connection lost during commit; it may have committed ({message})"
            )
        return ServerGone(f"store {where}: server unreachable or connection lost ({message})")
    if state.startswith("57014"):
        return StoreUnavailable(f"store {where}: statement timed out ({message})")
    return StoreUnavailable(f"store {where}: {message}")


def connection_is_broken(exc: BaseException) -> bool:
    """True when ``exc`` means the connection itself is gone (not one statement)."""
    import psycopg

    state = getattr(getattr(exc, "diag", None), "sqlstate", None) or ""
    return isinstance(exc, psycopg.OperationalError) and (not state or state[:2] in ("08", "57"))


class Statements:
    """The SQL texts of one prefix (built once per handle)."""

    def __init__(self, p: str) -> None:
        kv, meta = f'"{p}_kv"', f'"{p}_meta"'
        self.begin = "BEGIN ISOLATION LEVEL REPEATABLE READ"
        self.read_version = f"SELECT value FROM {meta} WHERE name = 'commit_version'"
        self.schema_version = f"SELECT value FROM {meta} WHERE name = 'schema_version'"
        self.oldest_reader = f"SELECT value FROM {meta} WHERE name = '{OLDEST_READER}'"
        # Every read returns the commit version first, as (NULL, 8 bytes big-endian).
        version = f"SELECT NULL::bytea, int8send(value) FROM {meta} WHERE name = 'commit_version'"
        self.version_only = version
        self.get = (
            f"{version} UNION ALL SELECT k, v FROM {kv} "
            f"WHERE {KP} = substring(%s from 1 for {KEY_PREFIX_BYTES}) AND k = %s"
        )
        self.get_many = (
            f"{version} UNION ALL SELECT k, v FROM {kv} WHERE {KP} = ANY(%b::bytea[]) AND k = ANY(%b::bytea[])"
        )
        bounds = (
            f"{KP} >= substring(%s from 1 for {KEY_PREFIX_BYTES}) "
            f"AND {KP} <= substring(%s from 1 for {KEY_PREFIX_BYTES}) AND k >= %s AND k < %s"
        )
        self.range_asc = f"({version}) UNION ALL (SELECT k, v FROM {kv} WHERE {bounds} ORDER BY {KP}, k LIMIT %s)"
        self._prefetch_parts = (
            f"SELECT NULL::bytea, int8send(value), 0 FROM {meta} WHERE name = 'commit_version' UNION ALL "
            f"SELECT k, v, 0 FROM {kv} WHERE {KP} = ANY(%b::bytea[]) AND k = ANY(%b::bytea[])",
            f" UNION ALL (SELECT k, v, {{n}} FROM {kv} WHERE {bounds} ORDER BY {KP}, k LIMIT %s)",
        )
        self._prefetch: dict[int, str] = {}
        self.range_desc = (
            f"({version}) UNION ALL (SELECT k, v FROM {kv} WHERE {bounds} ORDER BY {KP} DESC, k DESC LIMIT %s)"
        )
        self.changed_since = (
            f'SELECT EXISTS (SELECT 1 FROM "{p}_writes" w, unnest(%b::bytea[], %b::bytea[]) AS r(b, e) '
            "WHERE w.version > %s AND w.b < r.e AND w.e > r.b) "
            f"OR %s < (SELECT value FROM {meta} WHERE name = 'pruned_version')"
        )
        call = (
            f'"{p}_commit"(%s, %b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[], '
            "%b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[], "
            "%b::bytea[], %b::int[], %b::bytea[], %b::bytea[], %b::bytea[], %b::int[], "
            "%b::bytea[], %b::bytea[], %s)"
        )
        #: The commit function, its transaction flushed before it ends (and
        #: before its commit order lock is released).
        self.commit = f"SELECT {call}"
        #: ``flush=apart``: the commit function in a transaction that ends
        #: without waiting for its flush (the lock released at once) and
        #: without the notice of the ``COMMIT`` that ends it; ``flush`` follows.
        self.commit_unflushed = (
            f"SELECT {call}, set_config('synchronous_commit', 'off', true), "
            "set_config('client_min_messages', 'error', true)"
        )
        #: A transaction of one WAL record, committed with the session's
        #: ``synchronous_commit``: it returns once the WAL up to it, so every
        #: commit before it, is flushed (and on the standbys the server waits
        #: for). Concurrent flushes share one fsync.
        self.flush = f"SELECT pg_logical_emit_message(true, '{p}', '')"
        #: Whether this role may flush apart (the function has a fourth,
        #: defaulted argument since PostgreSQL 17).
        self.can_flush_apart = (
            "SELECT has_function_privilege(coalesce("
            "to_regprocedure('pg_catalog.pg_logical_emit_message(boolean, text, text, boolean)'), "
            "to_regprocedure('pg_catalog.pg_logical_emit_message(boolean, text, text)')), 'EXECUTE')"
        )
        self.watched = (
            f"SELECT NULL::bytea, NULL::bytea, value FROM {meta} WHERE name = 'commit_version' "
            f"UNION ALL SELECT k, v, NULL FROM {kv} WHERE {KP} = ANY(%b::bytea[]) AND k = ANY(%b::bytea[])"
        )
        self.channel = f"{p}_commits"

    def prefetch(self, ranges: int) -> str:
        """The statement reading keys (rows tagged 0) and ``ranges`` forward
        ranges (rows tagged 1, 2...) at once, after the commit version."""
        sql = self._prefetch.get(ranges)
        if sql is None:
            head, part = self._prefetch_parts
            sql = self._prefetch[ranges] = head + "".join(part.format(n=n + 1) for n in range(ranges))
        return sql


def key_prefixes(keys: List[bytes]) -> ByteaArray:
    """The index column of each key (its first ``KEY_PREFIX_BYTES`` bytes)."""
    return ByteaArray(k[:KEY_PREFIX_BYTES] for k in keys)
