"""A node: ``root`` (the root tree and the foreground run), ``config``
(the INI file and its values) and ``config_server`` (the settings keeper).
"""
