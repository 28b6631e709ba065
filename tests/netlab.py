"""A real network for tests (root only): hosts in network namespaces on two redundant
networks, with partitions and adapter failures made by the kernel.

Layout of one lab (run id R, a /24 10.214.N.0/24 that no route of the root namespace
overlaps, chosen at start)::

    root namespace --veth "txc-R-m" (10.214.N.1/30)-- switch namespace "txc-R-sw"
                                                        br-a  10.214.N.126/26  (net A)
                                                        br-b  10.214.N.190/26  (net B)
    host namespace "txc-R-<host>" (host number i, 1-based):
        lo     service IP 10.214.N.(16+i)/32  -- what nodes listen on and are reached at
        eth-a  10.214.N.(64+i)/26   veth to br-a
        eth-b  10.214.N.(128+i)/26  veth to br-b
        routes to every other host's service IP: via its net A address (metric 10) and
        via its net B address (metric 20), source = own service IP; the same two routes
        to the root namespace's management /30 through the switch.

The switch namespace only bridges (and routes the management /30, so that the test
process reaches every service IP through ``txc-R-m``). The root namespace gets one veth
and one route for the lab's /24, both gone when the lab is closed.

Faults (all idempotent):

* ``adapter_down(host, net, convergence_s=0)``: the adapter goes down (its kernel drops
  its own routes over it) and the routes over that net to the host are withdrawn
  everywhere else (what the routing of a real redundant network does when an adapter
  fails; a static route to a dead next hop would only blackhole) — at once, or after
  ``convergence_s`` of blackholing. Traffic fails over to the other net; ``adapter_up``
  brings it back.
* ``cut(a, b)``: an nftables set in each of the two namespaces drops every packet to
  and from the other's addresses, on both nets; ``uncut``; ``isolate(host)`` cuts it
  from every other host (the test process still reaches it, over the management path).
* ``lossy(a, b, percent)``: an nftables rule in each of the two namespaces drops that
  share of the packets to the other (random, per packet; works wherever nft does).
* ``slow(a, b, delay_ms, jitter_ms, loss_pct, rate_mbit)``: what each of the two sends
  to the other, and only that, is delayed and dropped (tc netem) and limited to a
  bandwidth: nftables sets the packets' priority to a class of an htb qdisc on the
  host's adapters, at that rate, whose leaf is the netem qdisc (one setting per host).
  A delay or loss needs the kernel's sch_netem (``netem_unavailable()`` says why not);
  a bandwidth alone does not.
* ``heal()``: no cuts, no loss, no slow links, every adapter up.

Cleanup: ``close()`` (also from ``with``, and from atexit if the test never got there)
deletes every namespace whose name starts with the run's prefix and the root veth.
Deleting the switch namespace removes every veth pair with it. A run killed with -9 is
swept by the next lab (``sweep_stale``: runs whose registered PID is dead). Processes
started in a host namespace are the tests' to stop (by PID) before ``close``.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

PREFIX = "txc-"
NETS = ("a", "b")
REGISTRY = Path("/tmp/txc-netlab")  # <run id> -> PID of the process that owns the run
_BASE = ipaddress.ip_network("10.214.0.0/16")
_HOST = re.compile(r"^[a-z][a-z0-9]{0,7}$")


class NetlabError(RuntimeError):
    pass


def unavailable() -> str | None:
    """Why a lab cannot be made here (for pytest.skip), or None."""
    if os.geteuid() != 0:
        return "needs root: network namespaces, veth links and nftables (CI runs as root)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"needs the `{tool}` command (Debian package {package})"
    return None


def run(*args: str, check: bool = True, input: str | None = None) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, input=input, timeout=30)
    if check and proc.returncode != 0:
        raise NetlabError(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def netns_names() -> list[str]:
    return [line.split()[0] for line in run("ip", "netns", "list").splitlines() if line.strip()]


def root_links() -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)[:@]", run("ip", "-o", "link"),
                                            re.M)]


def remove_run(run_id: str) -> list[int]:
    """Remove everything of run ``run_id`` by name: the root veth, then the namespaces.
    A process of the run still inside one of its namespaces (one its test did not stop,
    or the nodes of a run killed -9) is killed by its PID first; those PIDs are returned."""
    prefix = f"{PREFIX}{run_id}-"
    killed = []
    for link in root_links():
        if link.startswith(prefix):
            run("ip", "link", "del", link, check=False)
    for ns in netns_names():
        if ns.startswith(prefix):
            for pid in run("ip", "netns", "pids", ns, check=False).split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
            run("ip", "netns", "del", ns, check=False)
    with contextlib.suppress(FileNotFoundError):
        (REGISTRY / run_id).unlink()
    return killed


def sweep_stale() -> list[str]:
    """Remove the labs of runs whose owning process is gone (a test run killed -9)."""
    swept = []
    if not REGISTRY.is_dir():
        return swept
    for entry in REGISTRY.iterdir():
        try:
            pid = int(entry.read_text().strip())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{pid}").exists():
            remove_run(entry.name)
            swept.append(entry.name)
    return swept


class NetLab:
    """Hosts in namespaces on two redundant networks; see the module docstring."""

    def __init__(self, hosts: list[str], run_id: str | None = None) -> None:
        for h in hosts:
            if not _HOST.match(h) or h == "sw":
                raise ValueError(f"host name {h!r}: 1-8 lower-case letters/digits, not 'sw'")
        if len(set(hosts)) != len(hosts) or not 1 <= len(hosts) <= 40:
            raise ValueError(f"1 to 40 distinct hosts, got {hosts}")
        self.hosts = list(hosts)
        self.run_id = run_id or secrets.token_hex(3)
        self.prefix = f"{PREFIX}{self.run_id}-"
        self.subnet: ipaddress.IPv4Network | None = None
        self._cuts: set[frozenset[str]] = set()
        self._loss: dict[frozenset[str], int] = {}  # pair -> percent of packets dropped
        # pair -> (rate in kbit/s or 0, leaf qdisc "netem delay .." or None)
        self._slow: dict[frozenset[str], tuple[int, str | None]] = {}
        self._leaf: dict[str, tuple[int, str | None]] = {}  # host -> what its adapters have
        self._netem_why: str | bool | None = False  # False: not probed yet
        self._down: set[tuple[str, str]] = set()
        self._routes: set[tuple[str, str, str]] = set()  # (from ns key, to host, net)
        self._started = False

    # ---------------------------------------------------------------- addresses

    def _ip(self, last: int) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + last)

    def service_ip(self, host: str) -> str:
        return self._ip(16 + self._index(host))

    def link_ip(self, host: str, net: str) -> str:
        return self._ip((64 if net == "a" else 128) + self._index(host))

    def netns(self, host: str) -> str:
        self._index(host)
        return self.prefix + host

    @property
    def switch(self) -> str:
        return self.prefix + "sw"

    @property
    def root_link(self) -> str:
        return self.prefix + "m"

    def exec_prefix(self, host: str) -> list[str]:
        """Command prefix that runs a program in the host's namespace (``ip netns exec``
        execs the program: its PID is the one Popen reports)."""
        return ["ip", "netns", "exec", self.netns(host)]

    def _index(self, host: str) -> int:
        try:
            return self.hosts.index(host) + 1
        except ValueError:
            raise ValueError(f"unknown host {host!r} (hosts: {self.hosts})") from None

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> NetLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> NetLab:
        why = unavailable()
        if why:
            raise NetlabError(why)
        sweep_stale()
        REGISTRY.mkdir(parents=True, exist_ok=True)
        (REGISTRY / self.run_id).write_text(str(os.getpid()))
        atexit.register(self.close)
        self._started = True
        try:
            self.subnet = self._free_subnet()
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> list[int]:
        """Remove the lab; returns the PIDs of processes that were still in it (killed)."""
        if not self._started:
            return []
        self._started = False
        atexit.unregister(self.close)
        return remove_run(self.run_id)

    def leftovers(self) -> list[str]:
        """Namespaces and root links of this run that still exist (none after close)."""
        return [n for n in [*netns_names(), *root_links()] if n.startswith(self.prefix)]

    def _free_subnet(self) -> ipaddress.IPv4Network:
        taken = []
        for line in run("ip", "-4", "route", "show", "table", "all").splitlines():
            dst = line.split()[0] if line.split() else ""
            if dst in ("default", "broadcast", "local", "unreachable", "blackhole"):
                dst = line.split()[1] if dst != "default" else ""
            with contextlib.suppress(ValueError):
                if dst:
                    taken.append(ipaddress.ip_network(dst, strict=False))
        for m in re.finditer(r"inet (\S+)", run("ip", "-4", "-o", "addr")):
            taken.append(ipaddress.ip_interface(m.group(1)).network)
        candidates = list(_BASE.subnets(new_prefix=24))
        start = int(self.run_id, 16) % len(candidates)
        for k in range(len(candidates)):
            net = candidates[(start + k) % len(candidates)]
            if not any(net.overlaps(t) for t in taken if t.prefixlen > 0):
                return net
        raise NetlabError(f"no free /24 in {_BASE}: every one overlaps a route")

    def _build(self) -> None:
        sw = self.switch
        run("ip", "netns", "add", sw)
        self._sh(sw, "sysctl -qw net.ipv4.ip_forward=1",
                 "ip link set lo up",
                 "ip link add br-a type bridge", "ip link add br-b type bridge",
                 f"ip addr add {self._ip(126)}/26 dev br-a",
                 f"ip addr add {self._ip(190)}/26 dev br-b",
                 "ip link set br-a up", "ip link set br-b up")
        # The management path: the test process (root namespace) -> switch -> hosts.
        run("ip", "link", "add", self.root_link, "type", "veth", "peer", "name", "mgmt",
            "netns", sw)
        run("ip", "addr", "add", f"{self._ip(1)}/30", "dev", self.root_link)
        run("ip", "link", "set", self.root_link, "up")
        self._sh(sw, f"ip addr add {self._ip(2)}/30 dev mgmt", "ip link set mgmt up")
        run("ip", "route", "add", str(self.subnet), "via", self._ip(2), "dev", self.root_link)
        for host in self.hosts:
            ns = self.netns(host)
            run("ip", "netns", "add", ns)
            self._sh(ns, "sysctl -qw net.ipv4.conf.all.rp_filter=0",
                     "sysctl -qw net.ipv4.conf.default.rp_filter=0",
                     "ip link set lo up",
                     f"ip addr add {self.service_ip(host)}/32 dev lo")
            for net in NETS:
                run("ip", "-n", sw, "link", "add", f"{host}-{net}", "type", "veth",
                    "peer", "name", f"eth-{net}", "netns", ns)
                self._sh(sw, f"ip link set {host}-{net} master br-{net}",
                         f"ip link set {host}-{net} up")
                self._sh(ns, f"ip addr add {self.link_ip(host, net)}/26 dev eth-{net}",
                         f"ip link set eth-{net} up")
            run("ip", "netns", "exec", ns, "nft", "-f", "-", input=self._nft_table())
        self._sync_routes()
        if shutil.which("ping"):  # every service IP answers before anyone uses the lab
            for host in self.hosts:
                run("ping", "-c1", "-W2", self.service_ip(host))

    def _sh(self, ns: str, *commands: str) -> None:
        for cmd in commands:
            run("ip", "netns", "exec", ns, *cmd.split())

    # ---------------------------------------------------------------- routes

    def _route_args(self, src: str, dst: str, net: str) -> list[str]:
        """`ip route` arguments (after add/del) of the route in namespace ``src`` (a host
        or "sw") to host ``dst`` over ``net`` — or, for dst "mgmt", to the root's /30."""
        metric = "10" if net == "a" else "20"
        if dst == "mgmt":
            gw = self._ip(126 if net == "a" else 190)
            return [f"{self._ip(0)}/30", "via", gw, "dev", f"eth-{net}", "metric", metric,
                    "src", self.service_ip(src)]
        target = [f"{self.service_ip(dst)}/32", "via", self.link_ip(dst, net)]
        if src == "sw":
            return [*target, "dev", f"br-{net}", "metric", metric]
        return [*target, "dev", f"eth-{net}", "metric", metric, "src", self.service_ip(src)]

    def _sync_routes(self) -> None:
        """Install exactly the routes whose both ends are up on their net."""
        want = set()
        for net in NETS:
            for dst in self.hosts:
                if (dst, net) in self._down:
                    continue
                for src in ["sw", *self.hosts]:
                    if src != dst and (src, net) not in self._down:
                        want.add((src, dst, net))
                want.add((dst, "mgmt", net))
        for src, dst, net in sorted(self._routes - want):
            ns = self.switch if src == "sw" else self.netns(src)
            run("ip", "-n", ns, "route", "del", *self._route_args(src, dst, net), check=False)
        for src, dst, net in sorted(want - self._routes):
            ns = self.switch if src == "sw" else self.netns(src)
            run("ip", "-n", ns, "route", "replace", *self._route_args(src, dst, net))
        self._routes = want

    def route_dev(self, host: str, to: str) -> str:
        """The device the host's kernel uses now to reach ``to``'s service IP."""
        out = run("ip", "-n", self.netns(host), "route", "get", self.service_ip(to))
        m = re.search(r"\bdev (\S+)", out)
        return m.group(1) if m else ""

    # ---------------------------------------------------------------- faults

    def adapter_down(self, host: str, net: str, convergence_s: float = 0.0) -> None:
        """The host's adapter on ``net`` fails. With ``convergence_s`` 0 the others'
        routes over it are withdrawn first (instant failover); otherwise the adapter goes
        down first and the others go on sending to its dead address for that long (the
        time a real network's routing takes to notice) before they fail over."""
        self._check_net(net)
        if (host, net) in self._down:
            return
        if convergence_s > 0:
            run("ip", "-n", self.netns(host), "link", "set", f"eth-{net}", "down")
            time.sleep(convergence_s)
        self._down.add((host, net))
        self._sync_routes()
        run("ip", "-n", self.netns(host), "link", "set", f"eth-{net}", "down")

    def adapter_up(self, host: str, net: str) -> None:
        self._check_net(net)
        if (host, net) not in self._down:
            return
        run("ip", "-n", self.netns(host), "link", "set", f"eth-{net}", "up")
        self._down.discard((host, net))
        # The kernel flushed the host's routes over the adapter when it went down.
        self._routes = {r for r in self._routes if not (r[0] == host and r[2] == net)}
        self._sync_routes()

    def cut(self, a: str, b: str) -> None:
        """Drop all traffic between hosts a and b, on both nets."""
        self._pair(a, b)
        self._cuts.add(frozenset((a, b)))
        self._apply_cuts(a, b)

    def uncut(self, a: str, b: str) -> None:
        self._cuts.discard(frozenset((a, b)))
        self._apply_cuts(a, b)

    def isolate(self, host: str) -> None:
        for other in self.hosts:
            if other != host:
                self.cut(host, other)

    def heal(self) -> None:
        """No cuts, no loss, no slow links, every adapter up."""
        self._cuts.clear()
        self._apply_cuts(*self.hosts)
        degraded = {h for pair in [*self._loss, *self._slow] for h in pair}
        self._loss.clear()
        self._slow.clear()
        for host in sorted(degraded):
            self._apply_loss(host)
            self._apply_slow(host)
        for host, net in sorted(self._down):
            self.adapter_up(host, net)

    def lossy(self, a: str, b: str, percent: int) -> None:
        """Drop ``percent`` % of the packets between hosts a and b (each way, at random);
        0 ends it."""
        self._pair(a, b)
        if not 0 <= percent <= 100:
            raise ValueError(f"percent must be 0..100, got {percent}")
        if percent:
            self._loss[frozenset((a, b))] = percent
        else:
            self._loss.pop(frozenset((a, b)), None)
        self._apply_loss(a)
        self._apply_loss(b)

    def slow(self, a: str, b: str, delay_ms: int, jitter_ms: int = 0,
             loss_pct: float = 0.0, rate_mbit: float = 0.0) -> None:
        """What a and b send each other is delayed by ``delay_ms`` (+- ``jitter_ms``) and
        ``loss_pct`` % of it dropped (tc netem; each way, so the round trip gains twice the
        delay) and, with ``rate_mbit``, limited to that bandwidth each way (the htb class
        the packets go through; a bandwidth alone needs no netem). A host takes one
        setting: every slow pair it is in shares it. NetlabError where a delay or loss is
        asked and the kernel has no netem (``netem_unavailable``)."""
        self._pair(a, b)
        netem = None
        if delay_ms or jitter_ms or loss_pct or not rate_mbit:
            why = self.netem_unavailable()
            if why:
                raise NetlabError(why)
            netem = f"netem delay {int(delay_ms)}ms"
            if jitter_ms:
                netem += f" {int(jitter_ms)}ms"
            if loss_pct:
                netem += f" loss {loss_pct:g}%"
        args = (int(rate_mbit * 1000), netem)
        for host in (a, b):
            other = {p for p, v in self._slow.items() if host in p and v != args}
            if other - {frozenset((a, b))}:
                raise ValueError(f"{host} is already slow with other settings: {other}")
        self._slow[frozenset((a, b))] = args
        self._apply_slow(a)
        self._apply_slow(b)

    def netem_unavailable(self) -> str | None:
        """Why ``slow`` cannot work here (tc netem refused in the lab), or None."""
        if self._netem_why is False:
            if shutil.which("tc") is None:
                self._netem_why = "needs the `tc` command (Debian package iproute2)"
            else:
                proc = subprocess.run(["ip", "netns", "exec", self.switch, "tc", "qdisc",
                                       "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                                      capture_output=True, text=True, timeout=30)
                if proc.returncode == 0:
                    run("ip", "netns", "exec", self.switch, "tc", "qdisc", "del", "dev",
                        "lo", "root")
                    self._netem_why = None
                else:
                    self._netem_why = (f"tc qdisc add ... netem refused in a namespace: "
                                       f"{proc.stderr.strip()} (the kernel has no "
                                       f"sch_netem?)")
        return self._netem_why or None

    def cuts(self) -> set[frozenset[str]]:
        return set(self._cuts)

    def _pair(self, a: str, b: str) -> None:
        self._index(a), self._index(b)
        if a == b:
            raise ValueError(f"a host and itself ({a}) are no pair")

    def _addresses(self, host: str) -> list[str]:
        return [self.service_ip(host), self.link_ip(host, "a"), self.link_ip(host, "b")]

    def _peers(self, host: str, pairs: dict) -> list[tuple[str, Any]]:
        return sorted((other, v) for pair, v in pairs.items() if host in pair
                      for other in pair if other != host)

    def _apply_loss(self, host: str) -> None:
        script = f"flush chain inet {self._table} lossy\n"
        for other, percent in self._peers(host, self._loss):
            script += (f"add rule inet {self._table} lossy ip daddr "
                       f"{{ {', '.join(self._addresses(other))} }} "
                       f"numgen random mod 100 < {percent} drop\n")
        run("ip", "netns", "exec", self.netns(host), "nft", "-f", "-", input=script)

    def _apply_slow(self, host: str) -> None:
        """The host's egress: htb root 1: (default class 1:1, unshaped), class 1:2 at the
        rate asked (10 Gbit/s if none) with the leaf qdisc (netem) if any; nftables gives
        packets to the slow peers priority 1:2."""
        peers = self._peers(host, self._slow)
        leaf = peers[0][1] if peers else None
        ns = self.netns(host)
        script = f"flush set inet {self._table} slow\n"
        if peers:
            ips = [ip for other, _ in peers for ip in self._addresses(other)]
            script += f"add element inet {self._table} slow {{ {', '.join(ips)} }}\n"
        if leaf == self._leaf.get(host):
            run("ip", "netns", "exec", ns, "nft", "-f", "-", input=script)
            return
        for net in NETS:
            tc = ["ip", "netns", "exec", ns, "tc"]
            dev = f"eth-{net}"
            run(*tc, "qdisc", "del", "dev", dev, "root", check=False)
            if leaf:
                run(*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb",
                    "default", "1")
                kbit, netem = leaf
                for cls, rate in (("1:1", "10gbit"), ("1:2", f"{kbit}kbit" if kbit
                                                       else "10gbit")):
                    # A burst of 256 KiB: the veth passes segments of up to 64 KiB (GSO),
                    # which htb's default burst at these rates would hold back.
                    run(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", cls,
                        "htb", "rate", rate, "burst", "256k", "cburst", "256k")
                if netem:
                    run(*tc, "qdisc", "add", "dev", dev, "parent", "1:2", "handle", "20:",
                        *netem.split())
        if leaf:
            self._leaf[host] = leaf
        else:
            self._leaf.pop(host, None)
        run("ip", "netns", "exec", ns, "nft", "-f", "-", input=script)

    def _apply_cuts(self, *hosts: str) -> None:
        for host in hosts:
            blocked = sorted(ip for cut in self._cuts if host in cut
                             for other in cut if other != host
                             for ip in self._addresses(other))
            script = f"flush set inet {self._table} blocked\n"
            if blocked:
                script += f"add element inet {self._table} blocked {{ {', '.join(blocked)} }}\n"
            run("ip", "netns", "exec", self.netns(host), "nft", "-f", "-", input=script)

    @property
    def _table(self) -> str:
        return "txc_" + self.run_id

    def _nft_table(self) -> str:
        return f"""table inet {self._table} {{
  set blocked {{
    type ipv4_addr
  }}
  set slow {{
    type ipv4_addr
  }}
  chain lossy {{
  }}
  chain input {{
    type filter hook input priority 0; policy accept;
    ip saddr @blocked drop
  }}
  chain output {{
    type filter hook output priority 0; policy accept;
    ip daddr @blocked drop
    jump lossy
    ip daddr @slow meta priority set 1:2
  }}
}}
"""

    @staticmethod
    def _check_net(net: str) -> None:
        if net not in NETS:
            raise ValueError(f"net must be one of {NETS}, got {net!r}")
