"""The compute RPC client and the agent's endpoint offer the same methods.

An endpoint method no client sends is dead code on every host; a client method
without an endpoint fails only when first called.
"""

import inspect
import re

from fleetflow.compute import destroy_batches, rpcapi
from fleetflow.compute.agent import ComputeEndpoint


def test_the_client_sends_exactly_the_methods_the_endpoint_serves():
    source = inspect.getsource(rpcapi.ComputeAPI) + inspect.getsource(destroy_batches)
    # One host's calls, and the batches of builds and destroys (no one host: the agent's).
    sent = set(re.findall(r'(?:self\.(?:call|cast|_send)\(host, |\.call\(\{\}, )"(\w+)"',
                          source))
    served = {name for name, _ in inspect.getmembers(ComputeEndpoint, inspect.isfunction)
              if not name.startswith("_")}
    assert len(sent) > 10
    assert sent == served
