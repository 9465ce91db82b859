"""Statements over many rows straight to the driver (persistence.bulk): what they store
and read is what SQLAlchemy's own statements store and read."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import uuid

import pytest
import sqlalchemy as sa

from fleetflow.persistence import bulk
from fleetflow.persistence.db import Database
from fleetflow.persistence.models import Instance, Reservation

TABLE = Instance.__table__
WHEN = dt.datetime(2026, 11, 30, 12, 34, 56, 789012)


def _reservation(session) -> str:
    reservation_id = str(uuid.uuid4())
    session.add(Reservation(id=reservation_id, tenant_id="t", user_id="u", name="r",
                            status="PENDING", policy="all", request={}))
    session.flush()
    return reservation_id


def _rows(reservation_id: str, count: int, start: int = 0) -> list[dict]:
    shared: list = []  # one object in every row, as a reservation's create passes it
    return [{"id": str(uuid.uuid4()), "reservation_id": reservation_id, "tenant_id": "t",
             "name": f"r-{i}", "index": i, "status": "PENDING", "flavor_id": "f",
             "image_id": "i", "group_id": None, "attempts": 0,
             "hosts_tried": shared if i % 2 else [f"h{i}", "h0"],
             "metadata": None if i % 3 else {"ha": i}, "created_at": WHEN,
             "updated_at": WHEN + dt.timedelta(seconds=i)}
            for i in range(start, start + count)]


def _twins(reservation_id: str, count: int) -> tuple[list[dict], list[dict]]:
    """Two sets of rows alike but for their id, name and index: ours and SQLAlchemy's."""
    ours, theirs = _rows(reservation_id, count), _rows(reservation_id, count, start=count)
    for mine, other in zip(ours, theirs, strict=True):
        other.update({k: v for k, v in mine.items() if k not in ("id", "name", "index")})
    return ours, theirs


def _stored(session, ids) -> list[tuple]:
    """Every column but the id, name and index, as the database holds it (not loaded)."""
    columns = [c.name for c in TABLE.c if c.name not in ("id", "name", "index")]
    quoted = ", ".join(f'"{c}"' for c in columns)
    marks = ", ".join("?" * len(ids))
    found = session.connection().exec_driver_sql(
        f'SELECT {quoted} FROM instances WHERE id IN ({marks}) ORDER BY "index"',
        tuple(ids)).fetchall()
    return [tuple(row) for row in found]


def test_an_insert_stores_what_sqlalchemys_insert_stores(db):
    with db.session() as session:
        reservation_id = _reservation(session)
        ours, theirs = _twins(reservation_id, 6)
        bulk.insert(session, TABLE, ours)
        session.execute(TABLE.insert(), theirs)
        stored = _stored(session, [r["id"] for r in ours])
        assert stored == _stored(session, [r["id"] for r in theirs])
        assert len(stored) == 6
        loaded = {i.id: i for i in session.scalars(sa.select(Instance))}
    for row in ours:
        instance = loaded[row["id"]]
        assert (instance.hosts_tried, instance.metadata_, instance.updated_at) == (
            row["hosts_tried"], row["metadata"], row["updated_at"])


def test_updates_write_what_sqlalchemys_updates_write(db):
    with db.session() as session:
        reservation_id = _reservation(session)
        ours, theirs = _twins(reservation_id, 5)
        session.execute(TABLE.insert(), ours + theirs)
        hosts = [f"host-{i}" for i in range(5)]
        bulk.update_each(session, TABLE, [
            {"id": row["id"], "host": host, "hosts_tried": [host]}
            for row, host in zip(ours, hosts, strict=True)],
            attempts=1, status="BUILDING", task_state="spawning", updated_at=WHEN)
        session.execute(
            TABLE.update().where(TABLE.c.id == sa.bindparam("b_id")).values(
                host=sa.bindparam("b_host"),
                hosts_tried=sa.bindparam("b_tried", type_=TABLE.c.hosts_tried.type),
                attempts=1, status="BUILDING", task_state="spawning", updated_at=WHEN),
            [{"b_id": row["id"], "b_host": host, "b_tried": [host]}
             for row, host in zip(theirs, hosts, strict=True)])
        assert _stored(session, [r["id"] for r in ours]) == _stored(
            session, [r["id"] for r in theirs])

        fault = {"code": "X", "message": "m"}
        bulk.update_ids(session, TABLE, [r["id"] for r in ours[:3]], status="ERROR",
                        fault=fault, task_state=None, updated_at=WHEN)
        session.execute(TABLE.update().where(TABLE.c.id.in_([r["id"] for r in theirs[:3]]))
                        .values(status="ERROR", fault=fault, task_state=None, updated_at=WHEN))
        assert _stored(session, [r["id"] for r in ours]) == _stored(
            session, [r["id"] for r in theirs])
        statuses = [s for (s,) in session.execute(
            sa.select(TABLE.c.status).where(TABLE.c.id.in_([r["id"] for r in ours]))
            .order_by(TABLE.c.index))]
    assert statuses == ["ERROR"] * 3 + ["BUILDING"] * 2


