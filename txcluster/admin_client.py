"""The one HTTP client of a master's admin API (master_service/api/admin.py), for the
command line (`txcluster status`, `backup`, `restore`, `wait-sync`) and the data pipeline
(`txcluster load`: the status and the initial bulk load).

Each call answers the master's JSON, or raises ``AdminError`` saying which master, which
call and why: not reachable, no answer, or the master's refusal with its status and
message (the admin API's ``detail``).
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

STATUS = "/admin/status"
# The status page's data: the status and the operations in progress (status_page.py).
STATUS_DATA = "/status/data"


class AdminError(Exception):
    """The master refused or failed the call, or could not be reached; the message says
    why. ``status`` is the master's HTTP status, None when it did not answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AdminClient:
    """Calls to one master. ``http``: a client to share (its auth and timeouts apply);
    otherwise one of its own with ``auth`` and ``timeout``."""

    def __init__(self, master_url: str, auth: tuple[str, str] | None = None,
                 timeout: float = 10.0, http: httpx.Client | None = None,
                 verify: ssl.SSLContext | bool = True) -> None:
        self.base = master_url.rstrip("/")
        self._own = http is None
        # verify: an https master checked against a CA bundle's context (--ca-file), or
        # httpx's default (the system's CAs, or SSL_CERT_FILE); never unchecked.
        self.http = http if http is not None else httpx.Client(auth=auth, timeout=timeout,
                                                                verify=verify)

    def close(self) -> None:
        if self._own:
            self.http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call (httpx's keyword arguments: json, params, content, timeout...); the
        master's JSON answer."""
        try:
            r = self.http.request(method, self.base + path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise AdminError(f"cannot reach the master {self.base}: {exc}") from None
        except httpx.HTTPError as exc:
            raise AdminError(f"the master {self.base} did not answer {method} {path}: "
                             f"{exc}") from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except (ValueError, AttributeError):
                detail = r.text
            raise AdminError(f"{method} {path} on {self.base} answered {r.status_code}: "
                             f"{detail}", r.status_code)
        return r.json()

    # ---- status ----

    def status(self, timeout: float | None = None) -> dict:
        return self.call("GET", STATUS, **_timeout(timeout))

    def status_data(self) -> dict:
        return self.call("GET", STATUS_DATA)

    # ---- backup and restore ----

    def backup(self, name: str, timeout: float = 3600) -> dict:
        """An up-to-date worker writes the named image; the master answers when it is
        written (its record: worker, seq, quads, fingerprint, bytes)."""
        return self.call("POST", "/admin/backup", json={"name": name}, timeout=timeout)

    def restore(self, name: str, timeout: float = 3600) -> dict:
        """Every worker from the named image; the master answers once each has it (the
        log after it is then replayed)."""
        return self.call("POST", "/admin/restore", json={"name": name}, timeout=timeout)

    # ---- the initial bulk load (txcluster load --initial) ----

    def bulk_load_part(self, load_id: str, part: int, worker: str, data: bytes) -> dict:
        return self.call("PUT", f"/admin/bulk-load/{load_id}/parts/{part}",
                         params={"worker": worker}, content=data,
                         headers={"content-type": "application/n-quads"})

    def bulk_load_sent(self, load_id: str, worker: str) -> dict:
        """Every part is sent: the worker loads the waiting ones (before the commit)."""
        return self.call("POST", f"/admin/bulk-load/{load_id}/sent",
                         params={"worker": worker})

    def bulk_load_commit(self, load_id: str, worker: str, fingerprint: str,
                         quads: int) -> dict:
        """``fingerprint``: 32 hex digits."""
        return self.call("POST", f"/admin/bulk-load/{load_id}",
                         json={"worker": worker, "fingerprint": fingerprint, "quads": quads})

    def bulk_load_abort(self, load_id: str, worker: str) -> None:
        """Drop the staged parts; a load the worker does not know is no error."""
        try:
            self.call("DELETE", f"/admin/bulk-load/{load_id}", params={"worker": worker},
                      timeout=60)
        except AdminError as exc:
            if exc.status != 404:
                raise


def _timeout(timeout: float | None) -> dict[str, float]:
    return {} if timeout is None else {"timeout": timeout}
