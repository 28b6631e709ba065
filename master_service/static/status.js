// txcluster status page: polls /status/data and draws the cluster. Plain DOM, no build
// step; every value goes in through textContent (worker errors are not markup).
"use strict";

const STATUS_TEXT = {0: "available", 1: "needs attention", 2: "no workers"};
const POLL_MS = 1000;
let lastOk = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v;
    else node.setAttribute(k, String(v));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function kv(pairs) {
  const dl = el("dl", {class: "kv"});
  for (const [k, v] of pairs) {
    if (v === null || v === undefined) continue;
    dl.append(el("dt", {}, k), el("dd", {}, v));
  }
  return dl;
}

const short = (fp) => (fp ? fp.slice(0, 12) + "…" : "—");
const ago = (s) => (s === null || s === undefined ? "never" : `${s.toFixed(1)} s ago`);

// Seeding from a peer's image (master_service/sync/seeding.py): phase, bytes, position.
function seedingText(s) {
  const mb = (n) => (n / 1048576).toFixed(1);
  const size = s.total ? ` ${mb(s.bytes)} of ${mb(s.total)} MB`
    : s.bytes ? ` ${mb(s.bytes)} MB so far` : "";
  const at = s.position === null || s.position === undefined ? "" : ` at agreed position ${s.position}`;
  return `from ${s.peer}: ${s.phase}${size}${at}` + (s.error ? ` (${s.error})` : "");
}

function masterCard(d) {
  const st = d.status, sync = d.sync;
  const mode = st.mode + (st.read_only ? ", read-only" : "");
  const card = el("div", {class: "master", "data-node-id": st.node_id,
                          "data-sync-state": sync ? sync.state : "not-peered"},
    el("div", {class: "id"}, `master ${st.node_id}`));
  card.append(kv([
    ["url", d.master_url],
    ["mode", mode],
    ["peering", sync ? el("span", {class: `state-${sync.state}`}, sync.state) : "not peered"],
    ["sync position", sync ? `seq ${sync.seq} (executed ${sync.executed_seq}, ` +
                             `incoming ${sync.incoming}, ${sync.activity})` : null],
    ["split suspected", sync && sync.split_suspected && sync.split_suspected.length
      ? sync.split_suspected.join(", ") : null],
    ["missing peers", sync && sync.missing_peers && sync.missing_peers.length
      ? sync.missing_peers.join(", ") : null],
    ["sync failure", sync && sync.failed ? String(sync.failed) : null],
    ["seeding", sync && sync.seeding ? seedingText(sync.seeding) : null],
    ["log head", `seq ${st.head.seq}`],
    ["fingerprint", short(st.head.fingerprint)],
    ["quads", st.head.quads],
    ["probe", st.probe || "—"],
    ["writable", st.writable ? "yes" : `no: ${st.not_writable_because}`],
  ]));
  return card;
}

function workerCard(w, head) {
  const mismatch = w.seq === head.seq && w.fingerprint && w.fingerprint !== head.fingerprint;
  const card = el("div", {class: "worker" + (mismatch ? " mismatch" : ""),
                          "data-url": w.url, "data-status": w.status, "data-seq": w.seq},
    el("div", {class: "url"}, w.url),
    kv([["status", w.status], ["seq", w.seq], ["fingerprint", short(w.fingerprint)],
        ["quads", w.quads], ["running queries", w.running_reads],
        ["pending forwards", w.pending_forwards]]));
  if (w.last_error) card.append(el("div", {class: "error"}, w.last_error));
  return card;
}

