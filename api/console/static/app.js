// The console: pages drawn from the API, called as the identity the user gives.
// noauth: X-Auth-Token PROJECT:ROLES (from ?project=&roles= or the form); keystone: a
// pasted token. The API's policy decides what each identity sees; a refusal is shown.
import { render, atoms } from "./graph.js";

const POLL_MS = 2000;
const main = document.getElementById("main");
const who = { project: "", roles: "", token: "" };
const openGroups = new Set();
const SETTLED_FLOWS = ["SUCCESS", "REVERTED", "FAILURE", "PAUSED"];
let timer = null;
// The events feed's cursor: a page is drawn again when something it shows changed.
let cursor = null;
// A flow graph on the page still running: its atoms change without any row changing.
let flowLive = false;

function loadIdentity() {
  const q = new URLSearchParams(location.search);
  const saved = JSON.parse(sessionStorage.getItem("fleetflow-identity") || "{}");
  who.project = q.get("project") ?? saved.project ?? "";
  who.roles = q.get("roles") ?? saved.roles ?? "";
  who.token = saved.token ?? "";
  const form = document.getElementById("identity");
  for (const k of ["project", "roles", "token"]) form.elements[k].value = who[k];
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    for (const k of ["project", "roles", "token"]) who[k] = form.elements[k].value.trim();
    sessionStorage.setItem("fleetflow-identity", JSON.stringify(who));
    location.hash = isAdmin() ? "#/fleet" : "#/reservations";
    route();
  });
}

const isAdmin = () => who.roles.split(",").map((r) => r.trim()).includes("admin");
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const state = (s) => `<span class="state state-${esc(s)}">${esc(s)}</span>`;

class ApiError extends Error {}

async function api(path, options = {}) {
  const headers = { "Content-Type": "application/json" };
  headers["X-Auth-Token"] = who.token || `${who.project}:${who.roles}`;
  const answer = await fetch(path, { ...options, headers });
  const body = answer.status === 204 ? {} : await answer.json();
  if (!answer.ok) {
    const e = (body.errors || [{}])[0];
    throw new ApiError(`${answer.status} ${e.title || ""}: ${e.detail || ""}`);
  }
  return body;
}

function confirmThen(text, action) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  dialog.onclose = async () => {
    if (dialog.returnValue !== "ok") return;
    try { await action(); } catch (e) { alert(e.message); }
    route();
  };
  dialog.showModal();
}

// -- pages -------------------------------------------------------------------------

function fullness(resources) {
  let worst = 0;
  for (const r of Object.values(resources || {})) if (r.total) worst = Math.max(worst, r.used / r.total);
  return worst;
}

async function fleetPage() {
  const { capacity } = await api("/v2/admin/capacity");
  let html = `<h2>Fleet</h2><p>${capacity.host_count} hosts, ${capacity.instances} instances. ${usage(capacity.resources)}</p>
<p class="legend"><span>border: <b style="color:#2a8">up</b> <b style="color:#d22">down</b> <b style="color:#e90">maintenance</b> <b style="color:#888">disabled</b> <b style="color:#a3c">held by an evacuation</b>; <b style="color:#d22">hatched</b>: fenced (set down)</span><span>fill: how full (darkest = full)</span></p>`;
  for (const region of capacity.regions) {
    html += `<div class="region"><h3>${esc(region.name)} — ${region.host_count} hosts</h3>`;
    for (const zone of region.zones) {
      html += `<div class="zone"><h4>${esc(zone.name)}</h4>`;
      for (const rack of zone.racks) {
        html += `<div class="rack"><h5>${esc(rack.name)}</h5>`;
        for (const h of rack.hosts) {
          const f = fullness(h.resources);
          const cls = `${h.state}${h.evacuation_id ? " held" : ""}${h.fenced ? " fenced" : ""}`;
          html += `<a class="host ${esc(cls)}" data-host="${esc(h.name)}" href="#/host/${encodeURIComponent(h.name)}"
 style="background: rgba(40, 90, 180, ${(0.08 + 0.9 * f).toFixed(2)})" title="${esc(h.name)}: ${esc(h.state)}${h.fenced ? ` (fenced: ${esc(h.reason || "set down")})` : ""}, ${h.instances} instances, ${Math.round(f * 100)}% full"></a>`;
        }
        html += "</div>";
      }
      html += "</div>";
    }
    html += "</div>";
  }
  html += `<h3>Storage backends</h3><table><tr><th>name</th><th>scope</th><th>where</th><th>used</th></tr>
${capacity.backends.map((b) => `<tr><td>${esc(b.name)}</td><td>${esc(b.scope)}</td><td>${esc(b.zone)}/${esc(b.rack)}</td><td>${usage(b.resources)}</td></tr>`).join("")}</table>`;
  return html;
}

