// ratelane dashboard: plain JavaScript, no build step. Every request goes
// to /ui/api/v1/..., which the server forwards to the HTTP API with the
// session's key, so what a page shows is exactly what the key may read.
// Text is always inserted with textContent, never as HTML.
"use strict";

const csrf = document.querySelector('meta[name="csrf-token"]')?.content || "";
const page = document.body.dataset.page;
const role = document.body.dataset.role;

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") opts.headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch("/ui/api" + path, opts);
  if (r.status === 401) { location.href = "/ui/login"; throw new Error("signed out"); }
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) throw new Error((data && data.detail) || r.status + " " + r.statusText);
  return data;
}

// el builds an element; children are nodes or strings (as text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "onclick") e.addEventListener("click", v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function table(headers, rows) {
  if (rows.length === 0) return el("p", { class: "empty" }, "none");
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function setStatus(msg, bad) {
  const s = document.getElementById("status");
  if (!s) return;
  s.textContent = msg;
  s.className = bad ? "status error" : "status";
}

function replace(id, node) {
  const t = document.getElementById(id);
  if (t) t.replaceChildren(node);
}

// countdown renders a live "paused for 12.3 s" that the ticker updates.
function countdown(until) {
  return el("span", { class: "countdown", "data-until": until }, left(until));
}
function left(until) {
  const s = (Date.parse(until) - Date.now()) / 1000;
  return s > 0 ? s.toFixed(1) + " s" : "ended";
}
setInterval(() => {
  for (const e of document.querySelectorAll("[data-until]")) e.textContent = left(e.dataset.until);
}, 200);

function ago(t) {
  if (!t) return "";
  const s = (Date.now() - Date.parse(t)) / 1000;
  return s < 0 ? "in " + (-s).toFixed(1) + " s" : s.toFixed(1) + " s ago";
}

function poll(fn, ms) {
  const run = async () => {
    try { await fn(); setStatus("updated " + new Date().toLocaleTimeString()); }
    catch (e) { setStatus(e.message, true); }
  };
  run();
  return setInterval(run, ms);
}

// live keeps a page's data fresh: one server-sent event stream
// (/ui/stream, text/event-stream) carries each API path's answer when it
// changes, and the EventSource reconnects by itself after a dropped
// connection. When the stream cannot be held (the server refuses it past
// its per-session bound, or it fails before it opens), the page polls the
// same paths every 2 s and tries the stream again after 30 s.
// document.body.dataset.live says which ("sse" or "polling").
// paths() names the API paths; render(data) gets the latest answer of
// each, by path. Calling the returned function restarts with new paths.
function live(paths, render) {
  let es = null, timer = null, retry = null, data = {};
  const show = async () => {
    try { await render(data); } catch (e) { setStatus(e.message, true); }
  };
  const stop = () => {
    if (es) { es.close(); es = null; }
    if (timer) { clearInterval(timer); timer = null; }
    if (retry) { clearTimeout(retry); retry = null; }
  };
  const fallback = () => {
    stop();
    document.body.dataset.live = "polling";
    timer = poll(async () => {
      const ps = paths();
      const got = await Promise.all(ps.map((p) => api("GET", p)));
      data = {};
      ps.forEach((p, i) => { data[p] = got[i]; });
      await render(data);
    }, 2000);
    retry = setTimeout(start, 30000);
  };
  const start = () => {
    stop();
    data = {};
    if (!window.EventSource) { fallback(); return; }
    const q = new URLSearchParams();
    for (const p of paths()) q.append("path", p);
    let opened = false;
    es = new EventSource("/ui/stream?" + q);
    es.onopen = () => { opened = true; document.body.dataset.live = "sse"; };
    es.addEventListener("data", (ev) => {
      const m = JSON.parse(ev.data);
      if (m.status >= 400) { setStatus((m.body && m.body.detail) || "HTTP " + m.status, true); return; }
      data[m.path] = m.body;
      if (paths().every((p) => p in data)) { show(); setStatus("live · updated " + new Date().toLocaleTimeString()); }
    });
    es.addEventListener("end", () => { stop(); location.href = "/ui/login"; });
    es.onerror = () => {
      // Before it ever opened (refused: 429, 401) the browser gives up;
      // poll instead. After, EventSource reconnects on its own.
      if (!opened || es.readyState === EventSource.CLOSED) fallback();
      else setStatus("reconnecting…", true);
    };
  };
  start();
  return start;
}

