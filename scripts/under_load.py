"""Run pytest beside busy-loop processes: the fault tests must pass on a shared, busy machine, as CI's are.

    python scripts/under_load.py [--hogs 2] -- PYTEST ARGS...

Starts ``--hogs`` processes that each spin one core (plain Python loops, nice 0, as another tenant's work would
be), runs ``python -m pytest PYTEST ARGS`` in the foreground, and stops the hogs whatever happens (each also stops
on its own when this process goes away, or after ``--max-s`` seconds, so that none outlives a killed run). The exit
code is pytest's. ``make test`` runs the Ray and HTTP fault tests this way (the ``pytest-loaded`` target).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

# One core's worth of work that ends when its parent is gone or its time is up (checked every ~50 ms of spinning).
_HOG = """
import os, sys, time
parent, until = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < until:
    t = time.monotonic() + 0.05
    while time.monotonic() < t:
        pass
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hogs", type=int, default=2, help="busy-loop processes beside the tests (default 2)")
    ap.add_argument("--max-s", type=float, default=1800.0, help="the hogs stop by themselves after this long")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then pytest's arguments")
    args = ap.parse_args()
    if args.hogs < 0:
        print(f"--hogs: {args.hogs} is negative", file=sys.stderr)
        return 2
    rest = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    cmd = [sys.executable, "-c", _HOG, str(os.getpid()), str(args.max_s)]
    hogs = [subprocess.Popen(cmd) for _ in range(args.hogs)]
    t0 = time.monotonic()
    try:
        print(f"under load: {args.hogs} busy-loop processes beside pytest {' '.join(rest)}", flush=True)
        rc = subprocess.call([sys.executable, "-m", "pytest", *rest])
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()
    print(f"under load: pytest exited {rc} after {time.monotonic() - t0:.0f} s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
