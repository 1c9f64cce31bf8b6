"""The jobs data model: a durable job queue on the store interface.

A port of CouchDB's couch_jobs_fdb and couch_jobs_pending, written once
against :mod:`fdblayer.interface` so that it runs unchanged on the SQLite,
PostgreSQL and FoundationDB backends. It knows nothing of actors: the
per-type activity monitors and notifiers (``actors/``) build on the
store-level functions of :mod:`fdblayer.jobs.model` and
:mod:`fdblayer.jobs.activity`.

Modules, one role each, each importing only those below it (no cycle):

- top: ``api`` (the public calls), ``overview`` (what the views read),
  ``counts`` (the per-type counters, read or recounted), ``schedules``
  (periodic schedules and their exactly-once ticks, above ``work``);
- ``work`` (the worker pools' batch transitions: enqueue, claim, start,
  complete, renew, release; type priorities and pauses, progress) and
  ``retention`` (pruning finished pool jobs in batches), above ``model``
  (the couch_jobs transitions), above ``activity`` (types, activity stamps, re-enqueue
  of silent jobs), above ``transitions`` (a running job's transitions, each
  written once for a batch: start, refresh, stop, requeue; couch_jobs' calls
  pass one job, the pools' their batch);
- ``rows`` (the row writes the transitions share), ``due`` (which due
  jobs a pool's claim reads and picks among), ``pending`` (the
  pending queue), ``failures`` (the index of recent failures),
  ``finished`` (the index of finished pool jobs by end time), ``hosts``
  (worker hosts' heartbeats);
- bottom: ``tally`` (counter bumps and watch stamps), ``work_record``
  (the pools' record of a job), ``keys`` (the key layout), ``codec``
  (data and value encoding), ``fasttuple`` (fast paths of the tuple
  encoding for row values, below ``codec``), ``validate`` (argument
  checks), ``job`` (value types), ``ids`` (fresh job ids, UUID 7s),
  ``exceptions``.
"""

from fdblayer.jobs.api import (
    accept,
    add,
    add_many,
    clear_type_timeout,
    finish,
    get_job,
    get_job_data,
    get_job_state,
    get_jobs,
    get_type_timeout,
    get_types,
    is_resubmitted,
    remove,
    resubmit,
    set_type_timeout,
    update,
)
from fdblayer.jobs.exceptions import (
    EncodingError,
    Halt,
    InvalidArgument,
    JobsError,
    NoTypeTimeout,
    NotFound,
)
from fdblayer.jobs.job import Job, JobInfo, JobState

__all__ = [
    "accept",
    "add",
    "add_many",
    "clear_type_timeout",
    "finish",
    "get_job",
    "get_job_data",
    "get_job_state",
    "get_jobs",
    "get_type_timeout",
    "get_types",
    "is_resubmitted",
    "remove",
    "resubmit",
    "set_type_timeout",
    "update",
    "EncodingError",
    "Halt",
    "InvalidArgument",
    "JobsError",
    "NoTypeTimeout",
    "NotFound",
    "Job",
    "JobInfo",
    "JobState",
]
