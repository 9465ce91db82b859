"""Capability requirements: ``key -> "value"`` or ``key -> "<op> operand"``.

The syntax follows Nova's ComputeCapabilitiesFilter extra specs, with one
deliberate difference (``=``, see below). A requirement value is a string:

=====================  ===================================================
``"blue"``             the host's value, as a string, equals ``blue``
``"= 4"``              equal: numerically when both sides are numbers
                       (``4`` matches ``4.0``), else as strings
``"== 4"``             numerically equal (a non-number never matches)
``"!= 4"``             not equal (same comparison as ``=``); a host that
                       lacks the key passes: it certainly is not ``4``
``">= 4"`` ``"<= 4"``  numeric comparison (also ``>`` and ``<``)
``"s== abc"``          string equality (``s!=`` is its negation)
``"in a b c"``         the value is one of ``a``, ``b``, ``c`` (spaces or
                       commas separate; Nova's ``"<in> a b"`` is accepted)
``"<or> a <or> b"``    the same as ``in a b`` (Nova's spelling)
=====================  ===================================================

NOTE: Nova reads ``"= 4"`` as "at least 4". We read it as equality because
the request API documents ``=`` next to ``>=``; use ``">= 4"`` for "at least".

Values that are not strings are normalised: ``True`` -> ``"true"``, numbers
-> their ``str``. A host whose capability is a list matches when any element
matches (e.g. ``{"volume_types": ["ssd", "nvme"]}`` with ``"ssd"``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from fleetflow.common.exceptions import InvalidInput

# Longest operators first so ">=" is not read as ">" followed by "=4".
_OPERATORS = ("<in>", "<or>", "s==", "s!=", "==", "!=", ">=", "<=", "in", "=", ">", "<")
_SEPARATORS = re.compile(r"[\s,]+")


def normalise(value: Any) -> str:
    """The string form a capability value is compared in."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _equal(left: str, right: str) -> bool:
    a, b = _number(left), _number(right)
    if a is not None and b is not None:
        return a == b
    return left == right


def _numeric(compare: Callable[[float, float], bool]) -> Callable[[str, Any], bool]:
    def check(value: str, operand: float) -> bool:
        number = _number(value)
        return number is not None and compare(number, operand)
    return check


# operator -> (operand parser, predicate(host value, parsed operand))
_PREDICATES: dict[str, tuple[Callable[[str], Any], Callable[[str, Any], bool]]] = {
    "": (str, lambda value, operand: value == operand),
    "=": (str, _equal),
    "!=": (str, lambda value, operand: not _equal(value, operand)),
    "==": (float, _numeric(lambda a, b: a == b)),
    ">=": (float, _numeric(lambda a, b: a >= b)),
    "<=": (float, _numeric(lambda a, b: a <= b)),
    ">": (float, _numeric(lambda a, b: a > b)),
    "<": (float, _numeric(lambda a, b: a < b)),
    "s==": (str, lambda value, operand: value == operand),
    "s!=": (str, lambda value, operand: value != operand),
    "in": (lambda text: frozenset(p for p in _SEPARATORS.split(text) if p),
           lambda value, operand: value in operand),
}


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One parsed requirement; ``matches`` is called once per candidate host."""

    key: str
    op: str
    operand: Any
    text: str

    def matches(self, capabilities: Mapping[str, Any]) -> bool:
        if self.key not in capabilities:
            # A missing key satisfies only a negation (the host is not that value).
            return self.op in ("!=", "s!=")
        value = capabilities[self.key]
        check = _PREDICATES[self.op][1]
        if isinstance(value, list | tuple | set | frozenset):
            if self.op in ("!=", "s!="):
                return all(check(normalise(v), self.operand) for v in value)
            return any(check(normalise(v), self.operand) for v in value)
        return check(normalise(value), self.operand)


def parse_requirement(key: str, raw: Any) -> Requirement:
    """Parse one ``key: value`` pair; raise InvalidInput naming the key when malformed."""
    text = normalise(raw)
    op, rest = "", text
    for candidate in _OPERATORS:
        if text.startswith(candidate) and (candidate[0] in "<>=!s" or
                                           text[len(candidate):][:1].isspace()):
            op, rest = candidate, text[len(candidate):].strip()
            break
    if op == "<or>":
        # Nova's "<or> a <or> b": every operand is preceded by the marker.
        op, rest = "in", " ".join(p.strip() for p in rest.split("<or>"))
    elif op == "<in>":
        op = "in"
    if op and not rest:
        raise InvalidInput(f"capabilities.{key}: operator {op!r} needs an operand",
                           field=f"capabilities.{key}")
    parse = _PREDICATES[op][0]
    try:
        operand = parse(rest)
    except ValueError:
        raise InvalidInput(f"capabilities.{key}: {op!r} needs a number, got {rest!r}",
                           field=f"capabilities.{key}") from None
    return Requirement(key=key, op=op, operand=operand, text=text)


def parse_requirements(raw: Mapping[str, Any] | None) -> tuple[Requirement, ...]:
    """Parse a whole requirements mapping (empty or None: no requirement)."""
    return tuple(parse_requirement(str(k), v) for k, v in sorted((raw or {}).items()))


def matches_all(requirements: tuple[Requirement, ...], capabilities: Mapping[str, Any]) -> bool:
    return all(r.matches(capabilities) for r in requirements)


_MISSING = object()


def host_matcher(requirements: tuple[Requirement, ...]) -> Callable[[Mapping[str, Any]], bool]:
    """A fast ``matches_all`` for many hosts: each distinct value is judged once.

    Fleets repeat a handful of values (``gpu=true``, three sticker colours)
    across thousands of hosts, so a per-requirement memo turns parsing and
    comparing into one dict lookup per host and requirement.
    """
    memos: list[dict] = [{} for _ in requirements]
    pairs = list(zip(requirements, memos, strict=True))

    def matches(capabilities: Mapping[str, Any]) -> bool:
        for requirement, memo in pairs:
            value = capabilities.get(requirement.key, _MISSING)
            try:
                verdict = memo[value]
            except KeyError:
                verdict = memo[value] = requirement.matches(capabilities)
            except TypeError:  # unhashable (a list): judge it every time
                verdict = requirement.matches(capabilities)
            if not verdict:
                return False
        return True
    return matches
