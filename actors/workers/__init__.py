"""Worker hosts: supervised pools that run Python functions as queue jobs.

- ``client`` (``enqueue``, ``result``, ``status``, ``schedule``; re-exported
  by :mod:`actors.jobs`) and ``control`` (what a handler declares and
  raises: ``Retry``, ``Snooze``, ``Cancel``);
- ``host`` (``otpjobs worker``), ``sup`` (the tree), ``protocol`` (the
  messages), ``channel`` (a worker's report records);
- ``worker`` (runs handler calls; ``context`` builds what a handler gets);
- the dispatcher: ``dispatcher`` (the actor: claims, ends and hands out
  jobs in batches) over ``planner`` (its decisions, pure, on an injected
  clock), ``runs`` and ``state`` (what it holds), and one module a concept:
  ``pool`` (starting and adopting workers, time limits), ``leases`` (renewals and the
  lifeline), ``heartbeat``, ``pruning`` (retention), ``ticks`` (cron),
  ``wakeups`` (store watches and due timers), ``drain``;
- ``schedule`` (cron expressions).
"""
