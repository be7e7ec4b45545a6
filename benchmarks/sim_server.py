"""An IMDS simulator in its own process, listing N far-future Scheduled events.

Used where the simulator's own work must not share the GIL with the measuring driver:
``python -m benchmarks.sim_server --events 1000`` prints its URL, then serves until stdin closes.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.common import simulator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with simulator(args.events, seed=args.seed) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # until the driver closes our stdin (or dies)


if __name__ == "__main__":
    main()
