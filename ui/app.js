// kbq's page: explore the graph, chat with the agent, add sources, watch the status.
// It calls kbq's public API with the key given at sign-in, kept in sessionStorage (this tab
// only), so it can do nothing the key could not. docs/ui.md describes it.

const $ = (selector) => document.querySelector(selector);

/** Colours by entity type, in order of first sight; dark enough for white labels' halo. */
const PALETTE = ["#0b5cad", "#b35c00", "#1a7f37", "#a4161a", "#6f42c1", "#0e7c86",
  "#8a6d00", "#c2185b", "#4a5560", "#2e7d32", "#5d4037", "#3949ab"];
/** The most entities one traversal answers (the API's bound on `limit`). */
const MAX_LIMIT = 200;
const DEFAULT_LIMIT = 50;

const state = {
  key: sessionStorage.getItem("kbq.key"),
  workspace: sessionStorage.getItem("kbq.workspace") || "",
  me: null,
  view: null,
};

// ---- the API -------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? `kbq answered ${status}`);
    this.status = status;
    this.code = body?.error?.code ?? null;
    this.field = body?.error?.field ?? null;
  }
}

function headers(extra = {}) {
  const h = { authorization: `Bearer ${state.key}`, ...extra };
  if (state.workspace) h["x-kbq-workspace"] = state.workspace;
  return h;
}

/** Calls kbq; answers the JSON body, or throws an ApiError naming kbq's reason. */
async function api(method, path, body, { form, signal } = {}) {
  const init = { method, headers: headers(), signal };
  if (form) init.body = form;
  else if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

/** The server-sent events of a streamed answer, as {event, data} with data parsed. */
async function* events(path, { body, signal } = {}) {
  const init = { method: body === undefined ? "GET" : "POST", headers: headers({ accept: "text/event-stream" }), signal };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (!res.ok) {
    let data = null;
    try { data = await res.json(); } catch { data = null; }
    throw new ApiError(res.status, data);
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trimStart();
      }
      if (data) yield { event, data: JSON.parse(data) };
    }
  }
}

function message(e) {
  if (e instanceof ApiError) {
    const field = e.field ? ` (${e.field})` : "";
    return `${e.message}${field}`;
  }
  return `kbq could not be reached: ${e.message}`;
}

// ---- small DOM helpers ---------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name in node && typeof value !== "string") node[name] = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fill(list, items) {
  list.replaceChildren(...items);
}

