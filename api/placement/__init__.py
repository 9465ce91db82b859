"""OpenStack-Placement-compatible REST API mounted at ``/placement``."""
