"""Jepsen-style fault injection on real processes (issue 9).

A seeded round starts a cluster — "single-dc": 1 master, 3 workers on loopback;
"multi-dc": three peered masters of two data centres (uk1, uk2 / us1) with their workers
in network namespaces — runs a set workload on every master (clients insert unique
statements and ask for their own writes back), injects faults chosen from the seed,
heals, and checks: every acknowledged statement on every worker, nothing that no client
wrote, every worker at its master's head with one fingerprint, and (multi-dc) one
agreed queue on every master. ``python -m tests.chaos --rounds N --seed S [--topology
multi-dc]`` (``make chaos ROUNDS=N [TOPOLOGY=multi-dc]``) runs rounds and prints a table.

Modules: ``workload`` (clients and their history), ``faults`` (the fault kinds, a
registry by topology), ``topology`` (what a round runs on), ``checker`` (the invariants
after healing), ``runner`` (a round, many rounds, the table).
"""
