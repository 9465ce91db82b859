"""Claims over HTTP, the way Nova's scheduler makes them: ``placement_claims.py --http``.

Each client is a process of its own with one keep-alive connection; it
claims for new consumers (``PUT /allocations/{consumer}``, microversion
1.28, ``consumer_generation: null``) on 3 hot providers, all clients on the
same three, and in the ``claim+release`` mode releases each claim at once
(``DELETE /allocations/{consumer}``). A 409 ``placement.concurrent_update``
(another claim moved the provider's generation) is retried, as clients do;
any other failure stops the run.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import time
import urllib.parse
import uuid

PROVIDERS = [str(uuid.UUID(int=i + 1)) for i in range(3)]
CLAIM = {"VCPU": 1, "MEMORY_MB": 512}
# Room for every claim of the run: we measure claims, not refusals.
INVENTORY = {"VCPU": {"total": 1_000_000}, "MEMORY_MB": {"total": 1_000_000_000}}
HEADERS = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.28",
           "Accept": "application/json", "Content-Type": "application/json"}
MODES = ("claim", "claim+release")


class Connection:
    """One keep-alive connection to a placement root (``http://host:port/prefix``)."""

    def __init__(self, root: str):
        url = urllib.parse.urlsplit(root)
        self.host, self.port, self.prefix = url.hostname, url.port, url.path.rstrip("/")
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)

    def call(self, method: str, path: str, body=None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body)
        for attempt in (1, 2):
            try:
                self.conn.request(method, self.prefix + path, body=data, headers=HEADERS)
                response = self.conn.getresponse()
                raw = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                # The server closed an idle keep-alive connection: open a new one.
                self.conn.close()
                if attempt == 2:
                    raise
        return response.status, (json.loads(raw) if raw else {})

    def close(self) -> None:
        self.conn.close()


def _expect(answer: tuple[int, dict], *statuses: int) -> dict:
    if answer[0] not in statuses:
        raise RuntimeError(f"HTTP {answer[0]}: {answer[1]}")
    return answer[1]


def prepare(root: str) -> None:
    """The 3 hot providers, made over HTTP."""
    conn = Connection(root)
    for i, rp in enumerate(PROVIDERS):
        _expect(conn.call("POST", "/resource_providers", {"name": f"hot-{i}", "uuid": rp}),
                200, 201)
        generation = _expect(conn.call("GET", f"/resource_providers/{rp}"), 200)["generation"]
        _expect(conn.call("PUT", f"/resource_providers/{rp}/inventories", {
            "resource_provider_generation": generation, "inventories": INVENTORY}), 200)
    conn.close()


def _claim(conn: Connection, consumer: str, rp: str) -> int:
    """Claim for ``consumer`` on ``rp``; returns the retries it took."""
    body = {"allocations": {rp: {"resources": CLAIM}}, "project_id": "bench",
            "user_id": "bench", "consumer_generation": None}
    retries = 0
    while True:
        status, answer = conn.call("PUT", f"/allocations/{consumer}", body)
        if status == 204:
            return retries
        codes = {error.get("code") for error in answer.get("errors", [])}
        if status == 409 and "placement.concurrent_update" in codes:
            retries += 1
            continue
        raise RuntimeError(f"claim: HTTP {status}: {answer}")


def client(root: str, claims: int, index: int, mode: str, start, results) -> None:
    conn = Connection(root)
    conn.call("GET", "/")  # connected before the clock starts
    kept = dict.fromkeys(PROVIDERS, 0)
    retries = 0
    try:
        start.wait()
        for i in range(claims):
            consumer, rp = str(uuid.uuid4()), PROVIDERS[(index + i) % 3]
            retries += _claim(conn, consumer, rp)
            if mode == "claim+release":
                _expect(conn.call("DELETE", f"/allocations/{consumer}"), 204)
            else:
                kept[rp] += 1
        results.put((None, kept, retries))
    except Exception as exc:  # reported by the parent
        results.put((repr(exc), kept, retries))
    finally:
        conn.close()


def run_clients(root: str, clients: int, claims: int, mode: str) -> tuple[float, dict, int]:
    """Claims per second of ``clients`` processes; the claims they kept, their retries."""
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=client, args=(root, claims, i, mode, start, results))
             for i in range(clients)]
    for proc in procs:
        proc.start()
    time.sleep(0.5)  # let every client connect before the clock starts
    began = time.perf_counter()
    start.set()
    outcomes = [results.get(timeout=3600) for _ in procs]
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join()
    kept, retries = dict.fromkeys(PROVIDERS, 0), 0
    for error, counts, tries in outcomes:
        if error:
            raise RuntimeError(f"a client failed against {root}: {error}")
        for rp, count in counts.items():
            kept[rp] += count
        retries += tries
    return clients * claims / elapsed, kept, retries


def check(root: str, kept: dict) -> tuple[int, int]:
    """(overcommitted resource amounts, providers whose usage differs from the claims kept).

    Overcommit: usage beyond ``(total - reserved) * allocation_ratio`` of any
    inventory, summed over the providers.
    """
    conn = Connection(root)
    over = mismatched = 0
    for rp in PROVIDERS:
        inventories = _expect(conn.call("GET", f"/resource_providers/{rp}/inventories"),
                              200)["inventories"]
        usages = _expect(conn.call("GET", f"/resource_providers/{rp}/usages"), 200)["usages"]
        for rc, inv in inventories.items():
            capacity = (inv["total"] - inv.get("reserved", 0)) * inv.get("allocation_ratio", 1.0)
            over += max(0, usages.get(rc, 0) - int(capacity))
        if usages.get("VCPU", 0) != kept[rp] * CLAIM["VCPU"]:
            mismatched += 1
    conn.close()
    return over, mismatched