function drawTopology(d) {
  const st = d.status, sync = d.sync;
  const local = el("div", {class: "dc", id: "dc-local", "data-master": st.node_id},
    el("h3", {}, sync && sync.data_centre ? `data centre ${sync.data_centre}`
                                          : `data centre of ${st.node_id}`), masterCard(d));
  const workers = el("div", {class: "workers"});
  for (const w of st.workers) workers.append(workerCard(w, st.head));
  if (!st.workers.length) workers.append(el("p", {class: "none"}, "no workers"));
  local.append(workers);
  document.getElementById("local-dc").replaceChildren(local);

  const links = [], peers = [];
  for (const p of (sync ? sync.peers : [])) {
    const reachable = Boolean(p.reachable);
    const match = p.fingerprint_match === null || p.fingerprint_match === undefined ? "unknown"
      : (p.fingerprint_match ? "equal" : "DIFFERENT");
    links.push(el("div", {class: "link", "data-peer": p.id, "data-reachable": reachable},
      reachable ? "linked" : "unreachable", el("br"), `heard ${ago(p.last_heard_s)}`,
      el("br"), `fingerprints ${match}`));
    // The peer's own view (asked of it by this master): its data centre and workers.
    const view = (d.peer_views || {})[p.id];
    const theirs = view && view.ok ? view.data : null;
    const dcName = theirs && theirs.sync && theirs.sync.data_centre;
    const box = el("div", {class: "dc peer-dc", "data-peer": p.id, "data-reachable": reachable},
      el("h3", {}, dcName ? `data centre ${dcName}` : `data centre of ${p.id}`),
      el("div", {class: "master", "data-node-id": p.id},
        el("div", {class: "id"}, `master ${p.id}`),
        kv([["url", p.url], ["mode", p.mode], ["sync position",
            p.seq === null || p.seq === undefined ? "unknown" : `seq ${p.seq}`],
            ["executed", p.executed_seq ?? null],
            ["log head", theirs ? `seq ${theirs.status.head.seq}` : null],
            ["status", theirs ? (STATUS_TEXT[theirs.status.status] ?? theirs.status.status)
                              : null]])));
    if (theirs) {
      const ws = el("div", {class: "workers"});
      for (const w of theirs.status.workers) ws.append(workerCard(w, theirs.status.head));
      box.append(ws);
    } else {
      box.append(el("p", {class: "none peer-view-error"},
        `its workers: ${view ? view.error : "not asked yet"}`));
    }
    peers.push(box);
  }
  document.getElementById("links").replaceChildren(...links);
  document.getElementById("peer-dcs").replaceChildren(...peers);
}

function drawOperations(ops) {
  const box = document.getElementById("operations");
  if (!ops.length) { box.replaceChildren(el("p", {class: "none"}, "nothing")); return; }
  box.replaceChildren(...ops.map((op) => {
    const bar = el("progress", {max: 1});
    if (op.progress !== null && op.progress !== undefined) bar.value = op.progress;
    const pct = op.progress === null || op.progress === undefined ? ""
      : ` ${(op.progress * 100).toFixed(0)}%${op.kind === "replication" ? " (estimated)" : ""}`;
    return el("div", {class: "operation", "data-kind": op.kind, "data-worker": op.worker},
      el("span", {class: "text"}, op.text), bar,
      el("span", {class: "elapsed"}, `${op.elapsed_s.toFixed(0)} s${pct}`));
  }));
}

function draw(d) {
  const st = d.status;
  document.getElementById("repository").textContent = `repository ${d.repository_id}`;
  const badge = document.getElementById("cluster-status");
  badge.textContent = STATUS_TEXT[st.status] ?? String(st.status);
  badge.className = `badge s${st.status}`;
  badge.dataset.status = st.status;
  const writable = document.getElementById("writable");
  writable.textContent = st.writable ? "writable" : "not writable";
  writable.className = "badge " + (st.writable ? "yes" : "no");
  writable.title = st.not_writable_because || "";
  drawTopology(d);
  drawOperations(d.operations);
  const c = st.counters;
  document.getElementById("counters").textContent =
    `reads ${c.completed_reads} completed, ${c.failed_reads} failed, ${c.running_reads} running` +
    ` · writes ${c.completed_writes} completed, ${c.failed_writes} failed,` +
    ` ${c.pending_writes} pending · average read ${(c.average_read_time_s * 1000).toFixed(1)} ms`;
  // Peering divergences (split brain, fingerprint differences) are events too.
  const events = st.events.map((e) => ({time: e.time, text: e.message, cls: null}))
    .concat(((d.sync && d.sync.divergences) || []).map((v) => ({
      time: v.time, text: `divergence with ${v.peer} (${v.kind}): ${v.detail}`,
      cls: "divergence"})))
    .sort((a, b) => b.time - a.time);
  document.getElementById("events").replaceChildren(...events.map((e) => el("li",
    {class: e.cls}, `${new Date(e.time * 1000).toISOString().slice(11, 19)} ${e.text}`)));
}

async function poll() {
  const error = document.getElementById("error");
  try {
    const r = await fetch("/status/data", {cache: "no-store"});
    if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
    const d = await r.json();
    draw(d);
    lastOk = new Date();
    error.hidden = true;
    document.getElementById("updated").textContent =
      `updated ${lastOk.toISOString().slice(11, 19)} UTC`;
  } catch (exc) {
    // Keep the last picture, but say plainly that it is no longer live.
    error.hidden = false;
    error.textContent = `master not answering (${exc.message})` +
      (lastOk ? `; picture from ${lastOk.toISOString().slice(11, 19)} UTC` : "");
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
