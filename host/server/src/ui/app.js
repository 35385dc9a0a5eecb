// lockd's web page: held locks and the last events, live from
// GET /v1/events (Server-Sent Events). The namespaces come from
// GET /v1/namespaces (those the token may see), each listed once with
// GET /v1/locks; after that, events keep the page current. An event that
// grants or extends a lock re-lists its namespace (once per burst), since
// events carry no expiry. A shared name or a semaphore is one row with its
// mode and its holders (and permits); a holder leaving it re-lists the
// namespace, since others may still hold it. Nothing is loaded from another
// host.
"use strict";

const MAX_EVENTS = 200;
const TOKEN_KEY = "lockd-token";
const NAMESPACES_KEY = "lockd-namespaces";

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  namespaces: new Map(), // namespace -> Map(name -> listed lock)
  released: new Set(), // "ns\0name\0token" of grants that ended, so a late listing cannot bring them back
  events: [],
  prefix: "",
  source: null,
  reloads: new Map(), // namespace -> pending timer
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) node.append(child);
  return node;
}

function authHeaders() {
  return state.token ? { Authorization: "Bearer " + state.token } : {};
}

class Unauthorized extends Error {}

// Parses lockd's JSON keeping every fencing token as its exact digits (a
// string): JSON.parse reads numbers as doubles, which round above 2^53.
// lockd's own tokens stay below that, but a store built with larger ones
// answers them, and the page shows what the server sent. Within JSON text a
// quote inside a string is escaped, so the pattern matches only the field.
function parseExact(text) {
  return JSON.parse(text.replace(/"fencing_token":(\d+)/g, '"fencing_token":"$1"'));
}

async function api(method, path, body) {
  const init = { method, headers: authHeaders() };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    askForToken(state.token ? "That token was refused." : "");
    throw new Unauthorized();
  }
  return { status: response.status, json: parseExact(await response.text()) };
}

function askForToken(message) {
  if (state.source) state.source.close();
  state.source = null;
  setConnected(false, "sign-in needed");
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("token").focus();
}

function setConnected(on, text) {
  const conn = $("conn");
  conn.className = "conn " + (on ? "on" : "off");
  conn.textContent = text || (on ? "live" : "reconnecting…");
}

function releasedKey(ns, name, token) {
  return ns + "\0" + name + "\0" + token;
}

async function loadNamespace(ns) {
  try {
    const r = await api("GET", "/v1/locks?namespace=" + encodeURIComponent(ns));
    if (r.status === 403) {
      // Outside the token's namespaces (one typed in, or saved earlier).
      state.namespaces.delete(ns);
      render();
      return;
    }
    if (r.status !== 200) return;
    const locks = new Map();
    for (const lock of r.json.locks) {
      if (!state.released.has(releasedKey(ns, lock.name, lock.fencing_token))) {
        locks.set(lock.name, lock);
      }
    }
    state.namespaces.set(ns, locks);
    render();
  } catch (e) {
    if (!(e instanceof Unauthorized)) console.error(e);
  }
}

// Every namespace with held locks or waiters that the token may see.
async function loadNamespaces() {
  try {
    const r = await api("GET", "/v1/namespaces");
    if (r.status !== 200) return;
    for (const n of r.json.namespaces) {
      if (!state.namespaces.has(n.name)) {
        state.namespaces.set(n.name, new Map());
        loadNamespace(n.name);
      }
    }
    render();
  } catch (e) {
    if (!(e instanceof Unauthorized)) console.error(e);
  }
}

function scheduleReload(ns) {
  if (state.reloads.has(ns)) return;
  state.reloads.set(ns, setTimeout(() => {
    state.reloads.delete(ns);
    loadNamespace(ns);
  }, 100));
}

function addNamespace(ns) {
  if (!ns || state.namespaces.has(ns)) return;
  state.namespaces.set(ns, new Map());
  const saved = JSON.parse(sessionStorage.getItem(NAMESPACES_KEY) || "[]");
  if (!saved.includes(ns)) sessionStorage.setItem(NAMESPACES_KEY, JSON.stringify([...saved, ns]));
  loadNamespace(ns);
  render();
}