function usage(resources) {
  return Object.entries(resources || {}).map(([rc, r]) =>
    `${esc(rc)} <span class="bar"><i style="width:${r.total ? (100 * r.used / r.total).toFixed(1) : 0}%"></i></span> ${r.used}/${r.total}`).join(" ");
}

async function hostPage(name) {
  const { host } = await api(`/v2/admin/hosts/${encodeURIComponent(name)}`);
  const servers = await api(`/v2/admin/servers?host=${encodeURIComponent(name)}`).catch(() => ({ servers: [] }));
  const recent = await api(`/v2/admin/evacuations?host=${encodeURIComponent(name)}&limit=10`).catch(() => ({ evacuations: [] }));
  const actions = ["up", "maintenance", "down", "disabled"].filter((s) => s !== host.state)
    .map((s) => `<button data-set-state="${s}">set ${s}</button>`).join(" ");
  return `<h2>Host ${esc(host.name)}</h2><p>${state(host.state)} ${esc(host.reason || "")}
 ${host.evacuation_id ? `held by <a href="#/evacuation/${esc(host.evacuation_id)}">${esc(host.evacuation_id)}</a>` : ""}</p>
<p>${usage(host.capacity)}</p><p>${actions}</p>
<h3>Servers (${host.instances})</h3><table>${(servers.servers || []).map((s) => `<tr><td>${esc(s.id)}</td><td>${esc(s.name)}</td><td>${state(s.status)}</td></tr>`).join("")}</table>
<h3>Recent operations</h3>${recent.evacuations.length ? listTable(recent.evacuations, "evacuation", ["id", "hosts", "mode", "status", "progress", "created_at"]) : "<p>No evacuation of this host.</p>"}`;
}

function listTable(items, kind, cols) {
  return `<table><tr>${cols.map((c) => `<th>${c}</th>`).join("")}</tr>${items.map((it) => `<tr>
${cols.map((c) => `<td>${c === "id" ? `<a href="#/${kind}/${esc(it.id)}">${esc(it.id)}</a>` : c === "status" ? state(it.status) : c === "progress" ? esc(JSON.stringify(it.progress || {})) : esc(it[c])}</td>`).join("")}</tr>`).join("")}</table>`;
}

async function listPage(kind) {
  const filter = new URLSearchParams(location.hash.split("?")[1] || "").get("status");
  const q = filter ? `?status=${encodeURIComponent(filter)}` : "";
  if (kind === "reservations") {
    const { reservations } = await api(`/v2/${who.project}/reservations${q}`);
    return `<h2>Reservations</h2>${listTable(reservations, "reservation", ["id", "name", "status", "count", "progress", "created_at"])}`;
  }
  if (kind === "vclusters") {
    const { vclusters } = await api(`/v2/${who.project}/vclusters${q}`);
    return `<h2>Virtual clusters</h2>${listTable(vclusters, "vcluster", ["id", "name", "status", "created_at"])}`;
  }
  if (kind === "evacuations") {
    const { evacuations } = await api(`/v2/admin/evacuations${q}`);
    return `<h2>Evacuations</h2>${listTable(evacuations, "evacuation", ["id", "hosts", "status", "progress", "created_at"])}`;
  }
  const { recoveries } = await api(`/v2/admin/recoveries${q}`);
  return `<h2>Recoveries</h2>${listTable(recoveries, "recovery", ["id", "status", "created_at"])}`;
}