function jobLink(j) {
  return el("a", { href: "/ui/job?id=" + encodeURIComponent(j.id) + "&region=" + encodeURIComponent(j.region) }, j.id.slice(0, 13) + "…");
}

// ---- overview
// Rates come from the server's real counters (GET /v1/stats: each region
// and lane's starts and 429s through this node), as the difference of two
// reads over the difference of their server times, across the last 10 s.
const statsHistory = [];
function rateOver(key, field) {
  const last = statsHistory[statsHistory.length - 1], first = statsHistory[0];
  if (!last || last === first) return null;
  const dt = (Date.parse(last.at) - Date.parse(first.at)) / 1000;
  if (dt <= 0) return null;
  return ((last.lanes[key]?.[field] || 0) - (first.lanes[key]?.[field] || 0)) / dt;
}
function fmtRate(v) { return v === null ? "…" : v.toFixed(2); }
async function overview(data) {
  const stats = data["/v1/stats"], limits = data["/v1/limits"];
  const lanes = {};
  for (const r of stats.regions) for (const l of r.lanes) lanes[r.region + "/" + l.lane] = l;
  if (!statsHistory.length || statsHistory[statsHistory.length - 1].at !== stats.at) statsHistory.push({ at: stats.at, lanes });
  while (statsHistory.length > 1 && Date.parse(stats.at) - Date.parse(statsHistory[0].at) > 10000) statsHistory.shift();
  const states = ["accepted", "waiting", "retry_scheduled", "running", "validated", "published", "terminal"];
  const rows = [];
  for (const r of stats.regions) for (const l of r.lanes) {
    const key = r.region + "/" + l.lane;
    const frac = l.budget_seconds > 0 ? l.oldest_ready_seconds / l.budget_seconds : 0;
    const limited = rateOver(key, "rate_limited");
    rows.push(el("tr", { class: "lane-row", "data-lane": key }, el("td", {}, r.region), el("td", {}, l.lane),
      states.map((s) => el("td", { class: "num" }, l.depth[s] || 0)),
      el("td", { class: frac >= 0.8 ? "num bad" : "num" },
        l.oldest_ready_seconds.toFixed(1) + " s / " + l.budget_seconds + " s",
        " ", el("meter", { min: 0, max: 1, low: 0.5, high: 0.8, optimum: 0, value: Math.min(1, frac).toFixed(3) })),
      el("td", { class: "num starts-rate", "data-total": l.starts }, fmtRate(rateOver(key, "starts"))),
      el("td", { class: limited > 0 ? "num bad limited-rate" : "num limited-rate", "data-total": l.rate_limited }, fmtRate(limited))));
  }
  replace("queues", table(["region", "lane", ...states, "oldest ready / budget", "starts/s", "429s/s"], rows));
  const c = stats.counters;
  replace("rates", el("p", { id: "rate-line" }, "since this node started: " + c.starts + " starts, " + c.rate_limited + " 429s, " + c.attempts + " finished attempts"));
  const paused = limits.limits.filter((k) => k.paused_until && Date.parse(k.paused_until) > Date.now());
  replace("paused", table(["region", "key", "resumes in", "waiting cost"], paused.map((k) =>
    el("tr", { class: "paused-key" }, el("td", {}, k.region), el("td", {}, k.name), el("td", {}, countdown(k.paused_until)),
      el("td", { class: "num" }, k.waiting_cost)))));
}

// ---- limits
// inFlightCap is the " / cap" suffix of a key's in-flight cell: the cap in
// force, the learned one (discovered from the upstream's refusals) marked.
function inFlightCap(k) {
  const learned = k.learned_concurrency || 0;
  if (learned > 0 && (!k.concurrency || learned < k.concurrency)) return " / " + learned + " learned";
  return k.concurrency ? " / " + k.concurrency : "";
}

