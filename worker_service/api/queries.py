"""A worker's queries on its store: evaluated in the store's thread pool or in a query
process, stopped at their timeout, their results written in the negotiated format.

Reading: ``repo.reading()`` is held only around the call that *starts* a query or a
pattern iteration. pyoxigraph evaluates over a snapshot taken then, so results are
serialised after the lock is released and a reader never sees half a changeset.

Queries (txinfra/query_limits.py, worker_service/query_isolation.py): provably cheap
queries (a single triple pattern) run in the thread pool and are stopped while their
results are written; every other query runs in a query process
(worker_service/query_process.py) forked under the read lock, killed at the deadline or
when its client goes. A query that timed out is a 503 "Query evaluation took too long"
(RDF4J's answer). pyoxigraph always runs in the thread pool, never on the event loop."""

from __future__ import annotations

import asyncio
import os
import pickle
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import chain
from pathlib import Path
from typing import IO, Any

import pyoxigraph as ox
from starlette.responses import Response, StreamingResponse

from rdf4j_protocol.binary_rdf import write_rdf
from rdf4j_protocol.binary_results import write_results
from rdf4j_protocol.negotiation import (
    Negotiated,
    negotiate_boolean_format,
    negotiate_rdf_format,
    negotiate_tuple_format,
)
from rdf4j_protocol.parameters import ProtocolError
from rdf4j_protocol.reads import QueryRequest, is_update, sparql_keyword
from rdf4j_protocol.results import serialize_boolean
from rdfcore.sparql_text import uses_service
from txinfra import query_limits
from worker_service import query_process

# Threads that run pyoxigraph. A plain executor costs about half of what anyio's
# to_thread costs per hop (~26 vs ~57 us CPU measured), which shows on point queries.
STORE_THREADS = 16
_pool = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="rdf4j-store")


async def run_in_threadpool(fn: Callable, *args: Any) -> Any:
    """Run blocking store work off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(_pool, partial(fn, *args))


class QueryTimeout(Exception):
    pass


class TimedOut(ProtocolError):
    """A query stopped at its timeout: RDF4J's 503, marked so that a master does not send
    the query to another worker (query_limits.TIMED_OUT_HEADER)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(query_limits.TIMED_OUT_STATUS,
                         query_limits.timed_out_message(timeout_s))
        self.headers = {query_limits.TIMED_OUT_HEADER: f"{timeout_s:g}"}


class _DeadlineWriter:
    """A sink for pyoxigraph's ``serialize`` that fails once the deadline has passed.

    pyoxigraph evaluates lazily while it writes (about one write() per 8 KiB), so this
    stops evaluation as well as serialisation."""

    def __init__(self, deadline: float, timeout_s: float) -> None:
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.chunks: list[bytes] = []

    def write(self, chunk: bytes) -> int:
        if time.monotonic() > self.deadline:
            raise QueryTimeout
        self.chunks.append(bytes(chunk))
        # pyoxigraph's serialize needs the length back (docs/design/dependencies.md)
        return len(chunk)

    def flush(self) -> None:
        pass

    def getvalue(self) -> bytes:
        return b"".join(self.chunks)


def _write_results(result: Any, fmt: Any, timeout_s: float | None) -> bytes:
    if timeout_s is None:
        return result.serialize(format=fmt)
    sink = _DeadlineWriter(time.monotonic() + timeout_s, timeout_s)
    result.serialize(sink, format=fmt)
    return sink.getvalue()


# The result negotiation for each query form, chosen before the query starts.
_NEGOTIATORS = {
    "SELECT": negotiate_tuple_format,
    "ASK": negotiate_boolean_format,
    "CONSTRUCT": negotiate_rdf_format,
    "DESCRIBE": negotiate_rdf_format,
}


def _negotiate_first(q: QueryRequest, accept: str | None) -> Negotiated | None:
    negotiate = _NEGOTIATORS.get(sparql_keyword(q.query) or "")
    return negotiate(accept) if negotiate is not None else None


