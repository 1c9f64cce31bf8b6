"""The store's hot statements sent through libpq directly, in one round trip.

Principle: psycopg's cursor adapts each parameter, finds or prepares the
statement and drives its pipeline in Python: 90-150 us of client CPU a
statement on this machine, several times what the server's answer costs
to read, and a worker host's step runs five. The store's statements are
few and fixed, and their parameters are five kinds (``bytes``, ``int``,
``str``, and the binary arrays of :mod:`postgres_arrays`), so here each
is encoded at once, each statement is prepared once per connection under
a name of our own, and a statement with the ones it needs around it
(``BEGIN``, ``ROLLBACK``, ``COMMIT``, a flush) goes out as one libpq
pipeline. Rows are read by psycopg's own loaders (its C ``Transformer``),
so they are what ``fetchall`` returns.

What a caller can rely on: :func:`run` returns the rows of its statement,
or raises the psycopg exception the server's error maps to (a
``SerializationFailure`` for a conflict), or ``psycopg.OperationalError``
when the connection was lost, its ``succeeded`` attribute the number of
statements (of ``before``, the statement, ``after``) that ran before it
failed (a commit that ran and whose flush failed is told from one that
failed); a failed pipeline leaves the connection out of pipeline mode
when it is still usable (a transaction block that a ``before`` statement
opened stays open, failed: its owner rolls it back); a statement is
marked prepared only once the server said so (a pipeline aborted before
its ``Parse`` leaves it to be prepared again); other threads run while
one waits for the server.
"""

from __future__ import annotations

import select
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fdblayer.backends.postgres_arrays import BYTEA, BYTEA_ARRAY, INT4_ARRAY, ByteaArray, Int4Array
from fdblayer.backends.postgres_arrays import encode_bytea, encode_int4

__all__ = ["run", "send", "Sent"]

INT8, TEXT, UNKNOWN = 20, 25, 0
#: libpq's PGRES_COMMAND_OK (a statement without rows that ran, a ``Parse``
#: among them) and PGRES_TUPLES_OK: a statement that ran.
_COMMAND_OK = 1
_SUCCEEDED = (_COMMAND_OK, 2)


class _Connection:
    """What this module keeps of one connection: its prepared statements
    ((statement text, parameter types) -> name), its row loader and a
    poller of its socket."""

    __slots__ = ("names", "loader", "poller")

    def __init__(self, conn: Any) -> None:
        from psycopg.adapt import Transformer

        self.names: Dict[Tuple[str, Tuple[int, ...]], bytes] = {}
        self.loader = Transformer(conn)
        self.poller = select.poll()
        self.poller.register(conn.pgconn.socket, select.POLLIN)


_STATE: "weakref.WeakKeyDictionary[Any, _Connection]" = weakref.WeakKeyDictionary()
#: psycopg's placeholders (``%s``, ``%b``) turned into ``$n``, per statement text.
_NUMBERED: Dict[str, bytes] = {}


def _numbered(sql: str) -> bytes:
    """``sql`` with its ``%s``/``%b`` placeholders numbered (the store's
    statements have no other ``%``)."""
    text = _NUMBERED.get(sql)
    if text is None:
        parts = sql.replace("%b", "%s").split("%s")
        numbered = parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))
        text = _NUMBERED[sql] = numbered.encode()
    return text


def _encode(params: Sequence[Any]) -> Tuple[List[Optional[bytes]], Tuple[int, ...]]:
    """Each parameter in the binary wire format, and its type (``UNKNOWN``
    for NULL: the server takes the type the statement gives it).

    Raises:
        TypeError: a parameter of a kind the store never sends.
    """
    values: List[Optional[bytes]] = []
    types: List[int] = []
    for value in params:
        kind = type(value)
        if value is None:
            values.append(None)
            types.append(UNKNOWN)
        elif kind is bytes:
            values.append(value)
            types.append(BYTEA)
        elif kind is ByteaArray:
            values.append(encode_bytea(value))
            types.append(BYTEA_ARRAY)
        elif kind is Int4Array:
            values.append(encode_int4(value))
            types.append(INT4_ARRAY)
        elif kind is int:
            values.append(value.to_bytes(8, "big", signed=True))
            types.append(INT8)
        elif kind is str:
            values.append(value.encode())
            types.append(TEXT)
        else:
            raise TypeError(f"no direct encoding for a {kind.__name__} parameter")
    return values, tuple(types)


