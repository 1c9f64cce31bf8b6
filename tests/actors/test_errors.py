"""One error root for ``actors``, and one way for its errors to travel.

Every exception class defined in the package derives from
:class:`actors.errors.ActorsError` (except the three listed, with why), and
any of them pickles back to an equal error: same class, message and
attributes, as a call's ``Failure`` carries it to another process.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

import actors
from actors.errors import ActorsError
from actors.http.api import HttpError
from actors.settings.config import ConfigError, ConfigWriteError
from actors.settings.policy import Forbidden
from actors.scheduler.model import InvalidRequest, InvalidSetting, JobNotFound

#: Not ActorsError, on purpose: JobStopping is control flow raised inside a
#: handler's thread (a BaseException, so ``except Exception`` lets it
#: through); HandlerError is the queue's InvalidArgument (a worker's
#: handler path is a bad argument of the jobs API, whose root is fdblayer's);
#: UnstorableResult is the queue's EncodingError (a handler's result, encoded
#: as job data is, that cannot be stored); Retry, Snooze and Cancel are
#: control flow a handler raises to steer its own job, not errors of ours.
OUTSIDE = {
    "actors.handlers.JobStopping",
    "actors.handlers.HandlerError",
    "actors.workers.context.UnstorableResult",
    "actors.workers.control.Retry",
    "actors.workers.control.Snooze",
    "actors.workers.control.Cancel",
}


def package_errors() -> list[type]:
    found = {}
    for info in pkgutil.walk_packages(actors.__path__, "actors."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == info.name:
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(found.values())


def test_every_error_of_the_package_derives_from_its_root():
    errors = package_errors()
    assert len(errors) >= 10
    strays = [
        f"{c.__module__}.{c.__qualname__}"
        for c in errors
        if not issubclass(c, ActorsError) and f"{c.__module__}.{c.__qualname__}" not in OUTSIDE
    ]
    assert not strays, f"errors outside ActorsError: {strays}"


@pytest.mark.parametrize(
    "error",
    [
        ConfigError("replicator", "max_jobs", "x", "must be an integer"),
        ConfigWriteError("/etc/x.ini", "read-only"),
        Forbidden("handler", "os:system", "not in [replicator] handlers"),
        HttpError(400, "bad_request", "no", [("X", "y")]),
        InvalidRequest("limit", -1, "must be an int >= 0"),
        InvalidSetting("max_churn", 0, "must be >= 1"),
        JobNotFound("j1"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_error_pickles_back_to_an_equal_one(error):
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) and back.args == error.args
    assert vars(back) == vars(error)
