"""Flow tests on flows built in groups (``[conductor] instances_per_atom``)."""

from __future__ import annotations


def in_groups(cloud, flow_name: str, batch: int = 2):
    """``cloud`` with every ``flow_name`` it submits built in groups of ``batch``."""
    submit = cloud.submit

    def grouped(name, flow_kwargs, *args, **kwargs):
        if name == flow_name:
            flow_kwargs = {**flow_kwargs, "batch": batch}
        return submit(name, flow_kwargs, *args, **kwargs)
    cloud.submit = grouped
    return cloud
