"""The jobs data model: a durable job queue on the store interface.

A port of CouchDB's couch_jobs_fdb and couch_jobs_pending, written once
against :mod:`fdblayer.interface` so that it runs unchanged on the SQLite and
FoundationDB backends. It knows nothing of actors: the per-type activity
monitors and notifiers (``actors/``) build on the store-level functions of
:mod:`fdblayer.jobs.model`.

Modules, one role each: ``api`` (the public calls), ``model`` (the
transactions), ``pending`` (the pending queue), ``keys`` (the key layout),
``codec`` (data and value encoding), ``validate`` (argument checks),
``job`` (value types), ``exceptions``.
"""

from fdblayer.jobs.api import (
    accept,
    add,
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
