"""What a failed crash test leaves behind: its cloud's files, kept, and its rows, summed up.

Not a test module: tests/reliability/conftest.py calls it when a test that
made a cloud (provision, evacuation, vcluster) fails. A failure of these
suites is rare and load-dependent, and the next run passes: the conductor
logs, the SQLite database (rows, flow details, atoms, jobs) and the hosts'
state file are the only evidence. The cloud's directory is copied to a
kept folder (``FLEETFLOW_CRASH_KEEP``, else ``crash-kept`` under pytest's
base temporary directory, which outlives the next few runs) and the
operations that did not end as a settled flow are listed with their atoms
that did not succeed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3

# The operation rows a flow's store may name: (store key, table).
OPERATIONS = (("reservation_id", "reservations"), ("vcluster_id", "vclusters"),
              ("evacuation_id", "evacuations"))
SETTLED_FLOWS = ("SUCCESS", "REVERTED")
# Operation statuses no flow moves on from by itself.
SETTLED_ROWS = ("ACTIVE", "PARTIAL", "ERROR", "REVERTED", "DELETED", "DONE", "FAILED")
MAX_FLOWS = 12
MAX_ATOMS = 12


def keep_dir(base) -> str:
    """Where failed runs are kept: ``FLEETFLOW_CRASH_KEEP`` or ``base/crash-kept``."""
    return os.environ.get("FLEETFLOW_CRASH_KEEP") or os.path.join(str(base), "crash-kept")


def keep(workdir: str, into: str, label: str) -> str:
    """Copy ``workdir`` (logs, databases) to a new folder of ``into``; returns its path."""
    os.makedirs(into, exist_ok=True)
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:120]
    target, n = os.path.join(into, name), 1
    while os.path.exists(target):
        n += 1
        target = os.path.join(into, f"{name}-{n}")
    # The databases are in WAL mode: their -wal files hold the latest commits,
    # so they are copied with them (a checkpoint could fail on a busy file).
    shutil.copytree(workdir, target, ignore=shutil.ignore_patterns("*.sock"))
    return target


def summary(db_path: str) -> str:
    """The operations whose flow did not settle, or whose row did not: one line each,
    then their atoms that did not succeed. Read from a copy, with plain sqlite3."""
    if not os.path.exists(db_path):
        return f"(no database at {db_path})"
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True,
                                                timeout=5)) as conn:
            return _summary(conn)
    except sqlite3.Error as exc:
        return f"(could not read {db_path}: {exc})"


def _summary(conn) -> str:
    import json

    lines, shown = [], 0
    flows = conn.execute("SELECT uuid, state, meta FROM tf_flowdetails ORDER BY uuid"
                         ).fetchall()
    for uuid, state, meta in flows:
        meta = json.loads(meta) if meta else {}
        store = meta.get("store") or {}
        kwargs = (meta.get("factory") or {}).get("kwargs") or {}
        operation, status, current = "", None, True
        for key, table in OPERATIONS:
            row_id = store.get(key) or kwargs.get(key)
            if row_id:
                found = conn.execute(f"SELECT status, flow_id FROM {table} WHERE id = ?",
                                     (row_id,)).fetchone()
                status, current = (found[0], found[1] == uuid) if found else ("missing", True)
                operation = f"{key.removesuffix('_id')} {row_id} {status}"
                break
        # A settled earlier run of an operation that went on (a built cluster
        # now deleting) says nothing.
        if state in SETTLED_FLOWS and (status is None or status in SETTLED_ROWS
                                       or not current):
            continue
        shown += 1
        if shown > MAX_FLOWS:
            lines.append("...")
            break
        name = ((meta.get("fleetflow") or {}).get("flow_name")) or "?"
        lines.append(f"{operation or 'no operation'}: {name} flow {uuid} "
                     f"{state or 'never run'}")
        atoms = conn.execute(
            "SELECT name, state, intention, failure, revert_failure FROM tf_atomdetails "
            "WHERE parent_uuid = ? AND name != '_TaskFlow_INJECTOR' "
            "AND (state IS NULL OR state != 'SUCCESS' OR intention != 'EXECUTE') "
            "ORDER BY name", (uuid,)).fetchall()
        for atom, atom_state, intention, failure, revert_failure in atoms[:MAX_ATOMS]:
            why = _failure(revert_failure) or _failure(failure)
            lines.append(f"    {atom}: {atom_state}/{intention}" + (f" ({why})" if why else ""))
        if len(atoms) > MAX_ATOMS:
            lines.append(f"    ... and {len(atoms) - MAX_ATOMS} more atoms")
    return "\n".join(lines) or "every flow and operation settled"


def _failure(stored) -> str:
    import json

    if not stored:
        return ""
    try:
        failure = json.loads(stored)
    except ValueError:
        return str(stored)[:200]
    if not failure:
        return ""
    kind = (failure.get("exc_type_names") or ["?"])[0].rsplit(".", 1)[-1]
    return f"{kind}: {failure.get('exception_str', '')}"[:300]