function definitions(target, pairs) {
  fill(target, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function preview(value, max = 160) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function graphLink(name) {
  return el("a", { href: `#/graph?entity=${encodeURIComponent(name)}` }, name);
}

// ---- sign-in and views ---------------------------------------------------------------------

async function signIn(key, workspace) {
  state.key = key;
  state.workspace = workspace;
  const me = await api("GET", "/v1/key");
  state.me = me;
  sessionStorage.setItem("kbq.key", key);
  if (workspace) sessionStorage.setItem("kbq.workspace", workspace);
  else sessionStorage.removeItem("kbq.workspace");
  return me;
}

function signOut() {
  sessionStorage.clear();
  state.key = null;
  state.me = null;
  state.workspace = "";
  graph.reset();
  location.hash = "";
  route();
}

function allowed(view) {
  const needs = document.querySelector(`#nav a[data-view="${view}"]`)?.dataset.needs;
  return !needs || Boolean(state.me?.can?.[needs]);
}

function firstView() {
  return ["graph", "chat", "sources", "status"].find(allowed);
}

function parseHash() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [view, query = ""] = hash.split("?");
  return { view: view || null, params: new URLSearchParams(query) };
}

async function route() {
  if (!state.key) return showSignIn();
  if (!state.me) {
    try {
      await signIn(state.key, state.workspace);
    } catch (e) {
      sessionStorage.clear();
      state.key = null;
      return showSignIn(e);
    }
  }
  const { view, params } = parseHash();
  if (!view || !allowed(view)) {
    location.replace(`#/${firstView()}`);
    return;
  }
  $("#signin").hidden = true;
  $("#nav").hidden = false;
  $("#sign-out").hidden = false;
  const me = state.me;
  $("#whoami").textContent = `${me.name} · workspace ${me.workspace} · ${me.scopes.join(", ")}`;
  for (const a of document.querySelectorAll("#nav a")) {
    a.hidden = !allowed(a.dataset.view);
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  for (const section of document.querySelectorAll("main > .view")) {
    section.hidden = section.id !== `view-${view}`;
  }
  if (state.view !== view) status.stop();
  state.view = view;
  if (view === "graph") await graph.show(params);
  else if (view === "chat") chat.show();
  else if (view === "sources") await sources.show();
  else if (view === "status") status.start();
}

function showSignIn(error) {
  for (const section of document.querySelectorAll("main > .view")) section.hidden = section.id !== "signin";
  $("#nav").hidden = true;
  $("#sign-out").hidden = true;
  $("#whoami").textContent = "";
  status.stop();
  state.view = null;
  const shown = $("#signin-error");
  if (!error) shown.textContent = "";
  else if (error instanceof ApiError && (error.status === 401 || error.status === 403 || error.status === 404)) {
    shown.textContent = `kbq refused this key: ${message(error)}`;
  } else shown.textContent = message(error);
  $("#key").focus();
}

$("#signin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = $("#key").value.trim();
  const workspace = $("#workspace").value.trim();
  $("#signin-error").textContent = "";
  try {
    state.me = null;
    await signIn(key, workspace);
    $("#key").value = "";
    if (!parseHash().view) location.hash = `#/${firstView()}`;
    await route();
  } catch (e) {
    state.key = null;
    showSignIn(e);
  }
});
$("#sign-out").addEventListener("click", signOut);
window.addEventListener("hashchange", () => { route().catch(report); });

function report(e) {
  const shown = state.view ? $(`#view-${state.view} .status`) : $("#signin-error");
  if (shown) shown.textContent = message(e);
}

// ---- graph ---------------------------------------------------------------------------------

const graph = (() => {
  let sigma = null;
  let g = null;
  const colours = new Map();
  const hidden = new Set();
  let selected = null;
  /** What the view shows: the address bar's parameters. */
  let current = null;
  let searchTimer = null;
  let searchSeq = 0;

  function colour(type) {
    if (!colours.has(type)) colours.set(type, PALETTE[colours.size % PALETTE.length]);
    return colours.get(type);
  }

  function libraries() {
    const Graph = window.graphology?.Graph ?? window.graphology;
    const Sigma = window.Sigma?.Sigma ?? window.Sigma?.default ?? window.Sigma;
    const fa2 = window.graphologyLibrary?.layoutForceAtlas2;
    return { Graph, Sigma, fa2 };
  }

  function ensure() {
    if (g) return;
    const { Graph, Sigma } = libraries();
    g = new Graph({ multi: true, type: "directed" });
    sigma = new Sigma(g, $("#graph"), {
      renderEdgeLabels: false,
      // Sizes in pixels, whatever the drawing's extent.
      itemSizesReference: "screen",
      labelRenderedSizeThreshold: 6,
      defaultEdgeType: "arrow",
      nodeReducer: (node, data) => (hidden.has(data.entityType) ? { ...data, hidden: true }
        : node === selected ? { ...data, highlighted: true, zIndex: 1 } : data),
      edgeReducer: (edge, data) => {
        const [s, t] = g.extremities(edge);
        return hidden.has(g.getNodeAttribute(s, "entityType")) || hidden.has(g.getNodeAttribute(t, "entityType"))
          ? { ...data, hidden: true } : data;
      },
    });
    sigma.on("clickNode", ({ node }) => select(node));
  }

  function reset() {
    sigma?.kill();
    sigma = null;
    g = null;
    selected = null;
    current = null;
    $("#panel").hidden = true;
  }

  function params() {
    return {
      entity: current?.get("entity") ?? "",
      depth: Number(current?.get("depth") ?? 1),
      direction: current?.get("direction") ?? "both",
      rel: (current?.get("rel") ?? "").split(",").map((s) => s.trim()).filter(Boolean),
      hide: (current?.get("hide") ?? "").split(",").filter(Boolean),
      limit: Math.min(MAX_LIMIT, Number(current?.get("limit") ?? DEFAULT_LIMIT)),
      expand: (current?.get("expand") ?? "").split("|").filter(Boolean),
      pruned: (current?.get("pruned") ?? "").split("|").filter(Boolean),
    };
  }

  /** Writes `changes` into the address bar; a new entity is a new history entry. */
  function navigate(changes, { push = false } = {}) {
    const next = new URLSearchParams(current ?? "");
    for (const [k, v] of Object.entries(changes)) {
      if (v === null || v === "" || (Array.isArray(v) && v.length === 0)) next.delete(k);
      else next.set(k, Array.isArray(v) ? v.join(k === "expand" || k === "pruned" ? "|" : ",") : String(v));
    }
    const hash = `#/graph?${next}`;
    if (push) location.hash = hash;
    else {
      history.replaceState(null, "", hash);
      current = next;
    }
  }

  async function show(query) {
    ensure();
    const before = current?.toString() ?? null;
    const now = query.toString();
    const old = params();
    current = query;
    const p = params();
    $("#depth").value = String(p.depth);
    $("#direction").value = p.direction;
    $("#rel-types").value = p.rel.join(", ");
    hidden.clear();
    p.hide.forEach((t) => hidden.add(t));
    if (before === now) return;
    const sameWalk = before !== null && old.entity === p.entity && old.depth === p.depth
      && old.direction === p.direction && old.rel.join() === p.rel.join() && old.limit === p.limit
      && p.expand.slice(0, old.expand.length).join("|") === old.expand.join("|")
      && p.pruned.slice(0, old.pruned.length).join("|") === old.pruned.join("|");
    if (sameWalk) {
      for (const name of p.expand.slice(old.expand.length)) await expand(name, { record: false });
      for (const name of p.pruned.slice(old.pruned.length)) prune(name, { record: false });
      legend();
      sigma.refresh();
      return;
    }
    if (!p.entity) {
      // Nothing asked yet: start from the most connected entity, and offer the others.
      g.clear();
      legend();
      $("#truncated").hidden = true;
      let most = [];
      try {
        most = (await api("GET", "/data/v1/query/graph/stats")).most_connected;
      } catch (e) {
        $("#graph-status").textContent = message(e);
        return;
      }
      startFrom(most);
      if (!most.length) {
        $("#graph-status").textContent = "The knowledge base has no entity yet: add sources, or find one by name.";
        return;
      }
      navigate({ entity: most[0].name });
      await open(params());
      return;
    }
    await open(p);
  }

  async function traverse(name, { depth, direction, rel, limit }) {
    const body = { entity_name: name, depth, direction, limit };
    if (rel.length) body.relationship_types = rel;
    return api("POST", "/data/v1/query/graph", body);
  }

  /**
   * Adds a traversal's entities and relationships, but those pruned; new entities start near
   * `near`.
   */
  function merge(walk, near) {
    const origin = near && g.hasNode(near) ? g.getNodeAttributes(near) : { x: 0, y: 0 };
    const pruned = new Set(params().pruned);
    let added = 0;
    for (const found of walk.entities_found) {
      if (g.hasNode(found.name) || pruned.has(found.name)) continue;
      const angle = Math.random() * 2 * Math.PI;
      const r = 1 + Math.random() * 5;
      g.addNode(found.name, {
        label: found.name,
        entityType: found.entity_type,
        properties: found.properties,
        x: origin.x + r * Math.cos(angle),
        y: origin.y + r * Math.sin(angle),
        size: 5,
        color: colour(found.entity_type),
      });
      added += 1;
    }
    for (const rel of walk.relationships) {
      if (!g.hasNode(rel.source_name) || !g.hasNode(rel.target_name)) continue;
      const key = `${rel.source_name}\u0000${rel.relationship_type}\u0000${rel.target_name}`;
      if (g.hasEdge(key)) continue;
      g.addEdgeWithKey(key, rel.source_name, rel.target_name, {
        label: rel.relationship_type,
        relType: rel.relationship_type,
        properties: rel.properties,
        size: 1.5,
        color: "#8a96a3",
      });
    }
    g.forEachNode((node) => g.setNodeAttribute(node, "size", 3 + Math.min(9, Math.sqrt(g.degree(node)) * 1.5)));
    return added;
  }

  /**
   * Lays the drawing out, then draws it: ForceAtlas2 from the entities' starting places (each
   * new one beside the entity that reached it), for 120 iterations on small drawings and
   * fewer on large ones, so that the page's thread is busy for a bounded time (about 40,000
   * entity-iterations: 20 iterations at 2,000 entities).
   */
  function layout() {
    const { fa2 } = libraries();
    if (g.order > 1) {
      const settings = { ...fa2.inferSettings(g), barnesHutOptimize: g.order > 300 };
      const iterations = Math.max(15, Math.min(120, Math.round(40000 / g.order)));
      fa2.assign(g, { iterations, settings });
    }
    sigma.refresh();
  }

  /** Marks when the drawing is laid out and painted, for the browser tests' timings. */
  function painted(started) {
    return new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => {
      const ms = performance.now() - started;
      const box = $("#graph");
      box.dataset.nodes = String(g.order);
      box.dataset.layoutMs = ms.toFixed(1);
      box.dataset.ready = String(Number(box.dataset.ready ?? 0) + 1);
      resolve(ms);
    })));
  }

  async function open(p) {
    const started = performance.now();
    $("#graph-status").textContent = `Opening ${p.entity}…`;
    let walk;
    try {
      walk = await traverse(p.entity, p);
    } catch (e) {
      $("#graph-status").textContent = message(e);
      return;
    }
    // The expanded entities' walks, asked at once, merged in the address's order.
    const expansions = await Promise.all(p.expand.map((name) =>
      traverse(name, { ...p, depth: 1 }).catch(() => null)));
    g.clear();
    selected = null;
    merge(walk, null);
    p.expand.forEach((name, i) => {
      if (expansions[i] && g.hasNode(name)) merge(expansions[i], name);
    });
    for (const name of p.pruned) if (g.hasNode(name)) g.dropNode(name);
    layout();
    legend();
    truncated(walk, p);
    await painted(started);
    if (g.order === 0) $("#graph-status").textContent = `No entity is named ${p.entity}.`;
    else {
      $("#graph-status").textContent = `${p.entity}: ${g.order} entities, ${g.size} relationships.`;
      select(walk.entity_name && g.hasNode(walk.entity_name) ? walk.entity_name : p.entity);
    }
  }

  /** Links to the most connected entities, to start exploring from. */
  function startFrom(most) {
    const box = $("#start-from");
    box.hidden = most.length === 0;
    fill($("#start-list"), most.map((e) => el("li", {}, graphLink(e.name),
      el("span", { class: "hint" }, ` ${e.entity_type}, ${e.relationships}`))));
  }

  function truncated(walk, p) {
    const box = $("#truncated");
    if (!walk.truncated) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    const more = p.limit < MAX_LIMIT;
    $("#truncated-text").textContent = `Showing the first ${walk.entities_found.length} entities reached`
      + ` (the limit, ${p.limit}): more are reachable and not drawn.`
      + (more ? "" : ` kbq answers at most ${MAX_LIMIT} entities a request; filter by relationship type, or expand an entity, to see others.`);
    $("#load-more").hidden = !more;
  }

  async function expand(name, { record = true } = {}) {
    const started = performance.now();
    const p = params();
    let walk;
    try {
      walk = await traverse(name, { ...p, depth: 1 });
    } catch (e) {
      $("#graph-status").textContent = message(e);
      return;
    }
    const added = merge(walk, name);
    layout();
    legend();
    await painted(started);
    $("#graph-status").textContent = `Expanded ${name}: ${added} new entities${walk.truncated ? ` (the first ${walk.entities_found.length} reached; more are not drawn)` : ""}.`;
    if (record && !p.expand.includes(name)) navigate({ expand: [...p.expand, name] });
    if (selected === name) select(name);
  }

  function prune(name, { record = true } = {}) {
    if (!g.hasNode(name)) return;
    g.dropNode(name);
    const p = params();
    if (record && !p.pruned.includes(name)) navigate({ pruned: [...p.pruned, name] });
    if (selected === name) {
      selected = null;
      $("#panel").hidden = true;
    }
    legend();
    sigma.refresh();
    $("#graph-status").textContent = `Pruned ${name}: ${g.order} entities shown.`;
    $("#graph").dataset.nodes = String(g.order);
  }

  function legend() {
    const types = new Map();
    g.forEachNode((_, a) => types.set(a.entityType, (types.get(a.entityType) ?? 0) + 1));
    const sorted = [...types.entries()].sort((a, b) => a[0].localeCompare(b[0]));
    fill($("#legend-items"), sorted.map(([type, n]) => {
      const id = `type-${type.replace(/[^a-zA-Z0-9_-]/g, "_")}`;
      const box = el("input", { type: "checkbox", id, checked: !hidden.has(type), "data-type": type });
      box.addEventListener("change", () => {
        if (box.checked) hidden.delete(type);
        else hidden.add(type);
        navigate({ hide: [...hidden] });
        sigma.refresh();
        nodeList();
      });
      return el("label", { for: id }, box, el("span", { class: "swatch", style: null, "data-colour": colour(type) }), `${type} (${n})`);
    }));
    for (const swatch of document.querySelectorAll("#legend-items .swatch")) swatch.style.background = swatch.dataset.colour;
    nodeList();
  }

  function nodeList() {
    const names = [];
    g.forEachNode((name, a) => { if (!hidden.has(a.entityType)) names.push(name); });
    names.sort((a, b) => a.localeCompare(b));
    $("#node-count").textContent = String(names.length);
    $("#graph").dataset.visible = String(names.length);
    fill($("#node-list"), names.slice(0, 2000).map((name) => el("li", {},
      el("button", { type: "button", onclick: () => select(name) }, name))));
  }

  async function select(name) {
    if (!g.hasNode(name)) return;
    selected = name;
    sigma.refresh();
    const a = g.getNodeAttributes(name);
    $("#panel").hidden = false;
    $("#panel-title").textContent = name;
    $("#panel-type").textContent = a.entityType;
    definitions($("#panel-props"), Object.entries(a.properties ?? {}).map(([k, v]) => [k, preview(v, 400)]));
    const rels = [];
    g.forEachOutEdge(name, (edge, attrs, _s, target) => rels.push(["→", attrs.relType, target]));
    g.forEachInEdge(name, (edge, attrs, source) => rels.push(["←", attrs.relType, source]));
    fill($("#panel-rels"), rels.length ? rels.map(([arrow, type, other]) => el("li", {},
      `${arrow} ${type} `, el("button", { type: "button", class: "link", onclick: () => select(other) }, other)))
      : [el("li", {}, "None drawn.")]);
    const docs = $("#panel-docs");
    fill(docs, [el("li", {}, "Loading…")]);
    try {
      const found = await api("POST", "/data/v1/query/graph/documents", { entity_name: name, max_depth: 1, limit: 10 });
      if (selected !== name) return;
      fill(docs, found.results.length ? found.results.map((d) => el("li", {},
        el("button", { type: "button", class: "link", onclick: () => openDocument(d) }, d.title || d.source_id),
        el("span", { class: "hint" }, ` · ${d.relationship}${d.related_entity ? ` of ${d.related_entity}` : ""} · score ${d.score.toFixed(3)}`)))
        : [el("li", {}, "No documents.")]);
    } catch (e) {
      fill(docs, [el("li", { class: "error" }, message(e))]);
    }
  }

  function openDocument(d) {
    $("#doc-title").textContent = d.title || d.source_id;
    const meta = $("#doc-meta");
    meta.replaceChildren(`${d.source} / ${d.source_id} · ${d.content_type} · ${d.relationship}${d.related_entity ? ` of ${d.related_entity}` : ""} · score ${d.score.toFixed(3)}`);
    if (d.url) meta.append(" · ", el("a", { href: d.url, target: "_blank", rel: "noopener noreferrer" }, "source"));
    $("#doc-content").textContent = d.content;
    $("#doc-dialog").showModal();
  }

  // The search box: type-ahead from the name search, keyboard and mouse.
  const search = $("#search");
  const list = $("#search-list");
  let options = [];
  let active = -1;

  function close() {
    list.hidden = true;
    search.setAttribute("aria-expanded", "false");
    search.removeAttribute("aria-activedescendant");
    active = -1;
  }

  function highlight(i) {
    active = i;
    [...list.children].forEach((li, j) => li.setAttribute("aria-selected", String(j === i)));
    if (i >= 0) search.setAttribute("aria-activedescendant", list.children[i].id);
  }

  function choose(name) {
    close();
    search.value = name;
    navigate({ entity: name, expand: null, pruned: null, limit: null }, { push: true });
  }

  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    const query = search.value.trim();
    if (!query) return close();
    searchTimer = setTimeout(async () => {
      const seq = ++searchSeq;
      try {
        const found = await api("POST", "/data/v1/query/graph/search", { query, limit: 10 });
        if (seq !== searchSeq) return;
        options = found.results;
        fill(list, options.map((e, i) => el("li", { id: `option-${i}`, role: "option", "aria-selected": "false",
          onmousedown: (ev) => { ev.preventDefault(); choose(e.name); } }, e.name, el("span", { class: "type" }, e.entity_type))));
        list.hidden = options.length === 0;
        search.setAttribute("aria-expanded", String(!list.hidden));
        highlight(options.length ? 0 : -1);
      } catch (e) {
        $("#graph-status").textContent = message(e);
      }
    }, 120);
  });
  search.addEventListener("keydown", (ev) => {
    if (list.hidden) return;
    if (ev.key === "ArrowDown") { ev.preventDefault(); highlight(Math.min(options.length - 1, active + 1)); }
    else if (ev.key === "ArrowUp") { ev.preventDefault(); highlight(Math.max(0, active - 1)); }
    else if (ev.key === "Enter" && active >= 0) { ev.preventDefault(); choose(options[active].name); }
    else if (ev.key === "Escape") close();
  });
  search.addEventListener("blur", () => setTimeout(close, 150));

  $("#graph-controls").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const name = search.value.trim() || params().entity;
    if (!name) return;
    close();
    navigate({
      entity: name,
      depth: $("#depth").value,
      direction: $("#direction").value,
      rel: $("#rel-types").value.split(",").map((s) => s.trim()).filter(Boolean),
      expand: null,
      pruned: null,
      limit: null,
    }, { push: true });
  });
  $("#load-more").addEventListener("click", () => {
    navigate({ limit: Math.min(MAX_LIMIT, params().limit * 2), expand: null, pruned: null }, { push: true });
  });
  $("#expand").addEventListener("click", () => selected && expand(selected));
  $("#prune").addEventListener("click", () => selected && prune(selected));
  $("#center").addEventListener("click", () => selected && navigate({ entity: selected, expand: null, pruned: null, limit: null }, { push: true }));

  return { show, reset };
})();

