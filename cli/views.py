"""What each object of the API shows as in a client: one formatter for every command.

The ``fleetflow`` command (rich tables) and the ``openstack fleet`` commands (cliff's
formatters) both print what is defined here: a list's columns and each object's row,
one object's fields. Each client only frames them its own way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from fleetflow.api.client import where

# The resource classes a host list shows, as "used/total".
CAPACITY_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB", "GPU")
# The counts of an evacuation's progress, in the order they are shown.
EVACUATION_PROGRESS = ("done", "moving", "pending", "failed", "skipped", "reverted")
VCLUSTER_PROGRESS = ("active", "building", "error", "total")


def text(value) -> str:
    """A cell's text: a dict as ``k=v, ...``, a list as ``a, b``."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def fault_text(item: dict) -> str | None:
    fault = item.get("fault")
    return f"{fault['code']}: {fault['message']}" if fault else None


def failure_text(failure: dict | None) -> str | None:
    if not failure:
        return None
    return f"{failure['step']}: {failure['type']}: {failure['message']}"


def used_of_total(host: dict, resource_class: str) -> str:
    found = (host.get("capacity") or {}).get(resource_class)
    return f"{found['used']}/{found['total']}" if found else ""


def capacity_text(host: dict) -> str:
    """``VCPU 4/32 (28 free), MEMORY_MB ...``: every class of the host's inventory."""
    return ", ".join(f"{rc} {c['used']}/{c['total']} ({c['free']} free)"
                     for rc, c in sorted((host.get("capacity") or {}).items()))


@dataclasses.dataclass(frozen=True)
class View:
    """How one kind of object shows: ``title`` and ``fields`` of one, ``columns`` and
    ``row`` of a list."""

    title: Callable[[dict], str]
    fields: Callable[[dict], list[tuple[str, object]]]
    columns: tuple[str, ...]
    row: Callable[[dict], list]


def _picked(*keys: str) -> Callable[[dict], list[tuple[str, object]]]:
    return lambda item: [(key, item.get(key)) for key in keys]


RESERVATION = View(
    title=lambda r: f"reservation {r['id']}",
    fields=lambda r: [
        ("name", r.get("name")), ("status", r["status"]), ("policy", r.get("policy")),
        ("flow_id", r.get("flow_id")), ("progress", r.get("progress")),
        ("created_at", r.get("created_at")), ("updated_at", r.get("updated_at")),
        ("fault", fault_text(r)), *queue_fields(r.get("queue"))],
    columns=("id", "name", "status", "policy", "active", "building", "error", "total",
             "created_at"),
    row=lambda r: [r["id"], r.get("name"), r["status"], r["policy"], r["progress"]["active"],
                   r["progress"]["building"], r["progress"]["error"], r["progress"]["total"],
                   r.get("created_at")])

INSTANCE_COLUMNS = ("id", "name", "status", "host", "attempts", "fault")


def instance_row(instance: dict) -> list:
    return [instance["id"], instance["name"], instance["status"], where(instance),
            instance.get("attempts"), fault_text(instance)]


GROUP = View(
    title=lambda g: f"group {g['id']}",
    fields=_picked("name", "tenant_id", "policies", "scope", "max_per_host", "metadata",
                   "capabilities", "members", "created_at", "updated_at"),
    columns=("id", "name", "policies", "scope", "max_per_host", "members"),
    row=lambda g: [g["id"], g.get("name"), ", ".join(g["policies"]), g["scope"],
                   g.get("max_per_host"), len(g["members"])])

VCLUSTER = View(
    title=lambda v: f"vcluster {v['id']}",
    fields=lambda v: [
        ("name", v.get("name")), ("status", v["status"]), ("flow_id", v.get("flow_id")),
        ("progress", v.get("progress")), ("created_at", v.get("created_at")),
        ("updated_at", v.get("updated_at")), ("fault", fault_text(v)),
        *queue_fields(v.get("queue"))],
    columns=("id", "name", "status", *VCLUSTER_PROGRESS, "created_at"),
    row=lambda v: [v["id"], v.get("name"), v["status"],
                   *((v.get("progress") or {}).get(k) for k in VCLUSTER_PROGRESS),
                   v.get("created_at")])

