"""Fault injection: random SIGKILLs of workers, actors and whole nodes; store torture.

The short versions run in the normal ``python -m pytest -q``; set
``OTPJOBS_LONG=1`` (or run ``bench/faults.py``) for the long ones.
"""
