"""The queue tree's first child: check the store once, then step aside.

The seed's ``couch_jobs_fdb:init_cache`` fills a cache and returns
``ignore``, so the supervisor keeps its spec but no process. Here it opens
the store, so that a node with an unreachable store fails at start with a
clear reason, and returns ``IGNORE``.
"""

from __future__ import annotations

from typing import Any

import fdblayer
from supervision import IGNORE, GenServer


class StoreCache(GenServer):
    """Opens the store once (a failure is a start error) and is ignored."""

    def init(self, args: Any) -> Any:
        db = fdblayer.open(args["store"])
        tr = db.create_transaction()
        tr.get(b"\xff")  # any read proves the store answers
        tr.cancel()
        db.close()
        return IGNORE
