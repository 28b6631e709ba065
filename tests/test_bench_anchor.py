"""bench/bench_anchor.py's reading of wrk (nothing is timed here): the WRK_JSON line that
bench/wrk/sparql.lua prints, and that a non-2xx response fails the run rather than being
counted, and which round's figure the table shows. With wrk installed, the script itself
runs for 1 s against a stub server."""

from __future__ import annotations

import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.bench_anchor import BenchError, Row, Wrk, median_rows, parse_wrk, result_of

LINE = ('WRK_JSON {"duration_us": 2000000, "requests": 10, "ok": 10, "bad": 0, '
        '"first_bad": "", "errors": {"connect": 0, "read": 0, "write": 0, "status": 0, '
        '"timeout": 0}, "latency_us": {"mean": 900.5, "p50": 800.0, "p90": 1500.0, '
        '"p99": 2000.0, "max": 2100.0}}')


def test_the_json_line_is_found_among_wrk_output():
    out = f"Running 2s test @ http://127.0.0.1:1\n  1 threads and 1 connections\n{LINE}\n"
    assert parse_wrk(out)["ok"] == 10
    r = result_of("x", 1, out)
    assert (r.rate, r.p50_ms, r.seconds) == (5.0, 0.8, 2.0)


def test_output_without_the_line_is_an_error():
    with pytest.raises(BenchError, match="no WRK_JSON"):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")


@pytest.mark.parametrize("change", [
    ('"bad": 0, "first_bad": ""', '"bad": 3, "first_bad": "500 boom"'),
    ('"timeout": 0', '"timeout": 2'),
    ('"ok": 10', '"ok": 0'),
])
def test_failed_requests_fail_the_run(change):
    with pytest.raises(BenchError):
        result_of("x", 1, LINE.replace(*change))


class Stub(BaseHTTPRequestHandler):
    """204 for POST /ok, 200 for GET, 500 for anything else; keep-alive."""

    protocol_version = "HTTP/1.1"
    bodies: list[bytes] = []

    def do_GET(self) -> None:
        self.reply(200, b"{}")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        if len(self.bodies) < 3:
            self.bodies.append(body)
        self.reply(204 if self.path == "/ok" else 500, b"" if self.path == "/ok" else b"no")

    def reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class Quiet(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # wrk closes its connections mid-request when its time is up


@pytest.mark.skipif(shutil.which("wrk") is None, reason="no wrk (apt-get install wrk)")
@pytest.mark.processes
def test_the_lua_script_counts_2xx_and_writes_unique_subjects():
    server = Quiet(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        wrk = Wrk(seconds=1, warmup=0, threads=1)
        ok = wrk.run("w", "write", base, ("/ok",), ["Content-Type: text/plain"], 1)
        assert ok.ok > 0 and ok.ok == ok.requests
        first, second = Stub.bodies[:2]
        assert re.match(rb"INSERT DATA \{ <http://example.org/bench/w/r1-1-\d+> ", first)
        assert first.count(b" .") == 10 and first != second
        assert wrk.run("r", "read", base, ("/q?k=", "", "5"), [], 1).ok > 0
        with pytest.raises(BenchError, match="500 no"):
            wrk.run("w", "write", base, ("/fail",), [], 1)
    finally:
        server.shutdown()


def test_the_peer_rounds_line_splits_cpu_into_per_round_and_per_transaction():
    """bench_peer_rounds: points on CPU = 500 + 1,500 x rounds give that line back; a
    single rounds value (no slope to find) gives a flat line through the mean."""
    from bench.bench_peer_rounds import line

    points = [(r, 500 + 1500 * r) for r in (1.3, 0.67, 0.36, 0.32, 0.16)]
    intercept, slope = line(points)
    assert (round(intercept, 6), round(slope, 6)) == (500, 1500)
    assert line([(0.5, 10.0), (0.5, 20.0)]) == (15.0, 0.0)


def test_the_table_shows_each_figures_median_round_and_the_worse_middle_of_two():
    def rounds(*pairs):  # one figure per op: (rate ratio, latency ratio) per round
        return [[Row("rate", "a", 100.0, up, "q/s", ">=", 0.3),
                 Row("p50", "b", 2.0, 2.0 * down, "ms", "<=", 2.0)] for up, down in pairs]

    rate, p50 = median_rows(rounds((10, 1.5), (50, 3.0), (30, 4.5)))
    assert (rate.value, p50.value) == (30, 6.0)  # the middle of three, whichever round
    rate, p50 = median_rows(rounds((10, 1.5), (50, 3.0)))
    assert (rate.value, p50.value) == (10, 6.0)  # the worse of two: lower rate, higher p50
    assert (rate.ratio, p50.ratio) == (0.1, 3.0)


def test_the_engine_bound_rows_count_refusals_and_are_not_met_with_any():
    """bench_anchor's engine-bound runs count non-2xx answers (a worker's 503 "busy")
    instead of failing; a row with any is not met, whatever its rate."""
    refused = LINE.replace('"bad": 0, "first_bad": ""', '"bad": 3, "first_bad": "503 busy"'
                           ).replace('"status": 0', '"status": 3')
    r = result_of("x", 16, refused, refusals=True)
    assert (r.ok, r.bad, r.rate) == (10, 3, 5.0)
    with pytest.raises(BenchError):  # a socket error still fails the run
        result_of("x", 16, refused.replace('"timeout": 0', '"timeout": 1'), refusals=True)
    assert Row("engine", "a", 10.0, 9.5, "q/s", ">=", 0.9).met
    assert not Row("engine", "a", 10.0, 9.5, "q/s", ">=", 0.9, refused=r.bad).met
