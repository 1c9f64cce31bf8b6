"""Worker hosts' heartbeats: who serves the queue, and what each runs now.

Data model (beside the couch_jobs rows)::

    (JOBS, HOSTS, host name) = msgpack {"b": last beat (epoch s), "i": info}

Principle: a host's dispatcher writes its status every :data:`BEAT` seconds
and clears it when it stops cleanly; a host that died leaves its last beat,
which readers show as not alive after :data:`ALIVE_FOR` seconds, and which
any beating host clears once it is :data:`FORGET_AFTER` old. Bounded where
written: the info is cut to :data:`MAX_INFO` bytes (the running list first).
"""

from __future__ import annotations

from typing import Any, Optional

import msgpack

from fdblayer.interface import Transaction, strinc, transactional
from fdblayer.jobs.codec import report_bad_row
from fdblayer.jobs.keys import HOSTS, Layout, pack_element

__all__ = ["BEAT", "ALIVE_FOR", "FORGET_AFTER", "MAX_INFO", "beat", "forget", "list_hosts"]

#: Seconds between two beats of a host.
BEAT = 5.0
#: A host is alive while its last beat is younger than this.
ALIVE_FOR = 3 * BEAT
#: Beats older than this are cleared by the next beating host.
FORGET_AFTER = 3600.0
#: Bytes of a host's info at most.
MAX_INFO = 20_000


def _prefix(layout: Layout) -> bytes:
    return layout.subspace(HOSTS)


@transactional
def beat(tr: Transaction, layout: Layout, host: str, info: dict[str, Any], now: float) -> None:
    """Record ``host``'s status at ``now``; clear beats older than :data:`FORGET_AFTER`."""
    raw = msgpack.packb({"b": now, "i": info}, use_bin_type=True, default=str)
    while len(raw) > MAX_INFO and info.get("running"):
        info = dict(info, running=info["running"][: len(info["running"]) // 2], running_cut=True)
        raw = msgpack.packb({"b": now, "i": info}, use_bin_type=True, default=str)
    if len(raw) > MAX_INFO:
        raw = msgpack.packb({"b": now, "i": {"host": host, "info_cut": True}}, use_bin_type=True)
    prefix = _prefix(layout)
    for kv in tr.snapshot.get_range(prefix, strinc(prefix)):
        entry = _unpack(kv.key, kv.value)
        if entry is not None and now - entry["b"] > FORGET_AFTER:
            tr.clear(kv.key)
    tr.set(prefix + pack_element(host), raw)


@transactional
def forget(tr: Transaction, layout: Layout, host: str) -> None:
    """Clear ``host``'s beat (a clean stop)."""
    tr.clear(_prefix(layout) + pack_element(host))


@transactional
def read(tr: Transaction, layout: Layout, host: str) -> Optional[dict[str, Any]]:
    """``host``'s last published status, or None (never published, forgotten, or unreadable)."""
    raw = tr.snapshot.get(_prefix(layout) + pack_element(host))
    entry = None if raw is None else _unpack(_prefix(layout) + pack_element(host), raw)
    return dict(entry["i"]) if entry is not None and isinstance(entry["i"], dict) else None


@transactional
def list_hosts(tr: Transaction, layout: Layout, now: float) -> list[dict[str, Any]]:
    """Every host's last status, with ``last_beat`` (epoch s), ``age`` and ``alive``."""
    prefix = _prefix(layout)
    out = []
    for kv in tr.snapshot.get_range(prefix, strinc(prefix)):
        entry = _unpack(kv.key, kv.value)
        if entry is None:
            continue
        info = dict(entry["i"]) if isinstance(entry["i"], dict) else {}
        age = max(0.0, now - entry["b"])
        info.update(last_beat=entry["b"], age=round(age, 3), alive=age < ALIVE_FOR)
        out.append(info)
    return out


def _unpack(key: bytes, raw: bytes) -> Any:
    """A stored beat, or None (logged once) when it does not decode."""
    try:
        entry = msgpack.unpackb(raw, raw=False)
        if isinstance(entry, dict) and isinstance(entry.get("b"), (int, float)):
            return entry
    except Exception as exc:  # noqa: BLE001 - a corrupt row is skipped
        report_bad_row("host", key, repr(exc)[:80])
        return None
    report_bad_row("host", key, "wrong shape")
    return None
