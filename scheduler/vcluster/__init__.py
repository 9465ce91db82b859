"""Where a virtual cluster's members go: servers on hosts, volumes on backends, in one pass.

``place`` holds the members, groupings and :func:`place.place_vcluster`;
``rules`` turns groupings into affinity units and anti-affinity limits,
``static`` and ``pins`` filter what the pass may use, ``passes`` and ``pool``
run it, ``answer``, ``alternates`` and ``explain`` word its result, and
``check`` tells whether a grouping holds where its members are now. ``plan``
reads the cluster and the cloud from the database for the schedule task and
the API's dry run.
"""
