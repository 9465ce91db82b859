"""compute/messaging.py: oslo.messaging's pools sized for fleetflow's own concurrency.

Making a transport connects nothing, so no broker is needed here; the warnings
themselves are checked against RabbitMQ in tests/integration/test_compute_rabbit.py.
"""

from fleetflow.common import config
from fleetflow.compute import messaging

URL = "rabbit://guest:guest@127.0.0.1:5672/"


def test_the_connection_pool_fits_every_thread_that_may_send_at_once():
    conf = config.load(environ={"FLEETFLOW_CONDUCTOR_WORKERS": "3",
                                "FLEETFLOW_CONDUCTOR_ENGINE_WORKERS": "500",
                                "FLEETFLOW_COMPUTE_AGENT_THREADS": "700"})
    try:
        messaging.get_transport(conf, URL)
        assert messaging.rpc_callers(conf) == 3 * 500 + messaging.OTHER_RPC_THREADS
        assert conf.oslo_messaging_rabbit.rpc_conn_pool_size == \
            3 * 500 + messaging.OTHER_RPC_THREADS + 700
    finally:
        messaging.forget_transport(conf, URL)


def test_an_operators_own_pool_size_wins():
    conf = config.load(environ={})
    messaging.register_library_opts(conf)
    conf.set_override("rpc_conn_pool_size", 7, group="oslo_messaging_rabbit")
    try:
        messaging.get_transport(conf, URL)
        assert conf.oslo_messaging_rabbit.rpc_conn_pool_size == 7
    finally:
        messaging.forget_transport(conf, URL)
