"""The audit: do placement, the rows, the hosts, the groups and the flows agree?

``report`` holds :func:`report.audit` (the entry of the API, the CLI and the
tests), the mismatch kinds and the instance checks; ``sources`` reads every
place the cloud's state lives, in bulk; ``volumes`` checks volumes and
vcluster groupings, ``status`` row statuses against their members and flows,
and ``flows`` the flows nothing runs any more.
"""