def _negotiate_for(result: Any, accept: str | None) -> Negotiated:
    """The format for a result whose form was not known before the query started."""
    if isinstance(result, ox.QueryBoolean):
        return negotiate_boolean_format(accept)
    if isinstance(result, ox.QuerySolutions):
        return negotiate_tuple_format(accept)
    return negotiate_rdf_format(accept)


def _start_query(store: ox.Store, q: QueryRequest, repo_id: str) -> Any:
    """``store.query`` with its errors as protocol errors (no result exists yet)."""
    try:
        return store.query(q.query, **q.query_kwargs())
    except SyntaxError as exc:
        if is_update(q.query):
            raise ProtocolError(
                400, "a SPARQL update cannot be sent to the query endpoint: send it to "
                     f"/repositories/{repo_id}/statements ({exc})") from None
        raise ProtocolError(400, f"MALFORMED QUERY: {exc}") from None
    except (OSError, RuntimeError) as exc:  # e.g. a binding pyoxigraph cannot substitute
        raise _evaluation_failure(q, exc) from None


def _evaluation_failure(q: QueryRequest, exc: Exception) -> ProtocolError:
    """An error raised while a query was evaluated (an ASK at its start, other forms
    while their results are read). pyoxigraph raises
    OSError both for a failed SERVICE call and for the store's own I/O: in a query that
    calls another endpoint it is taken as the call's (the query's fault, 400, as any
    RuntimeError of the evaluation is); otherwise it is this worker's (500)."""
    if isinstance(exc, RuntimeError) or uses_service(q.query):
        return ProtocolError(400, f"query cannot be evaluated: {exc}")
    return ProtocolError(500, f"query evaluation failed: {exc}")


# How long a provably cheap query may run on the event loop (run_inline) before it is
# given up and run again in the thread pool. A point query takes ~50 us; the hop to a
# pool thread and back cost ~300 us under load on this 2-core machine (GIL handoffs),
# which made it the largest part of a point query's answer (bench/bench_anchor.py).
INLINE_BUDGET_S = 0.002


def run_inline(repo: Any, q: QueryRequest, accept: str | None,
               timeout_s: float | None) -> tuple[bytes, str] | None:
    """A provably cheap query on the calling (event loop) thread, if the repository's
    read lock is free now and the answer is written within INLINE_BUDGET_S; None
    otherwise (nothing was answered: run it in the thread pool, ``_run_query``). The
    answer is its body and media type. A query
    only reads, so giving one up and running it again changes nothing; the loop is never
    held for longer than the budget and one result chunk."""
    budget = INLINE_BUDGET_S if timeout_s is None else min(INLINE_BUDGET_S, timeout_s)
    with repo.reading_now() as store:
        if store is None:  # a writer holds or waits for the lock: never wait on the loop
            return None
        started = _start_query(store, q, repo.id)
    try:
        return _evaluate(repo, q, accept, budget, started=started)
    except _GivenUp:
        return None


class _GivenUp(Exception):
    """run_inline's budget passed (not the query's timeout)."""


def _run_query(repo: Any, q: QueryRequest, accept: str | None,
               timeout_s: float | None) -> Response:
    """``_evaluate`` as a Response."""
    body, media_type = _evaluate(repo, q, accept, timeout_s)
    return Response(body, media_type=media_type)


