"""The application, one subpackage per subsystem.

``queue`` (the durable job queue's actors: couch_jobs), ``workers`` (hosts
that run Python functions as queue jobs), ``scheduler`` (fair slots for
long-running jobs: couch_replicator_scheduler), ``docs`` (permanent jobs),
``http`` (the CouchDB-compatible API and status page), ``node`` (the root
tree, configuration and the settings keeper). In each, ``client`` is what
other processes import, ``protocol`` the messages, the rest server actors.
Registered names are in :mod:`actors.names`.

Public entry points: :mod:`actors.jobs` (the queue and workers API),
:mod:`actors.docs` (permanent jobs), ``python -m actors`` and the
``otpjobs`` command (:mod:`actors.cli`).

Built on :mod:`supervision` (OTP on Thespian) and :mod:`fdblayer` (the store
and the jobs data model).
"""