// The chart is real data: each point is the cost this node admitted on the
// key (GET /v1/limits admitted.cost, counted at every lease) per second
// between two reads of the stream, one read per second; the dashed line is
// the key's allowance (its learned rate when adaptive, else its rate, else
// its tightest window's limit per second). Two minutes are kept.
const charts = {}; // region/key -> [{starts, allowance}]
const lastAdmitted = {};
function allowance(k) {
  if (k.adaptive && k.learned_rate > 0) return k.learned_rate;
  if (k.rate > 0) return k.rate;
  const ws = (k.windows || []).map((w) => w.limit / goSeconds(w.period)).filter((v) => v > 0);
  return ws.length ? Math.min(...ws) : 0;
}
async function limits(data) {
  const list = data["/v1/limits"];
  const at = Date.parse(list.at);
  const rows = list.limits.map((k) => {
    const id = k.region + "/" + k.name;
    const cost = k.admitted ? k.admitted.cost : 0;
    const prev = lastAdmitted[id];
    const h = (charts[id] = charts[id] || []);
    if (prev && at > prev.at) {
      h.push({ starts: Math.max(0, cost - prev.cost) / ((at - prev.at) / 1000), allowance: allowance(k) });
      if (h.length > 120) h.shift();
    }
    if (!prev || at > prev.at) lastAdmitted[id] = { at, cost };
    const windows = (k.windows || []).map((w) => w.limit + " per " + w.period);
    const shape = [k.rate > 0 ? k.rate.toFixed(2) + "/s, burst " + k.burst : "", ...windows].filter(Boolean).join("; ") || "unpaced";
    const pause = k.paused_until ? el("span", {}, countdown(k.paused_until),
      k.pause_source ? el("div", { class: "small" }, "from job ", k.pause_source.job_id.slice(0, 13), "… ", k.pause_source.status || "", " ", ago(k.pause_source.at)) : null) : "–";
    const now = h.length ? h[h.length - 1].starts : 0;
    return el("tr", { "data-key": k.name }, el("td", {}, k.region), el("td", {}, k.name), el("td", {}, shape + (k.adaptive ? " (adaptive)" : "")),
      el("td", { class: "num" }, k.adaptive ? k.learned_rate.toFixed(2) + " / " + k.rate.toFixed(2) : "–"),
      el("td", { class: "num" }, k.tokens.toFixed(2)), el("td", {}, pause),
      el("td", { class: "num" }, k.in_flight + inFlightCap(k)),
      el("td", { class: "num" }, k.waiting_cost),
      el("td", { class: "num admitted", "data-cost": cost }, k.admitted ? k.admitted.starts + " (" + k.admitted.rate_limited + " 429s)" : "–"),
      el("td", {}, chart(h), el("div", { class: "small" }, now.toFixed(1) + "/s vs " + allowance(k).toFixed(1) + "/s")));
  });
  replace("limits", table(["region", "key", "shape", "learned / ceiling", "tokens", "paused", "in flight / cap", "waiting cost", "starts here", "admitted cost/s vs allowance (1 s points)"], rows));
}

// goSeconds reads a Go duration ("1m0s", "250ms") as seconds.
function goSeconds(d) {
  const unit = { h: 3600, m: 60, s: 1, ms: 1e-3, us: 1e-6, "µs": 1e-6, ns: 1e-9 };
  let total = 0;
  for (const m of String(d).matchAll(/([0-9.]+)(h|ms|m|s|us|µs|ns)/g)) total += parseFloat(m[1]) * unit[m[2]];
  return total;
}

