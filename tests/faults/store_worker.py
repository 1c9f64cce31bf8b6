"""A store torture process: mixed jobs-API and raw transactions, with a ledger.

``python -m tests.faults.store_worker URL NAME INCARNATION LEDGER STOP ITEMS``
runs random operations on one store until the stop file exists, writing
one ledger line after each commit (flushed, so a SIGKILL cannot lose it;
only a kill between a commit and its line leaves the store one step
ahead of the ledger). Operations:

* ``inc``: read-modify-write of a shared counter, plus a marker key
  ``("inc", tag, seq)`` in the same transaction (the counter must equal
  the number of markers: no lost update, no half transaction);
* ``atomic``: atomic add to a shared counter, plus a marker;
* ``stamp``: a versionstamped key; stamps of one process grow with its
  commit order;
* ``claim``: move one of ``ITEMS`` pre-seeded ``("pending", i)`` keys to
  ``("claimed", i) = tag`` (each item claimed once);
* ``plain`` jobs (type ``plain``: add, accept, update, finish, nothing
  else): each is accepted at most once, and no worker ever gets Halt;
* ``churn`` jobs (type ``churn``): add, accept, update, finish, remove,
  resubmit, and the activity monitor's re-enqueue of silent jobs.

Ledger lines: ``start <incarnation> <pid>``, ``inc <tag> <seq>``,
``atomic <tag> <seq>``, ``stamp <tag> <seq> <hex>``, ``claim <item> <tag>``,
``p-intent <id>``, ``p-added <id>``, ``p-accepted <id> <lock>``,
``p-finishing <id> <lock>``, ``p-finished <id> <lock>``, ``p-halt <id> <lock>``,
``c-intent <id>``, ``c-added <id>``, ``c-accepted <id> <lock>``, ``c-removing <id>``, ``c-removed <id>``,
``error <op> <text>``, ``exit``.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

PLAIN, CHURN = "plain", "churn"
OPS = (("inc", 2), ("atomic", 1), ("stamp", 1), ("claim", 1), ("plain", 4), ("churn", 3))


def main(argv: list[str]) -> int:
    import fdb.tuple

    import fdblayer
    from fdblayer.exceptions import StoreError
    from fdblayer.jobs import activity, api
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    url, name, incarnation, ledger_path, stop, items = argv
    items_n = int(items)
    tag = f"{name}.{incarnation}"
    db = fdblayer.open(url)
    rng = random.Random()
    ledger = open(ledger_path, "a")
    pack = fdb.tuple.pack

    def line(text: str) -> None:
        ledger.write(text + "\n")
        ledger.flush()

    line(f"start {incarnation} {os.getpid()}")

    @fdblayer.transactional
    def inc(tr, seq):
        value = int(tr.get(b"counter") or b"0")
        time.sleep(rng.random() * 0.002)  # widen the window for a kill mid-transaction
        tr[b"counter"] = str(value + 1).encode()
        tr[pack(("inc", tag, seq))] = b""

    @fdblayer.transactional
    def atomic(tr, seq):
        tr.add(b"atomic", (1).to_bytes(8, "little"))
        tr[pack(("atomic", tag, seq))] = b""

    @fdblayer.transactional
    def stamp(tr, seq):
        tr.set_versionstamped_key(fdb.tuple.pack_with_versionstamp(("vs", tag, fdb.tuple.Versionstamp(), seq)), b"")
        return tr.get_versionstamp()

    @fdblayer.transactional
    def claim(tr):
        start = rng.randrange(items_n)
        rows = tr.get_range(pack(("pending", start)), pack(("pending",)) + b"\xff", limit=1) or tr.get_range(
            pack(("pending",)), pack(("pending",)) + b"\xff", limit=1
        )
        if not rows:
            return None
        key = rows[0][0]
        item = fdb.tuple.unpack(key)[1]
        tr.clear(key)
        tr[pack(("claimed", item))] = tag.encode()
        return item

    seqs = {"inc": 0, "atomic": 0, "stamp": 0, "p": 0, "c": 0}
    held: dict = {PLAIN: None, CHURN: None}
    added_churn: list = []
    vs = None

    def new_id(kind: str) -> str:
        seqs[kind] += 1
        return f"{kind}-{tag}-{seqs[kind]}"

    def plain_step() -> None:
        job = held[PLAIN]
        if job is not None:
            if rng.random() < 0.3:
                try:
                    held[PLAIN] = api.update(db, job, {"by": tag})
                except api.Halt:
                    line(f"p-halt {job.id} {job.lock}")
                    held[PLAIN] = None
                return
            line(f"p-finishing {job.id} {job.lock}")
            try:
                api.finish(db, job, {"by": tag, "lock": job.lock})
                line(f"p-finished {job.id} {job.lock}")
            except api.Halt:
                line(f"p-halt {job.id} {job.lock}")
            held[PLAIN] = None
        elif rng.random() < 0.5:
            job_id = new_id("p")
            line(f"p-intent {job_id}")
            api.add(db, PLAIN, job_id, {"by": tag})
            line(f"p-added {job_id}")
        else:
            try:
                job, _ = api.accept(db, PLAIN, timeout=0)
            except api.NotFound:
                return
            line(f"p-accepted {job.id} {job.lock}")
            held[PLAIN] = job

    def churn_step() -> None:
        nonlocal vs
        job = held[CHURN]
        roll = rng.random()
        if job is not None:
            try:
                if roll < 0.3:
                    held[CHURN] = api.update(db, job, {"by": tag})
                    return
                if roll < 0.45:
                    held[CHURN] = api.resubmit(db, job)
                    return
                if roll < 0.6:
                    line(f"c-removing {job.id}")
                    api.remove(db, CHURN, job.id)
                    line(f"c-removed {job.id}")
                else:
                    api.finish(db, job, {"by": tag})
            except (api.Halt, api.NotFound):
                pass
            held[CHURN] = None
            return
        if roll < 0.4:
            job_id = new_id("c")
            line(f"c-intent {job_id}")
            api.add(db, CHURN, job_id, {"by": tag})
            line(f"c-added {job_id}")
            added_churn.append(job_id)
        elif roll < 0.7:
            try:
                job, _ = api.accept(db, CHURN, timeout=0)
            except api.NotFound:
                return
            line(f"c-accepted {job.id} {job.lock}")
            held[CHURN] = job
        elif roll < 0.8 and added_churn:
            job_id = rng.choice(added_churn)
            line(f"c-removing {job_id}")
            try:
                api.remove(db, CHURN, job_id)
                line(f"c-removed {job_id}")
            except api.NotFound:
                pass
        else:
            vs, _ = activity.check_inactive(db, DEFAULT_LAYOUT, CHURN, vs)

    kinds = [k for k, w in OPS for _ in range(w)]
    while not os.path.exists(stop):
        op = rng.choice(kinds)
        try:
            if op in ("inc", "atomic", "stamp"):
                seqs[op] += 1
                seq = seqs[op]
                if op == "inc":
                    inc(db, seq)
                    line(f"inc {tag} {seq}")
                elif op == "atomic":
                    atomic(db, seq)
                    line(f"atomic {tag} {seq}")
                else:
                    line(f"stamp {tag} {seq} {stamp(db, seq).wait(30).hex()}")
            elif op == "claim":
                item = claim(db)
                if item is not None:
                    line(f"claim {item} {tag}")
            elif op == "plain":
                plain_step()
            else:
                churn_step()
        except StoreError as exc:
            line(f"error {op} {type(exc).__name__}:{str(exc).replace(chr(10), ' ')[:200]}")
    line("exit")
    ledger.close()
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# ----------------------------------------------------------------- reading


def read_ledger(path: Path) -> tuple[list[tuple[str, list[str]]], set[str]]:
    """The ledger's lines as ``(incarnation tag, fields)`` (a torn last line
    dropped), and the tags of the incarnations that did not reach ``exit``."""
    text = path.read_text() if path.exists() else ""
    raw = text.split("\n")
    if raw and raw[-1] != "":
        raw = raw[:-1]
    name = path.stem
    lines, cut, current, last = [], set(), "?", None
    for text_line in raw:
        parts = text_line.split()
        if not parts:
            continue
        if parts[0] == "start":
            if last is not None and last != "exit":
                cut.add(current)
            current = f"{name}.{parts[1]}"
        lines.append((current, parts))
        last = parts[0]
    if last is not None and last != "exit":
        cut.add(current)
    return lines, cut