def run(conn: Any, sql: str, params: Sequence[Any], before: Sequence[str] = (), after: Sequence[str] = ()) -> List[Any]:
    """Run the statements ``before`` (no parameters), ``sql`` with
    ``params``, then ``after``, in one round trip; returns the rows of
    ``sql`` (binary results, loaded as psycopg loads them).

    Raises:
        psycopg.Error: the first statement that failed, as psycopg maps the
            server's error; ``psycopg.OperationalError`` when the
            connection is lost.
        TypeError: a parameter of a kind the store never sends.
    """
    return send(conn, sql, params, before, after).collect()


def send(conn: Any, sql: str, params: Sequence[Any], before: Sequence[str] = (), after: Sequence[str] = ()) -> "Sent":
    """:func:`run`'s first half: the statements are sent, not waited for.
    The connection serves nothing else until :meth:`Sent.collect` has
    returned or raised (what :func:`run` returns or raises); meanwhile
    :meth:`Sent.fileno` is the socket to wait on for the answer."""
    import psycopg

    values, types = _encode(params)
    pgconn = conn.pgconn
    state = _STATE.get(conn)
    if state is None:
        state = _STATE[conn] = _Connection(conn)
    names = state.names
    key = (sql, types)
    name = names.get(key)
    if name is not None and not before and not after:
        try:
            pgconn.send_query_prepared(name, values, param_formats=[1] * len(values), result_format=1)
            _flush(pgconn)
        except psycopg.Error:
            raise
        except Exception as exc:  # noqa: BLE001 - libpq's own failures: the connection is gone
            raise psycopg.OperationalError(f"connection lost: {exc}") from exc
        return Sent(state, pgconn, None, 0, -1)
    fresh = name is None
    if name is None:
        name = f"otp_{len(names)}".encode()
    try:
        pgconn.enter_pipeline_mode()
        for statement in before:
            pgconn.send_query_params(statement.encode(), None)
        if fresh:
            pgconn.send_prepare(name, _numbered(sql), param_types=types)
        pgconn.send_query_prepared(name, values, param_formats=[1] * len(values), result_format=1)
        for statement in after:
            pgconn.send_query_params(statement.encode(), None)
        pgconn.pipeline_sync()
        _flush(pgconn)
    except psycopg.Error:
        _leave_pipeline(pgconn)
        raise
    except Exception as exc:  # noqa: BLE001 - libpq's own failures: the connection is gone
        _leave_pipeline(pgconn)
        raise psycopg.OperationalError(f"connection lost: {exc}") from exc
    prepared = (key, name, len(before)) if fresh else None
    return Sent(state, pgconn, prepared, len(before), len(before) + fresh + 1 + len(after))


class Sent:
    """Statements sent by :func:`send`, their answer not yet read."""

    __slots__ = ("_state", "_pgconn", "_prepared", "before", "_count")

    def __init__(self, state: _Connection, pgconn: Any, prepared: Any, before: int, count: int) -> None:
        # prepared: (key, name, index of its result) of a statement prepared in
        # this pipeline; count: the pipeline's statements (-1: a statement
        # alone, no pipeline).
        self._state, self._pgconn, self._prepared, self._count = state, pgconn, prepared, count
        #: statements sent before this one (a failure's ``succeeded`` above it: this one ran)
        self.before = before

    def fileno(self) -> int:
        """The connection's socket: readable once the server answers."""
        return int(self._pgconn.socket)

    def collect(self) -> List[Any]:
        """Wait for the answer: the rows of the statement, or the error
        :func:`run` raises."""
        if self._count < 0:
            return _collect_alone(self._state, self._pgconn)
        import psycopg

        pgconn = self._pgconn
        try:
            results = _results(pgconn, self._state.poller, self._count)
        except psycopg.Error:
            raise
        except Exception as exc:  # noqa: BLE001 - libpq's own failures: the connection is gone
            raise psycopg.OperationalError(f"connection lost: {exc}") from exc
        finally:
            _leave_pipeline(pgconn)
        prepared_at = -1
        if self._prepared is not None:
            key, name, prepared_at = self._prepared
            if results[prepared_at].status == _COMMAND_OK:  # the server has it
                self._state.names[key] = name
        ran = 0
        for at, result in enumerate(results):
            if result.status not in _SUCCEEDED:
                error = _error(result, pgconn)
                error.succeeded = ran  # type: ignore[attr-defined]
                raise error
            ran += at != prepared_at
        return _rows(self._state, results[self.before + (prepared_at >= 0)])


