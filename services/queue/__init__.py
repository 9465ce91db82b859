"""The queue of requests waiting for capacity (docs/queue.md).

``admission.py``: one admission pass over the head of the queue; ``admitter.py``:
the thread of a conductor process that runs a pass when capacity may have been
freed, and periodically; ``views.py``: where a request stands, for the API.
"""
