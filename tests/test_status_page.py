"""The status page (master_service/api/status_page.py) rendered by headless Chromium.

Two data centres with peered masters, one worker killed: the page Chromium renders must
show both data centres, the link between the masters, each worker with its status colour
and sequence number. The DOM after the page's JavaScript ran is checked element by
element, and the screenshot is checked for the status colours it must contain (which
elements are drawn, not pixel positions). The screenshot is kept in
build/status-page.png for a human to look at.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from master_service.api.status_page import OperationTracker
from tests.clusters import LocalCluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BUILD = Path(__file__).resolve().parent.parent / "build"
# The colours status.css gives these worker statuses (--on, --off).
GREEN_ON = (0x2E, 0x7D, 0x32)
RED_OFF = (0xB7, 0x1C, 0x1C)


def chromium(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium with a fresh profile and no background traffic (the machine's
    network is closed: without these flags it keeps retrying Google's hosts)."""
    profile = tmp_path / f"chromium-profile-{time.monotonic_ns()}"
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--window-size=1400,1000",
         # Virtual time: the page's first poll and drawing happen before the dump.
         "--virtual-time-budget=4000", *args, url],
        capture_output=True, text=True, timeout=120, check=True)


class Elements(HTMLParser):
    """Every element of a DOM dump as (tag, attributes, text inside it)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[dict] = []
        self._open: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        node = {"tag": tag, **{k: v or "" for k, v in attrs}, "text": ""}
        self.elements.append(node)
        if tag not in ("br", "meta", "link", "img", "input"):
            self._open.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i]["tag"] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        for node in self._open:
            node["text"] += data

    def find(self, **attrs: str) -> list[dict]:
        return [e for e in self.elements
                if all(k in e and (v is None or v in e[k].split() if k == "class"
                                   else e[k] == v) for k, v in attrs.items())]


def png_colours(path: Path) -> set[tuple[int, int, int]]:
    """The set of RGB colours of an 8-bit RGB(A) non-interlaced PNG (what Chromium
    writes), decoded with zlib alone."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    prev, colours, i = bytearray(stride), set(), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc
                                      else c)) & 0xFF
        colours.update(zip(line[0::bpp], line[1::bpp], line[2::bpp], strict=True))
        prev = line
    return colours


