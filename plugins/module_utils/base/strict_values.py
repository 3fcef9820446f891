# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a value read from an inventory, a file or a peer becomes a boolean or a number: one home for the rules.

* A boolean only by Ansible's own rules (``ansible.module_utils.parsing.convert_bool.boolean``, strict): true,
  yes, on, y, t, 1 and their false twins, any case; anything else (``"flase"``, ``2``, ``[]``, ``None``) is
  refused naming where it came from -- never Python's ``bool("false") == True``.
* A number is finite: NaN and the infinities are refused wherever one is read (a JSON ``NaN``, a metric
  ``+Inf``, a float in a recorded file), because every comparison with NaN is false and a gate that asks
  ``drafts <= 0`` passes on it.

Each function takes ``error``, the caller's exception class, called with one message.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import math

BOOLEAN_WORDS = "true/false (or yes/no, on/off, y/n, t/f, 1/0)"
# ansible.module_utils.parsing.convert_bool's BOOLEANS_TRUE / BOOLEANS_FALSE, copied so fit_plan imports without
# Ansible (a law of its tests); tests/unit/plugins/filter/test_strict_values.py asserts the copies agree.
BOOLEANS_TRUE = frozenset(("y", "yes", "on", "1", "true", "t", 1, 1.0, True))
BOOLEANS_FALSE = frozenset(("n", "no", "off", "0", "false", "f", 0, 0.0, False))


def to_bool(value, where, error=ValueError):
    """value as a boolean by Ansible's rules (convert_bool.boolean, strict), or error naming where."""
    if isinstance(value, bool):
        return value
    key = value
    if isinstance(value, bytes):
        try:
            key = value.decode("utf-8")
        except UnicodeDecodeError:
            key = None
    if isinstance(key, str):
        key = key.lower().strip()
    try:
        if key in BOOLEANS_TRUE:
            return True
        if key in BOOLEANS_FALSE:
            return False
    except TypeError:           # unhashable: a list, a dict
        pass
    raise error("%s is %r, not a boolean: use %s" % (where, value, BOOLEAN_WORDS))


def is_finite_number(value):
    """An int or a finite float, not a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def finite(value, where, error=ValueError):
    """value if it is a finite number (not a bool); else error naming where."""
    if not is_finite_number(value):
        raise error("%s is %r: expected a finite number (NaN and infinities are refused)" % (where, value))
    return value


def finite_float(text, where, error=ValueError):
    """float(text) when it is a finite number; a NaN, an Inf or no number at all is error naming where."""
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        raise error("%s is %r, not a number" % (where, text))
    if not math.isfinite(value):
        raise error("%s is %r: expected a finite number (NaN and infinities are refused)" % (where, text))
    return value


def digits(text):
    """text is a non-empty run of ASCII digits (str.isdigit also takes '²' and other digits int() refuses)."""
    return isinstance(text, str) and bool(text) and all("0" <= c <= "9" for c in text)


def non_finite_path(value, where=""):
    """The path (``gpus[0].links[1].gbps``) of the first NaN or infinity inside parsed JSON, else None."""
    stack = [(where, value)]
    while stack:
        at, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return at or "the value"
        if isinstance(v, dict):
            stack.extend(("%s.%s" % (at, k) if at else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend(("%s[%d]" % (at, i), x) for i, x in reversed(list(enumerate(v))))
    return None
