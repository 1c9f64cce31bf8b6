"""Hypothesis-driven hostile input to every public surface (issue 8, item 3).

The queue API (``test_queue_api``), the permanent docs API
(``test_docs_api``), the scheduler's client (``test_scheduler_client``),
every HTTP endpoint of a real node without and with an admin
(``test_http``, ``test_http_admin``), what a default node listens on
(``test_listen``) and the config file every command reads (``test_config_file``). Bad input must give the documented error and change
nothing: SQLite stores are compared row by row, read raw (``store``).
"""
