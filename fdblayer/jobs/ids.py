"""Fresh job ids that sort by when they were made.

A job's rows are keyed by its id (``Layout.data_key``, ``work_key``, and
among jobs due the same second its pending key), so the order of new ids
is the order in which a store's B-tree sees those keys. Random ids
(UUID 4) put each new job on a random leaf page of its type's range: with
a backlog of 100,000 jobs an enqueue on SQLite took 70 us at NORMAL and
215 us at FULL, and 57 and 185 us with ids that grow with time (appended
at the end of the range, a page already in cache; docs/performance.md).
"""

from __future__ import annotations

import os
import time

__all__ = ["new_job_id"]

_MS_BITS = (1 << 48) - 1
_RAND_A_BITS = (1 << 12) - 1
_RAND_B_BITS = (1 << 62) - 1


def new_job_id() -> str:
    """A fresh job id: 32 lowercase hex digits, a UUID version 7 (RFC 9562).

    The first 12 digits are the Unix time in milliseconds, so an id made in
    a later millisecond sorts after one made earlier (ids of the same
    millisecond sort at random); 74 of the other bits are from
    ``os.urandom``, so two ids never meet in practice, across processes
    and forks alike.
    """
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits: 12 for rand_a, 62 for rand_b
    value = (
        (ms & _MS_BITS) << 80
        | 0x7 << 76  # version 7
        | (rand >> 68 & _RAND_A_BITS) << 64
        | 0b10 << 62  # the RFC's variant
        | rand & _RAND_B_BITS
    )
    return f"{value:032x}"