def _evaluate(repo: Any, q: QueryRequest, accept: str | None,
              timeout_s: float | None, started: Any = None) -> tuple[bytes, str]:
    """Start, evaluate and serialise a query, all in the calling (pool) thread; stopped
    (TimedOut) when ``timeout_s`` has passed at a write of its results. ``started``: a
    query run_inline started, whose ``timeout_s`` is its budget (_GivenUp, not TimedOut).

    pyoxigraph's result iterators are "unsendable": they must be used and dropped by the
    thread that created them. So the format is negotiated before the query starts, and
    no exception leaves this function while a frame still holds a result (an exception's
    traceback would keep it alive until another thread collects it)."""
    inline = started is not None
    neg = _negotiate_first(q, accept)
    if started is None:
        with repo.reading() as store:
            result = _start_query(store, q, repo.id)
    else:
        result, started = started, None
    failure: Exception | None = None
    try:
        neg = neg or _negotiate_for(result, accept)
        if isinstance(result, ox.QueryBoolean):
            body = serialize_boolean(bool(result), neg)
        elif isinstance(result, ox.QuerySolutions):
            body = (_binary_solutions(result, timeout_s) if neg.binary
                    else _write_results(result, neg.format, timeout_s))
        else:
            body = (_binary_graph(result, timeout_s) if neg.binary
                    else _write_results(result, neg.format, timeout_s))
    except ProtocolError as exc:
        failure = ProtocolError(exc.status, exc.message)
    except QueryTimeout:
        failure = _GivenUp() if inline else TimedOut(timeout_s or 0.0)
    except (OSError, RuntimeError, ValueError) as exc:
        failure = _evaluation_failure(q, exc)
    # Out of the except blocks: the exception and its frames are gone; drop the result
    # here, in its own thread, before raising anything.
    del result
    if failure is not None:
        raise failure
    return body, neg.content_type


def _within(items: Iterable, timeout_s: float | None) -> Iterable:
    """``items``, failing with QueryTimeout once ``timeout_s`` has passed (checked every
    256 items): the query timeout for results written by rdf4j_protocol.binary_rdf and
    binary_results, as _DeadlineWriter is for pyoxigraph's writers."""
    if timeout_s is None:
        yield from items
        return
    deadline = time.monotonic() + timeout_s
    for i, item in enumerate(items):
        if not i & 255 and time.monotonic() > deadline:
            raise QueryTimeout
        yield item


def _binary_solutions(result: ox.QuerySolutions, timeout_s: float | None) -> bytes:
    """SELECT results as RDF4J's binary results table."""
    variables = [v.value for v in result.variables]
    return write_results(variables, (tuple(s) for s in _within(result, timeout_s)))


def _binary_graph(result: ox.QueryTriples, timeout_s: float | None) -> bytes:
    """CONSTRUCT/DESCRIBE results as Binary RDF (statements without context)."""
    return write_rdf(_within(result, timeout_s))


def _answer_in_child(store: ox.Store, q: QueryRequest, accept: str | None,
                     neg: Negotiated | None, repo_id: str,
                     out: query_process.FrameWriter) -> None:
    """In a query process: evaluate ``q`` on ``store`` (the snapshot the fork took) and
    write the answer's frames; errors as the thread pool's ``_run_query`` answers them.
    No deadline here: the worker kills this process at it."""
    try:
        result = _start_query(store, q, repo_id)
        neg = neg or _negotiate_for(result, accept)
    except ProtocolError as exc:
        out.fail(exc.status, exc.message)
        return
    out.header(neg.content_type)
    try:
        if isinstance(result, ox.QueryBoolean):
            out.write(serialize_boolean(bool(result), neg))
        elif neg.binary:
            out.write(_binary_solutions(result, None) if isinstance(result, ox.QuerySolutions)
                      else _binary_graph(result, None))
        else:
            result.serialize(out, format=neg.format)
    except (OSError, RuntimeError, ValueError) as exc:
        failure = _evaluation_failure(q, exc)
        out.fail(failure.status, failure.message)


def _serve_in_child(store: ox.Store, repo_id: str, request: bytes,
                    out: query_process.FrameWriter) -> None:
    """In a query process: one request of the worker (``_query_request``)."""
    q, accept = pickle.loads(request)
    _answer_in_child(store, q, accept, _negotiate_first(q, accept), repo_id, out)


def _query_request(q: QueryRequest, accept: str | None) -> bytes:
    """What a query process is sent for ``q`` (the format is negotiated again there:
    pyoxigraph's formats do not pickle)."""
    return pickle.dumps((q, accept))


