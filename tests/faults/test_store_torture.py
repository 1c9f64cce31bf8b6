"""Eight processes on one SQLite file, SIGKILLed at random (see :mod:`tests.faults.torture`).

``OTPJOBS_LONG=1`` runs the long version; ``OTPJOBS_FAULT_SEED`` replays a seed.
"""

from __future__ import annotations

import pytest

from .torture import LONG, run_torture, settings_from_env

SETTINGS = settings_from_env()
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900 if SETTINGS is LONG else 180)]


def test_sigkilled_processes_lose_nothing_committed_and_take_nothing_twice(tmp_path):
    report = run_torture(SETTINGS, tmp_path)
    summary = report.summary()
    assert not report.problems, "\n".join([summary, *report.problems])
    counts = report.counts
    assert counts["kills"] >= 10, summary
    for kind in ("inc_commits", "atomic_commits", "stamps", "claims", "plain_finished", "churn_removed"):
        assert counts[kind] > 0, f"no {kind}: {summary}"
