"""Divergence between data centres that the agreed order does not show (the spec's known
issue for non-deterministic updates, and any store bug), as a part of the pure core
(protocol.py): every status carries its sender's last executed agreed position and the
repository fingerprint after it; the receiver compares it with its own at that position
and reports a mismatch once, until the two agree again.
"""

from __future__ import annotations

from master_service.sync.ready import ExecutedAt, Inconsistency

__all__ = ["FingerprintCheck"]


class FingerprintCheck:
    """Per peer: did its fingerprint match ours at the last position both knew?"""

    def __init__(self) -> None:
        self.matches: dict[str, bool | None] = {}

    def compare(self, peer: str, executed: ExecutedAt) -> tuple[Inconsistency | None, bool]:
        """(the divergence to report, whether the peer agrees with us again)."""
        if executed.ours is None:
            return None, False  # not executed here yet, or too old to compare cheaply
        match = executed.ours == executed.fingerprint.lower()
        before = self.matches.get(peer)
        self.matches[peer] = match
        if not match and before is not False:
            return Inconsistency(peer, "fingerprint", (
                f"after agreed position {executed.pos} its repository fingerprint is "
                f"{executed.fingerprint}, ours is {executed.ours}")), False
        return None, match and before is False

    def forget(self, peer: str) -> None:
        self.matches.pop(peer, None)
