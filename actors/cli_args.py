"""The values the ``otpjobs`` command line accepts, checked where they are parsed.

Principle: a bad value (a negative duration, a timeout out of the API's
bounds, a time that is not whole seconds) is an argparse error, exit 2,
before a store is opened or a process started.
"""

from __future__ import annotations

import argparse
import math

from actors.settings import config as config_mod

__all__ = ["DEFAULT_PORT"]

DEFAULT_PORT = config_mod.DEFAULTS["node"]["port"]


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", help="store URL (default sqlite:///otpjobs.db, or fdb:///path/fdb.cluster)")
    p.add_argument("--config", help="INI config file")


def _seconds(text: str) -> float:
    """A duration on the command line: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text!r}")
    return value


def _timeout_seconds(text: str) -> float:
    """A type's activity timeout on the command line: seconds > 0 (bounded as the API bounds it)."""
    from fdblayer.jobs.exceptions import InvalidArgument
    from fdblayer.jobs.validate import check_type_timeout

    try:
        return check_type_timeout(float(text))
    except (ValueError, InvalidArgument):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 (at most 1e8), not {text!r}") from None


def _epoch(text: str) -> int:
    """A scheduled time on the command line: whole seconds since the epoch, >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not whole seconds since the epoch: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be whole seconds since the epoch (>= 0), not {text!r}")
    return value


def _port_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, help=f"node admin port (default {DEFAULT_PORT})")
    p.add_argument("--config", help="INI config file")
