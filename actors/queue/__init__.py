"""The durable job queue's actors (the seed's couch_jobs application).

``client`` is the public API (re-exported by :mod:`actors.jobs`),
``protocol`` the messages; ``sup`` the tree, ``server`` the jobs server,
``activity_monitor``, ``notifier``, ``type_monitor`` and ``store_check``
its children.
"""