EVACUATION = View(
    title=lambda e: f"evacuation {e['id']}",
    fields=lambda e: [
        ("hosts", e.get("hosts")), ("mode", e.get("mode")), ("status", e["status"]),
        ("on_error", e.get("on_error")), ("max_parallel", e.get("max_parallel")),
        ("fallback", e.get("fallback")), ("target_hosts", e.get("target_hosts")),
        ("reason", e.get("reason")), ("flow_id", e.get("flow_id")),
        ("progress", e.get("progress")), ("created_at", e.get("created_at")),
        ("updated_at", e.get("updated_at")), ("fault", fault_text(e))],
    columns=("id", "hosts", "mode", "status", *EVACUATION_PROGRESS, "total", "created_at"),
    # An API from before the "reverted" count leaves its cell empty.
    row=lambda e: [e["id"], ", ".join(e["hosts"]), e["mode"], e["status"],
                   *(e["progress"].get(k, "") for k in (*EVACUATION_PROGRESS, "total")),
                   e.get("created_at")])

HOST = View(
    title=lambda h: f"host {h['name']}",
    fields=lambda h: [
        ("uuid", h.get("uuid")), ("state", h["state"]), ("reason", h.get("reason")),
        ("instances", h.get("instances")), ("capacity (used/total)", capacity_text(h)),
        ("evacuation_id", h.get("evacuation_id")), ("heartbeat_at", h.get("heartbeat_at")),
        ("topology", h.get("topology")), ("traits", h.get("traits")),
        ("capabilities", h.get("capabilities")), ("compute_agent", h.get("compute_agent")),
        ("updated_at", h.get("updated_at"))],
    columns=("name", "state", "instances", *(rc.lower() for rc in CAPACITY_CLASSES),
             "evacuation", "region", "zone", "rack", "reason"),
    row=lambda h: [h["name"], h["state"], h.get("instances"),
                   *(used_of_total(h, rc) for rc in CAPACITY_CLASSES), h.get("evacuation_id"),
                   h["topology"]["region"], h["topology"]["zone"], h["topology"]["rack"],
                   h.get("reason")])

def queue_fields(queue: dict | None) -> list[tuple[str, object]]:
    """A QUEUED request's place in the queue, as a show lists it (nothing otherwise)."""
    if not queue:
        return []
    return [("queue position", f"{queue['position']} ({queue['ahead']} ahead)"),
            ("waiting since", queue.get("waiting_since")),
            ("last attempt", queue.get("last_attempt")), ("why", queue.get("why"))]


QUEUE = View(
    title=lambda q: f"{q['kind']} {q['id']}",
    fields=lambda q: [("tenant", q["tenant_id"]), ("priority", q["priority"]),
                      *queue_fields(q), ("deadline", q.get("deadline")),
                      ("bypassed", q.get("bypassed"))],
    columns=("position", "kind", "id", "tenant", "priority", "waiting_since", "bypassed", "why"),
    row=lambda q: [q["position"], q["kind"], q["id"], q["tenant_id"], q["priority"],
                   q.get("waiting_since"), q.get("bypassed"), q.get("why")])


RECOVERY = View(
    title=lambda r: f"recovery {r['id']}",
    fields=_picked("host", "zone", "status", "evacuation_id", "suspect_at", "finished_at",
                   "detail"),
    columns=("id", "host", "zone", "status", "evacuation_id", "suspect_at", "finished_at",
             "detail"),
    row=lambda r: [r.get(c) for c in ("id", "host", "zone", "status", "evacuation_id",
                                       "suspect_at", "finished_at", "detail")])
TIMELINE_COLUMNS = ("at", "event", "detail")


def timeline_row(event: dict) -> list:
    return [event.get(column) for column in TIMELINE_COLUMNS]


def switch_text(switch: dict) -> str:
    """The recovery switch and the storm guard, in one line."""
    storm = switch.get("storm") or {}
    held = ("fleet" if storm.get("fleet") else ", ".join(storm.get("zones") or [])) or "none"
    return (f"recovery {'enabled' if switch.get('enabled') else 'disabled'}, "
            f"{'PAUSED' if switch.get('paused') else 'acting'}; storm guard holds: {held}")


