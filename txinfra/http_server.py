"""The HTTP/1.1 server both node kinds run: granian (Rust, hyper) serving the ASGI app.

Why granian. ``java.net.http.HttpClient`` with its defaults (what Jena 4+ and many Java
services use) offers HTTP/2 on a cleartext connection: ``Connection: Upgrade, HTTP2-Settings``
and ``Upgrade: h2c`` on an ordinary HTTP/1.1 request, body included. RFC 9110 §7.8 lets a
server ignore the offer and answer in HTTP/1.1, which every client must accept. granian does
exactly that, with the body whole (Content-Length or chunked), ``Expect: 100-continue``
answered and pipelined requests answered in order (docs/design/dependencies.md, granian;
tests/test_http_server.py). uvicorn with httptools (llhttp) does not: it ends the message
at the headers under an upgrade offer and hands the application an empty body, which only
a subclass of its private protocol internals could prevent.

granian's embedded server runs on this process's event loop (uvloop), so the app object
the node built, with its state, is the one served; lifespan events run as under any ASGI
server. granian marks its embedded server experimental: the version is pinned in setup.cfg,
and the behaviour above is what was tested with it.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
from pathlib import Path
from typing import Any

import uvloop
from granian.constants import HTTPModes, Interfaces, SSLProtocols
from granian.errors import FatalError
from granian.http import HTTP1Settings
from granian.log import LogLevels
from granian.server.embed import Server

from txinfra import heap

log = logging.getLogger("txcluster.http")

# FastAPI's own OpenTelemetry instrumentation, off on both node kinds: nothing here
# configures a tracer or meter, and deciding so again on every request cost about 25 us
# of CPU (a tenth of a point query's whole budget on the hot path).
FASTAPI_TELEMETRY = {"tracing": False, "metrics": False, "logs": False}


# Open connections a node serves at once. granian's backpressure counts connections, not
# requests: a kept-alive idle connection holds its place until its client closes it or
# granian's header read timeout (30 s) ends it, and past the limit no new connection is
# accepted (its requests wait unanswered in the listen queue). The default (backlog 128)
# was reached after a network cut: each status a peer gave up on during the cut left a
# connection whose FIN the cut dropped, and the master answered nobody, its operators
# included, for the 30 s those took to time out (tests/test_partitions.py). Concurrency is
# bounded where it costs (worker_service/query_slots.py, the write path), not here.
MAX_CONNECTIONS = 8192
LISTEN_BACKLOG = 1024  # the kernel caps it at net.core.somaxconn (4096 on current kernels)
# Descriptors besides connections: the stores, the log, query processes' pipes, pools.
OTHER_FILES = 1024


class ServerFailed(RuntimeError):
    """The server stopped by itself: the application's startup failed, or its worker
    died (granian logs why)."""


def server(app: Any, *, host: str, port: int, ssl_certfile: str | None = None,
           ssl_keyfile: str | None = None) -> Server:
    """The server of ``app`` on ``host``:``port``, HTTPS when given a certificate and its
    key (txinfra/tls.py). Its ``serve()`` runs on the current event loop until
    ``stop()``."""
    return Server(
        app, address=host, port=port, interface=Interfaces.ASGI,
        # HTTP/1.1 only, as before: an h2c upgrade offer is ignored (RFC 9110 §7.8).
        http=HTTPModes.http1, websockets=False,
        http1_settings=HTTP1Settings(keep_alive=True),
        backlog=LISTEN_BACKLOG, backpressure=MAX_CONNECTIONS,
        log_level=LogLevels.warning, log_access=False,
        ssl_cert=Path(ssl_certfile) if ssl_certfile else None,
        ssl_key=Path(ssl_keyfile) if ssl_keyfile else None,
        # What clients of the nodes speak (the JDK's HttpClient and Python's ssl: 1.2+).
        ssl_protocol_min=SSLProtocols.tls12)


async def serve(app: Any, **options: Any) -> None:
    """Serve ``app`` (``options``: :func:`server`'s) until SIGINT or SIGTERM, then stop
    gracefully: the requests being answered finish, the app's lifespan shutdown runs.
    Raises ServerFailed when the server stopped by itself."""
    s = server(app, **options)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, s.stop)
    try:
        await s.serve()
    except FatalError as exc:  # the application's lifespan startup failed
        raise ServerFailed(f"the HTTP server did not start: {exc}") from None
    if s.interrupt_children:
        raise ServerFailed("the HTTP server stopped: the application failed to start "
                           "or its worker died (see the log above)")


def run(app: Any, *, host: str, port: int, **options: Any) -> None:
    """Serve ``app`` as both node kinds do: granian's ASGI server on uvloop, in this
    process (``options``: ssl_certfile, ssl_keyfile)."""
    raise_open_files_limit(MAX_CONNECTIONS + OTHER_FILES)
    heap.settle()  # the app is built: nothing a collection should walk again
    uvloop.run(serve(app, host=host, port=port, **options))


def raise_open_files_limit(wanted: int) -> int:
    """Raise this process's soft limit of open files towards ``wanted``, within its hard
    limit (systemd's default soft limit is 1024, its hard one 524288: a server raises its
    own, as nginx and Go's runtime do). Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open files limit to %d: %s", target, exc)
    return soft
