"""Node-local registered names of the queue's long-lived actors."""

JOBS_SUP = "couch_jobs.sup"
ACTIVITY_MONITOR_SUP = "couch_jobs.activity_monitor_sup"
NOTIFIER_SUP = "couch_jobs.notifier_sup"
JOBS_SERVER = "couch_jobs.server"