// ---- chat ----------------------------------------------------------------------------------

const chat = (() => {
  const KEY = "kbq.chat";
  let busy = false;

  function history() {
    try { return JSON.parse(sessionStorage.getItem(KEY) ?? "[]"); } catch { return []; }
  }

  function bubble(role, text) {
    return el("li", { class: role }, el("div", { class: "who" }, role === "user" ? "You" : "Agent"),
      el("div", { class: "answer" }, text));
  }

  function show() {
    const turns = history();
    fill($("#messages"), turns.map((t) => bubble(t.role, t.content)));
  }

  /** Names of entities in a tool's result: what `KnowledgeGraphTool` and the searches give. */
  function entityNames(result) {
    const names = new Set();
    const walk = (v, depth) => {
      if (depth > 4 || v === null || typeof v !== "object") return;
      if (Array.isArray(v)) return v.slice(0, 50).forEach((x) => walk(x, depth + 1));
      if (typeof v.name === "string" && (v.entity_type || v.type)) names.add(v.name);
      if (typeof v.entity_name === "string") names.add(v.entity_name);
      for (const x of Object.values(v)) walk(x, depth + 1);
    };
    walk(result, 0);
    return [...names].slice(0, 12);
  }

  function summary(result) {
    if (result === null || typeof result !== "object") return preview(result, 120);
    if (result.error) return `error: ${result.error}`;
    const parts = [];
    for (const [k, v] of Object.entries(result)) {
      if (Array.isArray(v)) parts.push(`${v.length} ${k}`);
      else if (typeof v === "number" && k !== "duration_ms") parts.push(`${k} ${v}`);
    }
    return parts.length ? parts.join(", ") : preview(result, 120);
  }

  async function send(text) {
    busy = true;
    $("#chat-send").disabled = true;
    const earlier = history();
    const messages = $("#messages");
    messages.append(bubble("user", text));
    const tools = el("ol", { class: "tools", "aria-label": "Tool calls" });
    const answer = el("div", { class: "answer" });
    const turn = el("li", { class: "assistant" }, el("div", { class: "who" }, "Agent"), tools, answer);
    messages.append(turn);
    const calls = new Map();
    let final = null;
    try {
      for await (const { event, data } of events("/v1/agent/chat", { body: { message: text, history: earlier, stream: true } })) {
        if (event === "tool_call.started") {
          const li = el("li", { "data-tool": data.tool },
            el("strong", {}, data.tool), " ", el("code", {}, preview(data.arguments, 200)), " ",
            el("span", { class: "running" }, "running…"));
          calls.set(data.index, li);
          tools.append(li);
        } else if (event === "tool_call.completed") {
          const li = calls.get(data.index) ?? tools.appendChild(el("li", {}, el("strong", {}, data.tool)));
          const state = li.querySelector(".running");
          const names = entityNames(data.result);
          const done = el("span", { class: data.error ? "failed" : "done" },
            data.error ? `failed: ${data.error}` : `${summary(data.result)} · ${data.duration_ms.toFixed(1)} ms`);
          if (state) state.replaceWith(done); else li.append(" ", done);
          li.dataset.done = "true";
          if (names.length) li.append(el("div", {}, "Entities: ", ...names.flatMap((n, i) => [i ? ", " : "", graphLink(n)])));
        } else if (event === "delta") {
          answer.textContent += data.text;
        } else if (event === "done") {
          final = data;
          if (!data.success) answer.append(el("p", { class: "error" }, `The agent did not answer: ${data.error ?? data.stop_reason}`));
          else if (!answer.textContent) answer.textContent = data.response;
        } else if (event === "error") {
          answer.append(el("p", { class: "error" }, data.error?.message ?? "the turn failed"));
        }
      }
    } catch (e) {
      answer.append(el("p", { class: "error" }, message(e)));
    } finally {
      busy = false;
      $("#chat-send").disabled = false;
    }
    turn.dataset.done = "true";
    if (final?.success) {
      const turns = [...earlier, { role: "user", content: text }, { role: "assistant", content: final.response }];
      sessionStorage.setItem(KEY, JSON.stringify(turns.slice(-50)));
    }
  }

  $("#chat-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = $("#chat-input");
    const text = input.value.trim();
    if (!text || busy) return;
    input.value = "";
    send(text);
  });
  $("#chat-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) {
      ev.preventDefault();
      $("#chat-form").requestSubmit();
    }
  });
  $("#chat-clear").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    show();
  });

  return { show };
})();

