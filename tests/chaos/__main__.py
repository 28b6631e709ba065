"""python -m tests.chaos --rounds N --seed S: seeded chaos rounds, then the table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.chaos.faults import FAULTS, available
from tests.chaos.runner import run, run_round, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the first round; round n uses seed + n")
    parser.add_argument("--faults", help="comma-separated fault kinds for every round "
                        f"(default: drawn from the seed among {', '.join(available())})")
    parser.add_argument("--dir", type=Path, help="where rounds keep their files "
                        "(a failed round's are kept)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    results: list = []
    try:
        if args.faults:
            kinds = args.faults.split(",")
            if unknown := [k for k in kinds if k not in FAULTS]:
                parser.error(f"unknown fault kinds {unknown}; known: "
                             f"{', '.join(sorted(FAULTS))}")
            for n in range(args.rounds):
                results.append(run_round(args.seed + n, kinds, root=args.dir))
                print(f"round {n + 1}/{args.rounds}: {'ok' if results[-1].ok else 'FAILED'}")
                if not results[-1].ok:
                    print(results[-1].report())
        else:
            run(args.rounds, args.seed, root=args.dir, results=results)
    except KeyboardInterrupt:  # the table of the rounds done so far is still worth having
        print(f"\ninterrupted after {len(results)} rounds")
        if not results:
            return 130
    print()
    print(table(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