def _fork_query(repo: Any) -> tuple[int, int, int, int]:
    """In a pool thread: fork a query process while holding the read lock (no changeset
    half-applied in what it inherits): its pid, the read end of its answers pipe, the
    write end of its requests pipe, and the repository's write count it was forked at."""
    answers_r, answers_w = os.pipe()
    requests_r, requests_w = os.pipe()
    try:
        with repo.reading() as store:
            version = repo.write_count
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:  # the child: never returns
                query_process.child_main(parent, answers_w, requests_r,
                                         partial(_serve_in_child, store, repo.id))
    except BaseException:
        os.close(answers_r)
        os.close(requests_w)
        raise
    finally:
        os.close(answers_w)
        os.close(requests_r)
    return pid, answers_r, requests_w, version


def _excerpt(query: str, limit: int = 200) -> str:
    text = " ".join(query.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _serialize_quads(iterators: list, neg: Negotiated, prefixes: dict[str, str],
                     output: IO[bytes] | None = None) -> bytes | None:
    """Serialise quad iterators (started under ``reading()``) and drop them, in this
    thread: like query results, pyoxigraph's iterators must not outlive it (see
    ``_run_query``), so no exception leaves while a frame holds one. Into ``output``
    when given (a text format; None is returned), else as bytes."""
    quads: Iterable[ox.Quad] = chain.from_iterable(iterators)
    # Triples-only formats drop graph names (as RDF4J does); pyoxigraph needs triples.
    items: Iterable = quads if neg.supports_datasets else (q.triple for q in quads)
    kwargs = {"prefixes": prefixes} if prefixes and neg.format in (
        ox.RdfFormat.TURTLE, ox.RdfFormat.TRIG, ox.RdfFormat.N3, ox.RdfFormat.RDF_XML) else {}
    failure: ProtocolError | None = None
    body = None
    try:
        if neg.binary:
            body = write_rdf(quads, sorted(prefixes.items()))
        elif output is not None:
            ox.serialize(items, output, format=neg.format, **kwargs)
        else:
            body = ox.serialize(items, format=neg.format, **kwargs)
    except (OSError, RuntimeError, TypeError, ValueError) as exc:
        failure = ProtocolError(500, f"cannot write the statements as {neg.media_type}: {exc}")
    del quads, items
    iterators.clear()
    if failure is not None:
        raise failure
    return body


# A whole repository's export (GET /statements without a pattern: what the pipeline's
# load into a non-empty repository and its audit read) must not be built in the worker's
# memory: the statements are written to a spooled file — in memory up to SPOOL_BYTES,
# beyond that on disk next to the store (``spool_dir``; /tmp may be memory too) — and
# the answer streams from it. A small answer stays one plain response, as before.
SPOOL_BYTES = 8 << 20
_CHUNK = 1 << 20


def statements_response(iterators: list, neg: Negotiated, prefixes: dict[str, str],
                        spool_dir: Path | None = None) -> Response:
    """The answer of a statements read (in a pool thread, see ``_serialize_quads``)."""
    if neg.binary:  # Binary RDF is written whole (rdf4j_protocol.binary_rdf)
        return Response(_serialize_quads(iterators, neg, prefixes),
                        media_type=neg.content_type)
    # Closed by _chunks once streamed (or here on a failure): no context manager.
    spool = tempfile.SpooledTemporaryFile(  # noqa: SIM115
        SPOOL_BYTES, dir=spool_dir, prefix="export-")
    try:
        _serialize_quads(iterators, neg, prefixes, spool)
        size = spool.tell()
        spool.seek(0)
        if size <= SPOOL_BYTES:  # never rolled over to disk
            return Response(spool.read(), media_type=neg.content_type)
    except BaseException:
        spool.close()
        raise
    return StreamingResponse(_chunks(spool), media_type=neg.content_type)


def _chunks(spool: IO[bytes]) -> Iterator[bytes]:
    # The file is unlinked already (a temporary file): closing it frees the disk, also
    # when the client goes away and the generator is closed early.
    with spool:
        while chunk := spool.read(_CHUNK):
            yield chunk
