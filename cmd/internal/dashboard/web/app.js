// The leasehold dashboard's page: it draws each view the server sends over
// one event stream. Plain JavaScript, no build step. The state it drew is
// left in data attributes (the canvas's data-holders, data-lsn …, the
// body's data-render-ms) for tests and for anyone curious.
"use strict";

const $ = (sel) => document.querySelector(sel);
const readOnly = document.body.dataset.readOnly === "true";
const maxOwnerRows = 300; // the Owners table shows the largest; filter the timeline for the rest
const maxTimeline = 300;
let view = null;
let ns = "";
let first = true;

// colour gives each Owner a colour of its own that stays while the set of
// Owners stays: a hash of its ID picks one of 24 well-spaced colours, the
// next free one if an Owner before it (by ID) took that (12 hues for up to
// 12 Owners, each at two lightnesses for up to 24); past 24 Owners
// the hash picks any hue.
const palette = [];
for (const l of [48, 64]) for (let i = 0; i < 12; i++) palette.push(`hsl(${(i * 150 + (l === 64 ? 15 : 0)) % 360} 68% ${l}%)`);
let colours = new Map();
function hash(id) {
  let h = 2166136261;
  for (let i = 0; i < id.length; i++) { h ^= id.charCodeAt(i); h = Math.imul(h, 16777619); }
  h ^= h >>> 16; h = Math.imul(h, 0x85ebca6b); h ^= h >>> 13; h = Math.imul(h, 0xc2b2ae35); h ^= h >>> 16;
  return h >>> 0;
}
function assignColours(owners) {
  const m = new Map();
  if (owners.length <= palette.length) {
    const taken = new Set(), size = owners.length <= 12 ? 12 : palette.length; // 12: one lightness, hues 30° apart
    for (const o of owners) {
      let i = hash(o.id) % size;
      while (taken.has(i)) i = (i + 1) % size;
      taken.add(i);
      m.set(o.id, palette[i]);
    }
  } else {
    for (const o of owners) { const h = hash(o.id); m.set(o.id, `hsl(${h % 360} ${55 + (h >>> 9) % 30}% ${42 + (h >>> 17) % 20}%)`); }
  }
  colours = m;
}
function colour(id) { return colours.get(id) || "#888"; }
const freeColour = "#e2e2e2";

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
const fmt = (x, d) => Number(x).toFixed(d);

function current() {
  if (!view) return null;
  return view.namespaces.find((n) => n.name === ns) || view.namespaces[0] || null;
}

function render() {
  const t0 = performance.now();
  const n = current();
  if (n) ns = n.name;
  assignColours(n ? n.owners : []);
  renderHeader(n);
  renderLosses();
  renderRing(n);
  renderOwners(n);
  renderManagers();
  renderHot();
  renderTimeline();
  const t1 = performance.now();
  document.body.dataset.renderMs = fmt(t1 - t0, 1);
  document.body.dataset.build = view.build;
  if (first) {
    first = false;
    document.body.dataset.firstRenderMs = fmt(t1, 0); // since the navigation started
  }
}

function renderHeader(n) {
  const sel = $("#ns"), tl = $("#tl-ns");
  const names = view.namespaces.map((x) => x.name);
  if (sel.options.length !== names.length || names.some((x, i) => sel.options[i].value !== x)) {
    sel.innerHTML = names.map((x) => `<option>${esc(x)}</option>`).join("");
    const keep = tl.value;
    tl.innerHTML = `<option value="">all</option>` + names.map((x) => `<option>${esc(x)}</option>`).join("");
    tl.value = keep;
  }
  sel.value = ns;
  let s = `epoch ${view.epoch}`;
  if (n) s += ` · lsn ${n.lsn} · ${n.ranges} ranges (${n.freeRanges} free) · ${n.holders.length} Owners holding · ${n.lookups} Lookups`;
  s += ` · status ${fmt(view.statusAge, 1)} s old`;
  if (view.statusError) s += ` · <span class="err">status: ${esc(view.statusError)}</span>`;
  $("#summary").innerHTML = s;
}