function onEvent(e) {
  state.events.unshift(e);
  state.events.length = Math.min(state.events.length, MAX_EVENTS);
  if (!e.type.startsWith("lease_")) {
    if (!state.namespaces.has(e.namespace)) {
      addNamespace(e.namespace);
    } else {
      const locks = state.namespaces.get(e.namespace);
      const held = locks.get(e.name);
      switch (e.type) {
        case "released":
        case "expired":
        case "force_released":
          state.released.add(releasedKey(e.namespace, e.name, e.fencing_token));
          if (state.released.size > 10000) state.released.clear();
          if (held && isShared(held)) {
            // One holder of several left: the listing says who remains.
            held.holders = (held.holders || []).filter((h) => h.fencing_token !== e.fencing_token);
            const latest = held.holders[held.holders.length - 1];
            if (!latest) locks.delete(e.name);
            else if (held.fencing_token === e.fencing_token) {
              // The row shows the most recent grant that remains.
              Object.assign(held, { owner: latest.owner, fencing_token: latest.fencing_token, expires_at_ms: latest.expires_at_ms ?? null });
            }
            scheduleReload(e.namespace);
          } else if (held && held.fencing_token === e.fencing_token) {
            locks.delete(e.name);
          }
          break;
        case "acquired":
        case "handed_off": {
          const mode = e.mode || "exclusive";
          const joins = held && held.mode === mode && mode !== "exclusive";
          const holder = { owner: e.owner, fencing_token: e.fencing_token, mode };
          locks.set(e.name, {
            name: e.name,
            owner: e.owner,
            fencing_token: e.fencing_token,
            expires_at_ms: null,
            durability: held ? held.durability : null,
            waiters: held && e.type === "handed_off" ? Math.max(0, held.waiters - 1) : null,
            mode,
            holders: mode === "exclusive" ? [] : [...(joins ? held.holders || [] : []), holder],
            permits: joins ? held.permits : undefined,
          });
          scheduleReload(e.namespace);
          break;
        }
        case "extended":
          scheduleReload(e.namespace);
          break;
      }
    }
  }
  render();
}

function connect() {
  if (state.source) state.source.close();
  const query = state.token ? "?access_token=" + encodeURIComponent(state.token) : "";
  const source = new EventSource("/v1/events" + query);
  state.source = source;
  source.onopen = () => {
    setConnected(true);
    // Whatever happened while disconnected: list every namespace again.
    for (const ns of state.namespaces.keys()) loadNamespace(ns);
    loadNamespaces();
  };
  source.onmessage = (m) => onEvent(parseExact(m.data));
  source.addEventListener("lagged", () => {
    // The server dropped this stream because the page fell behind.
    setConnected(false);
    setTimeout(connect, 500);
  });
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      // Refused (a 401, say): find out why, then retry.
      setConnected(false);
      api("GET", "/v1/namespaces").then(() => setTimeout(connect, 2000), () => {});
    } else {
      setConnected(false);
    }
  };
}

function isShared(lock) {
  return lock.mode === "shared" || lock.mode === "permit";
}

// The mode cell, short enough for the table, and its tooltip: "exclusive",
// "shared (3)" (holders), "permit (2/5)" (permits held of the semaphore's).
function modeText(lock) {
  if (!lock.mode) return ["…", ""];
  if (!isShared(lock)) return [lock.mode, ""];
  const n = Math.max(1, (lock.holders || []).length);
  if (lock.mode === "permit") {
    return lock.permits
      ? [`permit (${n}/${lock.permits})`, `${n} of ${lock.permits} permits held`]
      : [`permit (${n})`, `${n} permits held`];
  }
  return [`shared (${n})`, `${n} shared holder${n === 1 ? "" : "s"}`];
}

function remaining(lock) {
  if (lock.expires_at_ms == null) return "…";
  const ms = Math.max(0, lock.expires_at_ms - Date.now());
  return (ms / 1000).toFixed(1) + " s";
}

async function forceUnlock(ns, lock) {
  const question = `Force-unlock ${ns}/${lock.name}, held by ${lock.owner} (token ${lock.fencing_token})?`;
  if (!window.confirm(question)) return;
  try {
    const r = await api("POST", "/v1/locks/force-unlock", { namespace: ns, name: lock.name });
    if (r.status === 409) loadNamespace(ns);
    else if (r.status !== 200) window.alert(`force-unlock failed: ${r.json.message || r.status}`);
  } catch (e) {
    if (!(e instanceof Unauthorized)) window.alert("force-unlock failed: " + e);
  }
}

