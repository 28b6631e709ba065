"""Failover between the masters of one data centre (docs/design/failover.md): the pure
core. ``node.py`` is the state machine of a master, ``messages.py`` what it takes and
gives; the workers' half of the rule is ``worker_service/epochs.py``. Both are modelled
together in ``tests/failover_sim.py`` before anything runs on processes."""
