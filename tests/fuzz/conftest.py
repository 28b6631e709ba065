"""Totals of the fuzz suite at the end of the run (``make fuzz`` prints them)."""

from __future__ import annotations

from tests.fuzz import settings as fuzz


def pytest_terminal_summary(terminalreporter) -> None:
    if not fuzz.CASES:
        return
    tr = terminalreporter
    tr.section(f"fuzz totals (profile {fuzz.PROFILE})")
    for prop, count in sorted(fuzz.CASES.items()):
        statuses = fuzz.STATUSES.get(prop)
        shown = " ".join(f"{s}:{n}" for s, n in sorted(statuses.items())) if statuses else ""
        tr.write_line(f"{prop:<36} {count:>7} cases  {shown}")
    tr.write_line(f"{'total':<36} {sum(fuzz.CASES.values()):>7} cases")