async function graphSection(flowId) {
  if (!flowId) return "<p>No flow yet.</p>";
  const path = isAdmin() ? `/v2/admin/flows/${flowId}/graph` : `/v2/${who.project}/flows/${flowId}/graph`;
  const { graph } = await api(path);
  flowLive = flowLive || !SETTLED_FLOWS.includes(graph.state);
  const all = [...atoms(graph.root)];
  const failed = all.filter((a) => a.failure);
  const actions = isAdmin() ? `<button data-flow-action="resume" data-flow="${esc(flowId)}">resume flow</button>
 <button class="danger" data-flow-action="revert" data-flow="${esc(flowId)}">revert flow</button>` : "";
  return `<h3>Flow <span id="flow-state">${state(graph.state)}</span> ${esc(graph.name)}</h3>
<p>fence ${esc(graph.fence ?? "–")}, owner ${esc(graph.owner ?? "–")}; ${all.length} atoms; last progress ${esc(graph.last_progress_at ?? "–")} ${actions}</p>
${failed.map((a) => `<p class="error">${esc(a.name)}: ${esc(a.failure.type)}: ${esc(a.failure.message)}</p>`).join("")}
<div class="graph">${render(graph.root, openGroups)}</div>`;
}

async function detailPage(kind, id) {
  if (kind === "flow") return `<h2>Flow ${esc(id)}</h2>${await graphSection(id)}`;
  if (kind === "reservation" || kind === "vcluster") {
    const body = await api(`/v2/${who.project}/${kind}s/${id}`);
    const item = body[kind];
    return `<h2>${kind} ${esc(id)}</h2><p>Status <span id="status">${state(item.status)}</span> ${esc(JSON.stringify(item.progress || ""))}</p>
<p><button class="danger" data-delete="/v2/${esc(who.project)}/${kind}s/${esc(id)}">delete</button></p>${await graphSection(item.flow_id || id)}`;
  }
  if (kind === "evacuation") {
    const { evacuation: e } = await api(`/v2/admin/evacuations/${id}`);
    const paused = e.status === "PAUSED";
    const acts = paused ? ["resume", "revert"].map((a) => `<button data-evac="${a}" data-id="${esc(id)}">${a}</button>`).join(" ") +
      ` <button data-evac="skip" data-id="${esc(id)}">skip failed</button>` : "";
    return `<h2>Evacuation ${esc(id)}</h2><p>Status <span id="status">${state(e.status)}</span> hosts ${esc(e.hosts.join(", "))} ${acts}</p>
${e.fault ? `<p class="error">${esc(e.fault.message)}</p>` : ""}
<table><tr><th>server</th><th>from</th><th>to</th><th>status</th><th>fault</th></tr>${e.instances.map((m) => `<tr><td>${esc(m.id)}</td><td>${esc(m.source)}</td><td>${esc(m.destination)}</td><td>${state(m.status)}</td><td>${esc(m.fault?.message)}</td></tr>`).join("")}</table>
${await graphSection(e.flow_id)}`;
  }
  const { recovery } = await api(`/v2/admin/recoveries/${id}`);
  return `<h2>Recovery ${esc(id)}</h2><pre>${esc(JSON.stringify(recovery, null, 2))}</pre>`;
}

async function auditPage() {
  if (!location.hash.includes("run")) return `<h2>Audit</h2><p><a href="#/audit?run=1">Run the audit</a> (asks every host for its guests).</p>`;
  const report = await api("/v2/admin/audit");
  const found = report.mismatches || report.audit?.mismatches || [];
  const byKind = {};
  for (const m of found) (byKind[m.kind || m.type] ||= []).push(m);
  return `<h2>Audit</h2><p>${found.length ? `${found.length} mismatches` : "Clean: everything agrees."}</p>
${Object.entries(byKind).map(([k, ms]) => `<h3>${esc(k)} (${ms.length})</h3><pre>${esc(ms.map((m) => JSON.stringify(m)).join("\n"))}</pre>`).join("")}`;
}

// -- routing -----------------------------------------------------------------------

function nav() {
  const links = isAdmin()
    ? ["fleet", "reservations", "vclusters", "evacuations", "recoveries", "audit"]
    : ["reservations", "vclusters"];
  const here = location.hash.slice(2).split(/[/?]/)[0];
  document.getElementById("nav").innerHTML = links.map((l) => `<a href="#/${l}" class="${l === here ? "current" : ""}">${l}</a>`).join("");
}