// chart draws a small SVG: admitted cost per second (solid) against the allowance (dashed).
function chart(h) {
  const ns = "http://www.w3.org/2000/svg", w = 160, ht = 36;
  const top = Math.max(1, ...h.map((p) => Math.max(p.starts, p.allowance))) * 1.1;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", ht); svg.setAttribute("class", "chart");
  const line = (vals, cls) => {
    const p = document.createElementNS(ns, "polyline");
    p.setAttribute("points", vals.map((v, i) => (i * (w / (Math.max(vals.length, 10) - 1))).toFixed(1) + "," + (ht - (v / top) * ht).toFixed(1)).join(" "));
    p.setAttribute("class", cls);
    svg.append(p);
  };
  line(h.map((p) => p.allowance), "allowance");
  line(h.map((p) => p.starts), "starts");
  return svg;
}

// ---- jobs
function jobsQuery() {
  const f = new FormData(document.getElementById("filters"));
  const q = new URLSearchParams();
  for (const [k, v] of f) if (v) q.set(k, v);
  q.set("limit", "100");
  return q;
}
function jobsPath() { return "/v1/jobs?" + jobsQuery(); }
async function jobs(all) {
  const data = all[jobsPath()];
  if (!data) return;
  replace("jobs", table(["id", "kind", "state", "lane", "tenant", "region", "limit keys", "attempts", "eligible"],
    data.jobs.map((j) => el("tr", { class: "job-row", "data-state": j.state }, el("td", {}, jobLink(j)), el("td", {}, j.kind),
      el("td", {}, el("span", { class: "state " + j.state }, j.state, j.reason ? " (" + j.reason + ")" : "")), el("td", {}, j.lane),
      el("td", {}, j.tenant), el("td", {}, j.region), el("td", {}, j.limit_keys.join(", ")), el("td", { class: "num" }, j.attempt),
      el("td", {}, ago(j.eligible_at))))));
}
function setupJobs() {
  const form = document.getElementById("filters");
  const params = new URLSearchParams(location.search);
  for (const e of form.elements) if (e.name && params.get(e.name)) e.value = params.get(e.name);
  const restart = live(() => [jobsPath()], jobs);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = jobsQuery(); q.delete("limit");
    window.history.replaceState(null, "", "/ui/jobs?" + q);
    restart();
  });
}

// ---- job detail
function jobPath() {
  const p = new URLSearchParams(location.search);
  return "/v1/jobs/" + encodeURIComponent(p.get("id") || "") + "?region=" + encodeURIComponent(p.get("region") || "");
}
async function jobDetail(all) {
  const j = all[jobPath()];
  const parts = [el("dl", {},
    ["id", "kind", "state", "reason", "region", "lane", "tenant", "cost", "priority", "attempt", "eligible_at", "created_at", "finished_at"]
      .filter((k) => j[k] !== undefined && j[k] !== "")
      .map((k) => [el("dt", {}, k), el("dd", {}, String(j[k]))]),
    el("dt", {}, "limit keys"), el("dd", {}, j.limit_keys.join(", ")),
    j.schedule ? [el("dt", {}, "schedule"), el("dd", { id: "job-schedule" }, j.schedule.id + " tick " + j.schedule.tick)] : null)];
  const w = j.waiting_for;
  if (w) {
    parts.push(el("section", { id: "waiting-for", class: w.blocked || !w.handler.handled ? "waitbox blocked" : "waitbox" },
      el("h2", {}, "What it waits for"), el("p", { class: "summary" }, w.summary),
      w.handler.handled ? null : el("p", { class: "error" }, w.handler.detail),
      w.not_eligible_until ? el("p", {}, "not eligible for ", countdown(w.not_eligible_until)) : null,
      table(["key", "admits now", "why", "detail", "admits in"], w.keys.map((k) => el("tr", {},
        el("td", {}, k.key), el("td", {}, k.blocks ? "no" : "yes"), el("td", {}, k.why || ""), el("td", {}, k.detail),
        el("td", {}, k.admits_at ? countdown(k.admits_at) : "")))),
      el("p", {}, "predicted start: ", w.predicted_start_at ? countdown(w.predicted_start_at) : "never, until something handles the kind")));
  }
  parts.push(el("h2", {}, "Attempts"), table(["at", "attempt", "outcome", "status", "delay", "why", "error"], (j.history || []).map((h) =>
    // A folded record (count > 1) stands for that many pending passes, from first_at to at.
    el("tr", {}, el("td", {}, h.count > 1 ? h.first_at + " … " + h.at : h.at), el("td", { class: "num" }, h.attempt),
      el("td", {}, h.count > 1 ? h.outcome + " ×" + h.count : h.outcome), el("td", {}, h.status || ""),
      el("td", {}, h.delay_ns ? (h.delay_ns / 1e9).toFixed(2) + " s" : ""), el("td", {}, h.why || ""), el("td", {}, h.error || "")))));
  if (j.payload !== undefined) parts.push(el("h2", {}, "Payload"), el("pre", {}, JSON.stringify(j.payload, null, 2)));
  if (j.result !== undefined) parts.push(el("h2", {}, "Result"), el("pre", {}, JSON.stringify(j.result, null, 2)));
  replace("job", el("div", { id: "job-view", "data-state": j.state }, parts));
}