def test_long_id_lists_are_cut_into_statements_sqlite_accepts(db):
    with db.session() as session:
        reservation_id = _reservation(session)
        rows = _rows(reservation_id, 20)
        # One row's 14 values a statement; ids 14 (reads) and 13 (writes) at a time.
        session.connection().connection.driver_connection.setlimit(
            sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 14)
        bulk.insert(session, TABLE, rows)
        ids = [r["id"] for r in rows]
        bulk.update_ids(session, TABLE, ids[:18], status="ACTIVE")
        found = bulk.select_ids(session, (TABLE.c.id, TABLE.c.status, TABLE.c.hosts_tried,
                                          TABLE.c.updated_at), ids)
        session.connection().connection.driver_connection.setlimit(
            sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        expected = session.execute(sa.select(TABLE.c.id, TABLE.c.status, TABLE.c.hosts_tried,
                                             TABLE.c.updated_at).where(TABLE.c.id.in_(ids)))
    assert sorted(found) == sorted(tuple(row) for row in expected)
    assert sorted(status for _, status, _, _ in found) == ["ACTIVE"] * 18 + ["PENDING"] * 2
    assert {uuid: tried for uuid, _, tried, _ in found} == {
        r["id"]: r["hosts_tried"] for r in rows}


def test_nothing_to_write_or_read_runs_no_statement(db):
    statements = []
    with db.session() as session:
        sa.event.listen(session.connection(), "before_cursor_execute",
                        lambda *args: statements.append(args[2]))
        bulk.insert(session, TABLE, [])
        bulk.update_each(session, TABLE, [], status="ACTIVE")
        bulk.update_ids(session, TABLE, [], status="ACTIVE")
        assert bulk.select_ids(session, (TABLE.c.id,), []) == []
    assert statements == []


@contextlib.contextmanager
def _postgresql_session(pg_url):
    """A session on PostgreSQL with the reservation and instance tables."""
    database = Database(pg_url)
    try:
        Reservation.metadata.create_all(database.engine,
                                        tables=[Reservation.__table__, TABLE])
        with database.session() as session:
            yield session
    finally:
        database.dispose()


def test_postgresql_takes_the_same_calls_through_sqlalchemy(pg_url):
    with _postgresql_session(pg_url) as session:
        reservation_id = _reservation(session)
        rows = _rows(reservation_id, 4)
        bulk.insert(session, TABLE, rows)
        ids = [r["id"] for r in rows]
        bulk.update_each(session, TABLE, [{"id": ids[0], "host": "a", "hosts_tried": ["a"]}],
                         attempts=1, updated_at=WHEN)
        bulk.update_ids(session, TABLE, ids[1:3], status="ACTIVE", updated_at=WHEN)
        found = {row[0]: row[1:] for row in bulk.select_ids(
            session, (TABLE.c.id, TABLE.c.status, TABLE.c.host, TABLE.c.hosts_tried,
                      TABLE.c.attempts, TABLE.c["metadata"]), ids)}
    assert found[ids[0]] == ("PENDING", "a", ["a"], 1, {"ha": 0})
    assert found[ids[1]] == ("ACTIVE", None, [], 0, None)
    assert found[ids[2]] == ("ACTIVE", None, ["h2", "h0"], 0, None)
    assert found[ids[3]] == ("PENDING", None, [], 0, {"ha": 3})


@pytest.mark.parametrize("value", [None, [], {"a": 1}])
def test_a_shared_value_is_processed_once(value):
    calls = []

    def process(v):
        calls.append(v)
        return repr(v)

    convert = bulk._once_per_value(process)
    assert [convert(value) for _ in range(4)] == [repr(value)] * 4
    assert calls == [value]
    assert convert([]) == "[]"  # an equal but other object: processed again
    assert len(calls) == 2


def test_an_update_of_each_row_needs_no_shared_value(db):
    with db.session() as session:
        rows = _rows(_reservation(session), 3)
        bulk.insert(session, TABLE, rows)
        bulk.update_each(session, TABLE, [{"id": r["id"], "host": f"h-{r['index']}"}
                                          for r in rows[:2]])
        hosts = dict(session.execute(sa.select(TABLE.c.id, TABLE.c.host)).all())
    assert hosts == {rows[0]["id"]: "h-0", rows[1]["id"]: "h-1", rows[2]["id"]: None}


def _compare_and_set(session, rows) -> tuple[int, dict]:
    """Attempts 0 -> 1 on every row, expecting 0; the second row was moved to 5
    first: ``(rows changed, {id: (attempts, host)})``."""
    ids = [r["id"] for r in rows]
    bulk.update_ids(session, TABLE, ids[1:2], attempts=5)
    changed = bulk.update_each(session, TABLE, [
        {"id": i, bulk.EXPECTED: 0, "attempts": 1, "host": f"h-{k}"} for k, i in enumerate(ids)],
        expect="attempts", updated_at=WHEN)
    found = {row[0]: row[1:] for row in bulk.select_ids(
        session, (TABLE.c.id, TABLE.c.attempts, TABLE.c.host), ids)}
    return changed, found


def test_a_compare_and_set_changes_only_the_rows_still_as_expected(db):
    with db.session() as session:
        rows = _rows(_reservation(session), 7)
        bulk.insert(session, TABLE, rows)
        # Two rows a statement: the statements' counts add up.
        session.connection().connection.driver_connection.setlimit(
            sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 10)
        changed, found = _compare_and_set(session, rows)
    assert changed == 6
    assert found.pop(rows[1]["id"]) == (5, None)
    assert found == {r["id"]: (1, f"h-{k}") for k, r in enumerate(rows) if k != 1}


def test_postgresql_compares_and_sets_through_sqlalchemy(pg_url):
    with _postgresql_session(pg_url) as session:
        rows = _rows(_reservation(session), 3)
        bulk.insert(session, TABLE, rows)
        changed, found = _compare_and_set(session, rows)
    assert changed == 2
    assert found == {rows[0]["id"]: (1, "h-0"), rows[1]["id"]: (5, None),
                     rows[2]["id"]: (1, "h-2")}


def test_many_rows_go_in_few_statements_each_one_step(db):
    """Each statement is a single step for many rows (the interpreter's lock let go
    once, not once a row), cut to SQLite's limit on bound parameters."""
    executed = []
    with db.session() as session:
        reservation_id = _reservation(session)
        conn = session.connection()
        conn.connection.driver_connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 40)
        sa.event.listen(conn, "before_cursor_execute",
                        lambda _c, _cur, statement, _p, _ctx, many: executed.append(
                            (statement.split()[0], many)))
        ours = _rows(reservation_id, 10)  # 14 columns: two rows a statement
        bulk.insert(session, TABLE, ours)
        bulk.update_each(session, TABLE, [{"id": r["id"], "host": f"h-{r['index']}",
                                           "hosts_tried": [f"h-{r['index']}"]} for r in ours],
                         status="BUILDING", updated_at=WHEN)  # 3 a row + 2: 12 rows each
        found = bulk.select_ids(session, (TABLE.c.id, TABLE.c.host, TABLE.c.hosts_tried,
                                          TABLE.c.status), [r["id"] for r in ours])
    assert executed == [("INSERT", False)] * 5 + [("UPDATE", False)] + [("SELECT", False)]
    assert sorted(found) == sorted((r["id"], f"h-{r['index']}", [f"h-{r['index']}"],
                                    "BUILDING") for r in ours)