def page_data(cluster: LocalCluster) -> dict:
    r = httpx.get(f"{cluster.master.url}/status/data", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(what: str, condition, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"not {what} after {timeout}s"
        time.sleep(0.1)
    return value


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make deps-debian)")
def test_page_draws_two_data_centres_and_a_dead_worker(two_data_centres, tmp_path):
    uk, us = two_data_centres
    wait_for("peered", lambda: page_data(uk)["sync"]["state"] == "connected"
             and all(p["reachable"] for p in page_data(uk)["sync"]["peers"]))
    r = uk.update("INSERT DATA { <urn:page> <urn:p> 1 }")
    assert r.status_code == 204, r.text
    uk.wait_in_sync()
    dead = uk.workers[2]
    dead.kill9()
    uk.wait_for(lambda s: uk.worker_status(s, dead)["status"] == "OFF", "worker OFF")
    data = page_data(uk)
    head = data["status"]["head"]["seq"]
    assert head > 0
    # The other data centre executes the agreed write on its own workers when it gets
    # there: the page shows them at the head once their master has seen them there, and
    # this master has asked it again (status_page.PeerViews keeps its answer up to
    # PEER_VIEW_TTL_S): wait for the page's own data to say so.

    def peer_workers_at_head() -> bool:
        view = page_data(uk)["peer_views"].get("master-us") or {}
        workers = view.get("data", {}).get("status", {}).get("workers", [])
        return bool(view.get("ok")) and len(workers) == len(us.workers) and all(
            w["seq"] >= head for w in workers)

    wait_for("the other data centre's workers at the head, in this page's data",
             peer_workers_at_head)

    dom = Elements()
    dom.feed(chromium(tmp_path, f"{uk.master.url}/", "--dump-dom").stdout)

    # The redirect from / landed on the page and the script drew it.
    [badge] = dom.find(id="cluster-status")
    assert badge["text"] == "needs attention" and badge["data-status"] == "1"
    [local] = dom.find(id="dc-local")
    assert "data centre uk" in local["text"]
    [master] = dom.find(**{"class": "master", "data-node-id": "master-uk"})
    assert master["data-sync-state"] == "connected"
    assert "peering" in master["text"] and "connected" in master["text"]
    cards = {w["data-url"]: w for w in dom.find(**{"class": "worker"})}
    workers = {u: c for u, c in cards.items() if u in {w.url for w in uk.workers}}
    workers_of_peer = {u: c for u, c in cards.items() if u in {w.url for w in us.workers}}
    assert set(cards) == {w.url for w in (*uk.workers, *us.workers)}
    assert workers[dead.url]["data-status"] == "OFF"
    for w in uk.workers[:2]:
        assert workers[w.url]["data-status"] == "ON"
        assert workers[w.url]["data-seq"] == str(head)
        assert "running queries" in workers[w.url]["text"]
    # The link to the other data centre and its master.
    [link] = dom.find(**{"class": "link", "data-peer": "master-us"})
    assert link["data-reachable"] == "true" and "linked" in link["text"]
    [peer] = dom.find(**{"class": "peer-dc", "data-peer": "master-us"})
    assert "data centre us" in peer["text"] and us.master.url in peer["text"]
    # The other data centre's workers, as its master sees them (asked by this master).
    for w in us.workers:
        assert workers_of_peer[w.url]["data-status"] == "ON"
        assert workers_of_peer[w.url]["data-seq"] == str(head)
    # No replication is running: nothing in progress.
    assert not dom.find(**{"class": "operation"})
    [events] = dom.find(id="events")
    assert f"worker {dead.url} -> OFF" in events["text"]

    BUILD.mkdir(exist_ok=True)
    shot = BUILD / "status-page.png"
    shot.unlink(missing_ok=True)
    chromium(tmp_path, f"{uk.master.url}/status", f"--screenshot={shot}")
    colours = png_colours(shot)
    assert GREEN_ON in colours, "no worker drawn in the ON colour"
    assert RED_OFF in colours, "the OFF worker is not drawn in red"

    # The other data centre's master dies: the link turns unreachable and its workers
    # are no longer known (the page says why instead of showing stale cards).
    us.master.kill9()
    wait_for("peer unreachable", lambda: not page_data(uk)["sync"]["peers"][0]["reachable"])
    dom = Elements()
    dom.feed(chromium(tmp_path, f"{uk.master.url}/status", "--dump-dom").stdout)
    [link] = dom.find(**{"class": "link", "data-peer": "master-us"})
    assert link["data-reachable"] == "false" and "unreachable" in link["text"]
    [peer] = dom.find(**{"class": "peer-dc", "data-peer": "master-us"})
    assert peer["data-reachable"] == "false"
    [error] = dom.find(**{"class": "peer-view-error"})
    assert "its workers: ConnectError" in error["text"]
    assert not [c for c in dom.find(**{"class": "worker"})
                if c["data-url"] in {w.url for w in us.workers}]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make deps-debian)")
def test_page_says_when_the_master_stops_answering(cluster_factory, tmp_path):
    """The picture stays, with a banner saying it is no longer live."""
    cluster = cluster_factory(workers=1)
    base = cluster.master.url
    # The page as the master served it, with its script inline and a <base> naming the
    # master, saved to a file: Chromium loads it after the master is killed, so its
    # polls of /status/data go to a dead master.
    html = httpx.get(f"{base}/status", timeout=10).text
    script = httpx.get(f"{base}/status/assets/status.js", timeout=10).text
    html = html.replace('<script src="/status/assets/status.js"></script>',
                        f"<script>{script}</script>")
    html = html.replace("<head>", f'<head><base href="{base}/">')
    page = tmp_path / "page.html"
    page.write_text(html)
    cluster.master.kill9()
    dom = Elements()
    dom.feed(chromium(tmp_path, page.as_uri(), "--dump-dom").stdout)
    [error] = dom.find(id="error")
    assert "hidden" not in error and "master not answering" in error["text"]


