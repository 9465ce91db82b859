"""The vcluster claim's group joins: every group locked, checked and joined at once."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetflow.flows.tasks.claim import ClaimRace
from fleetflow.flows.vcluster.build_tasks import _join_checked
from fleetflow.persistence import groups
from fleetflow.persistence.models import GroupMember

H1, H2, H5 = "z1-r1-h01", "z1-r1-h02", "z1-r2-h01"  # H1 and H2 share rack r1


@pytest.fixture
def three_groups(evac_cloud):
    with evac_cloud.database.session() as session:
        apart = groups.create(session, "t1", "apart", ["anti-affinity"]).id
        racks = groups.create(session, "t1", "racks-apart", ["anti-affinity"], scope="rack").id
        together = groups.create(session, "t1", "together", ["affinity"]).id
        # A member already placed (an evacuation may have moved it there since).
        groups.join(session, apart, "moved", H1)
    return apart, racks, together


def _members(cloud) -> dict[tuple[str, str], str | None]:
    with cloud.database.session() as session:
        return {(g, i): h for g, i, h in session.execute(
            sa.select(GroupMember.group_id, GroupMember.instance_id, GroupMember.host))}


def test_members_join_every_group_once_each_rule_holds(evac_cloud, three_groups):
    apart, racks, together = three_groups
    wanted = {apart: {"a": H2, "b": H5}, racks: {"a": H2, "b": H5},
              together: {"a": H2, "c": H2}}
    with evac_cloud.database.session() as session:
        _join_checked(session, wanted)
    expected = {(apart, "moved"): H1, (apart, "a"): H2, (apart, "b"): H5,
                (racks, "a"): H2, (racks, "b"): H5, (together, "a"): H2, (together, "c"): H2}
    assert _members(evac_cloud) == expected
    # A claim run again writes nothing new; one that moves a member moves its row.
    with evac_cloud.database.session() as session:
        _join_checked(session, wanted)
    assert _members(evac_cloud) == expected
    with evac_cloud.database.session() as session:
        _join_checked(session, {apart: {"b": "z1-r2-h02"}})
    assert _members(evac_cloud) == expected | {(apart, "b"): "z1-r2-h02"}


@pytest.mark.parametrize("which, hosts", [
    ("apart", {"a": H1}),  # the host of the member placed before
    ("racks", {"a": H1, "b": H2}),  # two hosts of one rack
    ("together", {"a": H1, "b": H5}),  # two hosts
])
def test_a_broken_rule_is_a_claim_race_and_joins_nobody(evac_cloud, three_groups, which,
                                                        hosts):
    apart, racks, together = three_groups
    group_id = {"apart": apart, "racks": racks, "together": together}[which]
    before = _members(evac_cloud)
    # The other groups' joins would hold: the broken one undoes them all.
    wanted = {g: {"x": H5} for g in (apart, racks, together) if g != group_id}
    wanted[group_id] = hosts
    with pytest.raises(ClaimRace, match=group_id), evac_cloud.database.session() as session:
        _join_checked(session, wanted)
    assert _members(evac_cloud) == before
