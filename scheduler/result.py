"""What the scheduler answers: a :class:`Placement`, or :class:`NoValidHost`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from fleetflow.common.exceptions import FleetflowError
from fleetflow.scheduler.filters import FilterStep


def explain(steps: Sequence[FilterStep]) -> str:
    """``capabilities: 128 -> 9; anti-affinity: 9 -> 0``: only steps that removed hosts."""
    removing = [str(s) for s in steps if s.after < s.before or s.note]
    if removing:
        return "; ".join(removing)
    if steps:
        return f"{steps[-1].after} hosts passed every filter"
    return "no hosts to choose from"


class NoValidHost(FleetflowError):
    """Not even ``min_count`` instances could be placed.

    ``details``: ``filters`` (list of ``{name, before, after, note}`` as the
    chain stood for the first instance that did not fit), ``placed`` and
    ``min_count``.
    """

    code = "NO_VALID_HOST"
    status = 409

    def __init__(self, steps: Sequence[FilterStep], placed: int, min_count: int, index: int):
        message = (f"No valid host for instance {index + 1} (placed {placed}, "
                   f"min_count {min_count}): {explain(steps)}")
        super().__init__(message, filters=[s.to_dict() for s in steps], placed=placed,
                         min_count=min_count)
        self.steps = list(steps)


@dataclasses.dataclass
class InstancePlacement:
    """One instance's primary host and its alternates, best first."""

    instance: str
    index: int
    host: str
    alternates: list[str] = dataclasses.field(default_factory=list)

    @property
    def candidates(self) -> list[str]:
        """Primary then alternates: the order a boot retry walks them."""
        return [self.host, *self.alternates]


@dataclasses.dataclass
class Placement:
    """The result of one pass; JSON-safe through ``to_dict``/``from_dict``.

    ``instances`` holds the placed ones in index order; ``unplaced`` the keys
    of the instances beyond what fitted (only when ``min_count`` < ``max_count``);
    ``host_uuids`` maps every host named in the result to its provider uuid;
    ``filters`` is the filter chain of the pass (for a dry run's explanation).
    """

    instances: list[InstancePlacement]
    unplaced: list[str] = dataclasses.field(default_factory=list)
    host_uuids: dict[str, str] = dataclasses.field(default_factory=dict)
    filters: list[FilterStep] = dataclasses.field(default_factory=list)

    def by_instance(self) -> dict[str, InstancePlacement]:
        return {p.instance: p for p in self.instances}

    @property
    def explanation(self) -> str:
        return explain(self.filters)

    def to_dict(self) -> dict[str, Any]:
        return {"instances": [dataclasses.asdict(p) for p in self.instances],
                "unplaced": list(self.unplaced), "host_uuids": dict(self.host_uuids),
                "filters": [s.to_dict() for s in self.filters]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Placement:
        return cls(instances=[InstancePlacement(**p) for p in data.get("instances", [])],
                   unplaced=list(data.get("unplaced", [])),
                   host_uuids=dict(data.get("host_uuids", {})),
                   filters=[FilterStep(**s) for s in data.get("filters", [])])
