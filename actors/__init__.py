"""The application: one module per role, the node, the CLI and the client API.

Built on :mod:`supervision` (OTP on Thespian) and :mod:`fdblayer` (the store
and the jobs data model).
"""