// confirmButton asks twice: the first click arms it, the second acts.
// Armed buttons are remembered by key, so a refresh of the table between
// the two clicks keeps the confirmation step.
const armed = new Set();
function confirmButton(key, label, confirmLabel, cls, act) {
  const b = el("button", { class: cls, type: "button" }, label);
  const arm = () => { b.textContent = confirmLabel; b.classList.add("armed"); };
  if (armed.has(key)) arm();
  b.addEventListener("click", async () => {
    if (!armed.has(key)) { armed.add(key); arm(); return; }
    armed.delete(key);
    b.disabled = true;
    try { await act(); } catch (e) { setStatus(e.message, true); }
    // The stream re-renders only what changed: reset the button here.
    b.textContent = label; b.classList.remove("armed"); b.disabled = false;
  });
  return b;
}

function flash(id, node) {
  const f = document.getElementById(id);
  f.hidden = false;
  f.replaceChildren(node);
}

// ---- dead letters
const deadPath = "/v1/dead-letters?limit=100";
let refreshDead = () => {};
async function dead(all) {
  const data = all[deadPath];
  replace("dead", table(["id", "kind", "reason", "tenant", "region", "attempts", "finished", ""], data.jobs.map((j) => {
    const q = "?region=" + encodeURIComponent(j.region);
    return el("tr", { class: "dead-row", "data-id": j.id }, el("td", {}, jobLink(j)), el("td", {}, j.kind), el("td", {}, j.reason),
      el("td", {}, j.tenant), el("td", {}, j.region), el("td", { class: "num" }, j.attempt), el("td", {}, ago(j.finished_at)),
      el("td", { class: "actions" },
        confirmButton("redrive:" + j.id, "Redrive", "Confirm redrive", "redrive", async () => {
          const got = await api("POST", "/v1/dead-letters/" + encodeURIComponent(j.id) + "/redrive" + q);
          flash("flash", el("span", { id: "moved" }, "Redrove ", jobLink(got), ": now ", got.state, "."));
          refreshDead();
        }),
        confirmButton("purge:" + j.id, "Purge", "Confirm purge", "purge danger", async () => {
          await api("DELETE", "/v1/dead-letters/" + encodeURIComponent(j.id) + q);
          flash("flash", el("span", {}, "Purged " + j.id + "."));
          refreshDead();
        })));
  })));
}