def test_rows_by_a_column_read_as_sqlalchemy_reads_them(db):
    with db.session() as session:
        reservation_id = _reservation(session)
        rows = _rows(reservation_id, 7)
        bulk.insert(session, TABLE, rows)
        bulk.insert(session, TABLE, _rows(_reservation(session), 3))  # another's: not read
        columns = (TABLE.c.index, TABLE.c.id, TABLE.c["metadata"], TABLE.c.created_at)
        found = bulk.select_where(session, columns, TABLE.c.reservation_id, reservation_id)
        expected = session.execute(sa.select(*columns).where(
            TABLE.c.reservation_id == reservation_id))
    assert sorted(found) == sorted(tuple(row) for row in expected)
    assert [uuid for _, uuid, _, _ in sorted(found)] == [r["id"] for r in rows]


def test_text_of_any_kind_reads_back_as_written(db):
    """The one-row JSON read escapes and unescapes what SQLite holds: quotes,
    backslashes, newlines, non-ASCII text, JSON inside a column, numbers, NULL."""
    awkward = 'q"uote \\ back\nline — ünï ☃ {"not": "json"}'
    with db.session() as session:
        rows = _rows(_reservation(session), 2)
        rows[0].update(name=awkward, hosts_tried=[awkward, "h"],
                       metadata={"note": awkward, "n": 1.5, "none": None})
        rows[1].update(name="", hosts_tried=[], attempts=2**40)
        bulk.insert(session, TABLE, rows)
        columns = (TABLE.c.id, TABLE.c.name, TABLE.c.hosts_tried, TABLE.c["metadata"],
                   TABLE.c.attempts, TABLE.c.task_state, TABLE.c.created_at)
        found = bulk.select_ids(session, columns, [r["id"] for r in rows])
        expected = session.execute(sa.select(*columns).where(
            TABLE.c.id.in_([r["id"] for r in rows])))
    assert sorted(found) == sorted(tuple(row) for row in expected)
    assert {row[1] for row in found} == {awkward, ""}


