"""Where an evacuation's servers go: every server placed in one pass over one view of the cloud.

``place`` is the entry (:func:`place.place_moves`); ``passes`` holds the heaps
of eligible hosts the pass consumes, ``units`` places a hard-affinity group as
one unit, and ``explain`` says why a server found no host. ``plan`` reads the
servers and the cloud from the database for the schedule task, the retry and
the API's dry run.
"""