// ---- subscribers
// health says in words whether deliveries succeed: failing since when,
// with the last status and error, or the last success.
function health(h) {
  h = h || {};
  if (h.failing_since) return el("span", { class: "bad" }, "failing since " + ago(h.failing_since),
    h.last_status ? " · last status " + h.last_status : "", h.last_error ? " · " + h.last_error : "");
  if (h.last_success_at) return el("span", {}, "healthy · last success " + ago(h.last_success_at));
  return el("span", {}, "no deliveries yet");
}
const subscribersPath = "/v1/subscribers?limit=100";
async function subscribers(all) {
  const data = all[subscribersPath];
  replace("subscribers", table(["id", "region", "url", "topics", "enabled", "health", "limit key", ""], data.subscribers.map((s) => {
    const q = "?region=" + encodeURIComponent(s.region);
    return el("tr", {}, el("td", {}, s.id), el("td", {}, s.region), el("td", {}, s.url), el("td", {}, (s.topics || []).join(", ")),
      el("td", {}, s.enabled ? "yes" : "no " + (s.disabled_reason || "")), el("td", { class: "small" }, health(s.health)),
      el("td", {}, s.limit_key),
      el("td", { class: "actions" },
        el("button", { type: "button", class: "deliveries", onclick: async () => {
          const d = await api("GET", "/v1/subscribers/" + encodeURIComponent(s.id) + "/deliveries" + q + "&limit=10");
          flash("secret", el("div", {}, el("h2", {}, "Recent deliveries of " + s.id),
            table(["delivery", "event", "state", "attempts", "last status", "last error", "next attempt"], d.deliveries.map((x) =>
              el("tr", { class: "delivery-row" }, el("td", {}, x.id || ""), el("td", {}, (x.event_id || "") + " v" + (x.version ?? 0)),
                el("td", {}, el("span", { class: "state " + x.state }, x.state || "", x.reason ? " (" + x.reason + ")" : "")),
                el("td", { class: "num" }, x.attempts ?? ""), el("td", {}, x.last_status ?? ""), el("td", {}, x.last_error || ""),
                el("td", {}, x.next_attempt_at ? ago(x.next_attempt_at) : ""))))));
        } }, "Deliveries"),
        confirmButton("rotate:" + s.id, "Rotate secret", "Confirm rotate", "rotate", async () => {
          const got = await api("POST", "/v1/subscribers/" + encodeURIComponent(s.id) + "/rotate-secret" + q);
          flash("secret", el("p", {}, "New secret for " + s.id + " (shown once): ", el("code", {}, got.secret)));
        })));
  })));
}

