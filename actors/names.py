"""Every registered name of a node's long-lived actors, in one place.

A registered name outlives the actor holding it (its restart registers the
same name at a new address), so clients and sibling actors find each other
by these names, never by a remembered address.
"""

#: The settings keeper (:mod:`actors.settings.keeper`).
CONFIG_SERVER = "config"

#: The queue's tree (:mod:`actors.queue`): its supervisors and the jobs server.
JOBS_SUP = "couch_jobs.sup"
ACTIVITY_MONITOR_SUP = "couch_jobs.activity_monitor_sup"
NOTIFIER_SUP = "couch_jobs.notifier_sup"
JOBS_SERVER = "couch_jobs.server"

#: The scheduler's tree (:mod:`actors.scheduler`).
SCHEDULER_SUP = "scheduler_sup"
SCHEDULER = "scheduler"

#: The doc processor (:mod:`actors.docs.processor`).
DOC_PROCESSOR = "doc_processor"

#: The HTTP listener (:mod:`actors.http.server`).
HTTP_SERVER = "http_server"

#: A node's worker host (:mod:`actors.workers`): its dispatcher and pool.
WORKER_DISPATCHER = "workers.dispatcher"
WORKER_POOL = "workers.pool"
WORKERS_SUP = "workers.sup"

#: The scheduler's job hosts (:mod:`actors.scheduler.host`): their supervisor
#: and host ``i`` (a template: ``SCHEDULER_HOST.format(i)``). A scheduler
#: registered under another name N has "N.hosts" and "N.host.i"
#: (:class:`actors.scheduler.sup.SchedulerTree`).
SCHEDULER_HOSTS_SUP = SCHEDULER + ".hosts"
SCHEDULER_HOST = SCHEDULER + ".host.{}"

#: The handler of replication jobs that name none (``source`` + ``target``):
#: a handler's import path, which the job policy treats apart.
REPLICATE_HANDLER = "actors.scheduler.replicate:replicate"