// renderRing draws the band of arcs as a ring, each run of arcs with one
// holder as one path: a few thousand paths at most, however many ranges.
function renderRing(n) {
  const cv = $("#ring");
  const g = cv.getContext("2d");
  const W = cv.width, cx = W / 2, cy = cv.height / 2, R = W / 2 - 12, r = R * 0.62;
  g.clearRect(0, 0, W, cv.height);
  if (!n) return;
  const band = n.band, B = band.length;
  const drawn = new Set();
  for (let i = 0; i < B;) {
    let j = i + 1;
    while (j < B && band[j] === band[i]) j++;
    const h = band[i];
    const id = h >= 0 ? n.owners[h].id : "";
    if (id) drawn.add(id);
    const a0 = -Math.PI / 2 + (2 * Math.PI * i) / B, a1 = -Math.PI / 2 + (2 * Math.PI * j) / B;
    g.beginPath();
    g.arc(cx, cy, R, a0, a1);
    g.arc(cx, cy, r, a1, a0, true);
    g.closePath();
    g.fillStyle = id ? colour(id) : freeColour;
    g.fill();
    if (B / (j - i) < 400 && j - i < B) { // a boundary between large runs
      g.strokeStyle = "#fff";
      g.lineWidth = 1;
      g.stroke();
    }
    i = j;
  }
  g.fillStyle = "#333";
  g.textAlign = "center";
  g.font = "bold 22px system-ui, sans-serif";
  g.fillText(`${n.holders.length} Owner${n.holders.length === 1 ? "" : "s"}`, cx, cy - 6);
  g.font = "13px system-ui, sans-serif";
  g.fillText(`${n.ranges} ranges · lsn ${n.lsn}`, cx, cy + 16);
  g.fillText(`namespace ${n.name}`, cx, cy + 34);
  cv.dataset.ns = n.name;
  cv.dataset.holderCount = n.holders.length;
  cv.dataset.holders = n.holders.length <= 100 ? n.holders.join(",") : "";
  cv.dataset.drawn = drawn.size;
  cv.dataset.lsn = n.lsn;
  cv.dataset.build = view.build;
  $("#ring-caption").textContent = `${B} arcs; each coloured by the Owner holding most of it`;
  const top = n.owners.filter((o) => o.ranges > 0).sort((a, b) => b.share - a.share).slice(0, 16);
  $("#legend").innerHTML = top.map((o) => `<li><span class="sw" style="background:${colour(o.id)}"></span>${esc(o.id)} ${fmt(100 * o.share, 1)}%</li>`).join("") +
    (n.freeRanges ? `<li><span class="sw" style="background:${freeColour}"></span>free</li>` : "") +
    (n.holders.length > top.length ? `<li class="dim">… ${n.holders.length - top.length} more</li>` : "");
}

function renderOwners(n) {
  const body = $("#owners tbody");
  if (!n) { body.innerHTML = ""; return; }
  const rows = n.owners.slice().sort((a, b) => b.ranges - a.ranges || (a.id < b.id ? -1 : 1));
  const shown = rows.slice(0, maxOwnerRows);
  $("#owners-caption").textContent = rows.length > shown.length ? `the ${shown.length} with the most ranges of ${rows.length}` : `${rows.length}`;
  body.innerHTML = shown.map((o) => {
    const cls = o.draining ? "draining" : o.ranges === 0 ? "empty" : "";
    const on = armed && armed.id === o.id && Date.now() < armed.until;
    const btn = readOnly ? "" : `<td>${o.member && !o.draining ? `<button class="drain${on ? " armed" : ""}" data-owner="${esc(o.id)}">${on ? `drain ${esc(o.id)}?` : "drain"}</button>` : ""}</td>`;
    return `<tr class="${cls}" data-owner="${esc(o.id)}" data-ranges="${o.ranges}" data-draining="${o.draining}">` +
      `<td><span class="sw" style="background:${colour(o.id)}"></span></td><td title="incarnation ${o.incarnation}">${esc(o.id)}</td><td>${esc(o.addr)}</td>` +
      `<td class="num">${o.ranges}</td><td class="num">${fmt(100 * o.share, 1)}%</td><td class="num">${fmt(o.load, 1)}</td>` +
      `<td class="num">${o.capacity}</td><td>${o.draining ? "DRAINING" : "no"}</td><td>${o.member ? "yes" : "no"}</td>` +
      `<td class="zone">${o.zone ? esc(o.zone) : "-"}</td>${standbyCell(n, o)}${btn}</tr>`;
  }).join("");
}

