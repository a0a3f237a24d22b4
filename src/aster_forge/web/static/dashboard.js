// aster-forge dashboard: polls the admin API about once a second. No dependencies.
// All data is inserted with textContent / DOM nodes, never as HTML.
"use strict";

(function () {
  // Every request is relative to where the script is served (<base>static/dashboard.js),
  // so the page works under any mount prefix, with or without a trailing slash.
  const BASE = new URL("..", document.currentScript.src).pathname;
  const API = BASE + "api";
  const TOKEN_KEY = "aster-forge-admin-token";
  const FAST_MS = 1000;
  const SLOW_EVERY = 5; // components, reports and diagnostics every 5th tick

  const state = { features: null, tick: 0, timer: null, needLogin: false, busy: new Set() };

  // -- token -----------------------------------------------------------------------------
  (function takeTokenFromUrl() {
    const params = new URLSearchParams(window.location.search);
    const token = params.get("token");
    if (token) {
      sessionStorage.setItem(TOKEN_KEY, token);
      params.delete("token");
      const query = params.toString();
      // Drop the token from the address bar and history.
      window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
    }
  })();

  function token() { return sessionStorage.getItem(TOKEN_KEY); }

  class Unauthorized extends Error {}

  async function request(path, options) {
    const headers = { Accept: "application/json" };
    const current = token();
    if (current) headers.Authorization = "Bearer " + current;
    const response = await fetch(path, Object.assign({ headers, cache: "no-store" }, options || {}));
    if (response.status === 401) throw new Unauthorized("unauthorized");
    let body = null;
    try { body = await response.json(); } catch (_) { body = null; }
    return { status: response.status, body };
  }

  // -- DOM helpers -----------------------------------------------------------------------
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else if (key.startsWith("data-")) node.setAttribute(key, String(value));
      else if (key === "class") node.className = value;
      else node.setAttribute(key, String(value));
    }
    for (const child of children || []) node.append(child);
    return node;
  }

  function badge(status) { return el("span", { class: "status", "data-status": status, text: status || "-" }); }

  function fill(sectionId, rows) {
    const tbody = document.querySelector("#" + sectionId + " tbody");
    tbody.replaceChildren(...rows);
  }

  function ago(iso) {
    if (!iso) return "-";
    const seconds = (Date.parse(iso) - Date.now()) / 1000;
    const abs = Math.abs(seconds);
    const text = abs < 90 ? Math.round(abs) + "s" : abs < 5400 ? Math.round(abs / 60) + "m" : Math.round(abs / 3600) + "h";
    return seconds >= 0 ? "in " + text : text + " ago";
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 120) return seconds.toFixed(1) + " s";
    return Math.round(seconds / 60) + " min";
  }

  // -- tasks -----------------------------------------------------------------------------
  function taskQuery() {
    const params = new URLSearchParams({ limit: "50" });
    for (const name of ["status", "lane", "kind"]) {
      const value = document.getElementById("filter-" + name).value.trim();
      if (value) params.set(name, value);
    }
    return params.toString();
  }

  function stepsCell(task) {
    const total = task.steps_total;
    if (!total) return el("td", { class: "steps muted", text: "no steps" });
    let progress = task.steps_done;
    const active = (task.steps || []).find((s) => s.status === "active");
    if (active && active.progress_total > 0) progress += active.progress_current / active.progress_total;
    const inner = el("div");
    inner.style.width = Math.round((100 * progress) / total) + "%";
    const bar = el("div", {
      class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": total,
      "aria-valuenow": task.steps_done, "data-status": task.status,
    }, [inner]);
    const list = el("div", { class: "step-list" }, (task.steps || []).map((step) =>
      el("span", { class: "step", "data-status": step.status, title: step.detail || step.status, text: step.title || step.key })));
    return el("td", { class: "steps" }, [bar, list, el("span", { class: "muted", text: task.steps_done + "/" + total })]);
  }

  function actionButton(task, action, label) {
    const button = el("button", { type: "button", "data-action": action, "data-task-id": task.id, text: label });
    button.disabled = state.busy.has(task.id);
    button.addEventListener("click", () => act(task.id, action));
    return button;
  }

  function taskRow(task) {
    const actions = [];
    // The server says what it accepts; the page never guesses from the status.
    if (task.actions.includes("retry")) actions.push(actionButton(task, "retry", "Retry"));
    if (task.actions.includes("cancel")) actions.push(actionButton(task, "cancel", "Cancel"));
    return el("tr", { "data-task-id": task.id, "data-task-status": task.status }, [
      el("td", { text: task.id }),
      el("td", { text: task.kind }),
      el("td", { text: task.lane }),
      el("td", {}, [badge(task.status), task.cancel_requested ? el("span", { class: "muted", text: " cancel requested" }) : ""]),
      el("td", { class: "runs", text: task.runs ? task.runs + " of " + task.max_attempts : "not run" }),
      stepsCell(task),
      el("td", { class: "err", text: task.status === "succeeded" ? "" : task.last_error || "" }),
      el("td", {}, actions),
    ]);
  }

  async function act(taskId, action) {
    state.busy.add(taskId);
    const message = document.getElementById("action-message");
    try {
      const { status, body } = await request(API + "/tasks/" + taskId + "/" + action, { method: "POST" });
      message.textContent = status === 200
        ? action + " #" + taskId + ": " + (body.outcome || body.status)
        : action + " #" + taskId + " refused: " + ((body && body.message) || status);
    } catch (error) {
      if (error instanceof Unauthorized) showLogin();
      else message.textContent = action + " failed: " + error.message;
    } finally {
      state.busy.delete(taskId);
      refresh(false);
    }
  }

  async function loadTasks() {
    const { status, body } = await request(API + "/tasks?" + taskQuery());
    if (status !== 200) { fill("tasks", [el("tr", {}, [el("td", { colspan: 8, class: "error", text: (body && body.message) || "error " + status })])]); return; }
    fill("tasks", body.items.length ? body.items.map(taskRow) : [el("tr", {}, [el("td", { colspan: 8, class: "muted", text: "no tasks" })])]);
  }

  // -- lanes, scheduled, leases --------------------------------------------------------
  async function loadLanes() {
    const { status, body } = await request(API + "/lanes");
    if (status !== 200) return;
    fill("lanes", body.items.map((lane) => el("tr", { "data-lane": lane.lane }, [
      el("td", { text: lane.lane }),
      el("td", { text: (lane.in_flight ?? "-") + " / " + (lane.limit ?? "-") }),
      el("td", { text: lane.due ?? "-" }),
      el("td", { text: lane.pending ?? "-" }),
      el("td", { text: lane.running ?? "-" }),
      el("td", { text: duration(lane.queue_lag_seconds) }),
    ])));
  }

  async function loadScheduled() {
    const { status, body } = await request(API + "/scheduled");
    if (status !== 200) return;
    fill("scheduled", body.items.map((task) => el("tr", { "data-scheduled": task.namespace + "/" + task.name }, [
      el("td", { text: task.namespace + " / " + task.name }),
      el("td", { text: duration(task.interval_seconds) }),
      el("td", {}, [task.last_run_status ? badge(task.last_run_status) : el("span", { class: "muted", text: "never" }),
        el("span", { class: "muted", text: " " + ago(task.last_run_finished_at) })]),
      el("td", { text: task.claimed ? "running" : task.due ? "due now" : ago(task.next_run_at) }),
      el("td", { text: task.claimed ? task.claimed_by : "-" }),
      el("td", { text: task.run_count }),
    ])));
  }

  async function loadLeases() {
    const { status, body } = await request(API + "/leases");
    if (status !== 200) return;
    fill("leases", body.items.map((lease) => el("tr", { "data-lease": lease.lease_id }, [
      el("td", { text: lease.lease_id }),
      el("td", { text: lease.expired ? "(free) last: " + lease.owner_id : lease.owner_id }),
      el("td", { text: lease.never_expires ? "never" : ago(lease.expires_at) }),
    ])));
  }

  // -- components graph ------------------------------------------------------------------
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  async function loadComponents() {
    const { status, body } = await request(API + "/components");
    if (status !== 200) return;
    const graph = document.getElementById("component-graph");
    const width = 150, height = 30, gapX = 40, gapY = 22;
    const columns = new Map();
    for (const component of body.components) {
      if (!columns.has(component.level)) columns.set(component.level, []);
      columns.get(component.level).push(component);
    }
    const position = new Map();
    let maxRows = 1;
    for (const [level, items] of columns) {
      maxRows = Math.max(maxRows, items.length);
      items.forEach((item, row) => position.set(item.name, { x: 10 + level * (width + gapX), y: 10 + row * (height + gapY) }));
    }
    const levels = columns.size ? Math.max(...columns.keys()) + 1 : 1;
    graph.setAttribute("viewBox", "0 -40 " + (20 + levels * (width + gapX)) + " " + (60 + maxRows * (height + gapY)));
    const defs = svg("defs", {});
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
    marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }));
    defs.append(marker);
    const nodes = [defs];
    for (const edge of body.edges) {
      const from = position.get(edge.from), to = position.get(edge.to);
      if (!from || !to) continue;
      // A component points at what it depends on (what shuts down before it).
      const x1 = from.x, y1 = from.y + height / 2, x2 = to.x + width, y2 = to.y + height / 2;
      // Edges that skip a level bend above the row so they do not cross the boxes between.
      const skips = Math.abs(x1 - x2) > width + gapX;
      const bend = skips ? Math.min(from.y, to.y) - 6 : (y1 + y2) / 2;
      const d = skips
        ? "M" + x1 + "," + from.y + " Q" + (x1 + x2) / 2 + "," + (bend - 30) + " " + x2 + "," + to.y
        : "M" + x1 + "," + y1 + " L" + x2 + "," + y2;
      nodes.push(svg("path", { d, class: "edge", "data-edge": edge.from + "->" + edge.to }));
    }
    for (const component of body.components) {
      const at = position.get(component.name);
      const group = svg("g", { "data-component": component.name });
      group.append(svg("rect", { x: at.x, y: at.y, width, height }));
      group.append(svg("text", { x: at.x + width / 2, y: at.y + height / 2 }, component.name + " (" + component.kind + ")"));
      group.append(svg("title", {}, "depends on: " + (component.depends_on.join(", ") || "nothing")));
      nodes.push(group);
    }
    graph.replaceChildren(...nodes);
    document.getElementById("shutdown-order").textContent = body.valid
      ? "Shutdown order: " + body.shutdown_order.join(" → ")
      : "Invalid graph: " + body.error.message;
  }

  function phaseRows(report, kind) {
    if (!report) return [el("tr", {}, [el("td", { colspan: 3, class: "muted", text: kind + " has not finished" })])];
    if (!report.phases.length) return [el("tr", {}, [el("td", { colspan: 3, class: "muted", text: kind + " had no phases" })])];
    return report.phases.map((phase) => el("tr", {}, [
      el("td", { text: (phase.component ? phase.component + ": " : "") + phase.name }),
      el("td", {}, [badge(phase.status)]),
      el("td", { text: phase.duration_seconds.toFixed(3) }),
    ]));
  }

  async function loadReports() {
    const { status, body } = await request(API + "/reports");
    if (status !== 200) return;
    document.querySelector("#startup-report tbody").replaceChildren(...phaseRows(body.startup, "startup"));
    document.querySelector("#shutdown-report tbody").replaceChildren(...phaseRows(body.shutdown, "shutdown"));
  }

  async function loadHealth() {
    const ready = await request(API + "/health?scope=readiness").catch(() => null);
    const readiness = document.getElementById("readiness");
    if (ready && ready.body && ready.status === 200) {
      readiness.dataset.status = ready.body.status;
      readiness.textContent = "readiness: " + ready.body.status;
    }
    const { status, body } = await request(API + "/health?scope=diagnostics");
    const section = document.getElementById("health");
    section.hidden = !(body && body.components);
    if (!body || !body.components) return;
    fill("health", body.components.map((c) => el("tr", { "data-component": c.name }, [
      el("td", { text: c.name }), el("td", {}, [badge(c.status)]), el("td", { text: c.message }),
    ])));
    return status;
  }

  // -- polling ---------------------------------------------------------------------------
  async function loadInfo() {
    const { status, body } = await request(API + "/info");
    if (status !== 200) throw new Error("info: " + status);
    state.features = body.features;
    document.getElementById("title").textContent = body.title;
    document.title = body.title;
    for (const section of document.querySelectorAll("[data-feature]")) {
      section.hidden = !state.features[section.dataset.feature];
    }
  }

  function guarded(load) { return load().catch((error) => { if (error instanceof Unauthorized) throw error; }); }

  async function refresh(includeSlow) {
    const f = state.features || {};
    const jobs = [];
    if (f.tasks) jobs.push(guarded(loadTasks));
    if (f.lanes) jobs.push(guarded(loadLanes));
    if (f.scheduled) jobs.push(guarded(loadScheduled));
    if (f.leases) jobs.push(guarded(loadLeases));
    if (includeSlow) {
      if (f.components) jobs.push(guarded(loadComponents));
      if (f.reports) jobs.push(guarded(loadReports));
      if (f.health) jobs.push(guarded(loadHealth));
    }
    await Promise.all(jobs);
  }

  async function tick() {
    try {
      if (!state.features) await loadInfo();
      await refresh(state.tick % SLOW_EVERY === 0);
      state.tick += 1;
      document.getElementById("connection").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (error) {
      if (error instanceof Unauthorized) { showLogin(); return; }
      document.getElementById("connection").textContent = "disconnected (" + error.message + ")";
    }
    state.timer = window.setTimeout(tick, FAST_MS);
  }

  function showLogin() {
    if (state.timer) window.clearTimeout(state.timer);
    state.timer = null;
    state.features = null;
    document.getElementById("content").hidden = true;
    document.getElementById("login").hidden = false;
    document.getElementById("login-error").textContent = token() ? "That token was not accepted." : "";
    document.getElementById("login-token").focus();
  }

  function start() {
    document.getElementById("login").hidden = true;
    document.getElementById("content").hidden = false;
    document.getElementById("logout").hidden = !token();
    state.tick = 0;
    tick();
  }

  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("login-token").value);
    document.getElementById("login-token").value = "";
    start();
  });
  document.getElementById("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    window.location.reload();
  });
  for (const id of ["filter-status", "filter-lane", "filter-kind"]) {
    document.getElementById(id).addEventListener("change", () => refresh(false));
  }
  start();
})();
