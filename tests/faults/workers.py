"""The queue workers of a chaos run: real processes, killed, paused and restarted.

Each worker (``tests.faults.queue_worker``) runs in its own session so a
SIGKILL of its process group leaves nothing; a killed worker is started
again as the next incarnation of the same name and appends to the same
ledger. A paused worker (SIGSTOP) is resumed by a timer once its pause is over.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.procs import kill_groups

from .nodes import ROOT
from .queue_worker import next_seq, read_ledgers


class Workers:
    """``count`` workers adding ``jobs`` jobs of ``job_type`` in all."""

    def __init__(
        self,
        store_url: str,
        job_type: str,
        workdir: Path,
        count: int,
        jobs: int,
        rate: float,
        updates: int = 2,
        work: float = 0.0,
    ) -> None:
        self.store_url = store_url
        self.job_type = job_type
        self.dir = workdir / "workers"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stop_file = workdir / "workers.stop"
        self.names = [f"w{i}" for i in range(count)]
        self.quota = {name: jobs // count + (1 if i < jobs % count else 0) for i, name in enumerate(self.names)}
        self.rate = rate
        self.updates = updates
        self.work = work
        self.procs: dict[str, subprocess.Popen] = {}
        self.incarnation = dict.fromkeys(self.names, 0)
        self.paused: dict[str, threading.Timer] = {}
        self.lock = threading.Lock()
        self.every_pid: set[int] = set()

    def ledger(self, name: str) -> Path:
        return self.dir / f"{name}.ledger"

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)

    def start(self, name: str) -> None:
        self.incarnation[name] += 1
        n = self.incarnation[name]
        out = open(self.dir / f"{name}.{n}.out", "w")
        cmd = [
            sys.executable,
            "-m",
            "tests.faults.queue_worker",
            self.store_url,
            self.job_type,
            name,
            "--ledger",
            str(self.ledger(name)),
            "--stop",
            str(self.stop_file),
            "--quota",
            str(self.quota[name]),
            "--rate",
            str(self.rate),
            "--updates",
            str(self.updates),
            "--work",
            str(self.work),
            "--incarnation",
            str(n),
        ]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.procs[name] = subprocess.Popen(
            cmd,
            cwd=str(ROOT),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        self.every_pid.add(self.procs[name].pid)

    def output(self, name: str, incarnation: int | None = None) -> str:
        n = incarnation or self.incarnation[name]
        try:
            return (self.dir / f"{name}.{n}.out").read_text()
        except FileNotFoundError:
            return ""

    def kill(self, name: str) -> None:
        """SIGKILL a worker's process group and start its next incarnation."""
        proc = self.procs[name]
        with self.lock:
            timer = self.paused.pop(name, None)
        if timer is not None:
            timer.cancel()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
        self.start(name)

    def pause(self, name: str, seconds: float) -> None:
        """SIGSTOP a worker; a timer sends SIGCONT ``seconds`` later, whatever the test does meanwhile."""
        proc = self.procs[name]
        os.killpg(proc.pid, signal.SIGSTOP)
        timer = threading.Timer(seconds, self._resume, (name, proc))
        timer.daemon = True
        self.paused[name] = timer
        timer.start()

    def _resume(self, name: str, proc: subprocess.Popen) -> None:
        with self.lock:
            if self.paused.get(name) is not None and self.procs.get(name) is proc:
                del self.paused[name]
                try:
                    os.killpg(proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass

    def resume_all(self) -> None:
        with self.lock:
            for name, timer in list(self.paused.items()):
                timer.cancel()
                try:
                    os.killpg(self.procs[name].pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            self.paused.clear()

    def check_running(self) -> None:
        """Fail if a worker exited on its own (it only exits once told to stop)."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"worker {name} exited {proc.returncode}: {self.output(name)[-3000:]}")

    def all_added(self) -> bool:
        """Every worker has issued its whole quota of adds."""
        return all(next_seq(self.ledger(name)) >= self.quota[name] for name in self.names)

    def finish(self, timeout: float) -> dict:
        """Tell the workers to stop once idle; their summed counts (each exits 0)."""
        self.resume_all()
        self.stop_file.touch()
        totals: dict = {}
        deadline = time.monotonic() + timeout
        for name, proc in self.procs.items():
            try:
                code = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"worker {name} did not stop: {self.output(name)[-2000:]}") from None
            out = self.output(name)
            assert code == 0, f"worker {name} exited {code}: {out[-3000:]}"
            for key, value in json.loads(out.strip().splitlines()[-1]).items():
                totals[key] = totals.get(key, 0) + value
        return totals

    def read(self):
        return read_ledgers([self.ledger(name) for name in self.names])

    def cleanup(self) -> None:
        self.resume_all()
        kill_groups(self.procs.values(), self.every_pid, "worker process")
