// ratelane dashboard: the schedules page (periodic producers). It uses the
// helpers of app.js (api, el, table, poll, confirmButton, flash, ago) and,
// like every page, reads and changes only what the session's key may
// through the HTTP API.
"use strict";

function scheduleSpec(s) {
  return s.cron ? s.cron + " (" + s.timezone + ")" : "every " + s.every_seconds + " s";
}

function schedulePolicy(s) {
  return s.missed === "catch_up" ? "catch up ≤ " + s.catch_up_max + " ticks, ≤ " + s.max_late_seconds + " s late" : "skip if > " + s.max_late_seconds + " s late";
}

async function schedules() {
  const data = await api("GET", "/v1/schedules?limit=100");
  replace("schedules", table(["name", "region", "tenant", "schedule", "missed ticks", "kind", "state", "next tick", "last job", "produced", "skipped", ""],
    data.schedules.map((s) => {
      const q = "?region=" + encodeURIComponent(s.region);
      const path = "/v1/schedules/" + encodeURIComponent(s.id);
      const toggle = s.paused
        ? el("button", { type: "button", class: "resume", onclick: async () => { await api("POST", path + "/resume" + q); await schedules(); } }, "Resume")
        : el("button", { type: "button", class: "pause", onclick: async () => { await api("POST", path + "/pause" + q); await schedules(); } }, "Pause");
      return el("tr", { class: "schedule-row", "data-id": s.id, "data-paused": s.paused ? "true" : "false" },
        el("td", {}, s.name), el("td", {}, s.region), el("td", {}, s.tenant), el("td", {}, scheduleSpec(s)), el("td", {}, schedulePolicy(s)),
        el("td", {}, s.job.kind), el("td", { class: "sched-state" }, s.paused ? "paused" : "active"),
        el("td", {}, s.paused ? "" : ago(s.next_tick_at)),
        el("td", {}, s.last_job_id ? jobLink({ id: s.last_job_id, region: s.region }) : ""),
        el("td", { class: "num" }, s.produced), el("td", { class: "num" }, s.skipped),
        el("td", { class: "actions" }, toggle,
          confirmButton("delete:" + s.id, "Delete", "Confirm delete", "delete danger", async () => {
            await api("DELETE", path + q);
            flash("flash", el("span", {}, "Deleted schedule " + s.name + "; the jobs it produced stay."));
            await schedules();
          })));
    })));
}

if (page === "schedules") poll(schedules, 2000);
