"""The lists and views clients poll read in read-only transactions: on SQLite they
neither take nor wait for the write lock that a building operation holds."""

from __future__ import annotations

from fleetflow.persistence.models import Flavor, Image
from fleetflow.services import catalog, groups, servers
from fleetflow.services import reservations as reservation_service
from fleetflow.services.vclusters import VClusterOps
from fleetflow.testing.locks import ends_while_locked


def test_lists_and_views_read_while_a_writer_holds_the_lock(db, conf):
    with db.session() as session:
        session.add_all([Flavor(id="f-1", name="m1.tiny", vcpus=1, ram_mb=512, disk_gb=1),
                         Image(id="i-1", name="cirros")])
    group = groups.create(db, "t", {"name": "g", "policies": ["anti-affinity"],
                                    "scope": "host"})
    seen = {}

    def read():
        seen["flavors"] = [f.name for f in catalog.flavor_page(db, limit=1)[0]]
        seen["flavor"] = catalog.find_flavor(db, "m1.tiny").id
        seen["images"] = len(catalog.image_page(db, limit=5)[0])
        seen["groups"] = [g.id for g in groups.list_page(db, "t", limit=5)[0]]
        seen["group"] = groups.get(db, "t", group.id).name
        seen["servers"] = servers.list_page(db, limit=5, tenant_id="t")[0]
        seen["server"] = servers.get(db, "t", "00000000-0000-4000-8000-000000000000")
        seen["reservations"] = reservation_service.list_page(db, "t", limit=5)[0]
        seen["vclusters"] = VClusterOps(conf, db, submit=None).list("t")
    assert ends_while_locked(db, read)
    assert seen == {"flavors": ["m1.tiny"], "flavor": "f-1", "images": 1,
                    "groups": [group.id], "group": "g", "servers": [], "server": None,
                    "reservations": [], "vclusters": []}


def test_a_moves_look_at_its_evacuations_stopping_reads_while_a_writer_holds_the_lock(db):
    from fleetflow.common import states
    from fleetflow.flows.evacuate import rows
    from fleetflow.persistence.models import Evacuation

    with db.session() as session:
        session.add(Evacuation(id="ev-1", hosts=["h1"], mode=states.MODE_REBUILD,
                               stopping=states.ON_ERROR_PAUSE))
    seen = {}
    assert ends_while_locked(db, lambda: seen.update(stopping=rows.stopping(db, "ev-1")))
    assert seen == {"stopping": states.ON_ERROR_PAUSE}
