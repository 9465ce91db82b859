"""Virtual clusters: the build flow (create, add) and the teardown flow (remove, delete)."""

from fleetflow.flows.vcluster import build, teardown  # noqa: F401
