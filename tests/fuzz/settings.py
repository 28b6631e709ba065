"""Hypothesis profiles of the fuzz suite and the count of cases run.

"ci" (the default) keeps every property to a bounded number of examples so the suite stays
within CI's time; "long" (``make fuzz``, or TXC_FUZZ_PROFILE=long) runs enough for more
than 10,000 cases in total. TXC_FUZZ_EXAMPLES overrides the per-property number of either.
``deadline=None``: an example is an HTTP round trip to a real process, whose time varies
with the machine's load; a slow answer is not a failure (a hang is caught by the client's
timeout).
"""

from __future__ import annotations

import os
from collections import Counter

from hypothesis import HealthCheck, settings

# Examples per property: CI (about 2,000 cases over the whole fuzz suite, ~1 minute) and
# long (about 28,000).
CI_EXAMPLES = 100
LONG_EXAMPLES = 1500

_common = dict(
    deadline=None,
    # A module-scoped process is reused across examples on purpose (starting one per
    # example would cost seconds); generators are large by design.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large, HealthCheck.filter_too_much],
    derandomize=False,
    print_blob=True,
)
settings.register_profile("ci", max_examples=CI_EXAMPLES, **_common)
settings.register_profile("long", max_examples=LONG_EXAMPLES, **_common)

PROFILE = os.environ.get("TXC_FUZZ_PROFILE", "ci")
if PROFILE not in ("ci", "long"):
    raise ValueError(f"TXC_FUZZ_PROFILE must be ci or long, got {PROFILE!r}")
EXAMPLES = int(os.environ.get("TXC_FUZZ_EXAMPLES") or
               (LONG_EXAMPLES if PROFILE == "long" else CI_EXAMPLES))


def fuzz_settings(scale: float = 1.0) -> settings:
    """The settings of one property: the profile's example count times ``scale`` (a
    property whose example is cheap runs more of them)."""
    return settings(settings.get_profile(PROFILE), max_examples=max(1, int(EXAMPLES * scale)))


# Cases run per property (each example counts once), printed by conftest.py at the end.
CASES: Counter[str] = Counter()
# Status codes seen per property: shows that the generators reach both the accepting and
# the refusing paths.
STATUSES: dict[str, Counter[int]] = {}


def record(prop: str, status: int | None = None) -> None:
    CASES[prop] += 1
    if status is not None:
        STATUSES.setdefault(prop, Counter())[status] += 1