// ---- sources -------------------------------------------------------------------------------

const sources = (() => {
  async function show() {
    const body = $("#sources tbody");
    try {
      const listed = await api("GET", "/data/v1/ingest/sources");
      $("#sources-total").textContent = listed.total === listed.sources.length
        ? `${listed.total} ${listed.total === 1 ? "source" : "sources"}.`
        : `The ${listed.sources.length} most recent of ${listed.total} sources.`;
      fill(body, listed.sources.map((s) => el("tr", {},
        el("td", {}, s.url ? el("a", { href: s.url, target: "_blank", rel: "noopener noreferrer" }, s.title || s.source_id) : (s.title || s.source_id)),
        el("td", {}, s.source), el("td", {}, s.source_id), el("td", {}, s.chunks),
        el("td", {}, new Date(s.updated_at).toLocaleString()),
        el("td", {}, el("button", { type: "button", class: "secondary", "aria-label": `Delete ${s.source} ${s.source_id}`,
          onclick: () => remove(s) }, "Delete")))));
    } catch (e) {
      $("#sources-total").textContent = message(e);
    }
  }

  async function remove(s) {
    try {
      const done = await api("DELETE", `/data/v1/ingest/sources/${encodeURIComponent(s.source)}/${encodeURIComponent(s.source_id)}`);
      await show();
      $("#sources-total").textContent = `Deleted ${s.source_id}: ${done.chunks} chunks, and ${done.entities} entities and ${done.relationships} relationships only it gave.`;
    } catch (e) {
      $("#sources-total").textContent = message(e);
    }
  }

  async function upload(file) {
    const bar = el("progress", { max: 1, value: 0, "aria-label": `Progress of ${file.name}` });
    const text = el("span", {}, "uploading…");
    const item = el("li", { "data-file": file.name }, el("strong", {}, file.name), bar, text);
    $("#jobs").prepend(item);
    const form = new FormData();
    form.append("file", file, file.name);
    try {
      const job = await api("POST", "/data/v1/ingest/sources", undefined, { form });
      item.dataset.job = job.job_id;
      let last = job;
      for await (const { data } of events(`/data/v1/ingest/jobs/${job.job_id}/events`)) {
        last = data;
        bar.max = Math.max(1, data.chunks_total ?? 1);
        bar.value = data.chunks_done ?? 0;
        text.textContent = `${data.status}: ${data.chunks_done ?? 0} of ${data.chunks_total ?? "?"} chunks`;
      }
      item.dataset.status = last.status;
      const c = last.counts ?? {};
      text.replaceChildren(el("span", { class: last.status === "succeeded" ? "ok" : "error" }, last.status),
        last.status === "succeeded" ? ` · ${c.chunks ?? 0} chunks, ${c.entities_added ?? 0} entities and ${c.relationships_added ?? 0} relationships added`
          : last.error ? ` · ${last.error}` : "");
    } catch (e) {
      item.dataset.status = "refused";
      text.replaceChildren(el("span", { class: "error" }, message(e)));
    }
    await show();
  }

  $("#upload-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const files = [...$("#upload").files];
    $("#upload").value = "";
    await Promise.all(files.map(upload));
  });

  return { show };
})();

