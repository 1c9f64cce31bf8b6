"""Render the status page (``/_utils/``) of a node holding sample work to ``docs/status-page.png``.

Starts a whole node (queue, worker pool, scheduler, doc processor, HTTP)
on a temporary SQLite store, gives it a little of everything the page
shows (queue types with running, failed and delayed jobs, scheduler jobs
and replication documents), keeps a trickle of emails going for
``--minutes`` so that the per-type charts (one point per ``--sample-interval``
seconds, a minute by default as on any node) have something to draw, takes
a screenshot with headless chromium (Debian's ``chromium``), and stops the
node::

    .venv/bin/python docs/status_page_png.py [--out docs/status-page.png] [--minutes 20]

The node's processes fork from this one, so the sample handlers below are
found as ``status_page_png:...`` (this directory is put on the path).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import fdblayer  # noqa: E402
from actors import docs, jobs  # noqa: E402
from actors.http.server import http_children  # noqa: E402
from actors.settings.config import Config  # noqa: E402
from actors.node.root import ROOT_FLAGS, root_children  # noqa: E402
from fdblayer.jobs import hosts  # noqa: E402
from supervision import start_node  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def send_email(ctx):
    """Sample queue handler: holds its job a while, reporting progress; fails for 'bounce' addresses."""
    if "bounce" in ctx.data.get("to", ""):
        raise ConnectionRefusedError(f"550 mailbox unavailable: {ctx.data['to']}")
    for sent in range(1, 1000):
        if ctx.stopping:
            return None
        ctx.progress(sent=sent, of=ctx.data.get("batch", 1))
        time.sleep(0.2 if ctx.data.get("batch") else 0.001)
        if sent >= ctx.data.get("batch", 1):
            return {"sent": sent}
    return None


def reindex(ctx):
    """Sample scheduler handler: runs until stopped, reporting what it did."""
    done = 0
    while not ctx.wait(0.5):
        done += 100
        ctx.report(docs_read=done, docs_written=done)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def trickle(db, seconds: float, rng: random.Random) -> None:
    """Emails for ``seconds``: a few every 5 s, now and then one that bounces (twice, then failed)."""
    deadline, n = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        for _ in range(rng.choice((0, 1, 2, 2, 3, 4, 6))):
            n += 1
            jobs.enqueue(db, "emails", {"to": f"user{n}@example.com"})
        if rng.random() < 0.08:
            jobs.enqueue(db, "emails", {"to": f"bounce{n}@example.org"}, id=f"welcome-bounce{n}", max_attempts=2)
        time.sleep(5)


def fill(db, data_dir: Path, client_http, minutes: float) -> None:
    """Queue jobs of three types, two replication documents and a transient scheduler job."""
    for job_type in ("emails", "thumbnails"):
        jobs.set_type_timeout(db, job_type, 30)
    for n in range(12):
        jobs.enqueue(db, "emails", {"to": f"user{n}@example.com"})
    for n in range(2):
        jobs.enqueue(db, "emails", {"to": f"bounce{n}@example.org"}, id=f"welcome-bounce{n}", max_attempts=1)
    trickle(db, minutes * 60, random.Random(29))
    wait(
        lambda: (
            [
                (t["pending"], t["running"])
                for t in client_http("GET", "/_jobs").json()["types"]
                if t["type"] == "emails"
            ]
            == [(0, 0)]
        ),
        60,
        "the quick emails done",
    )
    for n, batch in enumerate((400, 250, 900)):  # long ones last: none holds up a quick one
        jobs.enqueue(db, "emails", {"to": f"list{n}@example.com", "batch": batch}, id=f"newsletter-{n}")
    for n, delay in enumerate((90, 600, 3600)):
        jobs.enqueue(db, "thumbnails", {"image": f"photos/{n}.jpg", "size": 256}, id=f"thumb-{n}", delay=delay)
    source = fdblayer.open(f"sqlite:///{data_dir}/catalog.db")
    tr = source.create_transaction()
    for n in range(50):
        tr[b"item/%03d" % n] = b"x" * 40
    tr.commit()
    source.close()
    for doc_id, target in (("catalog-backup", "backup.db"), ("catalog-mirror", "mirror.db")):
        docs.put(
            db,
            docs.REPLICATOR_DB,
            doc_id,
            {
                "source": f"sqlite:///{data_dir}/catalog.db",
                "target": f"sqlite:///{data_dir}/{target}",
                "continuous": True,
            },
        )
    client_http(
        "POST",
        "/_replicate",
        {"replication_id": "nightly-reindex", "handler": "status_page_png:reindex", "continuous": True},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default=str(HERE / "status-page.png"))
    parser.add_argument("--minutes", type=float, default=20, help="how long emails trickle in before the shot")
    parser.add_argument("--height", type=int, default=1980, help="the screenshot's height in pixels")
    parser.add_argument(
        "--sample-interval",
        type=float,
        default=60,
        help="seconds between two readings of the counters (a chart's points)",
    )
    args = parser.parse_args()
    if not shutil.which(CHROMIUM):
        raise SystemExit(f"{CHROMIUM} is needed (Debian: apt-get install chromium)")
    import requests

    with tempfile.TemporaryDirectory(prefix="status-page-") as tmp:
        data_dir = Path(tmp)
        config = Config()
        port, http_port = free_port(), free_port()
        store = f"sqlite:///{data_dir}/store.db"
        for key, value in (("port", port), ("http_port", http_port), ("store", store)):
            config.set("node", key, value)
        config.set("replicator", "handlers", "status_page_png")
        config.workers["emails"] = "status_page_png:send_email"
        listener = http_children(config, sample_interval=args.sample_interval)[0]
        node = start_node(
            port, ROOT_FLAGS, [listener if spec.id == "http_server" else spec for spec in root_children(config)]
        )
        url = f"http://127.0.0.1:{http_port}"

        def http(method, path, body=None):
            return requests.request(method, url + path, json=body, timeout=30)

        try:
            wait(lambda: http("GET", "/_up").status_code == 200, 30, "the HTTP API")
            db = fdblayer.open(store)
            fill(db, data_dir, http, args.minutes)
            wait(
                lambda: [t["running"] for t in http("GET", "/_jobs").json()["types"] if t["type"] == "emails"] == [3],
                60,
                "the newsletters running",
            )
            wait(lambda: len(http("GET", "/_scheduler/jobs").json()["jobs"]) == 3, 60, "three scheduler jobs")
            time.sleep(hosts.BEAT + 1)  # a few progress reports, replication passes and a host's beat
            profile = data_dir / "chromium"
            subprocess.run(
                [
                    CHROMIUM,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    f"--user-data-dir={profile}",
                    f"--window-size=1280,{args.height}",
                    f"--screenshot={os.path.abspath(args.out)}",
                    url + "/_utils/",
                ],
                check=True,
                timeout=120,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            db.close()
        finally:
            node.stop()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
