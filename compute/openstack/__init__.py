"""The OpenStack driver: fleetflow's flows acting on a real Nova and Placement.

Chosen by ``[cloud] driver = openstack``. Nothing here is imported in the
simulated mode, so openstacksdk is needed only where it is used.
"""
