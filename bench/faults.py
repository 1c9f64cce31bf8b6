"""The long fault-injection runs (prints what was injected and checked; not a test).

    python bench/faults.py [--short] [--seed N] [--only chaos|torture] [--keep]

1. chaos (tests/faults/chaos.py): a real node; 4 worker processes add,
   accept, update and finish 5,000 jobs while the scheduler runs 200
   permanent jobs with max_jobs 20; random SIGKILLs of the workers, of
   every kind of process of the node and of whole nodes (started again).
   Checked against the workers' ledgers and the store: every added job
   finished exactly once, nothing lost, the tree whole after each fault,
   no stray process.
2. torture (tests/faults/torture.py): 8 processes on one SQLite file mixing
   jobs-API calls and raw transactions, SIGKILLed at random for 90 s;
   then ``PRAGMA integrity_check`` and the ledger checks.

Exits 1 if any check failed (the problems are printed). ``--short`` runs
the CI sizes; ``--keep`` keeps the work directory (logs, ledgers, stores).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    from tests.faults import chaos, torture

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--short", action="store_true", help="the CI sizes instead of the long ones")
    p.add_argument("--seed", type=int, help="replay a seed")
    p.add_argument("--only", choices=["chaos", "torture"])
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="otpjobs-faults-"))
    failed = False
    try:
        runs = []
        if args.only in (None, "chaos"):
            s = chaos.SHORT if args.short else chaos.LONG
            runs.append(("chaos", chaos.run_chaos, dataclasses.replace(s, seed=args.seed)))
        if args.only in (None, "torture"):
            s = torture.SHORT if args.short else torture.LONG
            runs.append(("torture", torture.run_torture, dataclasses.replace(s, seed=args.seed)))
        for name, run, settings in runs:
            where = work / name
            where.mkdir()
            print(f"== {name}: {settings}", flush=True)
            started = time.monotonic()
            try:
                problems = run(settings, where, out=lambda line: print(line, flush=True)).problems
            except AssertionError as exc:  # a check that stops the run (the tree never recovered...)
                problems = [str(exc)]
            print(f"== {name}: {'FAILED' if problems else 'ok'} in {time.monotonic() - started:.1f}s")
            for problem in problems:
                print(f"   problem: {problem}")
            failed = failed or bool(problems)
    finally:
        if args.keep or failed:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