FLOW = View(
    title=lambda f: f"flow {f['id']}",
    fields=lambda f: [
        ("name", f["name"]), ("state", f["state"]), ("owner_tenant", f.get("owner_tenant")),
        ("on_error", f.get("on_error")), ("submitted_at", f.get("submitted_at")),
        ("paused_at", f.get("paused_at")), ("last_progress_at", f.get("last_progress_at")),
        ("failure", failure_text(f.get("failure")))],
    columns=("id", "name", "state", "owner_tenant", "on_error", "submitted_at",
             "last_progress_at"),
    row=lambda f: [f["id"], f["name"], f["state"], f.get("owner_tenant"), f.get("on_error"),
                   f.get("submitted_at"), f.get("last_progress_at")])

ATOM_COLUMNS = ("name", "kind", "state", "intention", "attempts", "failure")


def atom_row(atom: dict) -> list:
    return [atom["name"], atom["kind"], atom["state"], atom["intention"], atom["attempts"],
            failure_text(atom.get("failure") or atom.get("revert_failure"))]


MISMATCH_COLUMNS = ("kind", "subject", "host", "detail")


def mismatch_row(mismatch: dict) -> list:
    return [mismatch["kind"], mismatch["subject"], mismatch.get("host"), mismatch["detail"]]


def audit_summary(result: dict) -> str:
    """``2 mismatches (hosts=4, instances=3, ...)``: the audit's last line."""
    counts = result.get("counts") or {}
    looked = ", ".join(f"{k}={v}" for k, v in counts.items() if k != "mismatches")
    return f"{len(result['mismatches'])} mismatches" + (f" ({looked})" if looked else "")


def dry_run_fields(verdict: dict) -> list[tuple[str, object]]:
    """A reservation's dry run: does it fit, and why."""
    return [("fits", verdict["fits"]), ("placed", verdict.get("placed")),
            ("explanation", verdict.get("explanation")),
            ("hosts", len(verdict.get("hosts") or {}))]


# -- capacity ------------------------------------------------------------------

CAPACITY_COLUMNS = ("level", "name", "hosts", "instances", "states",
                    *(rc.lower() for rc in CAPACITY_CLASSES))
# The nesting of a capacity report: each level's list of the next.
_CAPACITY_CHILDREN = (("region", "regions"), ("zone", "zones"), ("rack", "racks"),
                      ("host", "hosts"))


def amounts_text(resources: dict, resource_class: str) -> str:
    """``used/total`` of one class of a capacity level (empty when it has none)."""
    found = (resources or {}).get(resource_class)
    return f"{found['used']}/{found['total']}" if found else ""


def _capacity_row(level: str, name: str, item: dict) -> list:
    hosts = item.get("host_count", 1 if level == "host" else None)
    states = item.get("states") or ({item["state"]: 1} if "state" in item else {})
    return [level, name, hosts, item.get("instances"), text(states),
            *(amounts_text(item.get("resources"), rc) for rc in CAPACITY_CLASSES)]


def capacity_rows(report: dict) -> list[list]:
    """The fleet, then each region, zone, rack (and host) under it, one row each, as deep
    as the report goes; a level's name is its path (``region/zone/rack``)."""
    rows = [_capacity_row("fleet", "", report)]

    def under(item: dict, depth: int, path: str) -> None:
        if depth == len(_CAPACITY_CHILDREN):
            return
        level, key = _CAPACITY_CHILDREN[depth]
        for child in item.get(key) or ():
            name = f"{path}/{child['name']}" if path else child["name"]
            rows.append(_capacity_row(level, name, child))
            under(child, depth + 1, name)

    under(report, 0, "")
    return rows


BACKEND_COLUMNS = ("name", "scope", "where", "disk_gb")


def backend_row(backend: dict) -> list:
    place = backend.get("host") or "/".join(
        str(backend.get(k)) for k in ("region", "zone", "rack") if backend.get(k))
    return [backend["name"], backend.get("scope"), place,
            amounts_text(backend.get("resources"), "DISK_GB")]


