"""The ``openstack fleet ...`` commands: a python-openstackclient plugin for fleetflow."""