function render() {
  const prefix = state.prefix;
  const root = $("namespaces");
  root.replaceChildren();
  for (const ns of [...state.namespaces.keys()].sort()) {
    const locks = [...state.namespaces.get(ns).values()]
      .filter((l) => l.name.startsWith(prefix))
      .sort((a, b) => (a.name < b.name ? -1 : 1));
    const section = el("div", { class: "namespace", "data-ns": ns }, el("h3", {}, ns));
    if (locks.length === 0) {
      section.append(el("p", { class: "empty" }, prefix ? `no locks named ${prefix}… held` : "no locks held"));
    } else {
      const head = el("tr", {}, ...["Name", "Mode", "Owner", "Token", "Durability", "Expires in", "Waiters", ""].map((h) => el("th", {}, h)));
      const rows = locks.map((lock) => el("tr", { class: "lock", "data-ns": ns, "data-name": lock.name },
        el("td", { class: "name" }, lock.name),
        el("td", { class: "mode", title: modeText(lock)[1] }, modeText(lock)[0]),
        // A shared name's row shows its most recent holder; the tooltip has them all.
        el("td", { class: "owner", title: (lock.holders || []).map((h) => `${h.owner} (token ${h.fencing_token})`).join("\n") }, lock.owner),
        el("td", { class: "token" }, String(lock.fencing_token)),
        el("td", { class: "durability" }, lock.durability || "…"),
        el("td", { class: "expires", "data-expires": lock.expires_at_ms == null ? "" : String(lock.expires_at_ms) }, remaining(lock)),
        el("td", { class: "waiters" }, lock.waiters == null ? "–" : String(lock.waiters)),
        el("td", {}, el("button", { class: "force", type: "button", onclick: () => forceUnlock(ns, lock) }, "Force-unlock"))));
      section.append(el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
    }
    root.append(section);
  }
  const list = $("events");
  list.replaceChildren(...state.events
    .filter((e) => e.name.startsWith(prefix))
    .slice(0, 50)
    .map((e) => el("li", { class: "event t-" + e.type },
      el("span", { class: "time" }, new Date(e.at_ms).toLocaleTimeString()),
      el("span", { class: "type" }, e.type),
      `${e.namespace}/${e.name} · ${e.owner} · token ${e.fencing_token}` +
        (e.mode && e.mode !== "exclusive" ? ` · ${e.mode}` : ""))));
}

// The countdowns: a local clock, not a poll of the server.
setInterval(() => {
  for (const cell of document.querySelectorAll("td.expires")) {
    const at = cell.dataset.expires;
    if (!at) continue;
    const ms = Math.max(0, Number(at) - Date.now());
    cell.textContent = (ms / 1000).toFixed(1) + " s";
    cell.classList.toggle("soon", ms < 5000);
  }
}, 100);

$("filter-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  addNamespace($("add-ns").value.trim());
  $("add-ns").value = "";
});
for (const kind of ["input", "change"]) {
  $("prefix").addEventListener(kind, () => {
    state.prefix = $("prefix").value;
    render();
  });
}
$("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  state.token = $("token").value;
  sessionStorage.setItem(TOKEN_KEY, state.token);
  try {
    await api("GET", "/v1/namespaces");
    $("login").hidden = true;
    $("token").value = "";
    connect();
  } catch (e) {
    if (!(e instanceof Unauthorized)) $("login-error").textContent = String(e);
  }
});

async function start() {
  const params = new URLSearchParams(location.search);
  const saved = JSON.parse(sessionStorage.getItem(NAMESPACES_KEY) || "[]");
  for (const ns of [...params.getAll("namespace"), ...saved]) {
    if (ns) state.namespaces.set(ns, new Map());
  }
  render();
  try {
    // One cheap call to learn whether a token is needed.
    await api("GET", "/v1/namespaces");
  } catch (e) {
    return; // the sign-in form is up; it connects once signed in
  }
  connect();
}

start();
