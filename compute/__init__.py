"""Compute hosts: the agent (oslo.messaging RPC server), the fake driver, the client.

- ``agent.serve_fleet(conf, database)``: every host served in-process (embedded mode);
  ``agent.serve(..., per_host=True)``: one RPC server per host (``fleetflow compute-agent``).
- ``rpcapi.ComputeAPI(conf, database)``: what tasks call; a timeout raises
  ``exceptions.OutcomeUnknown`` and ``ensure_built`` asks the host before retrying.
- ``drivers.fake.FakeDriver``: the stateful simulated hypervisor behind the agent;
  moves between hosts (``start_move`` ... ``confirm_move``) report the words of
  ``moves``.
- ``agent_processes.AgentProcesses``: the simulated fleet of ``fleetflow serve`` in
  child processes, reached over ``ipc_driver`` (oslo.messaging on Unix sockets).
- ``openstack``: the same calls acting on a real Nova (``[cloud] driver = openstack``).
- :func:`client` picks the one the configuration names.
"""


def client(conf, database):
    """What tasks call: the simulated hosts' RPC client, or Nova in openstack mode."""
    from fleetflow.common.config import openstack_mode

    if openstack_mode(conf):
        from fleetflow.compute.openstack.connection import connect
        from fleetflow.compute.openstack.driver import OpenStackCompute

        return OpenStackCompute(conf, database, connect(conf))
    from fleetflow.compute.rpcapi import ComputeAPI

    return ComputeAPI(conf, database)