def _leave_pipeline(pgconn: Any) -> None:
    """Leave pipeline mode if the connection is usable and in it (results
    left unread: the caller drops the connection)."""
    from psycopg import pq

    if pgconn.status == pq.ConnStatus.OK and pgconn.pipeline_status != pq.PipelineStatus.OFF:
        try:
            pgconn.exit_pipeline_mode()
        except Exception:  # noqa: BLE001 - results left unread: the caller drops the connection
            pass


def _collect_alone(state: _Connection, pgconn: Any) -> List[Any]:
    """:meth:`Sent.collect` of a prepared statement sent alone: no pipeline
    (its entering, leaving and sync cost a third of a short statement)."""
    import psycopg

    try:
        result = _next_result(pgconn, state.poller)
        while _next_result(pgconn, state.poller) is not None:  # the statement's end
            pass
    except psycopg.Error:
        raise
    except Exception as exc:  # noqa: BLE001 - libpq's own failures: the connection is gone
        raise psycopg.OperationalError(f"connection lost: {exc}") from exc
    if result is None or result.status not in _SUCCEEDED:
        error = _error(result, pgconn) if result is not None else psycopg.OperationalError("no result")
        error.succeeded = 0  # type: ignore[attr-defined]
        raise error
    return _rows(state, result)


def _rows(state: _Connection, result: Any) -> List[Any]:
    """The rows of a statement's binary result, as psycopg's ``fetchall``."""
    from psycopg import pq

    loader = state.loader
    loader.set_pgresult(result, set_loaders=True, format=pq.Format.BINARY)
    return list(loader.load_rows(0, result.ntuples, tuple))


def _flush(pgconn: Any) -> None:
    """Send everything queued; while the socket is full, read what the
    server answers meanwhile (so neither side waits on the other)."""
    poller = None
    while pgconn.flush() == 1:
        if poller is None:
            poller = select.poll()
            poller.register(pgconn.socket, select.POLLIN | select.POLLOUT)
        if any(events & select.POLLIN for _, events in poller.poll()):
            pgconn.consume_input()


def _next_result(pgconn: Any, poller: Any) -> Any:
    """The connection's next result, waited for in ``poll`` (which lets
    other threads run: libpq's own wait in ``get_result`` would hold the
    GIL for the whole round trip)."""
    while pgconn.is_busy():
        poller.poll()
        pgconn.consume_input()
    return pgconn.get_result()


def _results(pgconn: Any, poller: Any, count: int) -> List[Any]:
    """The result of each of ``count`` statements, then the sync's."""
    from psycopg import pq

    results = []
    while True:
        result = _next_result(pgconn, poller)
        if result is None:
            if pgconn.status != pq.ConnStatus.OK:
                raise OSError(pgconn.error_message.decode(errors="replace").strip() or "connection lost")
            continue  # the end of one statement's results
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            break
        results.append(result)
        if pgconn.status != pq.ConnStatus.OK:
            break
    if len(results) < count:  # the connection was lost on the way: the last result says why
        results.extend([results[-1]] * (count - len(results)))
    return results


def _error(result: Any, pgconn: Any) -> Exception:
    """The psycopg exception for a failed statement's result."""
    import psycopg
    from psycopg import errors

    if result.status != psycopg.pq.ExecStatus.FATAL_ERROR:  # aborted with no error before it: never expected
        return psycopg.OperationalError(f"statement not run (status {result.status})")
    if pgconn.status != psycopg.pq.ConnStatus.OK or not result.error_field(psycopg.pq.DiagnosticField.SQLSTATE):
        return psycopg.OperationalError(result.get_error_message("utf-8").strip() or "connection lost")
    return errors.error_from_result(result, "utf-8")