// standbyCell shows the ranges an Owner stands by for: in sync / named,
// marked while some are still filling; "-" in a namespace without standbys.
function standbyCell(n, o) {
  if (!n.standbys && !o.standbyRanges) return `<td class="num standby">-</td>`;
  const filling = o.standbyInSync < o.standbyRanges;
  return `<td class="num standby${filling ? " filling" : ""}" data-standby="${o.standbyRanges}" data-insync="${o.standbyInSync}"` +
    ` title="${o.standbyInSync} of ${o.standbyRanges} in sync">${o.standbyInSync}/${o.standbyRanges}${filling ? " filling" : ""}</td>`;
}

function renderManagers() {
  $("#managers tbody").innerHTML = view.managers.map((m) =>
    `<tr data-role="${esc(m.role)}" data-ready="${m.ready}"><td>${m.id || "-"}</td><td>${esc(m.addr)}</td><td>${m.role === "leader" ? "<b>leader</b>" : esc(m.role)}</td>` +
    `<td class="num">${m.term}</td><td class="num">${m.commit}</td><td class="num">${m.applied}</td><td class="num">${m.lookups ?? 0}</td>` +
    `<td title="${esc(m.reason || "")}">${m.ready ? "ready" : `not ready${m.reason ? `: ${esc(m.reason)}` : ""}`}</td></tr>`).join("");
}

// renderLosses shows the losses first: a counter in the header and the
// newest losses, each with the Owners whose state was lost and their
// ranges (the loss schema, docs/protocol.md "Loss events").
function renderLosses() {
  const pill = $("#loss-count"), count = view.lossCount || 0;
  pill.textContent = `${count} loss${count === 1 ? "" : "es"}`;
  pill.className = count ? "pill lossy" : "pill";
  pill.dataset.count = count;
  const ls = view.losses || [];
  $("#losses").innerHTML = ls.length ? ls.map((l) => {
    const spans = (rs) => rs.slice(0, 3).map((r) => `[${r.start}, ${r.end})`).join(" ") + (rs.length > 3 ? " …" : "");
    const who = l.all ? "all ranges: no sync with the Manager within its sync timeout"
      : l.owners.length ? l.owners.map((o) => `<span class="who">${esc(o.owner)}</span> at ${esc(o.addr)}: ${o.ranges.length} range${o.ranges.length === 1 ? "" : "s"} ${esc(spans(o.ranges))}`).join("; ")
      : esc(spans(l.ranges));
    return `<li data-id="${l.id}" data-ns="${esc(l.namespace)}" data-owners="${esc(l.owners.map((o) => o.owner).join(" "))}" data-ranges="${l.ranges.length}">` +
      `<span class="t">${esc(l.at.slice(11, 23))}</span> ${esc(l.namespace)} · LOSS of ${l.ranges.length} range${l.ranges.length === 1 ? "" : "s"} held by ${who}</li>`;
  }).join("") : `<li class="none">no loss since the dashboard started</li>`;
}

function renderHot() {
  $("#hot tbody").innerHTML = view.hot.length ? view.hot.map((k) =>
    `<tr><td>${esc(k.key)}</td><td>${esc(k.owner)}</td><td class="num">${fmt(k.rate, 1)}</td></tr>`).join("")
    : `<tr><td colspan="3" class="dim">none reported</td></tr>`;
}

function renderTimeline() {
  const fns = $("#tl-ns").value, fo = $("#tl-owner").value.trim(), grants = $("#tl-grants").checked, lossesOnly = $("#tl-losses").checked;
  const out = [];
  for (let i = view.events.length - 1; i >= 0 && out.length < maxTimeline; i--) {
    const e = view.events[i];
    if (fns && e.ns !== fns) continue;
    if (fo && !e.owners.includes(fo)) continue;
    if (!grants && (e.kind === "grant" || e.kind === "free" || e.kind === "move")) continue;
    if (lossesOnly && e.kind !== "loss") continue;
    out.push(`<li class="${esc(e.kind)}" data-kind="${esc(e.kind)}" data-owners="${esc(e.owners.join(" "))}" data-count="${e.count || 0}">` +
      `<span class="t">${esc(e.at.slice(11, 23))}</span><span class="ns">${esc(e.ns)}</span>${esc(e.text)}</li>`);
  }
  $("#timeline").innerHTML = out.join("") || `<li class="dim">nothing yet</li>`;
}

// The event stream: one view per message, the newest only.
function connect() {
  const es = new EventSource("/events");
  es.addEventListener("view", (m) => {
    view = JSON.parse(m.data);
    $("#conn").textContent = "live";
    $("#conn").className = "pill live";
    render();
  });
  es.onerror = () => { $("#conn").textContent = "reconnecting"; $("#conn").className = "pill down"; };
}

