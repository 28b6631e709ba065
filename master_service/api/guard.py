"""The one guard of the master's admin routes (/admin, /admin/sync and /jolokia), and
how their refusals become HTTP errors.

The users are the client API's (client-auth-file): the read role may look, the write
role may change. A refusal is an HTTPException carrying the client API's status and
message, and on a 401 its challenge: a 401 without WWW-Authenticate (RFC 9110 11.6.1)
leaves browsers and curl --anyauth without a way to ask for credentials.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import HTTPException, Request

from master_service.api.client import ClientAuth
from master_service.control import ControlError


class AdminGuard:
    def __init__(self, auth: ClientAuth) -> None:
        self.auth = auth

    def require(self, request: Request, write: bool) -> None:
        """Raise the refusal unless the request's user may look (may change: ``write``)."""
        denied = self.auth.problem(request, need_write=write)
        if denied is not None:
            challenge = {k: v for k, v in denied.headers.items()
                         if k.lower() == "www-authenticate"}
            raise HTTPException(denied.status_code, denied.body.decode(),
                                headers=challenge or None)

    def may_write(self, request: Request) -> bool:
        return self.auth.problem(request, need_write=True) is None


@contextmanager
def refusal_as_http(**statuses: int) -> Iterator[None]:
    """A ``ControlError`` raised inside becomes the HTTP error of the admin API: its
    status (or the one ``statuses`` gives its class name) and its message."""
    try:
        yield
    except ControlError as exc:
        raise HTTPException(statuses.get(type(exc).__name__, exc.status), str(exc)) from None
