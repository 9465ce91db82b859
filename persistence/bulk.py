"""Statements over many rows at the driver's cost: a reservation's instance rows.

SQLAlchemy's ``executemany`` builds a dict of bound parameters for every row and
runs each column's type processor on it, and an ``IN`` list is rendered anew at
each execution: some 10 µs a row, more than SQLite's own work for the row. The
few statements a large reservation runs over all its instance rows (their
insert, their first try, their reads and status writes by group) go here instead
as parameters straight to the driver, each value through its column's own bind
processor (so what is stored is exactly what SQLAlchemy stores), a value shared
by many rows processed once.

Each is also one step of SQLite for many rows, not one a row: Python's sqlite3
lets go of the interpreter lock around every step (each row an ``executemany``
writes, each row a cursor fetches), and takes it back behind whatever thread
runs Python meanwhile, for up to its switch interval. Next to one busy thread,
an ``executemany`` of 10,000 rows took minutes instead of 0.1 s. So an insert
is one multi-row ``VALUES``, an update of each row its own values one
``UPDATE ... FROM (VALUES ...)``, a read one row of JSON that SQLite builds
(``json_group_array``), each cut to SQLite's limit on bound parameters.

SQLite only: elsewhere the same calls take SQLAlchemy's path, where
PostgreSQL's driver already sends many rows per round trip.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy import orm

# The statements run in a session's transaction or on a connection.
SessionOrConnection = orm.Session | sa.Connection
# The key of a row's expected value in :func:`update_each`'s compare-and-set.
EXPECTED = "expected"


def insert(session: SessionOrConnection, table: sa.Table, rows: Sequence[Mapping]) -> None:
    """INSERT ``rows`` (dicts of column name to value, the same keys in each)."""
    if not rows:
        return
    conn = _connection(session)
    if not _direct(conn):
        session.execute(table.insert(), list(rows))
        return
    names = list(rows[0])
    convert = _converters(conn, table, names)
    quoted = ", ".join(_quote(conn, name) for name in names)
    row = f"({', '.join('?' * len(names))})"
    for part in _parts(conn, _tuples(rows, names, convert), len(names)):
        conn.exec_driver_sql(
            f"INSERT INTO {_quote(conn, table.name)} ({quoted}) "
            f"VALUES {', '.join([row] * len(part))}", _flat(part))


def update_each(session: SessionOrConnection, table: sa.Table, rows: Sequence[Mapping],
                key: str = "id", expect: str | None = None, **values) -> int:
    """UPDATE each row whose ``key`` column a dict of ``rows`` names, with that dict's
    other columns (the same keys in each) and ``values`` (the same for all); how many
    rows changed.

    ``expect``: a compare-and-set, a row changes only while its ``expect`` column
    still holds the dict's :data:`EXPECTED` value.
    """
    if not rows:
        return 0
    conn = _connection(session)
    where = [key, *([EXPECTED] if expect else [])]
    names = [name for name in rows[0] if name not in where]
    columns = {key: key, EXPECTED: expect}
    if not _direct(conn):
        bound = {name: f"b_{name}" for name in (*names, *where)}
        statement = table.update().where(*(table.c[columns[w]] == sa.bindparam(bound[w])
                                           for w in where))
        return session.execute(
            statement.values({**{n: sa.bindparam(bound[n], type_=table.c[n].type)
                                 for n in names}, **values}),
            [{bound[n]: row[n] for n in (*names, *where)} for row in rows]).rowcount
    convert = _converters(conn, table, names)
    fixed, fixed_params = _assignments(conn, table, values)
    name = _quote(conn, table.name)
    matched = [_quote(conn, columns[w]) for w in where]
    if sqlite3.sqlite_version_info < (3, 33):  # no UPDATE ... FROM: a step a row
        assignments = ", ".join([*(f"{_quote(conn, n)} = ?" for n in names), *fixed])
        params = [(*assigned, *matched_values) for assigned, matched_values in zip(
            _tuples(rows, names, convert, fixed_params),
            _tuples(rows, where, [_identity] * len(where)), strict=True)]
        return conn.exec_driver_sql(
            f"UPDATE {name} SET {assignments} WHERE "
            + " AND ".join(f"{m} = ?" for m in matched), params).rowcount
    # VALUES' columns are column1, column2, ...: the WHERE's first, then ``names``.
    assignments = ", ".join([*(f"{_quote(conn, n)} = v.column{k}"
                               for k, n in enumerate(names, start=len(where) + 1)), *fixed])
    condition = " AND ".join(f"{name}.{m} = v.column{k}"
                             for k, m in enumerate(matched, start=1))
    row = f"({', '.join('?' * (len(names) + len(where)))})"
    changed = 0
    for part in _parts(conn, _tuples(rows, [*where, *names],
                                     [*[_identity] * len(where), *convert]),
                       len(names) + len(where), len(fixed_params)):
        changed += conn.exec_driver_sql(
            f"UPDATE {name} SET {assignments} "
            f"FROM (VALUES {', '.join([row] * len(part))}) AS v WHERE {condition}",
            (*fixed_params, *_flat(part))).rowcount
    return changed


def update_ids(session: SessionOrConnection, table: sa.Table, ids: Sequence[str], **values) -> None:
    """UPDATE the rows whose ``id`` is in ``ids`` with ``values``, in one statement."""
    if not ids:
        return
    conn = _connection(session)
    if not _direct(conn):
        session.execute(table.update().where(table.c.id.in_(ids)).values(**values))
        return
    assignments, params = _assignments(conn, table, values)
    for chunk in _parts(conn, ids, fixed=len(params)):
        conn.exec_driver_sql(
            f"UPDATE {_quote(conn, table.name)} SET {', '.join(assignments)} "
            f"WHERE id IN ({', '.join('?' * len(chunk))})", (*params, *chunk))


def select_ids(session: SessionOrConnection, columns: Sequence[sa.Column], ids: Sequence[str]
               ) -> list[tuple]:
    """The ``columns`` of the rows (of the columns' one table) whose ``id`` is in ``ids``,
    each value as SQLAlchemy would load it."""
    if not ids:
        return []
    conn = _connection(session)
    table = columns[0].table
    if not _direct(conn):
        return [tuple(row) for row in session.execute(
            sa.select(*columns).where(table.c.id.in_(ids)))]
    found = []
    for chunk in _parts(conn, ids):
        found.extend(_select(conn, columns, f"id IN ({', '.join('?' * len(chunk))})",
                             tuple(chunk)))
    return found


def select_where(session: SessionOrConnection, columns: Sequence[sa.Column], column: sa.Column,
                 value) -> list[tuple]:
    """The ``columns`` of the rows whose ``column`` equals ``value``, in no set order,
    each value as SQLAlchemy would load it."""
    conn = _connection(session)
    if not _direct(conn):
        return [tuple(row) for row in session.execute(
            sa.select(*columns).where(column == value))]
    return _select(conn, columns, f"{_quote(conn, column.name)} = ?", (value,))


def fetch(session: SessionOrConnection, statement: sa.Select, params: Mapping) -> list[tuple]:
    """The rows of ``statement``, each value as SQLAlchemy would load it; on SQLite in no
    set order (read as one row of JSON: callers sort)."""
    conn = _connection(session)
    columns = list(statement.selected_columns)
    if not _direct(conn) or not _as_json(columns):
        return [tuple(row) for row in conn.execute(statement, params)]
    page = statement.subquery()

    def read(embed: bool) -> str:
        values = [sa.func.json(value) if embed and _embeddable(column) else value
                  for value, column in zip(page.c, columns, strict=True)]
        return conn.execute(sa.select(sa.func.json_group_array(sa.func.json_array(*values))),
                            params).scalar_one()
    return _json_rows(conn, columns, read)


def _select(conn: sa.Connection, columns: Sequence[sa.Column], where: str,
            params: tuple) -> list[tuple]:
    table = _quote(conn, columns[0].table.name)
    if not _as_json(columns):
        quoted = ", ".join(_quote(conn, column.name) for column in columns)
        return _loaded(conn, columns, conn.exec_driver_sql(
            f"SELECT {quoted} FROM {table} WHERE {where}", params).fetchall())

    def read(embed: bool) -> str:
        values = ", ".join(f"json({_quote(conn, column.name)})"
                           if embed and _embeddable(column) else _quote(conn, column.name)
                           for column in columns)
        [(text,)] = conn.exec_driver_sql(
            f"SELECT json_group_array(json_array({values})) FROM {table} WHERE {where}",
            params)
        return text
    return _json_rows(conn, columns, read)


def _json_rows(conn: sa.Connection, columns: Sequence[sa.Column],
               read: Callable[[bool], str]) -> list[tuple]:
    """The rows that ``read(embed)`` returns as one JSON array of arrays, loaded.

    Embedded, a JSON column's stored text goes into the array as JSON (``json()``),
    so the one ``json.loads`` of the whole array decodes it: no second parse a
    value. Text that SQLite's JSON rejects (Python writes NaN) is read as text.
    """
    try:
        return _loaded(conn, columns, json.loads(read(True)), embedded=True)
    except sa.exc.OperationalError as exc:
        if "malformed JSON" not in str(exc):
            raise
    return _loaded(conn, columns, json.loads(read(False)))


def _embeddable(column: sa.Column) -> bool:
    """Whether the column holds JSON text that loads with the engine's plain JSON
    parser (a type of its own may load it otherwise)."""
    return type(column.type) is sa.JSON


def _as_json(columns) -> bool:
    """Whether rows of ``columns`` can come as one row of JSON: bytes have no JSON form,
    and an old SQLite may lack its JSON functions; those are fetched a row a step."""
    return sqlite3.sqlite_version_info >= (3, 38) and not any(
        column.type.python_type is bytes for column in columns
        if _has_python_type(column.type))


def _loaded(conn: sa.Connection, columns, found, embedded: bool = False) -> list[tuple]:
    """``found`` (rows as stored) with each value through its column's result processor;
    ``embedded``: the JSON columns' values came already loaded."""
    loads = [None if embedded and _embeddable(column) else
             column.type.dialect_impl(conn.dialect).result_processor(conn.dialect, None)
             for column in columns]
    if not any(loads):
        return [tuple(row) for row in found]
    return [tuple(value if load is None else load(value)
                  for load, value in zip(loads, row, strict=True)) for row in found]


def _limit(conn: sa.Connection) -> int:
    return conn.connection.driver_connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)