def test_json_that_sqlites_json_rejects_reads_back_as_sqlalchemy_reads_it(db):
    """JSON columns come inside the one row of JSON as JSON; Python writes NaN, which
    SQLite's JSON refuses: those rows are read with the column as text instead."""
    with db.session() as session:
        rows = _rows(_reservation(session), 2)
        rows[0].update(metadata={"ratio": float("nan"), "n": [1, 2]})
        bulk.insert(session, TABLE, rows)
        columns = (TABLE.c.id, TABLE.c["metadata"], TABLE.c.hosts_tried)
        found = bulk.select_ids(session, columns, [r["id"] for r in rows])
    by_id = {row[0]: row for row in found}
    nan = by_id[rows[0]["id"]][1]
    assert nan["n"] == [1, 2] and nan["ratio"] != nan["ratio"]  # NaN, loaded by Python
    assert by_id[rows[1]["id"]][1:] == (rows[1]["metadata"], rows[1]["hosts_tried"])


def test_row_writes_of_many_rows_store_what_one_at_a_time_stores(db):
    from fleetflow.persistence.row_writes import RowWrites

    writes = RowWrites(TABLE)
    with db.session() as session:
        ours, theirs = _twins(_reservation(session), 3)
        bulk.insert(session, TABLE, ours + theirs)
        fault = {"code": "X", "message": "it's \\ \"odd\""}
        writes.update_each(session, {r["id"]: {"status": "ERROR", "fault": fault, "host": "h"}
                                     for r in ours})
        for row in theirs:
            writes.update(session, row["id"], status="ERROR", fault=fault, host="h")
        ours_stored = _stored(session, [r["id"] for r in ours])
        theirs_stored = _stored(session, [r["id"] for r in theirs])
    updated_at = [c.name for c in TABLE.c if c.name not in ("id", "name", "index")].index(
        "updated_at")
    assert [row[:updated_at] + row[updated_at + 1:] for row in ours_stored] == [
        row[:updated_at] + row[updated_at + 1:] for row in theirs_stored]
    assert {row[3] for row in ours_stored} == {"ERROR"}


def test_instance_pages_read_as_json_match_the_row_by_row_read(db, monkeypatch):
    from fleetflow.persistence import reservations

    with db.session() as session:
        rows = _rows(_reservation(session), 9)
        rows.reverse()  # stored out of index order
        for k, row in enumerate(rows):
            row.update(status=("ACTIVE", "ERROR", "BUILDING")[k % 3],
                       hosts_tried=[f'h"{k}', "h\\0"] if k % 2 else [])
        bulk.insert(session, TABLE, rows)
        bulk.update_ids(session, TABLE, [rows[1]["id"]],
                        fault={"code": "X", "message": 'no "room"\n'})
        reservation_id = rows[0]["reservation_id"]
        as_json = [reservations.instance_views(session, reservation_id),
                   reservations.instance_view_page(session, reservation_id, 4),
                   reservations.instance_view_page(session, reservation_id, 4,
                                                   marker=rows[4]["id"])]
        monkeypatch.setattr(bulk, "_as_json", lambda _columns: False)
        by_rows = [reservations.instance_views(session, reservation_id),
                   reservations.instance_view_page(session, reservation_id, 4),
                   reservations.instance_view_page(session, reservation_id, 4,
                                                   marker=rows[4]["id"])]
    assert as_json == by_rows
    assert [view["id"] for view in as_json[0]] == [r["id"] for r in reversed(rows)]
    assert as_json[1][1] and not as_json[2][1] and len(as_json[2][0]) == 4
