"""Flows: what the engine runs, for operators (resume, revert) and their owners (read)."""
