// MetaService admin page: draws the lineage DAG left to right, coloured by table delay, and explains a table's
// delay (critical path, bottleneck job). Plain JS, no dependencies. All data goes into the DOM as text nodes or
// attributes, never as HTML.
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";
  const params = new URLSearchParams(window.location.search);
  const WARN = Number(params.get("warn") || 60); // seconds: fresh up to here
  const CRIT = Number(params.get("crit") || 300); // seconds: stale beyond here
  const REFRESH_MS = Math.max(1000, Number(params.get("refresh") || 5) * 1000);
  const FOCUS = params.get("table"); // optional: only the graph around one table
  const DEPTH = params.get("depth");
  const TOKEN_KEY = "metaservice-token"; // sessionStorage only: never a cookie, localStorage or the URL
  const TREE_DEPTH = 4; // levels of input snapshots shown at first; "more levels" adds as many again
  const TREE_MAX_DEPTH = 50;

  const TABLE_W = 184, TABLE_H = 48, JOB_W = 160, JOB_H = 32;
  const COL_GAP = 64, ROW_GAP = 12;

  const $ = (id) => document.getElementById(id);
  const svg = $("graph"), viewport = $("viewport"), edgeLayer = $("edges"), nodeLayer = $("nodes");

  const state = {
    graph: null, // last /lineage answer
    byId: new Map(),
    signature: "",
    positions: new Map(), // id -> {x, y, w, h}
    bounds: { minX: 0, minY: 0, maxX: 1, maxY: 1 },
    view: { x: 0, y: 0, k: 1 },
    fitted: false,
    selected: null,
    delay: null, // /delay answer of the selected table
    paused: false,
    timer: null,
    token: sessionStorage.getItem(TOKEN_KEY),
    signedOut: false, // a 401 stopped the page: nothing is polled until a token is given
    seq: 0, // numbers /lineage requests, so an older answer never overwrites a newer question's
    asOf: params.get("as_of"), // null: now; else the barrier number or ISO time the graph is of
    tree: null, // snapshot lineage shown in the panel: {table, snapshot, depth, data, error}
    out: new Map(), // id -> ids it has edges to
    in: new Map(), // id -> ids with edges to it
    elements: new Map(), // id -> <g>
    edgeElements: [], // {from, to, el}
    search: "",
  };

  // ---------------------------------------------------------------------------------------------- helpers

  function el(tag, attrs = {}, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v;
      else node.setAttribute(k, v);
    }
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svgEl(tag, attrs = {}, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function fmtSeconds(s) {
    if (s === null || s === undefined || Number.isNaN(s)) return "—";
    const a = Math.abs(s);
    const two = (big, bigUnit, small, smallUnit) => (small ? `${big} ${bigUnit} ${small} ${smallUnit}` : `${big} ${bigUnit}`);
    if (a < 1) return `${Math.round(s * 1000)} ms`;
    if (a < 60) return `${s.toFixed(a < 10 ? 2 : 1)} s`;
    if (a < 3600) return two(Math.floor(a / 60), "m", Math.round(a % 60), "s");
    if (a < 86400) return two(Math.floor(a / 3600), "h", Math.round((a % 3600) / 60), "m");
    return two(Math.floor(a / 86400), "d", Math.round((a % 86400) / 3600), "h");
  }

  function fmtTime(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return "—";
    const pad = (n, w = 2) => String(n).padStart(w, "0");
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }

  function barrierTime(barrier) {
    // A barrier is microseconds since the epoch.
    if (barrier === null || barrier === undefined) return null;
    return new Date(Math.floor(Number(barrier) / 1000)).toISOString();
  }

  function freshness(delay) {
    if (delay === null || delay === undefined) return "unknown";
    if (delay <= WARN) return "fresh";
    if (delay <= CRIT) return "lagging";
    return "stale";
  }

  function shorten(text, max) {
    return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
  }

  function splitTable(name) {
    const parts = name.split(".");
    return { ns: parts.slice(0, -1).join("."), short: parts[parts.length - 1] };
  }

  function tablePath(name) {
    return name.split(".").map(encodeURIComponent).join("/");
  }

  class SignInNeeded extends Error {}

  async function problemDetail(response) {
    try {
      const problem = await response.json();
      return problem.detail || problem.title || `${response.status}`;
    } catch (_) {
      return `${response.status} ${response.statusText}`.trim();
    }
  }

  // Every API call goes through here: the token travels only in the Authorization header.
  async function api(path) {
    const headers = { Accept: "application/json" };
    const sent = state.token;
    if (sent) headers.Authorization = `Bearer ${sent}`;
    const response = await fetch(path, { headers, cache: "no-store", credentials: "omit" });
    if (response.status === 401) {
      const detail = await problemDetail(response);
      // A token that was replaced meanwhile (signed in again) is not the one the server refused.
      if (sent === state.token) signedOut(sent ? detail : null);
      throw new SignInNeeded(detail);
    }
    if (!response.ok) throw new Error(await problemDetail(response));
    return response.json();
  }

  function setStatus(text, error = false) {
    const status = $("status");
    status.textContent = text;
    status.classList.toggle("error", error);
  }

  // ---------------------------------------------------------------------------------------------- layout

  // Layered left-to-right layout: ranks by longest path, order within a rank by barycentre sweeps, then
  // y positions pulled towards neighbours while keeping order and spacing.
  function layout(nodes, edges) {
    const ids = nodes.map((n) => n.id);
    const size = new Map(nodes.map((n) => [n.id, n.kind === "table" ? [TABLE_W, TABLE_H] : [JOB_W, JOB_H]]));
    const preds = new Map(ids.map((i) => [i, []]));
    const succs = new Map(ids.map((i) => [i, []]));
    for (const e of edges) {
      if (!preds.has(e.to) || !succs.has(e.from)) continue;
      succs.get(e.from).push(e.to);
      preds.get(e.to).push(e.from);
    }
    const rank = new Map(ids.map((i) => [i, 0]));
    const indeg = new Map(ids.map((i) => [i, preds.get(i).length]));
    const queue = ids.filter((i) => indeg.get(i) === 0).sort();
    for (let head = 0; head < queue.length; head++) {
      const n = queue[head];
      for (const s of succs.get(n)) {
        rank.set(s, Math.max(rank.get(s), rank.get(n) + 1));
        indeg.set(s, indeg.get(s) - 1);
        if (indeg.get(s) === 0) queue.push(s);
      }
    }
    // Sources sit right before their first reader, so roots feeding late jobs do not stretch across the page.
    for (const i of ids) {
      if (preds.get(i).length === 0 && succs.get(i).length > 0) {
        rank.set(i, Math.max(0, Math.min(...succs.get(i).map((s) => rank.get(s))) - 1));
      }
    }
    const depth = Math.max(0, ...rank.values());
    const layers = Array.from({ length: depth + 1 }, () => []);
    for (const i of [...ids].sort()) layers[rank.get(i)].push(i);

    const order = new Map();
    const renumber = (layer) => layer.forEach((id, idx) => order.set(id, idx));
    layers.forEach(renumber);
    const sweep = (layer, neighbours) => {
      const key = new Map();
      for (const id of layer) {
        const ns = neighbours.get(id).filter((n) => order.has(n));
        key.set(id, ns.length ? ns.reduce((a, n) => a + order.get(n), 0) / ns.length : order.get(id));
      }
      layer.sort((a, b) => key.get(a) - key.get(b) || order.get(a) - order.get(b));
      renumber(layer);
    };
    for (let iter = 0; iter < 6; iter++) {
      for (let r = 1; r <= depth; r++) sweep(layers[r], preds);
      for (let r = depth - 1; r >= 0; r--) sweep(layers[r], succs);
    }

    const positions = new Map();
    let x = 0;
    const colX = [];
    for (const layer of layers) {
      colX.push(x);
      const width = Math.max(0, ...layer.map((id) => size.get(id)[0]));
      x += width + COL_GAP;
    }
    // initial stacking, centred on 0
    const y = new Map();
    for (const layer of layers) {
      const total = layer.reduce((a, id) => a + size.get(id)[1] + ROW_GAP, -ROW_GAP);
      let cursor = -total / 2;
      for (const id of layer) {
        y.set(id, cursor + size.get(id)[1] / 2); // centre line
        cursor += size.get(id)[1] + ROW_GAP;
      }
    }
    const place = (layer, neighbours) => {
      if (!layer.length) return;
      const desired = layer.map((id) => {
        const ns = neighbours.get(id);
        return ns.length ? ns.reduce((a, n) => a + y.get(n), 0) / ns.length : y.get(id);
      });
      const placed = [];
      layer.forEach((id, idx) => {
        const half = size.get(id)[1] / 2;
        let want = desired[idx];
        if (idx > 0) {
          const prev = layer[idx - 1];
          want = Math.max(want, placed[idx - 1] + size.get(prev)[1] / 2 + ROW_GAP + half);
        }
        placed.push(want);
      });
      const shift = placed.reduce((a, v, idx) => a + (v - desired[idx]), 0) / placed.length;
      layer.forEach((id, idx) => y.set(id, placed[idx] - shift));
    };
    for (let iter = 0; iter < 4; iter++) {
      for (let r = 1; r <= depth; r++) place(layers[r], preds);
      for (let r = depth - 1; r >= 0; r--) place(layers[r], succs);
    }
    let minY = Infinity, maxY = -Infinity;
    layers.forEach((layer, r) => {
      const width = Math.max(0, ...layer.map((id) => size.get(id)[0]));
      for (const id of layer) {
        const [w, h] = size.get(id);
        const pos = { x: colX[r] + (width - w) / 2, y: y.get(id) - h / 2, w, h };
        positions.set(id, pos);
        minY = Math.min(minY, pos.y);
        maxY = Math.max(maxY, pos.y + h);
      }
    });
    if (!Number.isFinite(minY)) {
      minY = 0;
      maxY = 1;
    }
    return { positions, bounds: { minX: 0, minY, maxX: Math.max(1, x - COL_GAP), maxY } };
  }

  // ---------------------------------------------------------------------------------------------- drawing

  function edgePath(a, b) {
    const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x - 2, y2 = b.y + b.h / 2;
    const dx = Math.max(30, (x2 - x1) / 2);
    return `M ${x1} ${y1} C ${x1 + dx} ${y1}, ${x2 - dx} ${y2}, ${x2} ${y2}`;
  }

  function freshnessOf(n) {
    // `delay_seconds` is the old name of freshness, answered by servers that predate the two figures.
    return n.freshness_seconds !== undefined ? n.freshness_seconds : n.delay_seconds;
  }

  function lagText(lag) {
    if (lag === null || lag === undefined) return "";
    return lag === 0 ? "caught up" : `lag ${fmtSeconds(lag)}`;
  }

  function tableNode(n, pos) {
    const fresh = freshnessOf(n);
    const g = svgEl("g", {
      class: `node table ${freshness(fresh)}`,
      transform: `translate(${pos.x},${pos.y})`,
      "data-id": n.id,
      "data-kind": "table",
      tabindex: 0,
      role: "button",
    });
    const { ns, short } = splitTable(n.name);
    const figures = [
      `freshness ${fresh === null || fresh === undefined ? "—" : fmtSeconds(fresh)} (age of the newest barrier it completed)`,
      n.lag_seconds === null || n.lag_seconds === undefined
        ? "lag —"
        : `lag ${fmtSeconds(n.lag_seconds)} (behind the newest root data; 0: caught up)`,
    ];
    g.appendChild(svgEl("title", {}, `${n.name}\n${n.table_kind} table\n${figures.join("\n")}`));
    g.appendChild(svgEl("rect", { class: "shape", width: pos.w, height: pos.h, rx: 6, ry: 6 }));
    g.appendChild(svgEl("rect", { class: "stripe", width: 5, height: pos.h - 2, x: 1, y: 1, rx: 3, ry: 3 }));
    g.appendChild(svgEl("text", { class: "name", x: 12, y: 16 }, shorten(short, 22)));
    const delay = svgEl("text", { class: "delay", x: pos.w - 8, y: 16, "text-anchor": "end" },
      fresh === null || fresh === undefined ? "—" : fmtSeconds(fresh));
    g.appendChild(delay);
    const lag = n.lag_seconds;
    g.appendChild(svgEl("text", { class: "ns", x: 12, y: 29 },
      shorten(`${ns}${n.table_kind === "root" ? " · root" : ""}`, lag === null || lag === undefined ? 32 : 17)));
    if (lag !== null && lag !== undefined) {
      const lagEl = svgEl("text", {
        class: `lag${lag > 0 ? " behind" : ""}`, x: pos.w - 8, y: 29, "text-anchor": "end", "data-seconds": lag,
      }, lagText(lag));
      g.appendChild(lagEl);
    }
    const meta = n.newest_complete_barrier === null
      ? "no complete barrier yet"
      : `barrier ${fmtTime(barrierTime(n.newest_complete_barrier))} · snap ${n.newest_complete_snapshot_id}`;
    g.appendChild(svgEl("text", { class: "meta", x: 12, y: 41 }, shorten(meta, 34)));
    g.appendChild(badge(pos.w));
    return g;
  }

  function lastRunLine(n) {
    const runs = n.recent_runs || [];
    const flying = runs.find((r) => r.status === "in_flight");
    if (flying) return { status: "in_flight", text: `in flight since ${fmtTime(flying.started_at)}` };
    const done = runs.find((r) => r.status === "committed");
    if (done) {
      return {
        status: "committed",
        text: `proc ${fmtSeconds(done.processing_seconds)} · wait ${fmtSeconds(done.waiting_seconds)}`,
      };
    }
    if (runs.length) return { status: runs[0].status, text: runs[0].status };
    return { status: "none", text: n.last_barrier === null ? "no barrier yet" : "idle" };
  }

  function jobNode(n, pos) {
    const g = svgEl("g", {
      class: `node job${n.is_active ? "" : " inactive"}`,
      transform: `translate(${pos.x},${pos.y})`,
      "data-id": n.id,
      "data-kind": "job",
      tabindex: 0,
      role: "button",
    });
    const line = lastRunLine(n);
    g.appendChild(svgEl("title", {}, `job ${n.name}\n${line.text}`));
    g.appendChild(svgEl("rect", { class: "shape", width: pos.w, height: pos.h, rx: pos.h / 2, ry: pos.h / 2 }));
    g.appendChild(svgEl("circle", { class: `dot ${line.status}`, cx: 13, cy: pos.h / 2, r: 4 }));
    g.appendChild(svgEl("text", { class: "name", x: 23, y: 13 }, shorten(n.name, 18)));
    g.appendChild(svgEl("text", { class: "meta", x: 23, y: 25 }, shorten(line.text, 27)));
    g.appendChild(badge(pos.w));
    return g;
  }

  function badge(width) {
    const b = svgEl("g", { class: "badge", transform: `translate(${width - 70},-9)` });
    b.appendChild(svgEl("rect", { width: 72, height: 15, rx: 7, ry: 7 }));
    b.appendChild(svgEl("text", { x: 36, y: 11, "text-anchor": "middle" }, "BOTTLENECK"));
    return b;
  }

  function draw(relayout) {
    const graph = state.graph;
    if (relayout || state.elements.size !== graph.nodes.length) {
      clear(edgeLayer);
      clear(nodeLayer);
      state.elements.clear();
      state.edgeElements = [];
      for (const e of graph.edges) {
        const a = state.positions.get(e.from), b = state.positions.get(e.to);
        if (!a || !b) continue;
        const path = svgEl("path", {
          class: "edge", d: edgePath(a, b), "marker-end": "url(#arrow)", "data-from": e.from, "data-to": e.to,
        });
        edgeLayer.appendChild(path);
        state.edgeElements.push({ from: e.from, to: e.to, el: path });
      }
    }
    for (const n of graph.nodes) {
      const pos = state.positions.get(n.id);
      if (!pos) continue;
      const fresh = n.kind === "table" ? tableNode(n, pos) : jobNode(n, pos);
      const current = state.elements.get(n.id);
      if (!current) {
        nodeLayer.appendChild(fresh);
        state.elements.set(n.id, fresh);
        continue;
      }
      // Same graph: update the drawn node in place, so focus, clicks and references survive a refresh.
      current.setAttribute("class", fresh.getAttribute("class"));
      current.replaceChildren(...fresh.childNodes);
    }
    drawMinimap();
    $("empty").hidden = graph.nodes.length > 0;
    const banner = $("banner");
    banner.hidden = !graph.truncated;
    banner.textContent = graph.truncated
      ? `Showing the first ${graph.nodes.length} nodes only: the graph is larger than the node cap.`
      : "";
    applyHighlight();
  }

  // ---------------------------------------------------------------------------------------------- view

  function drawMinimap() {
    const layer = $("minimap-nodes");
    clear(layer);
    const b = state.bounds, pad = 20;
    $("minimap").setAttribute("viewBox", `${b.minX - pad} ${b.minY - pad} ${b.maxX - b.minX + 2 * pad} ${b.maxY - b.minY + 2 * pad}`);
    $("minimap").setAttribute("preserveAspectRatio", "xMidYMid meet");
    for (const n of state.graph.nodes) {
      const pos = state.positions.get(n.id);
      if (!pos) continue;
      const cls = n.kind === "table" ? `mm ${freshness(freshnessOf(n))}` : "mm job";
      layer.appendChild(svgEl("rect", { class: cls, x: pos.x, y: pos.y, width: pos.w, height: pos.h, rx: 6 }));
    }
  }

  function visibleArea() {
    const box = svg.getBoundingClientRect();
    const { x, y, k } = state.view;
    return { x: -x / k, y: -y / k, w: box.width / k, h: box.height / k };
  }

  function applyView() {
    const { x, y, k } = state.view;
    viewport.setAttribute("transform", `translate(${x},${y}) scale(${k})`);
    svg.classList.toggle("lod-low", k < 0.6);
    const area = visibleArea(), b = state.bounds;
    const everything = area.x <= b.minX && area.y <= b.minY && area.x + area.w >= b.maxX && area.y + area.h >= b.maxY;
    // SVG elements have no `hidden` property: toggle the attribute
    $("minimap").toggleAttribute("hidden", everything || !state.graph || !state.graph.nodes.length);
    const view = $("minimap-view");
    view.setAttribute("x", area.x);
    view.setAttribute("y", area.y);
    view.setAttribute("width", area.w);
    view.setAttribute("height", area.h);
  }

  // The part of the canvas nothing covers, in canvas coordinates: left of the side panel (should it ever overlap
  // the canvas, as on a narrow window) and below the "as of" bar when it is shown.
  function freeArea() {
    const box = svg.getBoundingClientRect();
    const panel = $("panel").getBoundingClientRect();
    let right = box.width;
    if (panel.width > 0 && panel.left < box.right && panel.right > box.left) right = Math.max(0, panel.left - box.left);
    const past = $("past");
    const top = past.hidden ? 0 : past.getBoundingClientRect().bottom - box.top;
    return { x: 0, y: Math.max(0, top), w: right, h: Math.max(0, box.height - Math.max(0, top)) };
  }

  // The whole graph's bounding box, centred in the free area with a margin, at most slightly enlarged.
  function fit() {
    const area = freeArea();
    const b = state.bounds, margin = 24;
    const w = b.maxX - b.minX, h = b.maxY - b.minY;
    const k = Math.min(1.4, Math.max(0.005, Math.min((area.w - 2 * margin) / w, (area.h - 2 * margin) / h)));
    state.view = {
      k,
      x: area.x + (area.w - w * k) / 2 - b.minX * k,
      y: area.y + (area.h - h * k) / 2 - b.minY * k,
    };
    applyView();
  }

  function zoomAt(factor, cx, cy) {
    const v = state.view;
    const k = Math.min(4, Math.max(0.03, v.k * factor));
    const f = k / v.k;
    state.view = { k, x: cx - (cx - v.x) * f, y: cy - (cy - v.y) * f };
    applyView();
  }

  function centreOn(id) {
    const pos = state.positions.get(id);
    if (!pos) return;
    const box = svg.getBoundingClientRect();
    const k = Math.max(state.view.k, 0.8);
    state.view = { k, x: box.width / 2 - (pos.x + pos.w / 2) * k, y: box.height / 2 - (pos.y + pos.h / 2) * k };
    applyView();
  }

  // ---------------------------------------------------------------------------------------------- selection

  function reach(start, forward) {
    const adjacency = forward ? state.out : state.in;
    const seen = new Set([start]);
    const stack = [start];
    while (stack.length) {
      for (const next of adjacency.get(stack.pop()) || []) {
        if (!seen.has(next)) {
          seen.add(next);
          stack.push(next);
        }
      }
    }
    return seen;
  }

  function criticalIds() {
    const nodes = new Set(), edges = new Set();
    const d = state.delay;
    if (!d || `table:${d.table}` !== state.selected) return { nodes, edges, bottleneck: null };
    let previousTable = null;
    for (const step of d.critical_path) {
      const job = `job:${step.job_id}`, table = `table:${step.table}`;
      nodes.add(job);
      nodes.add(table);
      edges.add(`${job}>${table}`);
      if (previousTable) edges.add(`${previousTable}>${job}`);
      previousTable = table;
    }
    return { nodes, edges, bottleneck: d.bottleneck_job ? `job:${d.bottleneck_job}` : null };
  }

  function applyHighlight() {
    const selected = state.selected && state.byId.has(state.selected) ? state.selected : null;
    svg.classList.toggle("dimmed", Boolean(selected));
    const related = selected ? new Set([...reach(selected, true), ...reach(selected, false)]) : new Set();
    const critical = criticalIds();
    const query = state.search.trim().toLowerCase();
    for (const [id, g] of state.elements) {
      g.classList.toggle("selected", id === selected);
      g.classList.toggle("hl", related.has(id));
      g.classList.toggle("critical", critical.nodes.has(id));
      g.classList.toggle("bottleneck", id === critical.bottleneck);
      g.classList.toggle("match", Boolean(query) && state.byId.get(id).name.toLowerCase().includes(query));
    }
    for (const e of state.edgeElements) {
      const isCritical = critical.edges.has(`${e.from}>${e.to}`);
      const isRelated = related.has(e.from) && related.has(e.to);
      e.el.classList.toggle("critical", isCritical);
      e.el.classList.toggle("hl", isRelated && !isCritical);
      const marker = isCritical ? "url(#arrow-critical)" : isRelated ? "url(#arrow-hl)" : "url(#arrow)";
      e.el.setAttribute("marker-end", marker);
    }
  }

  async function select(id) {
    if (id !== state.selected) state.tree = null;
    state.selected = id;
    state.delay = null;
    applyHighlight();
    await renderPanel();
  }

  // ---------------------------------------------------------------------------------------------- side panel

  function figure(list, label, value, attrs = {}) {
    list.appendChild(el("dt", {}, label));
    list.appendChild(el("dd", attrs, value));
  }

  function closeButton() {
    const b = el("button", { class: "close", type: "button", title: "Close", "aria-label": "Close" }, "×");
    b.addEventListener("click", () => select(null));
    return b;
  }

  async function renderPanel() {
    const body = $("panel-body");
    const node = state.selected ? state.byId.get(state.selected) : null;
    $("panel-intro").hidden = Boolean(node);
    body.hidden = !node;
    if (!node) return;
    if (node.kind === "job") {
      renderJob(body, node);
      return;
    }
    const requested = state.selected;
    // In the past, explain the barrier the table had completed then, not today's.
    const past = state.asOf !== null;
    const barrier = node.newest_complete_barrier;
    try {
      const delay = past && barrier === null
        ? null
        : await api(`/tables/${tablePath(node.name)}/delay${past ? `?barrier=${encodeURIComponent(barrier)}` : ""}`);
      if (state.selected !== requested) return;
      state.delay = delay;
    } catch (err) {
      if (state.selected !== requested || err instanceof SignInNeeded) return;
      state.delay = null;
      setStatus(`delay of ${node.name}: ${err.message}`, true);
    }
    renderTable(body, state.byId.get(requested) || node, state.delay);
    applyHighlight();
  }

  function renderTable(body, node, delay) {
    clear(body);
    body.appendChild(closeButton());
    const { ns, short } = splitTable(node.name);
    body.appendChild(el("h2", { id: "panel-title" }, short));
    body.appendChild(el("div", { class: "kind" }, `${ns} · ${node.table_kind} table${node.format ? ` · ${node.format}` : ""}`));

    // In the past the node's figures are of that moment; today's delay endpoint would measure against now.
    const seconds = delay && state.asOf === null ? freshnessOf(delay) : freshnessOf(node);
    const figures = el("div", { class: "two-figures" });
    const fresh = el("div");
    fresh.appendChild(el("div", { class: "muted", title: "now − issue time of the newest barrier it completed" },
      state.asOf === null ? "freshness" : "freshness then"));
    const big = el("div", { id: "panel-delay", class: `delay-big ${freshness(seconds)}` },
      seconds === null || seconds === undefined ? "nothing complete yet" : fmtSeconds(seconds));
    if (seconds !== null && seconds !== undefined) big.dataset.seconds = String(seconds);
    fresh.appendChild(big);
    figures.appendChild(fresh);
    const lagBox = el("div");
    lagBox.appendChild(el("div", { class: "muted", title: "how far behind the newest root data; 0: caught up" },
      "lag"));
    const lag = delay && state.asOf === null && delay.lag_seconds !== undefined ? delay.lag_seconds : node.lag_seconds;
    const known = lag !== null && lag !== undefined;
    const lagEl = el("div", { id: "panel-lag", class: `delay-big lag${known && lag > 0 ? " behind" : ""}` },
      known ? (lag === 0 ? "caught up" : fmtSeconds(lag)) : "—");
    if (known) lagEl.dataset.seconds = String(lag);
    lagEl.title = known ? "" : state.asOf === null ? "nothing complete yet" : "lag is not kept through time";
    lagBox.appendChild(lagEl);
    figures.appendChild(lagBox);
    body.appendChild(figures);

    const box = el("div", { class: "bottleneck-box" });
    box.appendChild(el("div", { class: "label" }, "bottleneck job"));
    const name = delay && delay.bottleneck_job;
    box.appendChild(el("div", { id: "panel-bottleneck", class: "job" }, name || "none on this path"));
    if (name) {
      box.appendChild(el("div", { class: "muted" }, `${fmtSeconds(delay.bottleneck_seconds)} waiting + processing`));
    } else {
      box.classList.add("none");
    }
    body.appendChild(box);

    const list = el("dl", { class: "figures" });
    const barrier = delay ? delay.barrier : node.newest_complete_barrier;
    figure(list, "barrier", barrier === null ? "—" : String(barrier));
    figure(list, "issued", delay && delay.issued_at ? fmtTime(delay.issued_at) : fmtTime(node.newest_complete_issued_at));
    figure(list, "completed", delay && delay.completed_at ? fmtTime(delay.completed_at) : "—");
    figure(list, "end to end", delay ? fmtSeconds(delay.end_to_end_seconds) : "—");
    snapshotFigure(list, "snapshot", node, node.newest_complete_snapshot_id, "panel-snapshot");
    snapshotFigure(list, "latest known", node, node.latest_snapshot_id, "panel-latest-snapshot");
    body.appendChild(list);
    body.appendChild(snapshotTree(node));

    body.appendChild(el("h3", {}, "critical path (roots → table)"));
    const path = delay ? delay.critical_path : [];
    if (!path.length) {
      body.appendChild(el("p", { class: "muted" },
        node.table_kind === "root" ? "A root table: it is complete as soon as a barrier seals it." : "No steps."));
    } else {
      const longest = Math.max(1e-9, ...path.map((s) => s.waiting_seconds + s.processing_seconds));
      const ol = el("ol", { class: "path", id: "panel-path" });
      for (const step of path) {
        const li = el("li");
        const row = el("div", { class: "row" });
        const isBottleneck = step.job_id === delay.bottleneck_job;
        row.appendChild(el("span", { class: `job${isBottleneck ? " bottleneck" : ""}` },
          `${isBottleneck ? "⚑ " : ""}${step.job_id}${step.status === "idle" ? " (idle)" : ""}`));
        row.appendChild(el("span", { class: "times" },
          `wait ${fmtSeconds(step.waiting_seconds)} · proc ${fmtSeconds(step.processing_seconds)}`));
        li.appendChild(row);
        li.appendChild(el("div", { class: "out" }, `→ ${step.table}`));
        const bar = el("div", { class: "spanbar" });
        const wait = el("span", { class: "wait" });
        const proc = el("span", { class: "proc" });
        wait.style.width = `${(100 * step.waiting_seconds) / longest}%`;
        proc.style.width = `${(100 * step.processing_seconds) / longest}%`;
        bar.appendChild(wait);
        bar.appendChild(proc);
        li.appendChild(bar);
        ol.appendChild(li);
      }
      body.appendChild(ol);
      const keys = el("div", { class: "keys" });
      keys.appendChild(el("span", { class: "k-wait" }, "waiting for inputs / to start"));
      keys.appendChild(el("span", { class: "k-proc" }, "processing"));
      body.appendChild(keys);
    }
    const writer = state.graph.edges.filter((e) => e.to === node.id).map((e) => e.from.slice(4));
    const readers = state.graph.edges.filter((e) => e.from === node.id).map((e) => e.to.slice(4));
    body.appendChild(el("h3", {}, "lineage"));
    const lin = el("dl", { class: "figures" });
    figure(lin, "writer", writer.length ? writer.join(", ") : "— (root)");
    figure(lin, "readers", readers.length ? readers.join(", ") : "—");
    body.appendChild(lin);
  }

  // A snapshot id as a button: clicking it shows the snapshot's lineage tree below the figures.
  function snapshotFigure(list, label, node, snapshot, id) {
    list.appendChild(el("dt", {}, label));
    const dd = el("dd");
    if (snapshot === null || snapshot === undefined) {
      dd.textContent = "—";
    } else {
      const button = el("button", {
        class: "snap-link", type: "button", id, "data-snapshot": snapshot,
        title: "show the runs and input snapshots this snapshot was built from",
      }, String(snapshot));
      button.addEventListener("click", () => showTree(node.name, snapshot, TREE_DEPTH));
      dd.appendChild(button);
    }
    list.appendChild(dd);
  }

  async function showTree(table, snapshot, depth) {
    state.tree = { table, snapshot, depth, data: null, error: null };
    const asked = state.tree;
    redrawTree();
    try {
      const data = await api(`/tables/${tablePath(table)}/snapshots/${encodeURIComponent(snapshot)}/lineage?depth=${depth}`);
      if (state.tree === asked) asked.data = data;
    } catch (err) {
      if (state.tree === asked) asked.error = err.message;
    }
    if (state.tree === asked) redrawTree();
  }

  function redrawTree() {
    const current = $("snapshot-lineage");
    const node = state.selected ? state.byId.get(state.selected) : null;
    if (current && node) current.replaceWith(snapshotTree(node));
  }

  function snapshotTree(node) {
    const box = el("div", { id: "snapshot-lineage" });
    const tree = state.tree;
    if (!tree || tree.table !== node.name) return box;
    box.appendChild(el("h3", {}, `snapshot ${tree.snapshot}: built from`));
    if (tree.error) {
      box.appendChild(el("p", { class: "tree-error", id: "snapshot-lineage-error" }, tree.error));
      return box;
    }
    if (!tree.data) {
      box.appendChild(el("p", { class: "muted" }, "loading…"));
      return box;
    }
    const root = el("ul", { class: "tree" });
    root.appendChild(treeEntry(tree.data, true));
    box.appendChild(root);
    if (containsCut(tree.data) && tree.depth < TREE_MAX_DEPTH) {
      const more = el("button", { class: "tree-more", type: "button", id: "snapshot-lineage-more" }, "more levels");
      more.addEventListener("click",
        () => showTree(tree.table, tree.snapshot, Math.min(TREE_MAX_DEPTH, tree.depth + TREE_DEPTH)));
      box.appendChild(more);
    }
    return box;
  }

  function containsCut(entry) {
    return entry.truncated || entry.inputs.some(containsCut);
  }

  // table@snapshot ← job@barrier, then the input snapshots the run read, each the same way.
  function treeEntry(entry, top = false) {
    const li = el("li", {
      class: "entry", "data-table": entry.table, "data-snapshot": entry.snapshot_id,
      "data-job": entry.job === null ? "" : entry.job, "data-barrier": entry.barrier === null ? "" : entry.barrier,
    });
    const line = el("div", { class: "line" });
    const id = `table:${entry.table}`;
    if (!top && state.byId.has(id)) {
      // Drill down: select the input table and show this snapshot's own tree there.
      const go = el("button", { class: "t tree-table", type: "button", title: "select it and show its lineage" },
        entry.table);
      go.addEventListener("click", async () => {
        centreOn(id);
        await select(id);
        showTree(entry.table, entry.snapshot_id, TREE_DEPTH);
      });
      line.appendChild(go);
    } else {
      line.appendChild(el("span", { class: "t" }, entry.table));
    }
    line.appendChild(el("span", { class: "snap" }, `@${entry.snapshot_id}`));
    const at = entry.barrier === null ? null : el("span", { class: "b", title: `barrier ${entry.barrier}` },
      `barrier ${fmtTime(barrierTime(entry.barrier))}`);
    if (entry.job !== null) {
      line.appendChild(el("span", { class: "arrow" }, " ← "));
      line.appendChild(el("span", { class: "job" }, entry.job));
      if (at) {
        line.appendChild(el("span", { class: "arrow" }, " @ "));
        line.appendChild(at);
      }
      if (entry.started_at && entry.finished_at) {
        const took = (new Date(entry.finished_at) - new Date(entry.started_at)) / 1000;
        line.appendChild(el("span", { class: "dur" }, ` · ran ${fmtSeconds(took)}`));
      }
    } else {
      line.appendChild(el("span", { class: "arrow" }, " · "));
      line.appendChild(at ? el("span", { class: "b" }, "root, sealed by ") : el("span", { class: "b" }, "root, not sealed by a barrier yet"));
      if (at) line.appendChild(at);
    }
    li.appendChild(line);
    if (entry.inputs.length) {
      const ul = el("ul");
      for (const input of entry.inputs) ul.appendChild(treeEntry(input, false));
      li.appendChild(ul);
    }
    if (entry.truncated) li.appendChild(el("div", { class: "cut" }, "… inputs not shown (depth)"));
    return li;
  }

  function renderJob(body, node) {
    clear(body);
    body.appendChild(closeButton());
    body.appendChild(el("h2", { id: "panel-title" }, node.name));
    body.appendChild(el("div", { class: "kind" }, `job${node.is_active ? "" : " · unregistered"}`));
    const list = el("dl", { class: "figures" });
    figure(list, "last barrier", node.last_barrier === null ? "—" : String(node.last_barrier));
    figure(list, "lag", node.lag_seconds === null ? "—" : `${fmtSeconds(node.lag_seconds)} behind the newest barrier`);
    const inputs = state.graph.edges.filter((e) => e.to === node.id).map((e) => e.from.slice(6));
    const outputs = state.graph.edges.filter((e) => e.from === node.id).map((e) => e.to.slice(6));
    figure(list, "reads", inputs.join(", ") || "—");
    figure(list, "writes", outputs.join(", ") || "—");
    body.appendChild(list);
    body.appendChild(el("h3", {}, "recent barriers"));
    const runs = node.recent_runs || [];
    if (!runs.length) {
      body.appendChild(el("p", { class: "muted" }, "No barrier processed yet (idle stretches are not listed)."));
      return;
    }
    const table = el("table", { class: "runs", id: "panel-runs" });
    const head = el("tr");
    for (const h of ["barrier", "status", "wait", "proc"]) head.appendChild(el("th", {}, h));
    table.appendChild(head);
    for (const r of runs) {
      const tr = el("tr");
      const when = el("td", { title: String(r.barrier) }, fmtTime(barrierTime(r.barrier)));
      tr.appendChild(when);
      const status = el("td");
      status.appendChild(el("span", { class: `pill ${r.status}` }, r.status.replace("_", " ")));
      tr.appendChild(status);
      tr.appendChild(el("td", {}, fmtSeconds(r.waiting_seconds)));
      tr.appendChild(el("td", {}, r.status === "in_flight" ? "running" : fmtSeconds(r.processing_seconds)));
      table.appendChild(tr);
    }
    body.appendChild(table);
  }

  function renderSummary() {
    const tables = state.graph.nodes.filter((n) => n.kind === "table");
    const jobs = state.graph.nodes.filter((n) => n.kind === "job");
    const summary = $("summary");
    clear(summary);
    const counts = { fresh: 0, lagging: 0, stale: 0, unknown: 0 };
    for (const t of tables) counts[freshness(freshnessOf(t))] += 1;
    for (const [value, label] of [[tables.length, "tables"], [jobs.length, "jobs"],
      [counts.stale + counts.lagging, "lagging or stale"]]) {
      const cell = el("div");
      cell.appendChild(el("b", {}, String(value)));
      cell.appendChild(el("span", {}, label));
      summary.appendChild(cell);
    }
    const worst = $("worst");
    clear(worst);
    const sorted = [...tables].sort((a, b) => {
      const da = freshnessOf(a) === null ? Infinity : freshnessOf(a);
      const db = freshnessOf(b) === null ? Infinity : freshnessOf(b);
      return db - da || a.name.localeCompare(b.name);
    });
    for (const t of sorted.slice(0, 8)) {
      const li = el("li");
      li.appendChild(el("span", { class: `d ${freshness(freshnessOf(t))}` },
        freshnessOf(t) === null ? "—" : fmtSeconds(freshnessOf(t))));
      li.appendChild(el("span", { class: "tname" }, t.name));
      li.addEventListener("click", () => {
        centreOn(t.id);
        select(t.id);
      });
      worst.appendChild(li);
    }
  }

  // ---------------------------------------------------------------------------------------------- refresh

  function lineageUrl(asOf) {
    const q = new URLSearchParams({ max_nodes: "5000" });
    if (FOCUS) q.set("table", FOCUS);
    if (FOCUS && DEPTH) q.set("depth", DEPTH);
    if (asOf !== null) q.set("as_of", asOf);
    return `/lineage?${q}`;
  }

  function show(graph) {
    state.graph = graph;
    state.byId = new Map(graph.nodes.map((n) => [n.id, n]));
    state.out = new Map();
    state.in = new Map();
    for (const e of graph.edges) {
      if (!state.out.has(e.from)) state.out.set(e.from, []);
      if (!state.in.has(e.to)) state.in.set(e.to, []);
      state.out.get(e.from).push(e.to);
      state.in.get(e.to).push(e.from);
    }
    const signature = JSON.stringify([graph.nodes.map((n) => n.id), graph.edges.map((e) => `${e.from}>${e.to}`)]);
    const relayout = signature !== state.signature;
    if (relayout) {
      const { positions, bounds } = layout(graph.nodes, graph.edges);
      state.positions = positions;
      state.bounds = bounds;
      state.signature = signature;
    }
    showPast(graph.as_of || null);
    draw(relayout);
    if (!state.fitted && graph.nodes.length) {
      fit();
      state.fitted = true;
    }
    renderSummary();
    if (state.selected && !state.byId.has(state.selected)) state.selected = null;
  }

  // Loads the graph now or as of `state.asOf`. The present is polled; the past does not change, so it is not.
  async function refresh(preloaded = null) {
    clearTimeout(state.timer);
    const seq = ++state.seq;
    const asked = state.asOf;
    try {
      const graph = preloaded || (await api(lineageUrl(asked)));
      if (seq !== state.seq) return;
      signedIn();
      show(graph);
      await renderPanel();
      if (seq !== state.seq) return;
      const tables = graph.nodes.filter((n) => n.kind === "table").length;
      svg.dataset.loaded = "true";
      svg.dataset.asOf = asked === null ? "" : asked;
      const when = asked === null ? `updated ${fmtTime(new Date().toISOString())}` : "as of the past, not refreshed";
      setStatus(`${tables} tables · ${graph.nodes.length - tables} jobs · ${when}`);
      loadChanges();
    } catch (err) {
      if (seq !== state.seq || err instanceof SignInNeeded) return; // signed out: nothing is polled
      if (asked !== null) showAsOfError(err.message);
      if (!$("auth").hidden) {
        // Signing in, and the server failed otherwise (down, 5xx): say so; the next poll tries the token again.
        $("auth-error").hidden = false;
        $("auth-error").textContent = `The server did not answer: ${err.message}`;
        $("auth-submit").disabled = false;
      }
      setStatus(`refresh failed: ${err.message}${asked === null ? " — retrying" : ""}`, true);
    }
    if (!state.paused && state.asOf === null && seq === state.seq) state.timer = setTimeout(refresh, REFRESH_MS);
  }

  // ---------------------------------------------------------------------------------------------- as of

  // What the admin typed, as the server's `as_of`: digits are a barrier; a time without a zone is local time.
  function asOfValue(text) {
    const value = text.trim();
    if (/^\d+$/.test(value)) return value;
    // Times go out as RFC 3339 in UTC with seconds, the one form the server takes (it refuses zoneless times).
    if (/(Z|[+-]\d\d:?\d\d)$/i.test(value) && !Number.isNaN(Date.parse(value))) return new Date(value).toISOString();
    const clock = /^(\d{1,2}):(\d\d)(?::(\d\d)(\.\d+)?)?$/.exec(value);
    if (clock) {
      const d = new Date();
      d.setHours(Number(clock[1]), Number(clock[2]), Number(clock[3] || 0), Math.round(Number(clock[4] || 0) * 1000));
      return d.toISOString();
    }
    const local = new Date(value.replace(" ", "T"));
    return Number.isNaN(local.getTime()) ? value : local.toISOString(); // else the server says what is wrong
  }

  function showAsOfError(message) {
    const box = $("as-of-error");
    box.hidden = !message;
    box.textContent = message ? `As of: ${message}` : "";
  }

  function rememberAsOf(value) {
    const url = new URL(window.location.href);
    if (value === null) url.searchParams.delete("as_of");
    else url.searchParams.set("as_of", value);
    window.history.replaceState(null, "", url);
  }

  // Loads the graph as of `value` (null: now). A value the server refuses leaves the page showing what it showed.
  async function goTo(value) {
    showAsOfError(null);
    clearTimeout(state.timer);
    const seq = ++state.seq;
    let graph = null;
    if (value !== null) {
      try {
        graph = await api(lineageUrl(value));
      } catch (err) {
        if (seq === state.seq && !(err instanceof SignInNeeded)) {
          showAsOfError(err.message);
          if (state.asOf === null && !state.paused) state.timer = setTimeout(refresh, REFRESH_MS);
        }
        return;
      }
      if (seq !== state.seq) return;
      state.asOf = value;
    } else {
      state.asOf = null;
      $("as-of").value = "";
    }
    state.fitted = false;
    state.tree = null;
    rememberAsOf(state.asOf);
    await refresh(graph);
  }

  function showPast(asOf) {
    const past = $("past");
    const inPast = state.asOf !== null && asOf !== null;
    document.body.classList.toggle("in-past", inPast);
    past.hidden = !inPast;
    $("as-of-now").hidden = !inPast;
    if (!inPast) return;
    const barrier = asOf.barrier === null ? "before the first barrier" : `barrier ${asOf.barrier}`;
    const time = new Date(asOf.time);
    const when = Number.isNaN(time.getTime()) ? asOf.time : time.toLocaleString();
    $("past-text").textContent = `Showing the past: the lineage as of ${when} (${barrier}). Not refreshed.`;
    past.dataset.barrier = asOf.barrier === null ? "" : String(asOf.barrier);
    if (document.activeElement !== $("as-of") && !$("as-of").value) $("as-of").value = state.asOf;
  }

  // The newest lineage changes, each a way into the graph just before it took effect.
  async function loadChanges() {
    let page;
    try {
      page = await api("/lineage/changes?limit=20");
    } catch (_) {
      return; // an older server without the endpoint: the list stays empty
    }
    const list = $("changes");
    const key = JSON.stringify(page.changes);
    if (list.dataset.key === key) return;
    list.dataset.key = key;
    clear(list);
    if (!page.changes.length) list.appendChild(el("li", { class: "muted" }, "none recorded"));
    for (const c of page.changes) {
      const li = el("li", {
        "data-barrier": c.barrier, title: c.barrier ? `show the lineage as of barrier ${c.barrier}` : "",
      });
      li.appendChild(el("span", { class: c.change }, c.change === "added" ? "+ " : "− "));
      li.appendChild(el("span", {}, `${c.job_id} ${c.role === "source" ? "reads" : "writes"} ${c.table} `));
      li.appendChild(el("span", { class: "when" }, fmtTime(c.at)));
      // `barrier` is the newest one issued before the change: the graph as of it does not have the change yet.
      if (c.barrier > 0) li.addEventListener("click", () => {
        $("as-of").value = String(c.barrier);
        goTo(String(c.barrier));
      });
      list.appendChild(li);
    }
  }

  // ---------------------------------------------------------------------------------------------- sign-in

  // The token was refused or dropped: forget it, wipe what it showed, ask for another and stop polling.
  function signedOut(message) {
    state.signedOut = true;
    clearTimeout(state.timer);
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    state.graph = null;
    state.byId = new Map();
    state.signature = "";
    state.fitted = false;
    state.selected = null;
    state.tree = null;
    state.elements.clear();
    state.edgeElements = [];
    for (const id of ["edges", "nodes", "minimap-nodes", "summary", "worst", "changes", "panel-body"]) clear($(id));
    $("changes").dataset.key = "";
    $("panel-body").hidden = true;
    $("panel-intro").hidden = false;
    $("minimap").toggleAttribute("hidden", true);
    $("sign-out").hidden = true;
    delete svg.dataset.loaded;
    setStatus("signed out");
    const error = $("auth-error");
    error.hidden = !message;
    error.textContent = message || "";
    $("auth-backdrop").hidden = false;
    $("auth").hidden = false;
    $("auth-submit").disabled = false;
    $("auth-token").focus();
  }

  function signedIn() {
    state.signedOut = false;
    $("auth").hidden = true;
    $("auth-backdrop").hidden = true;
    $("sign-out").hidden = !state.token;
  }

  // ---------------------------------------------------------------------------------------------- events

  function nodeIdOf(target) {
    const g = target.closest ? target.closest("g.node") : null;
    return g ? g.getAttribute("data-id") : null;
  }

  function wire() {
    $("legend-fresh").textContent = `≤ ${fmtSeconds(WARN)}`;
    $("legend-lagging").textContent = `≤ ${fmtSeconds(CRIT)}`;
    $("legend-stale").textContent = `> ${fmtSeconds(CRIT)}`;

    let drag = null;
    svg.addEventListener("pointerdown", (ev) => {
      if (nodeIdOf(ev.target)) return;
      drag = { x: ev.clientX, y: ev.clientY, vx: state.view.x, vy: state.view.y, moved: false };
      svg.classList.add("panning");
    });
    window.addEventListener("pointermove", (ev) => {
      if (!drag) return;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      state.view = { ...state.view, x: drag.vx + dx, y: drag.vy + dy };
      applyView();
    });
    window.addEventListener("pointerup", () => {
      if (drag && !drag.moved) select(null);
      drag = null;
      svg.classList.remove("panning");
    });
    svg.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const box = svg.getBoundingClientRect();
      zoomAt(Math.exp(-ev.deltaY * 0.0015), ev.clientX - box.left, ev.clientY - box.top);
    }, { passive: false });
    nodeLayer.addEventListener("click", (ev) => {
      const id = nodeIdOf(ev.target);
      if (id) select(id === state.selected ? null : id);
    });
    nodeLayer.addEventListener("keydown", (ev) => {
      const id = nodeIdOf(ev.target);
      if (id && (ev.key === "Enter" || ev.key === " ")) {
        ev.preventDefault();
        select(id);
      }
    });
    const centre = () => {
      const box = svg.getBoundingClientRect();
      return [box.width / 2, box.height / 2];
    };
    $("zoom-in").addEventListener("click", () => zoomAt(1.25, ...centre()));
    $("zoom-out").addEventListener("click", () => zoomAt(0.8, ...centre()));
    $("fit").addEventListener("click", () => fit());
    let steering = false;
    const steer = (ev) => {
      const mm = $("minimap");
      const point = mm.createSVGPoint();
      point.x = ev.clientX;
      point.y = ev.clientY;
      const at = point.matrixTransform(mm.getScreenCTM().inverse());
      const canvas = svg.getBoundingClientRect(), k = state.view.k;
      state.view = { k, x: canvas.width / 2 - at.x * k, y: canvas.height / 2 - at.y * k };
      applyView();
    };
    $("minimap").addEventListener("pointerdown", (ev) => {
      steering = true;
      steer(ev);
      ev.stopPropagation();
    });
    window.addEventListener("pointermove", (ev) => steering && steer(ev));
    window.addEventListener("pointerup", () => {
      steering = false;
    });
    $("pause").addEventListener("click", () => {
      state.paused = !state.paused;
      $("pause").textContent = state.paused ? "Resume" : "Pause";
      $("pause").classList.toggle("active", state.paused);
      if (state.paused) clearTimeout(state.timer);
      else refresh();
    });
    $("search").addEventListener("input", (ev) => {
      state.search = ev.target.value;
      applyHighlight();
    });
    $("search").addEventListener("keydown", (ev) => {
      if (ev.key !== "Enter" || !state.graph) return;
      const query = state.search.trim().toLowerCase();
      const hit = state.graph.nodes.find((n) => n.name.toLowerCase().includes(query));
      if (hit) {
        centreOn(hit.id);
        select(hit.id);
      }
    });
    document.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") select(null);
    });
    $("auth").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const token = $("auth-token").value.trim();
      if (!token) {
        $("auth-error").hidden = false;
        $("auth-error").textContent = "Enter a token.";
        return;
      }
      $("auth-token").value = "";
      $("auth-submit").disabled = true;
      state.token = token;
      sessionStorage.setItem(TOKEN_KEY, token);
      refresh(); // the server decides: the graph, or the sign-in again with its problem message
    });
    $("sign-out").addEventListener("click", () => {
      signedOut(null);
      refresh(); // with auth on this asks for a token again; with auth off the page simply carries on
    });
    $("as-of-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = $("as-of").value.trim();
      goTo(text ? asOfValue(text) : null);
    });
    $("as-of-now").addEventListener("click", () => goTo(null));
    $("past-now").addEventListener("click", () => goTo(null));
    window.addEventListener("resize", () => {
      if (state.graph && !state.graph.nodes.length) return;
      applyView();
    });
  }

  wire();
  if (state.asOf !== null) $("as-of").value = state.asOf;
  refresh();
})();
