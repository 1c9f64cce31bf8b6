"""Random SIGKILLs of workers, of every kind of node process and of whole nodes
while the queue and the scheduler work (see :mod:`tests.faults.chaos`).

The short run is part of the normal test suite; ``OTPJOBS_LONG=1`` runs the
long one (5,000 queue jobs, 200 scheduler jobs with max_jobs 20), as
``bench/faults.py`` does. ``OTPJOBS_FAULT_SEED`` replays a seed.
"""

from __future__ import annotations

import pytest

from .chaos import LONG, NODE_FAULTS, run_chaos, settings_from_env

SETTINGS = settings_from_env()
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800 if SETTINGS is LONG else 240)]


def test_no_job_lost_or_finished_twice_and_the_tree_recovers_under_random_sigkills(tmp_path):
    report = run_chaos(SETTINGS, tmp_path)
    summary = report.summary()
    assert not report.problems, "\n".join([summary, *report.problems])
    # every kind of fault happened
    faults = report.faults
    assert faults.get("worker_kill", 0) >= 1, summary
    assert sum(faults.get(kind, 0) for kind in NODE_FAULTS) >= 2, summary
    killed_roles = {kind.split(":", 1)[1] for kind in faults if kind.startswith("kill:")}
    assert len(killed_roles) >= (12 if SETTINGS is LONG else 4), summary
    assert report.counts["jobs_checked"] == SETTINGS.jobs - report.counts["adds_not_committed"], summary
    assert report.counts["docs_checked"] == SETTINGS.sched_jobs, summary
