"""Automatic recovery of dead hosts (docs/recovery.md).

``monitor`` (the thread every conductor process runs, one acting under a
lease), ``detect`` (suspect, dead, flap, the storm guard), ``act`` (fence,
evacuate, follow), ``policy`` (which servers, in which order, where) and
``ops`` (what the API shows and steers).
"""
