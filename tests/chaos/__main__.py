"""python -m tests.chaos --rounds N --seed S [--topology multi-dc]: seeded chaos rounds,
then the table."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from tests.chaos.faults import FAULTS, TOPOLOGIES, available
from tests.chaos.runner import run, table
from tests.chaos.topology import unavailable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the first round; round n uses seed + n")
    parser.add_argument("--topology", choices=TOPOLOGIES, default="single-dc",
                        help="single-dc: 1 master, 3 workers on loopback; multi-dc: masters "
                        "uk1, uk2 (DC uk) and us1 (DC us) peered, in network namespaces "
                        "(root only)")
    parser.add_argument("--faults", help="comma-separated fault kinds for every round "
                        "(default: drawn from the seed among the topology's: "
                        + "; ".join(f"{t}: {', '.join(available(t))}" for t in TOPOLOGIES)
                        + ")")
    parser.add_argument("--history", action="store_true",
                        help="print every round's event history (a failed round's always)")
    parser.add_argument("--dir", type=Path, help="where rounds keep their files "
                        "(a failed round's are kept)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if why := unavailable(args.topology):
        parser.error(f"topology {args.topology} cannot run here: {why}")
    kinds = None
    if args.faults:
        kinds = args.faults.split(",")
        if unknown := [k for k in kinds if k not in FAULTS]:
            parser.error(f"unknown fault kinds {unknown}; known: {', '.join(sorted(FAULTS))}")
        if wrong := [k for k in kinds if k not in available(args.topology)]:
            parser.error(f"fault kinds {wrong} are not for topology {args.topology}")
    results: list = []
    try:
        run(args.rounds, args.seed, root=args.dir, results=results, topology=args.topology,
            faults=kinds, progress=functools.partial(print, flush=True),
            history=args.history)
    except KeyboardInterrupt:  # the table of the rounds done so far is still worth having
        print(f"\ninterrupted after {len(results)} rounds")
        if not results:
            return 130
    print()
    print(table(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