def _parts(conn: sa.Connection, items: Sequence, per_item: int = 1, fixed: int = 0
           ) -> Iterable[Sequence]:
    """``items`` (``per_item`` bound values each, ``fixed`` more a statement) cut so no
    statement binds more than SQLite accepts."""
    size = max(1, (_limit(conn) - fixed) // per_item)
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _flat(part: list[tuple]) -> tuple:
    return tuple(itertools.chain.from_iterable(part))


def _has_python_type(type_) -> bool:
    try:
        type_.python_type  # noqa: B018 - some types have none (NotImplementedError)
    except NotImplementedError:
        return False
    return True


def _connection(session: SessionOrConnection) -> sa.Connection:
    return session if isinstance(session, sa.Connection) else session.connection()


def direct(session: SessionOrConnection) -> bool:
    """Whether these statements go straight to the driver on ``session``'s database."""
    return _direct(_connection(session))


def _direct(conn: sa.Connection) -> bool:
    return conn.dialect.name == "sqlite"


def _quote(conn: sa.Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote(name)


def _assignments(conn: sa.Connection, table: sa.Table, values: Mapping
                 ) -> tuple[list[str], list]:
    names = list(values)
    convert = _converters(conn, table, names)
    return ([f"{_quote(conn, n)} = ?" for n in names],
            [c(values[n]) for n, c in zip(names, convert, strict=True)])


def _converters(conn: sa.Connection, table: sa.Table, names: Iterable[str]
                ) -> list[Callable]:
    dialect = conn.dialect
    return [_once_per_value(table.c[name].type.dialect_impl(dialect).bind_processor(dialect))
            for name in names]


def _tuples(rows: Sequence[Mapping], names: list[str], convert: list[Callable],
            fixed: Sequence = (), key: str | None = None) -> list[tuple]:
    """The parameters of each row: its ``names`` converted, then ``fixed``, then its
    ``key`` (an UPDATE's WHERE). Built a column at a time: a list comprehension a
    column costs a third of a generator a row."""
    columns = [[row[n] for row in rows] if c is _identity else [c(row[n]) for row in rows]
               for n, c in zip(names, convert, strict=True)]
    columns.extend([value] * len(rows) for value in fixed)
    if key is not None:
        columns.append([row[key] for row in rows])
    return list(zip(*columns, strict=True))


def _identity(value):
    return value


def _once_per_value(process: Callable | None) -> Callable:
    """``process`` remembering its last argument: rows sharing a value object (one
    timestamp, one empty list) have it processed once."""
    if process is None:
        return _identity
    last: list = [_identity, None]  # no row's value is this function

    def convert(value):
        if value is not last[0]:
            last[0], last[1] = value, process(value)
        return last[1]
    return convert