// ---- reviews
function reviewPath() {
  const p = new URLSearchParams(location.search);
  return "/v1/reviews/" + encodeURIComponent(p.get("id") || "") + "?region=" + encodeURIComponent(p.get("region") || "");
}
async function review(all) {
  const r = all[reviewPath()];
  if (!r) return;
  const parts = r.parts || {};
  const res = r.result || { findings: [], quarantined: [] };
  replace("review", el("div", { id: "review-view" },
    el("p", {}, el("a", { class: "back", href: "/ui/reviews" }, "← all reviews")),
    el("dl", {}, ["id", "state", "reason", "region", "tenant", "repo", "change", "depth", "provider"]
      .filter((k) => r[k]).map((k) => [el("dt", {}, k), el("dd", {}, String(r[k]))])),
    el("p", {}, "parts: ", parts.succeeded || 0, " succeeded, ", parts.failed || 0, " failed, ", parts.pending || 0, " pending of ", parts.total || 0, " ",
      el("meter", { min: 0, max: parts.total || 1, value: (parts.succeeded || 0) + (parts.failed || 0) })),
    el("h2", {}, "Findings"), table(["where", "severity", "category", "message"], (res.findings || []).map((f) =>
      el("tr", {}, el("td", {}, f.path + ":" + f.line), el("td", {}, f.severity), el("td", {}, f.category), el("td", {}, f.message)))),
    el("h2", {}, "Quarantined"), table(["where", "message", "reason"], (res.quarantined || []).map((q) =>
      el("tr", {}, el("td", {}, q.finding.path + ":" + q.finding.line), el("td", {}, q.finding.message), el("td", {}, typeof q.reason === "string" ? q.reason : JSON.stringify(q.reason)))))));
}
// The list (GET /v1/reviews) is live like the jobs list, and each review
// in it carries its parts progress and, once aggregated, its findings and
// quarantined counts: a page is one path on the live stream (or one poll),
// never a GET per row.
// A page holds reviewPageSize rows unless the address says limit=.
const reviewPageSize = 25;
function reviewLink(r) {
  return el("a", { class: "review-link", href: "/ui/reviews?id=" + encodeURIComponent(r.id) + "&region=" + encodeURIComponent(r.region) }, r.id.slice(0, 13) + "…");
}
// reviewsQuery is the filters, the page size when the address names one
// (limit=, else reviewPageSize) and, withAfter, the page's cursor.
function reviewsQuery(withAfter) {
  const f = new FormData(document.getElementById("review-filters"));
  const here = new URLSearchParams(location.search);
  const q = new URLSearchParams();
  for (const [k, v] of f) if (v) q.set(k, v);
  if (here.get("limit")) q.set("limit", here.get("limit"));
  if (withAfter && here.get("after")) q.set("after", here.get("after"));
  return q;
}
function reviewsPath() {
  const q = reviewsQuery(true);
  if (!q.get("limit")) q.set("limit", String(reviewPageSize));
  return "/v1/reviews?" + q;
}
function renderReviewRows(reviews, next) {
  const rows = reviews.map((r) => {
    const p = r.parts || {};
    const aggregated = r.findings !== undefined;
    return el("tr", { class: "review-row", "data-id": r.id, "data-state": r.state },
      el("td", {}, reviewLink(r)), el("td", {}, [r.repo, r.change].filter(Boolean).join(" #")),
      el("td", {}, el("span", { class: "state " + r.state }, r.state, r.reason ? " (" + r.reason + ")" : "")),
      el("td", {}, r.lane), el("td", {}, r.tenant), el("td", {}, r.region),
      el("td", { class: "num parts" }, [(p.succeeded || 0) + (p.failed || 0) + " / " + (p.total || 0), p.failed ? " (" + p.failed + " failed)" : "", " ",
        el("meter", { min: 0, max: p.total || 1, value: (p.succeeded || 0) + (p.failed || 0) })]),
      el("td", { class: "num findings" }, aggregated ? r.findings : "–"),
      el("td", { class: "num quarantined" }, aggregated ? r.quarantined : "–"),
      el("td", { title: r.created_at }, ago(r.created_at)));
  });
  const nav = el("p", { class: "paging" },
    new URLSearchParams(location.search).get("after") ? el("button", { type: "button", class: "first-page", onclick: () => reviewsPage("") }, "First page") : null,
    next ? el("button", { type: "button", class: "next-page", onclick: () => reviewsPage(next) }, "Next page") : null);
  replace("reviews", el("div", {}, table(["id", "change", "state", "lane", "tenant", "region", "parts done", "findings", "quarantined", "created"], rows), nav));
}
let restartReviews = () => {};
function reviewsPage(after) {
  const q = reviewsQuery(false);
  if (after) q.set("after", after);
  window.history.replaceState(null, "", "/ui/reviews?" + q);
  restartReviews();
}
async function reviewsList(all) {
  const data = all[reviewsPath()];
  if (!data) return;
  renderReviewRows(data.reviews, data.next_cursor || "");
}
function setupReviews() {
  const form = document.getElementById("review-form");
  const filters = document.getElementById("review-filters");
  const params = new URLSearchParams(location.search);
  for (const f of [form, filters]) for (const e of f.elements) if (e.name && params.get(e.name)) e.value = params.get(e.name);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.href = "/ui/reviews?" + new URLSearchParams(new FormData(form));
  });
  if (params.get("id")) {
    // One review: its detail, live; the filters lead back to the list.
    document.getElementById("review").hidden = false;
    filters.addEventListener("submit", (ev) => { ev.preventDefault(); location.href = "/ui/reviews?" + reviewsQuery(false); });
    live(() => [reviewPath()], review);
    return;
  }
  document.getElementById("reviews").hidden = false;
  restartReviews = live(() => [reviewsPath()], reviewsList);
  filters.addEventListener("submit", (ev) => { ev.preventDefault(); reviewsPage(""); });
}

const pagesJS = {
  overview: () => live(() => ["/v1/stats", "/v1/limits"], overview),
  limits: () => live(() => ["/v1/limits"], limits),
  jobs: setupJobs,
  job: () => live(() => [jobPath()], jobDetail),
  "dead-letters": () => { refreshDead = live(() => [deadPath], dead); },
  subscribers: () => live(() => [subscribersPath], subscribers),
  reviews: setupReviews,
};
if (pagesJS[page]) pagesJS[page]();
