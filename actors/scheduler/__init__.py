"""The scheduler of long-running jobs (couch_replicator_scheduler).

``core`` is the policy on plain data, ``server`` the scheduler actor,
``job`` one running job, ``sup`` their supervisors, ``replicate`` the
built-in job kind; ``protocol`` the requests, ``client`` the
:class:`~actors.scheduler.client.SchedulerClient`.
"""
