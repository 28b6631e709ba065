"""An initial load's parts, sent from the Spark tasks that parse them (IO only).

``PartPush`` travels to the executors inside the job's closure (``transform.ParseConfig
.push``); each task sends the parts it makes to the master's admin API, which forwards
them to the worker being loaded (``PUT /admin/bulk-load/{id}/parts/{n}?worker=...``,
worker_service/bulk_load.py). The parts never go through Spark's JVM or the driver
(docs/design/pipeline-on-spark.md, "An initial load").

The executors run it with what is shipped to them (spark_pipeline/shipping.py: this
package, pyoxigraph and a few more), so it uses the standard library's HTTP client only:
no httpx, no txcluster package there. An https master is checked against the CA bundle
the loader was given (``--ca-file``: its PEM text travels in the closure, so executors
need no file of their own), else the system's certificate authorities.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import time
from urllib.parse import quote, urlsplit

# A part can wait while the worker loads the batch before it (bulk_load.LOAD_EVERY).
TIMEOUT_S = 3600.0
# Waits before sending a part again when the master could not be reached or answered
# that it (or the worker behind it) is unavailable now: 502, 503, 504. A master restarts
# in a few seconds, and without this a local load (Spark runs a local task once) or a
# task out of Spark's own attempts failed the whole load. Sending again is safe: the
# worker takes a part number it has once when its quads are the same. Refusals (4xx)
# and 500 (the worker discarded the staging) are final.
RETRY_DELAYS_S = (1.0, 4.0, 15.0)
TRANSIENT = frozenset({502, 503, 504})


def tls_context(cadata: str | None) -> ssl.SSLContext:
    """How the loader checks an https master or worker: against the CA bundle's PEM text
    when given (``--ca-file``), else the system's CAs; never unchecked."""
    return ssl.create_default_context(cadata=cadata) if cadata else \
        ssl.create_default_context()


class PartRefused(RuntimeError):
    """The master refused a part, or could not be reached; the message says why. The task
    fails with it (Spark names the task, transform.TaskFailure the file and lines)."""


class PartPush:
    """Sends the parts of bulk load ``load_id`` to ``worker`` through ``master``: one
    connection per part (a kept one could be closed by the master between two parts, as
    uvicorn closes a connection idle for 5 s, while the task parses the next; a ~10 MB
    part makes the connection's cost nothing). A task that runs again sends the same
    parts under the same numbers, which the worker takes once."""

    def __init__(self, master: str, auth: tuple[str, str] | None, load_id: str,
                 worker: str, cadata: str | None = None) -> None:
        self.master, self.auth, self.load_id, self.worker = master.rstrip("/"), auth, \
            load_id, worker
        self.cadata = cadata  # PEM text of the CA bundle (--ca-file), or None

    def _connection(self) -> http.client.HTTPConnection:
        url = urlsplit(self.master)
        if url.scheme == "https":
            return http.client.HTTPSConnection(url.netloc, timeout=TIMEOUT_S,
                                               context=tls_context(self.cadata))
        return http.client.HTTPConnection(url.netloc, timeout=TIMEOUT_S)

    def send(self, number: int, data: bytes) -> None:
        """Send part ``number``; sent again after RETRY_DELAYS_S when the master was not
        reached or answered a TRANSIENT status. PartRefused when it is refused, or still
        not taken after the last wait."""
        path = (urlsplit(self.master).path + f"/admin/bulk-load/{quote(self.load_id)}"
                f"/parts/{number}?worker={quote(self.worker, safe='')}")
        headers = {"content-type": "application/n-quads"}
        if self.auth is not None:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            headers["authorization"] = f"Basic {token}"
        delays = list(RETRY_DELAYS_S)
        while True:
            problem = self._send_once(number, path, headers, data)
            if problem is None:
                return
            message, transient = problem
            if not transient or not delays:
                attempts = len(RETRY_DELAYS_S) - len(delays) + 1
                raise PartRefused(message + (f" ({attempts} attempts)" if attempts > 1
                                             else ""))
            time.sleep(delays.pop(0))

    def _send_once(self, number: int, path: str, headers: dict[str, str], data: bytes
                   ) -> tuple[str, bool] | None:
        """None when the part was taken, else (why not, whether it is worth sending
        again)."""
        conn = self._connection()
        try:
            conn.request("PUT", path, body=data, headers=headers)
            r = conn.getresponse()
            body = r.read()
        except ssl.SSLError as exc:  # a certificate it does not trust: not for a retry
            return f"cannot send part {number} to the master {self.master}: {exc}", False
        except (OSError, http.client.HTTPException) as exc:
            return f"cannot send part {number} to the master {self.master}: {exc}", True
        finally:
            conn.close()
        if r.status < 400:
            return None
        try:
            detail = json.loads(body).get("detail", body.decode(errors="replace"))
        except (ValueError, AttributeError):
            detail = body.decode(errors="replace")
        return (f"PUT /admin/bulk-load/{self.load_id}/parts/{number} on {self.master} "
                f"answered {r.status}: {detail}", r.status in TRANSIENT)