// ---- status --------------------------------------------------------------------------------

const status = (() => {
  let timer = null;
  let previous = null;

  /** The request counters and duration histograms of a /metrics text, by route. */
  function parse(text) {
    const routes = new Map();
    const route = (name) => {
      if (!routes.has(name)) routes.set(name, { count: 0, buckets: new Map() });
      return routes.get(name);
    };
    for (const line of text.split("\n")) {
      let m = line.match(/^kbq_http_requests_total\{([^}]*)\} (\S+)/);
      if (m) {
        const r = m[1].match(/route="([^"]*)"/);
        if (r) route(r[1]).count += Number(m[2]);
        continue;
      }
      m = line.match(/^kbq_http_request_duration_seconds_bucket\{([^}]*)\} (\S+)/);
      if (m) {
        const r = m[1].match(/route="([^"]*)"/);
        const le = m[1].match(/le="([^"]*)"/);
        if (r && le) {
          const b = route(r[1]).buckets;
          b.set(le[1], (b.get(le[1]) ?? 0) + Number(m[2]));
        }
      }
    }
    return { at: performance.now(), routes };
  }

  /** The 99th percentile, in ms, of cumulative buckets (the bucket's bound it falls in). */
  function p99(buckets, before) {
    const rows = [...buckets.entries()].map(([le, n]) => [le === "+Inf" ? Infinity : Number(le), n - (before?.get(le) ?? 0)])
      .sort((a, b) => a[0] - b[0]);
    const total = rows.length ? rows[rows.length - 1][1] : 0;
    if (total <= 0) return null;
    const want = total * 0.99;
    const hit = rows.find(([, n]) => n >= want);
    return hit && Number.isFinite(hit[0]) ? hit[0] * 1000 : null;
  }

  async function tick() {
    try {
      const [ready, health, counts, metrics] = await Promise.all([
        fetch("/readyz").then((r) => r.json()),
        fetch("/v1/agent/health", { headers: headers() }).then((r) => r.json()),
        state.me?.can?.read ? api("GET", "/data/v1/query/graph/stats") : Promise.resolve(null),
        fetch("/metrics").then((r) => r.text()),
      ]);
      definitions($("#readiness"), Object.entries(ready).map(([k, v]) => [k, preview(v)]));
      definitions($("#counts"), counts ? [["workspace", state.me.workspace], ["entities", counts.entities],
        ["relationships", counts.relationships], ["documents", counts.documents]] : [["counts", "needs the read scope"]]);
      $("#health-status").textContent = `Agent: ${health.status}`;
      fill($("#providers tbody"), (health.providers ?? []).map((p) => el("tr", {},
        el("td", {}, p.name), el("td", {}, p.kind), el("td", {}, p.status),
        el("td", {}, p.latency_ms === null ? "" : p.latency_ms.toFixed(2)), el("td", {}, p.last_error ?? ""))));
      const now = parse(metrics);
      const seconds = previous ? (now.at - previous.at) / 1000 : null;
      const rows = [...now.routes.entries()].sort((a, b) => b[1].count - a[1].count).map(([name, r]) => {
        const before = previous?.routes.get(name);
        const rate = seconds ? (r.count - (before?.count ?? 0)) / seconds : null;
        const p = p99(r.buckets, before?.buckets) ?? p99(r.buckets, null);
        return el("tr", {}, el("td", {}, name), el("td", {}, rate === null ? "…" : rate.toFixed(1)),
          el("td", {}, p === null ? "" : p.toFixed(1)), el("td", {}, r.count));
      });
      fill($("#routes tbody"), rows);
      previous = now;
      $("#view-status").dataset.ticks = String(Number($("#view-status").dataset.ticks ?? 0) + 1);
    } catch (e) {
      $("#health-status").textContent = message(e);
    }
  }

  function start() {
    if (timer) return;
    previous = null;
    tick();
    timer = setInterval(tick, 2000);
  }

  function stop() {
    clearInterval(timer);
    timer = null;
  }

  return { start, stop };
})();

// The libraries are classic scripts, deferred like this module: they have run by now.
route().catch(report);
