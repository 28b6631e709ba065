"""Jepsen-style fault injection on real processes (issue 9), single data centre for now.

A seeded round starts a local cluster (1 master, 3 workers), runs a set workload (clients
insert unique statements and ask for their own writes back), injects faults chosen from
the seed, heals, and checks: every acknowledged statement on every worker, nothing that
no client wrote, every worker at the log's head with one fingerprint. ``python -m
tests.chaos --rounds N --seed S`` (``make chaos ROUNDS=N``) runs rounds and prints a table.

Modules: ``workload`` (clients and their history), ``faults`` (the fault kinds, a
registry that peering partitions will join), ``checker`` (the invariants after healing),
``runner`` (a round, many rounds, the table).
"""
