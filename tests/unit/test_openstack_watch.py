"""The openstack driver's watch: every waiting task answered from one listing."""

from __future__ import annotations

import threading

from fleetflow.compute.openstack.watch import CHUNK, Watch


class ListingNova:
    """Nova's server list as the watch calls it: ``tags-any``, every project."""

    def __init__(self, servers):
        self.servers_by_id = {s["id"]: s for s in servers}
        self.listings: list[set[str]] = []
        self.lock = threading.Lock()

    def servers(self, **filters):
        asked = set(filters["tags-any"].split(","))
        with self.lock:
            self.listings.append(asked)
        return [s for s in self.servers_by_id.values() if asked & set(s["tags"])]


def server(sid, *tags):
    return {"id": sid, "tags": list(tags), "status": "ACTIVE"}


def test_tags_asked_together_are_listed_once_within_an_interval():
    nova = ListingNova([server("a", "t1"), server("b", "t2")])
    watch = Watch(nova, interval=3600)
    assert [s["id"] for s in watch.servers("t1")] == ["a"]
    # t2 was never asked: the listing covering it is taken now, with t1 in it too.
    assert [s["id"] for s in watch.servers("t2")] == ["b"]
    assert nova.listings == [{"t1"}, {"t1", "t2"}]
    for _ in range(5):
        watch.servers("t1")
        watch.servers("t2")
    assert len(nova.listings) == 2


def test_a_tag_no_server_carries_is_answered_empty():
    nova = ListingNova([server("a", "t1")])
    watch = Watch(nova, interval=3600)
    assert watch.servers("gone") == []
    assert watch.servers("gone") == []
    assert len(nova.listings) == 1


def test_an_old_listing_is_taken_again():
    nova = ListingNova([server("a", "t1")])
    watch = Watch(nova, interval=0)
    watch.servers("t1")
    nova.servers_by_id["a"]["status"] = "ERROR"
    assert watch.servers("t1")[0]["status"] == "ERROR"
    assert len(nova.listings) == 2


def test_many_tags_are_listed_in_chunks():
    count = CHUNK * 2 + 5
    nova = ListingNova([server(f"s{i}", f"t{i}") for i in range(count)])
    watch = Watch(nova, interval=3600)
    for i in range(count):
        watch.servers(f"t{i}")
    nova.listings.clear()
    watch.interval = 0  # the next ask lists every tag asked so far
    assert [s["id"] for s in watch.servers("t0")] == ["s0"]
    assert [len(chunk) for chunk in nova.listings] == [CHUNK, CHUNK, 5]


def test_tasks_asking_at_once_share_one_listing():
    nova = ListingNova([server(f"s{i}", f"t{i}") for i in range(8)])
    watch = Watch(nova, interval=3600)
    for i in range(8):  # every tag known, none listed yet
        watch._asked[f"t{i}"] = float("inf")
    barrier = threading.Barrier(8)
    answers = {}

    def ask(i):
        barrier.wait()
        answers[i] = [s["id"] for s in watch.servers(f"t{i}")]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == {i: [f"s{i}"] for i in range(8)}
    assert len(nova.listings) == 1


def test_a_tag_nobody_asks_about_any_more_drops_out_of_the_listing():
    nova = ListingNova([server("a", "t1"), server("b", "t2")])
    watch = Watch(nova, interval=0)
    watch.servers("t1")
    watch._asked["t1"] -= 30  # its task stopped asking 30 s ago, many intervals
    watch.servers("t2")
    assert nova.listings[-1] == {"t2"}
