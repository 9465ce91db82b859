// A flow's graph as SVG: linear and graph flows left to right, unordered flows top to
// bottom, a retry as the box around what it retries, each atom coloured by its state.
// An unordered flow of many children is folded into groups, each a bar of its atoms'
// states; clicking a group opens it (the set of open groups survives redraws).

const COLOURS = {
  SUCCESS: "#7fcf92", RUNNING: "#7fb1ea", PENDING: "#eeeeee", FAILURE: "#ec7b7b",
  REVERTING: "#c9a0e8", REVERTED: "#bbbbbb", REVERT_FAILURE: "#c0392b",
  RETRYING: "#f5c26b", IGNORE: "#f4f4f4", SUSPENDED: "#f5d77b",
};
const ATOM_W = 170, ATOM_H = 22, GAP = 8, PAD = 6, TITLE = 14;
export const FOLD_AT = 12, GROUP = 50;

const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const colour = (state) => COLOURS[state || "PENDING"] || "#ddd";

function atomTitle(node) {
  const lines = [`${node.kind} ${node.name}`, `state: ${node.state || "PENDING"}`];
  if (node.started_at) lines.push(`started: ${node.started_at}`);
  if (node.duration != null) lines.push(`duration: ${node.duration.toFixed(3)} s`);
  if (node.reverted_at) lines.push(`reverted: ${node.reverted_at}`);
  if (node.updated_at) lines.push(`last checkpoint: ${node.updated_at}`);
  if (node.failure) lines.push(`failure: ${node.failure.type}: ${node.failure.message}`);
  return lines.join("\n");
}

function atom(node) {
  return {
    w: ATOM_W, h: ATOM_H,
    draw: (x, y) => `<g class="node atom" data-name="${esc(node.name)}" data-state="${esc(node.state || "PENDING")}">
<title>${esc(atomTitle(node))}</title>
<rect x="${x}" y="${y}" width="${ATOM_W}" height="${ATOM_H}" rx="3" fill="${colour(node.state)}"/>
<text x="${x + 4}" y="${y + 15}">${esc(node.name.slice(0, 26))}</text></g>`,
  };
}

function countsBar(counts, x, y, w) {
  const total = Object.values(counts).reduce((a, b) => a + b, 0) || 1;
  let at = x, out = "";
  for (const [state, n] of Object.entries(counts).sort()) {
    const width = (w * n) / total;
    out += `<rect x="${at}" y="${y}" width="${width}" height="8" fill="${colour(state)}"><title>${esc(state)}: ${n}</title></rect>`;
    at += width;
  }
  return out;
}

function addCounts(into, counts) {
  for (const [k, v] of Object.entries(counts || {})) into[k] = (into[k] || 0) + v;
  return into;
}

function group(key, children, open) {
  const counts = children.reduce((acc, c) => addCounts(acc, c.counts || {[c.state || "PENDING"]: 1}), {});
  const label = `${children[0].name} … ${children[children.length - 1].name} (${children.length})`;
  return {
    w: ATOM_W + 60, h: ATOM_H + 12,
    draw: (x, y) => `<g class="node fold" data-group="${esc(key)}" data-counts="${esc(JSON.stringify(counts))}">
<title>${esc(label)}: click to open</title>
<rect x="${x}" y="${y}" width="${ATOM_W + 60}" height="${ATOM_H + 12}" fill="#fafafa"/>
<text x="${x + 4}" y="${y + 13}">▸ ${esc(label.slice(0, 36))}</text>
${countsBar(counts, x + 4, y + 20, ATOM_W + 52)}</g>`,
  };
}

function flow(node, open, path) {
  let items = node.children.map((c, i) => layout(c, open, `${path}/${i}`));
  if (node.kind === "unordered" && node.children.length > FOLD_AT) {
    items = [];
    for (let i = 0; i < node.children.length; i += GROUP) {
      const key = `${path}@${i}`;
      const slice = node.children.slice(i, i + GROUP);
      if (open.has(key)) items.push(...slice.map((c, j) => layout(c, open, `${path}/${i + j}`)));
      else items.push(group(key, slice, open));
    }
  }
  const across = node.kind !== "unordered";
  const inner = { w: 0, h: 0 };
  for (const it of items) {
    if (across) { inner.w += it.w + GAP; inner.h = Math.max(inner.h, it.h); }
    else { inner.h += it.h + GAP; inner.w = Math.max(inner.w, it.w); }
  }
  const retry = node.retry;
  const top = TITLE + PAD + (retry ? ATOM_H + GAP : 0);
  const w = Math.max(inner.w, ATOM_W) + 2 * PAD, h = inner.h + top + PAD;
  return {
    w, h,
    draw: (x, y) => {
      let out = `<g class="flow ${retry ? "retry" : ""}" data-kind="${node.kind}" data-name="${esc(node.name)}">`;
      out += `<rect x="${x}" y="${y}" width="${w}" height="${h}" rx="4" ${retry ? `stroke="${colour(retry.state)}"` : ""}/>`;
      out += `<text x="${x + PAD}" y="${y + TITLE}" fill="#666">${esc(node.kind)} ${esc(node.name)}</text>`;
      if (retry) out += atom(retry).draw(x + PAD, y + TITLE + PAD);
      let cx = x + PAD, cy = y + top, prev = null;
      for (const it of items) {
        out += it.draw(cx, cy);
        if (across && prev) out += `<line x1="${cx - GAP}" y1="${cy + 10}" x2="${cx}" y2="${cy + 10}" stroke="#555" marker-end="url(#arrow)"/>`;
        prev = it;
        if (across) cx += it.w + GAP; else cy += it.h + GAP;
      }
      return out + "</g>";
    },
  };
}

function layout(node, open, path = "") {
  return node.kind === "task" || node.kind === "retry" ? atom(node) : flow(node, open, path);
}

export function render(root, open) {
  const laid = layout(root, open);
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${laid.w + 4}" height="${laid.h + 4}" id="flow-graph">
<defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#555"/></marker></defs>
${laid.draw(2, 2)}</svg>`;
}

export function* atoms(node) {
  if (node.kind === "task" || node.kind === "retry") { yield node; return; }
  if (node.retry) yield node.retry;
  for (const c of node.children) yield* atoms(c);
}