// Does a change of the feed show on the page ``page``/``arg``?
function shows(page, arg, event) {
  if (page === "fleet") return event.kind === "host" || event.kind === "evacuation";
  if (page === "host") return (event.kind === "host" && event.id === arg) || event.kind === "evacuation";
  if (page === "recoveries") return true;
  if (arg) return event.kind === page && event.id === arg;
  return `${event.kind}s` === page;
}

function feedPath() {
  return isAdmin() ? "/v2/admin/events" : `/v2/${encodeURIComponent(who.project)}/events`;
}

// Poll the events feed (not every list): draw the page again when one of its objects
// changed, or while a flow on it runs.
async function watch(page, arg) {
  let changed = flowLive;
  try {
    const since = cursor ? `?since=${encodeURIComponent(cursor)}` : "?limit=1";
    const feed = await api(`${feedPath()}${since}`);
    const first = cursor === null;
    cursor = feed.cursor;
    changed = changed || (!first && feed.events.some((e) => shows(page, arg, e)));
  } catch (e) {
    changed = true; // the feed is refused or away: fall back to drawing the page again
  }
  if (changed) route();
  else timer = setTimeout(() => watch(page, arg), POLL_MS);
}

async function route() {
  clearTimeout(timer);
  flowLive = false;
  if (!location.hash) location.hash = isAdmin() ? "#/fleet" : "#/reservations";
  nav();
  const [page, arg] = location.hash.slice(2).split("?")[0].split("/");
  if (cursor === null && page !== "audit") {
    // The feed's cursor before the page is read: a change made while it is drawn is
    // then after the cursor, seen at the next poll (taken after, it would be lost).
    try {
      cursor = (await api(`${feedPath()}?limit=1`)).cursor;
    } catch (e) {
      // the feed is refused or away: watch() draws the page again at each poll
    }
  }
  try {
    let html;
    if (page === "fleet") html = await fleetPage();
    else if (page === "host") html = await hostPage(decodeURIComponent(arg));
    else if (page === "audit") html = await auditPage();
    else if (arg) html = await detailPage(page, arg);
    else html = await listPage(page);
    main.innerHTML = html;
  } catch (e) {
    main.innerHTML = `<p class="error" id="refused">${esc(e.message)}</p>`;
  }
  if (page !== "audit") timer = setTimeout(() => watch(page, arg && decodeURIComponent(arg)), POLL_MS);
}

main.addEventListener("click", (e) => {
  const t = e.target.closest("[data-group],[data-set-state],[data-flow-action],[data-evac],[data-delete]");
  if (!t) return;
  if (t.dataset.group) { openGroups.add(t.dataset.group); route(); return; }
  if (t.dataset.setState) {
    const name = decodeURIComponent(location.hash.split("/")[2]);
    confirmThen(`Set host ${name} ${t.dataset.setState}?`, () => api(`/v2/admin/hosts/${encodeURIComponent(name)}`,
      { method: "PUT", body: JSON.stringify({ host: { state: t.dataset.setState, reason: "set from the console" } }) }));
  } else if (t.dataset.flowAction) {
    confirmThen(`${t.dataset.flowAction} flow ${t.dataset.flow}?`, () => api(`/v2/admin/flows/${t.dataset.flow}/${t.dataset.flowAction}`, { method: "POST" }));
  } else if (t.dataset.evac) {
    const id = t.dataset.id, action = t.dataset.evac;
    confirmThen(`${action} evacuation ${id}?`, async () => {
      let body = {};
      if (action === "skip") {
        const { evacuation } = await api(`/v2/admin/evacuations/${id}`);
        body = { skip: { instances: evacuation.instances.filter((m) => m.status === "FAILED").map((m) => m.id) } };
      }
      return api(`/v2/admin/evacuations/${id}/${action}`, { method: "POST", body: JSON.stringify(body) });
    });
  } else if (t.dataset.delete) {
    confirmThen(`Delete ${t.dataset.delete}?`, () => api(t.dataset.delete, { method: "DELETE" }));
  }
});

loadIdentity();
window.addEventListener("hashchange", route);
route();
