// aster-forge dashboard: reads the admin API (described by api/openapi.json). No dependencies.
// All data is inserted with textContent / DOM nodes, never as HTML.
"use strict";

(function () {
  // Every request is relative to where the script is served (<base>static/dashboard.js),
  // so the page works under any mount prefix, with or without a trailing slash.
  const BASE = new URL("..", document.currentScript.src).pathname;
  const API = BASE + "api";
  const TOKEN_KEY = "aster-forge-admin-token";
  const STATUSES = ["pending", "running", "succeeded", "failed", "cancelled"];
  const PAGE = 50;
  const SHOW_CHARS = 20000; // payload/result text shown before truncating
  const POLL_MS = { overview: 2000, tasks: 2000, task: 2000, runtime: 5000 };

  const state = {
    features: null, actionsAllowed: false, view: "overview", timer: null, busy: new Set(),
    filters: {}, status: "", cursor: {}, page: null, taskId: null,
  };
  const $ = (id) => document.getElementById(id);

  // -- token -----------------------------------------------------------------------------
  (function takeTokenFromUrl() {
    const params = new URLSearchParams(window.location.search);
    const token = params.get("token");
    if (token) {
      sessionStorage.setItem(TOKEN_KEY, token);
      params.delete("token");
      const query = params.toString();
      // Drop the token from the address bar and history.
      window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : "") + window.location.hash);
    }
  })();

  function token() { return sessionStorage.getItem(TOKEN_KEY); }

  class Unauthorized extends Error {}

  async function request(path, options) {
    const headers = { Accept: "application/json" };
    const current = token();
    if (current) headers.Authorization = "Bearer " + current;
    const init = Object.assign({ cache: "no-store" }, options || {});
    if (init.json !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(init.json);
      delete init.json;
    }
    init.headers = headers;
    const response = await fetch(path, init);
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
      else if (key === "class") node.className = value;
      else node.setAttribute(key, String(value));
    }
    for (const child of children || []) node.append(child);
    return node;
  }
  const td = (text, cls) => el("td", { text: text === null || text === undefined ? "-" : text, class: cls });
  function badge(status) { return el("span", { class: "status", "data-status": status, text: status || "-" }); }
  // A running task whose lease expired: its worker is gone, the next claim rescues it.
  function statusBadges(task) {
    return task.lease_expired
      ? [badge(task.status), " ", el("span", { class: "status", "data-status": "lease_expired", text: "lease expired", title: "its worker stopped renewing the lease; the next claim of the lane rescues it" })]
      : [badge(task.status)];
  }
  function fill(tbody, rows, columns, empty) {
    tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, [el("td", { colspan: columns, class: "muted", text: empty })])]));
  }
  function body(sectionId) { return document.querySelector("#" + sectionId + " tbody"); }

  function span(seconds) {
    const abs = Math.abs(seconds);
    return abs < 90 ? Math.round(abs) + "s" : abs < 5400 ? Math.round(abs / 60) + "m" : abs < 172800 ? Math.round(abs / 3600) + "h" : Math.round(abs / 86400) + "d";
  }
  function ago(iso) {
    if (!iso) return "-";
    const seconds = (Date.parse(iso) - Date.now()) / 1000;
    return seconds >= 0 ? "in " + span(seconds) : span(seconds) + " ago";
  }
  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 120) return seconds.toFixed(1) + " s";
    return span(seconds);
  }
  function stamp(iso) { return iso ? new Date(iso).toLocaleString() : "-"; }
  function say(id, text) { $(id).textContent = text; }

  // -- views -----------------------------------------------------------------------------
  function parseHash() {
    const hash = window.location.hash.replace(/^#/, "");
    const match = /^task\/(\d+)$/.exec(hash);
    if (match) return { view: "task", taskId: match[1] };
    return { view: ["overview", "tasks", "runtime"].includes(hash) ? hash : "overview", taskId: null };
  }

  function showView() {
    const { view, taskId } = parseHash();
    state.view = view;
    state.taskId = taskId;
    for (const node of document.querySelectorAll(".view")) node.hidden = node.dataset.view !== view;
    for (const link of document.querySelectorAll("#nav a")) {
      link.setAttribute("aria-current", link.dataset.view === view || (view === "task" && link.dataset.view === "tasks") ? "page" : "false");
    }
    schedule(0);
  }

  // -- overview --------------------------------------------------------------------------
  async function loadOverview() {
    const f = state.features;
    const [lanes, overview] = await Promise.all([
      f.lanes ? request(API + "/lanes") : null,
      f.overview ? request(API + "/overview") : null,
    ]);
    const byLane = new Map();
    const entry = (name) => { if (!byLane.has(name)) byLane.set(name, { lane: name }); return byLane.get(name); };
    if (lanes && lanes.status === 200) for (const item of lanes.body.items) Object.assign(entry(item.lane), { live: item });
    if (overview && overview.status === 200) for (const item of overview.body.lanes) Object.assign(entry(item.lane), { totals: item });
    const rows = [...byLane.values()].sort((a, b) => (a.lane < b.lane ? -1 : 1)).map(laneRow);
    fill(body("lanes"), rows, 13, "no lanes yet");
    if (overview && overview.status === 200) drawCharts(overview.body);
  }

  function laneRow(item) {
    const live = item.live || {};
    const counts = (item.totals && item.totals.counts) || {};
    const paused = typeof live.paused === "boolean" ? live.paused : null; // null: the store cannot pause
    const control = paused === null || !state.actionsAllowed ? "" : el("button", {
      type: "button", "data-lane-action": paused ? "resume" : "pause", "data-lane": item.lane, text: paused ? "Resume" : "Pause",
    });
    if (control) control.addEventListener("click", () => laneAction(item.lane, paused ? "resume" : "pause"));
    const age = item.totals ? item.totals.oldest_pending_age_seconds : null;
    const expired = item.totals ? item.totals.lease_expired : live.expired;
    return el("tr", { "data-lane": item.lane, "data-paused": paused === null ? "unsupported" : String(paused) }, [
      td(item.lane),
      el("td", {}, [paused ? badge("paused") : el("span", { class: "muted", text: paused === null ? "-" : "active" }), rateLabel(live)]),
      td(counts.pending ?? live.pending, "num count-pending"),
      el("td", { class: "num" }, [String(live.due ?? "-"), partitionsLabel(live)]),
      td(String(counts.running ?? live.running ?? "-") + (live.cluster_limit ? " / " + live.cluster_limit : "") + (live.partition_limit ? " (" + live.partition_limit + " per partition)" : ""), "num count-running"),
      td(expired, expired ? "num count-expired alert" : "num count-expired"),
      td(counts.succeeded, "num count-succeeded"),
      td(counts.failed, "num count-failed"),
      td(counts.cancelled, "num count-cancelled"),
      td((live.in_flight ?? "-") + " / " + (live.limit ?? "-")),
      td(age === null || age === undefined ? "-" : span(age)),
      td(duration(live.queue_lag_seconds)),
      el("td", {}, [control]),
    ]);
  }

  function partitionsLabel(live) {
    // How many partitions have due tasks waiting, the busiest named in the title.
    if (!live.partitions_waiting) return "";
    const top = (live.top_partitions_waiting || []).map((p) => p.partition + ": " + p.due).join(", ");
    return el("span", {
      class: "muted lane-partitions",
      title: top ? "most due tasks: " + top : null,
      text: " · " + live.partitions_waiting + (live.partitions_waiting === 1 ? " partition" : " partitions"),
    });
  }

  function rateLabel(live) {
    // The starts left in the lane's current rate window, of its count per period, and
    // the cap per partition.
    const parts = [];
    if (live.rate_limit) {
      parts.push("rate " + (live.rate_remaining ?? "-") + " left of " + live.rate_limit.count + " per " + duration(live.rate_limit.period_seconds));
    }
    if (live.partition_rate_limit) {
      parts.push(live.partition_rate_limit.count + " per " + duration(live.partition_rate_limit.period_seconds) + " per partition");
    }
    if (!parts.length) return "";
    return el("span", { class: "muted lane-rate", text: " · " + parts.join(" · ") });
  }

  async function laneAction(lane, action) {
    const { status, body: answer } = await request(API + "/lanes/" + encodeURIComponent(lane) + "/" + action, { method: "POST" });
    say("lane-message", status === 200 ? action + " " + lane + ": done" : action + " " + lane + " refused: " + ((answer && answer.message) || status));
    schedule(0);
  }

  // -- throughput chart (inline SVG, drawn here) -----------------------------------------
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function drawCharts(data) {
    const width = 720, height = 64, left = 4, bar = (width - left) / data.minutes;
    const charts = data.throughput.map((series) => {
      const totals = series.succeeded.map((s, i) => s + series.failed[i] + series.retried[i]);
      const peak = Math.max(1, ...totals);
      const chart = svg("svg", { viewBox: "0 0 " + width + " " + (height + 14), class: "chart", role: "img", "aria-label": "throughput of " + series.lane, "data-chart": series.lane });
      chart.append(svg("line", { x1: left, y1: height, x2: width, y2: height, class: "axis" }));
      for (let i = 0; i < data.minutes; i++) {
        let y = height;
        for (const name of ["succeeded", "failed", "retried"]) {
          const value = series[name][i];
          if (!value) continue;
          const h = (value / peak) * (height - 4);
          y -= h;
          const rect = svg("rect", { x: left + i * bar + 0.5, y, width: Math.max(1, bar - 1), height: h, "data-series": name });
          rect.append(svg("title", {}, value + " " + name + ", " + (data.minutes - i - 1) + " min ago"));
          chart.append(rect);
        }
      }
      chart.append(svg("text", { x: left, y: height + 12, class: "tick" }, "-60 min"));
      chart.append(svg("text", { x: width, y: height + 12, class: "tick end" }, "now"));
      const sum = (name) => series[name].reduce((a, b) => a + b, 0);
      return el("div", { class: "chart-row" }, [
        el("div", { class: "chart-label" }, [
          el("strong", { text: series.lane }),
          el("span", { class: "muted", text: sum("succeeded") + " ok · " + sum("failed") + " failed · " + sum("retried") + " retried" }),
          el("span", { class: "muted small", text: "peak " + Math.max(0, ...totals) + "/min" }),
        ]),
        chart,
      ]);
    });
    $("charts").replaceChildren(...(charts.length ? charts : [el("p", { class: "muted", text: "no lanes yet" })]));
  }

  // -- tasks -----------------------------------------------------------------------------
  function readFilters() {
    const form = $("filters");
    const filters = {};
    for (const input of form.querySelectorAll("input")) {
      const value = input.value.trim();
      if (!value) continue;
      // datetime-local has no zone: send it with the browser's offset (the API wants one).
      filters[input.name] = input.type === "datetime-local" ? new Date(value).toISOString() : value;
    }
    return filters;
  }

  function query(extra) {
    const params = new URLSearchParams(state.filters);
    if (state.status) params.set("status", state.status);
    for (const [key, value] of Object.entries(extra || {})) params.set(key, value);
    return params.toString();
  }

  async function loadTasks() {
    const f = state.features;
    const paging = Object.assign({ limit: PAGE }, state.cursor);
    const [page, counts] = await Promise.all([
      request(API + "/tasks?" + query(paging)),
      f.overview ? request(API + "/tasks/counts?" + new URLSearchParams(state.filters)) : null,
    ]);
    drawTabs(counts && counts.status === 200 ? counts.body : null);
    const tbody = body("tasks");
    if (page.status !== 200) {
      fill(tbody, [el("tr", {}, [el("td", { colspan: 9, class: "error", text: (page.body && page.body.message) || "error " + page.status })])], 9, "");
      return;
    }
    state.page = page.body;
    fill(tbody, page.body.items.map(taskRow), 9, "no tasks match");
    $("page-newer").disabled = page.body.prev_after_id === null;
    $("page-older").disabled = page.body.next_before_id === null;
    $("page-newest").disabled = !state.cursor.before_id && !state.cursor.after_id;
    for (const button of document.querySelectorAll("[data-bulk]")) button.hidden = !f.overview || !state.actionsAllowed;
  }

  function drawTabs(counts) {
    const tabs = [["", "All", counts ? counts.total : null], ...STATUSES.map((s) => [s, s, counts ? counts.counts[s] : null])];
    $("status-tabs").replaceChildren(...tabs.map(([value, label, count]) => {
      const tab = el("button", { type: "button", role: "tab", "data-tab": value || "all", "aria-selected": String(state.status === value) }, [
        el("span", { text: label }), count === null ? "" : el("span", { class: "count", text: count }),
      ]);
      tab.addEventListener("click", () => { state.status = value; state.cursor = {}; schedule(0); });
      return tab;
    }));
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
    return el("td", { class: "steps" }, [bar, el("span", { class: "muted", text: task.steps_done + "/" + total + (active ? " " + (active.title || active.key) : "") })]);
  }

  function actionButtons(task) {
    // The server says what it accepts; the page never guesses from the status.
    const labels = { retry: "Retry", cancel: "Cancel" };
    if (!state.actionsAllowed) return [];
    return task.actions.map((action) => {
      const button = el("button", { type: "button", "data-action": action, "data-task-id": task.id, text: labels[action] || action });
      button.disabled = state.busy.has(task.id);
      button.addEventListener("click", () => act(task.id, action));
      return button;
    });
  }

  function runs(task) { return task.runs ? task.runs + " of " + task.max_attempts : "not run"; }

  function taskRow(task) {
    return el("tr", { "data-task-id": task.id, "data-task-status": task.status }, [
      el("td", {}, [el("a", { href: "#task/" + task.id, text: "#" + task.id })]),
      td(task.kind, "kind"),
      td(task.lane),
      el("td", {}, [...statusBadges(task), task.cancel_requested ? el("span", { class: "muted", text: " cancel requested" }) : ""]),
      td(runs(task), "runs"),
      stepsCell(task),
      td(task.status === "succeeded" ? "" : task.last_error || "", "err"),
      td(ago(task.created_at), "muted"),
      el("td", { class: "actions" }, actionButtons(task)),
    ]);
  }

  async function act(taskId, action, messageId) {
    state.busy.add(taskId);
    const where = messageId || "action-message";
    try {
      const { status, body: answer } = await request(API + "/tasks/" + taskId + "/" + action, { method: "POST" });
      say(where, status === 200
        ? action + " #" + taskId + ": " + (answer.outcome || answer.status)
        : action + " #" + taskId + " refused: " + ((answer && answer.message) || status));
    } catch (error) {
      if (error instanceof Unauthorized) showLogin();
      else say(where, action + " failed: " + error.message);
    } finally {
      state.busy.delete(taskId);
      schedule(0);
    }
  }

  async function bulk(action) {
    const selection = Object.assign({}, state.filters);
    if (state.status) selection.status = state.status;
    if (selection.id) selection.id = Number(selection.id);
    const preview = await request(API + "/tasks/bulk/" + action, { method: "POST", json: Object.assign({ dry_run: true }, selection) });
    if (preview.status !== 200) { say("action-message", action + " refused: " + ((preview.body && preview.body.message) || preview.status)); return; }
    const { matched, eligible } = preview.body;
    if (!eligible) { say("action-message", "nothing to " + action + ": " + matched + " matching, none eligible"); return; }
    const dialog = $("confirm");
    $("confirm-text").textContent = (action === "retry" ? "Retry " : "Cancel ") + eligible + " of " + matched + " matching tasks?";
    dialog.dataset.action = action;
    dialog.returnValue = "";
    dialog.showModal();
    dialog.addEventListener("close", async () => {
      if (dialog.returnValue !== "ok") { say("action-message", action + " not confirmed"); return; }
      const done = await request(API + "/tasks/bulk/" + action, { method: "POST", json: selection });
      say("action-message", done.status === 200
        ? action + ": " + done.body.changed.length + " of " + done.body.matched + " matching tasks changed"
        : action + " refused: " + ((done.body && done.body.message) || done.status));
      schedule(0);
    }, { once: true });
  }

  // -- one task --------------------------------------------------------------------------
  function pretty(value, invalid, preview, size) {
    if (preview !== null && preview !== undefined) {
      return preview.slice(0, SHOW_CHARS) + "\n… truncated: the stored value is " + size + " characters";
    }
    if (invalid) return "(stored value is not valid JSON)";
    if (value === null || value === undefined) return "null";
    const text = JSON.stringify(value, null, 2);
    return text.length > SHOW_CHARS
      ? text.slice(0, SHOW_CHARS) + "\n… truncated: " + (text.length - SHOW_CHARS) + " more characters"
      : text;
  }

  async function loadTask() {
    const { status, body: task } = await request(API + "/tasks/" + state.taskId);
    if (status !== 200) {
      say("detail-title", "Task #" + state.taskId);
      say("detail-message", (task && task.message) || "error " + status);
      for (const id of ["detail-fields", "detail-steps", "detail-actions", "detail-status"]) $(id).replaceChildren();
      return;
    }
    say("detail-title", "Task #" + task.id + " · " + task.kind);
    $("detail-status").replaceChildren(...statusBadges(task));
    $("detail-actions").replaceChildren(...(state.actionsAllowed ? task.actions : []).map((action) => {
      const button = el("button", { type: "button", "data-action": action, "data-task-id": task.id, text: action === "retry" ? "Retry" : "Cancel" });
      button.addEventListener("click", () => act(task.id, action, "detail-message"));
      return button;
    }));
    const fields = [
      ["Lane", task.lane], ["Status", task.status + (task.lease_expired ? ", lease expired (worker lost; the next claim rescues it)" : "") + (task.cancel_requested ? " (cancel requested)" : "")],
      ["Runs", runs(task)], ["Failed attempts", task.attempt], ["Snoozed", task.snooze_count], ["Priority", task.priority],
      ["Dedupe key", task.dedupe_key], ["Failure reason", task.failure_reason],
      ["Manual retry allowed", String(task.manual_retry_allowed)], ["Rescued after lost lease", String(task.rescued)],
      ["Lease owner", task.claimed_by], ["Lease expires", task.lease_expired ? "expired " + ago(task.lease_expires_at) : stamp(task.lease_expires_at)],
      ["Created", stamp(task.created_at)], ["Run at", stamp(task.run_at)], ["Started", stamp(task.started_at)],
      ["Finished", stamp(task.finished_at)], ["Updated", stamp(task.updated_at)],
    ];
    $("detail-fields").replaceChildren(...fields.flatMap(([name, value]) => [el("dt", { text: name }), el("dd", { text: value ?? "-", "data-field": name })]));
    const steps = task.steps || [];
    $("detail-steps").replaceChildren(...(steps.length ? steps.map((step) => el("li", { "data-step-status": step.status }, [
      el("span", { class: "step-dot", "data-status": step.status }),
      el("strong", { text: step.title || step.key }),
      el("span", { class: "muted", text: " " + step.status + (step.progress_total ? " " + step.progress_current + "/" + step.progress_total : "") }),
      el("div", { class: "muted small", text: (step.started_at ? stamp(step.started_at) : "") + (step.finished_at ? " → " + stamp(step.finished_at) : "") }),
      step.detail ? el("div", { class: "small", text: step.detail }) : "",
    ])) : [el("li", { class: "muted", text: task.steps_invalid ? "(stored steps are not valid)" : "no steps" })]));
    $("detail-error").textContent = task.last_error || "-";
    $("detail-traceback").textContent = task.last_traceback || "";
    $("detail-traceback-box").hidden = !task.last_traceback;
    $("detail-payload").textContent = pretty(task.payload, task.payload_invalid, task.payload_preview, task.payload_size);
    $("detail-result").textContent = pretty(task.result, task.result_invalid, task.result_preview, task.result_size);
    await loadWorkflow(task.id);
  }

  // A task's workflow: what it waits for and what waits for it, with their states.
  async function loadWorkflow(taskId) {
    const { status, body: graph } = await request(API + "/tasks/" + taskId + "/workflow");
    const box = $("detail-workflow");
    if (status !== 200 || !graph.edges.length) { box.hidden = true; return; }
    box.hidden = false;
    const nodes = new Map(graph.nodes.map((node) => [node.id, node]));
    const anyway = new Set(graph.edges.filter((e) => e.run_anyway).map((e) => e.from + ">" + e.to));
    const item = (id, edgeKey) => {
      const node = nodes.get(id);
      return el("li", { "data-workflow-task": id }, [
        el("a", { href: "#task/" + id, text: "#" + id }),
        " " + (node ? node.kind + " " : ""),
        badge(node ? (node.waiting ? "waiting" : node.status) : "-"),
        anyway.has(edgeKey) ? el("span", { class: "muted", text: " runs anyway" }) : "",
      ]);
    };
    const none = (text) => [el("li", { class: "muted", text })];
    $("workflow-dependencies").replaceChildren(...(graph.dependencies.length
      ? graph.dependencies.map((id) => item(id, id + ">" + taskId)) : none("nothing")));
    $("workflow-dependents").replaceChildren(...(graph.dependents.length
      ? graph.dependents.map((id) => item(id, taskId + ">" + id)) : none("nothing")));
    const open = graph.nodes.filter((node) => node.status === "pending" || node.status === "running").length;
    say("workflow-summary", graph.nodes.length + (graph.truncated ? "+" : "") + " tasks, " + open + " unfinished");
    const actions = [];
    if (state.actionsAllowed && open) {
      const button = el("button", { type: "button", "data-action": "cancel-workflow", text: "Cancel workflow" });
      button.addEventListener("click", async () => {
        const done = await request(API + "/tasks/" + taskId + "/workflow/cancel", { method: "POST" });
        say("detail-message", done.status === 200
          ? "workflow: " + done.body.cancelled.length + " cancelled, " + done.body.cancel_requested.length + " asked to stop"
          : "cancel workflow refused: " + ((done.body && done.body.message) || done.status));
        schedule(0);
      });
      actions.push(button);
    }
    $("workflow-actions").replaceChildren(...actions);
  }

  // -- runtime ---------------------------------------------------------------------------
  async function loadScheduled() {
    const { status, body: data } = await request(API + "/scheduled");
    if (status !== 200) return;
    fill(body("scheduled"), data.items.map((task) => el("tr", { "data-scheduled": task.namespace + "/" + task.name }, [
      td(task.namespace + " / " + task.name),
      // Cron text when the catalog row carries one, else the interval.
      td(task.schedule || task.cron || "every " + duration(task.interval_seconds), "schedule"),
      el("td", {}, [task.last_run_status ? badge(task.last_run_status) : el("span", { class: "muted", text: "never" }),
        el("span", { class: "muted", text: " " + ago(task.last_run_finished_at) }),
        task.last_run_error ? el("div", { class: "err small", text: task.last_run_error }) : ""]),
      td(task.claimed ? "running now" : task.due ? "due now" : ago(task.next_run_at)),
      td(task.claimed ? task.claimed_by : "-"),
      td(task.run_count, "num"),
    ])), 6, "no scheduled tasks");
  }

  async function loadLeases() {
    const { status, body: data } = await request(API + "/leases");
    if (status !== 200) return;
    fill(body("leases"), data.items.map((lease) => el("tr", { "data-lease": lease.lease_id }, [
      td(lease.lease_id),
      td(lease.expired ? "(free) last: " + lease.owner_id : lease.owner_id),
      td(lease.never_expires ? "never" : ago(lease.expires_at)),
    ])), 3, "no runtime leases");
  }

  function detailText(detail) {
    const value = detail.value;
    if (value && typeof value === "object" && "type" in value) {
      if (value.type === "duration_millis") return value.value + " ms";
      return String(value.value);
    }
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  async function loadHealth() {
    const ready = await request(API + "/health?scope=readiness");
    if (ready.status === 200 && ready.body) {
      $("readiness").dataset.status = ready.body.status;
      say("readiness", "readiness: " + ready.body.status);
    }
    if (state.view !== "runtime") return;
    const { status, body: report } = await request(API + "/health?scope=diagnostics");
    if (status !== 200) return;
    fill(body("health"), report.components.map((c) => el("tr", { "data-component": c.name }, [
      td(c.name), el("td", {}, [badge(c.status)]), td(c.message),
      el("td", { class: "small" }, (c.details || []).map((d) => el("div", { text: d.key + ": " + detailText(d) }))),
    ])), 4, "no health checks");
  }

  async function loadComponents() {
    const { status, body: data } = await request(API + "/components");
    if (status !== 200) return;
    const graph = $("component-graph");
    const charWidth = 7.2, height = 34, gapX = 56, gapY = 18;
    const label = (c) => c.name + " (" + c.kind + ")";
    const width = Math.max(140, ...data.components.map((c) => label(c).length * charWidth + 24));
    const columns = new Map();
    for (const component of data.components) {
      if (!columns.has(component.level)) columns.set(component.level, []);
      columns.get(component.level).push(component);
    }
    const position = new Map();
    let maxRows = 1;
    for (const [level, items] of columns) {
      maxRows = Math.max(maxRows, items.length);
      items.forEach((item, row) => position.set(item.name, { x: 10 + level * (width + gapX), y: 24 + row * (height + gapY) }));
    }
    const levels = columns.size ? Math.max(...columns.keys()) + 1 : 1;
    const totalWidth = 20 + levels * (width + gapX) - gapX;
    const totalHeight = 34 + maxRows * (height + gapY);
    // Drawn at its natural size (1 unit = 1 px) so labels stay readable; the box scrolls if wider.
    graph.setAttribute("viewBox", "0 0 " + totalWidth + " " + totalHeight);
    graph.setAttribute("width", totalWidth);
    graph.setAttribute("height", totalHeight);
    const defs = svg("defs", {});
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
    marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }));
    defs.append(marker);
    const nodes = [defs];
    for (const edge of data.edges) {
      const from = position.get(edge.from), to = position.get(edge.to);
      if (!from || !to) continue;
      // A component points at what it depends on (what shuts down after it).
      const x1 = from.x, y1 = from.y + height / 2, x2 = to.x + width, y2 = to.y + height / 2;
      const mid = (x1 + x2) / 2;
      nodes.push(svg("path", { d: "M" + x1 + "," + y1 + " C" + mid + "," + y1 + " " + mid + "," + y2 + " " + x2 + "," + y2, class: "edge", "data-edge": edge.from + "->" + edge.to }));
    }
    for (const component of data.components) {
      const at = position.get(component.name);
      const group = svg("g", { "data-component": component.name });
      group.append(svg("rect", { x: at.x, y: at.y, width, height, rx: 6 }));
      group.append(svg("text", { x: at.x + width / 2, y: at.y + height / 2 }, label(component)));
      group.append(svg("title", {}, "depends on: " + (component.depends_on.join(", ") || "nothing")));
      nodes.push(group);
    }
    graph.replaceChildren(...nodes);
    say("shutdown-order", data.valid ? "Shutdown order: " + data.shutdown_order.join(" → ") : "Invalid graph: " + data.error.message);
  }

  function phaseRows(report, kind) {
    if (!report) return [el("tr", {}, [el("td", { colspan: 3, class: "muted", text: kind + " has not finished" })])];
    if (!report.phases.length) return [el("tr", {}, [el("td", { colspan: 3, class: "muted", text: kind + " had no phases" })])];
    return report.phases.map((phase) => el("tr", {}, [
      td((phase.component ? phase.component + ": " : "") + phase.name),
      el("td", {}, [badge(phase.status)]),
      td(phase.duration_seconds.toFixed(3), "num"),
    ]));
  }

  async function loadReports() {
    const { status, body: data } = await request(API + "/reports");
    if (status !== 200) return;
    document.querySelector("#startup-report tbody").replaceChildren(...phaseRows(data.startup, "startup"));
    document.querySelector("#shutdown-report tbody").replaceChildren(...phaseRows(data.shutdown, "shutdown"));
  }

  // -- polling ---------------------------------------------------------------------------
  async function loadInfo() {
    const { status, body: info } = await request(API + "/info");
    if (status !== 200) throw new Error("info: " + status);
    state.features = info.features;
    // Without a token or auth configured, only a loopback client may change tasks.
    state.actionsAllowed = info.actions_allowed === true;
    $("read-only").hidden = state.actionsAllowed;
    say("title", info.title);
    document.title = info.title;
    for (const section of document.querySelectorAll("[data-feature]")) section.hidden = !state.features[section.dataset.feature];
  }

  function guarded(load) { return load().catch((error) => { if (error instanceof Unauthorized) throw error; }); }

  async function refresh() {
    const f = state.features;
    const jobs = [];
    if (f.health) jobs.push(guarded(loadHealth));
    if (state.view === "overview" && (f.lanes || f.overview)) jobs.push(guarded(loadOverview));
    if (state.view === "tasks" && f.tasks) jobs.push(guarded(loadTasks));
    if (state.view === "task" && f.tasks) jobs.push(guarded(loadTask));
    if (state.view === "runtime") {
      if (f.scheduled) jobs.push(guarded(loadScheduled));
      if (f.leases) jobs.push(guarded(loadLeases));
      if (f.components) jobs.push(guarded(loadComponents));
      if (f.reports) jobs.push(guarded(loadReports));
    }
    await Promise.all(jobs);
  }

  function schedule(delay) {
    if (state.timer) window.clearTimeout(state.timer);
    state.timer = window.setTimeout(tick, delay);
  }

  async function tick() {
    state.timer = null;
    try {
      if (!state.features) await loadInfo();
      await refresh();
      say("connection", "updated " + new Date().toLocaleTimeString());
    } catch (error) {
      if (error instanceof Unauthorized) { showLogin(); return; }
      say("connection", "disconnected (" + error.message + ")");
    }
    if (!state.timer && !$("content").hidden) schedule(POLL_MS[state.view] || 2000);
  }

  function showLogin() {
    if (state.timer) window.clearTimeout(state.timer);
    state.timer = null;
    state.features = null;
    $("content").hidden = true;
    $("nav").hidden = true;
    $("login").hidden = false;
    say("login-error", token() ? "That token was not accepted." : "");
    $("login-token").focus();
  }

  function start() {
    $("login").hidden = true;
    $("content").hidden = false;
    $("nav").hidden = false;
    $("logout").hidden = !token();
    showView();
  }

  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("login-token").value);
    $("login-token").value = "";
    start();
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    window.location.reload();
  });
  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    state.filters = readFilters();
    state.cursor = {};
    schedule(0);
  });
  $("filters-clear").addEventListener("click", () => {
    $("filters").reset();
    state.filters = {};
    state.cursor = {};
    schedule(0);
  });
  $("page-newest").addEventListener("click", () => { state.cursor = {}; schedule(0); });
  $("page-older").addEventListener("click", () => {
    if (state.page && state.page.next_before_id !== null) { state.cursor = { before_id: state.page.next_before_id }; schedule(0); }
  });
  $("page-newer").addEventListener("click", () => {
    if (state.page && state.page.prev_after_id !== null) { state.cursor = { after_id: state.page.prev_after_id }; schedule(0); }
  });
  for (const button of document.querySelectorAll("[data-bulk]")) button.addEventListener("click", () => bulk(button.dataset.bulk));
  window.addEventListener("hashchange", showView);
  start();
})();