// Hover: the range under the pointer, asked of the dashboard (not the
// Manager), which keeps the table it last drew.
let hoverKey = "";
$("#ring").addEventListener("mousemove", async (ev) => {
  const n = current();
  const cv = ev.currentTarget, tip = $("#tip");
  if (!n) return;
  const rect = cv.getBoundingClientRect();
  const x = (ev.clientX - rect.left) * (cv.width / rect.width) - cv.width / 2;
  const y = (ev.clientY - rect.top) * (cv.height / rect.height) - cv.height / 2;
  const R = cv.width / 2 - 12, r = R * 0.62, d = Math.hypot(x, y);
  if (d < r || d > R) { tip.hidden = true; hoverKey = ""; return; }
  let f = (Math.atan2(y, x) + Math.PI / 2) / (2 * Math.PI);
  if (f < 0) f += 1;
  if (f >= 1) f = 0;
  const arc = Math.min(Math.floor(f * n.band.length), n.band.length - 1);
  tip.style.left = `${ev.clientX - cv.parentElement.getBoundingClientRect().left + 14}px`;
  tip.style.top = `${ev.clientY - cv.parentElement.getBoundingClientRect().top + 14}px`;
  const key = `${n.name}/${arc}/${view.build}`;
  if (key === hoverKey) return;
  hoverKey = key;
  const res = await fetch(`/api/segment?ns=${encodeURIComponent(n.name)}&at=${f}&arc=${arc}`);
  if (hoverKey !== key) return;
  if (!res.ok) { tip.hidden = true; return; }
  const s = await res.json();
  tip.textContent = `[${s.start}, ${s.end})\n` +
    (s.owner ? `holder ${s.owner} at ${s.addr}\nLGN ${s.lgn}${s.migrated ? " (migrated)" : ""}\nload ${fmt(s.load, 1)}/s, capacity ${s.capacity}` : "free") +
    `\n${s.inArc} range${s.inArc === 1 ? "" : "s"} in this arc · lsn ${s.lsn}`;
  tip.hidden = false;
});
$("#ring").addEventListener("mouseleave", () => { $("#tip").hidden = true; hoverKey = ""; });

// Drain: a first click arms the button, a second within 5 s sends it. The
// armed button survives the views that redraw the table meanwhile.
let armed = null;
$("#owners").addEventListener("click", async (ev) => {
  const b = ev.target.closest("button.drain");
  if (!b) return;
  const id = b.dataset.owner;
  if (!armed || armed.id !== id || Date.now() > armed.until) {
    armed = { id, until: Date.now() + 5000 };
    renderOwners(current());
    setTimeout(() => { if (view) renderOwners(current()); }, 5100);
    return;
  }
  armed = null;
  b.disabled = true;
  const box = $("#answer");
  try {
    const res = await fetch("/api/drain", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Leasehold-Action": "drain" },
      body: JSON.stringify({ namespace: ns, owner: id }),
    });
    const a = res.ok ? await res.json() : { ok: false, answer: (await res.text()).trim() };
    box.textContent = a.answer;
    box.className = a.ok ? "ok" : "refused";
  } catch (e) {
    box.textContent = `drain ${id}: ${e}`;
    box.className = "refused";
  }
  box.hidden = false;
  box.dataset.owner = id;
});

$("#ns").addEventListener("change", (ev) => { ns = ev.target.value; if (view) render(); });
// The key search: which Owner holds the key, since when, asked of the
// dashboard (its table last drawn), not the Manager.
$("#key-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const key = $("#key-q").value, box = $("#key-answer");
  if (!key) return;
  const res = await fetch(`/api/key?ns=${encodeURIComponent(ns)}&key=${encodeURIComponent(key)}`);
  if (res.ok) {
    const a = await res.json();
    box.textContent = a.text;
    box.className = "";
    box.dataset.owner = a.owner;
    box.dataset.key = a.key;
    box.dataset.since = a.since;
  } else {
    box.textContent = (await res.text()).trim();
    box.className = "refused";
    box.dataset.owner = "";
  }
  box.hidden = false;
});

for (const sel of ["#tl-ns", "#tl-owner", "#tl-grants", "#tl-losses"]) {
  $(sel).addEventListener("input", () => { if (view) renderTimeline(); });
}
connect();
