"""Worker hosts: supervised pools that run Python functions as queue jobs.

``client`` (``enqueue``, ``result``, ``status``, ``schedule``; re-exported
by :mod:`actors.jobs`), ``protocol`` (the messages), ``dispatcher`` (claims,
ends and renews jobs in batches), ``worker`` (runs one handler call at a
time), ``sup`` (the tree), ``host`` (``otpjobs worker``), ``context`` (what
a handler gets), ``handlers`` (``package.module:callable``), ``schedule``
(cron).
"""