def test_assets_and_bad_paths(cluster_factory):
    cluster = cluster_factory(workers=1)
    base = cluster.master.url
    r = httpx.get(f"{base}/", follow_redirects=False, timeout=10)
    assert r.status_code == 307 and r.headers["location"] == "/status"
    page = httpx.get(f"{base}/status", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/status/assets/status.js" in page.text
    js = httpx.get(f"{base}/status/assets/status.js", timeout=10)
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    missing = httpx.get(f"{base}/status/assets/..%2Fapp.py", timeout=10)
    assert missing.status_code == 404
    assert httpx.get(f"{base}/status/assets/nope.js", timeout=10).status_code == 404
    data = httpx.get(f"{base}/status/data", timeout=10).json()
    assert data["sync"] is None  # not peered
    assert data["status"]["node_id"] == "master1" and data["operations"] == []


# ---- operations in progress, from worker statuses (pure) ----


def status(head: int, *workers: dict) -> dict:
    return {"head": {"seq": head}, "workers": list(workers)}


def worker(url: str, st: str, seq: int = 0, **extra) -> dict:
    return {"url": url, "status": st, "seq": seq, "size_bytes": None, "last_error": None,
            **extra}


def test_operations_replication_estimate_and_catch_up_progress():
    now = [1000.0]
    tracker = OperationTracker(clock=lambda: now[0])
    # 100 MB source at 100 Mbit/s: the smart-replication estimate is 8 s.
    s = status(50, worker("a", "REPLICATION_SERVER", 50, size_bytes=100_000_000),
               worker("b", "REPLICATION_CLIENT", -1), worker("c", "OUT_OF_SYNC", 10))
    ops = {o["kind"]: o for o in tracker.operations(s, 100_000_000)}
    assert ops["replication"]["source"] == "a" and ops["replication"]["estimated_s"] == 8.0
    assert ops["replication"]["progress"] == 0.0
    assert ops["catch-up"]["progress"] == 0.0 and "seq 10 of 50" in ops["catch-up"]["text"]
    assert "backup" not in ops  # the server serves the replication, not a backup
    now[0] += 4
    s["workers"][2]["seq"] = 30
    ops = {o["kind"]: o for o in tracker.operations(s, 100_000_000)}
    assert ops["replication"]["progress"] == 0.5 and ops["replication"]["elapsed_s"] == 4.0
    assert ops["catch-up"]["progress"] == 0.5
    now[0] += 100  # an estimate never says done: the worker does
    assert {o["kind"]: o for o in tracker.operations(s, 100_000_000)}[
        "replication"]["progress"] == 0.99
    # Done: forgotten; a later replication of the same worker starts its clock afresh.
    assert tracker.operations(status(50, worker("b", "ON", 50)), 1) == []
    assert tracker.first_seen == {}


def test_operations_backup_and_restore():
    tracker = OperationTracker(clock=lambda: 5.0)
    [backup] = tracker.operations(status(3, worker("a", "REPLICATION_SERVER", 3),
                                         worker("b", "ON", 3)), 1)
    assert backup["kind"] == "backup" and backup["worker"] == "a"
    assert backup["progress"] is None
    restoring = "restoring from image 'nightly'"
    ops = tracker.operations(status(3, worker("a", "REPLICATION_CLIENT", 0,
                                              last_error=restoring),
                                    worker("b", "OUT_OF_SYNC", 0)), 1)
    [restore] = [o for o in ops if o["kind"] == "restore"]
    assert restore["progress"] == 0.5
    assert restore["text"] == "restoring from image 'nightly': 1 of 2 workers restored"
