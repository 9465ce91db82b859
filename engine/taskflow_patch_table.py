"""How a TaskFlow patch goes in and comes out: attributes of TaskFlow's classes swapped."""

from __future__ import annotations


class Replacements:
    """``(owner, name, patched, stock)`` entries: ``setattr(owner, name, patched)`` to install.

    ``stock`` None means the patch adds the attribute, and removing it deletes it.
    """

    def __init__(self, *entries):
        self._entries = entries

    def install(self) -> None:
        for owner, name, patched, _stock in self._entries:
            setattr(owner, name, patched)

    def uninstall(self) -> None:
        for owner, name, _patched, stock in self._entries:
            if stock is None:
                if name in owner.__dict__:
                    delattr(owner, name)
            else:
                setattr(owner, name, stock)

    def is_installed(self) -> bool:
        return all(owner.__dict__.get(name) is patched
                   for owner, name, patched, _stock in self._entries)