# -- a flow's graph ------------------------------------------------------------

def _node_text(node: dict) -> str:
    if node["kind"] in ("task", "retry"):
        parts = [node["kind"], node["name"], node.get("state") or "PENDING"]
        if node.get("started_at"):
            parts.append(f"started {node['started_at']}")
        if node.get("duration") is not None:
            parts.append(f"({node['duration']:.3f} s)")
        elif node.get("updated_at"):
            parts.append(f"at {node['updated_at']}")
        failure = failure_text(node.get("failure") or node.get("revert_failure"))
        return " ".join(parts) + (f"  ! {failure}" if failure else "")
    counts = ", ".join(f"{state} {n}" for state, n in sorted((node.get("counts") or {})
                                                              .items()))
    return f"{node['kind']} {node['name']}" + (f"  [{counts}]" if counts else "")


def graph_lines(root: dict, indent: str = "  ") -> list[str]:
    """A flow's graph as an indented tree: a flow, its retry (``retry ...``) first, then its
    children in order; atoms with state, last checkpoint and failure."""
    lines = []

    def walk(node: dict, depth: int) -> None:
        lines.append(indent * depth + _node_text(node))
        if node.get("retry") is not None:
            lines.append(indent * (depth + 1) + _node_text(node["retry"]))
        for child in node.get("children") or ():
            walk(child, depth + 1)

    walk(root, 0)
    return lines


#: Graphviz fill colours of atom states (the console's palette).
DOT_COLOURS = {"SUCCESS": "palegreen", "RUNNING": "lightskyblue", "FAILURE": "salmon",
               "REVERT_FAILURE": "red", "REVERTING": "orange", "REVERTED": "khaki",
               "RETRYING": "plum", "PENDING": "white"}


def _quoted(value: str) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def graph_dot(graph: dict) -> str:
    """A flow's graph in Graphviz' DOT language: a flow (and its retry) is a cluster around
    its children, an atom a box filled by its state, a flow's edges link its children
    (a subflow by its first atom, with ``lhead``/``ltail`` so the arrow meets its box)."""
    out = [f"digraph {_quoted(graph.get('name') or 'flow')} {{", "  compound=true;",
           "  rankdir=LR;", "  node [shape=box, style=filled];"]
    clusters = iter(range(1, 1 << 30))

    def atom(node: dict, pad: str) -> str:
        state = node.get("state") or "PENDING"
        shape = ", shape=diamond" if node["kind"] == "retry" else ""
        out.append(f"{pad}{_quoted(node['name'])} [label={_quoted(node['name'] + chr(10) + state)}"
                   f", fillcolor={DOT_COLOURS.get(state, 'white')}{shape}];")
        return node["name"]

    def flow(node: dict, pad: str) -> tuple[str | None, str]:
        """Draw ``node``; its first atom's name (None when empty) and its cluster's id."""
        cluster = f"cluster_{next(clusters)}"
        retry = node.get("retry")
        label = f"{node['kind']} {node['name']}" + (f" (retry {retry['name']})" if retry else "")
        out.append(f"{pad}subgraph {cluster} {{")
        out.append(f"{pad}  label={_quoted(label)};")
        first = atom(retry, pad + "  ") if retry else None
        anchors = {}
        for child in node.get("children") or ():
            if child["kind"] in ("task", "retry"):
                anchors[child["name"]] = (atom(child, pad + "  "), None)
            else:
                anchors[child["name"]] = flow(child, pad + "  ")
            first = first or anchors[child["name"]][0]
        for source, target in node.get("edges") or ():
            (tail, tail_cluster), (head, head_cluster) = anchors[source], anchors[target]
            if tail is None or head is None:
                continue
            attrs = [f"ltail={tail_cluster}"] if tail_cluster else []
            attrs += [f"lhead={head_cluster}"] if head_cluster else []
            extra = f" [{', '.join(attrs)}]" if attrs else ""
            out.append(f"{pad}  {_quoted(tail)} -> {_quoted(head)}{extra};")
        out.append(f"{pad}}}")
        return first, cluster

    flow(graph["root"], "  ")
    out.append("}")
    return "\n".join(out) + "\n"
