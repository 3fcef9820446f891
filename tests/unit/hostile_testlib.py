"""Hostile shapes for the typed-reader tests (issue 33): any JSON value, substituted at every position of a
recorded real answer, and hostile text for the readers of files and command output.

    positions(answer)                  every path into a recorded answer ((), ('choices',), ('choices', 0) ...)
    substitute(answer, path, value)    a deep copy of answer with the value at path replaced
    json_values()                      a hypothesis strategy of any JSON value, hostile ones weighted in
    hostile_answers(answer)            a strategy: the recorded answer with one position replaced by any value
    hostile_text()                     a strategy of text a host or a peer might send (control characters,
                                       huge numbers, '1_0', NaN words, deep brackets)

A test built on them asserts the one law of every reader: the real answer's result, or a named refusal
(typed_reader.ShapeError or the surface's own error/finding), within its deadline -- never another exception.
"""
import copy
import json

from hypothesis import strategies as st

HUGE_INT = int("9" * 60)
SPECIAL = [None, True, False, 0, -1, 1, 1.5, -1e308, 1e308, float("nan"), float("inf"), float("-inf"),
           2 ** 63, -(2 ** 63) - 1, HUGE_INT, "", "no", "1_0", "1.2.3", "NaN", "\x1b[2J\x1b[31m", "x\n",
           "\x00", "9" * 5000, [], {}, [None], {"": None}]


def positions(value, path=()):
    """Every path into value, the root first."""
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(positions(item, path + (key,)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(positions(item, path + (index,)))
    return out


def substitute(value, path, new):
    """A deep copy of value with the node at path replaced by new (path () replaces the whole)."""
    if not path:
        return new
    out = copy.deepcopy(value)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return out


def deep(levels, leaf=1):
    """A value nested ``levels`` deep (lists), built without recursion."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def json_values(max_leaves=8):
    scalars = st.one_of(
        st.sampled_from(SPECIAL),
        st.none(), st.booleans(),
        st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=40),
    )
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
        max_leaves=max_leaves)


def hostile_answers(answer):
    """The recorded answer with one of its positions replaced by any JSON value."""
    paths = positions(answer)
    return st.tuples(st.sampled_from(paths), json_values()).map(lambda pv: (pv[0], substitute(answer, pv[0], pv[1])))


def dumps(value):
    """JSON text of any value json_values makes (NaN and Infinity written as Python writes them: a peer may)."""
    return json.dumps(value, allow_nan=True)


def hostile_text(max_size=80):
    """Text a host or a peer might answer with."""
    return st.one_of(
        st.text(max_size=max_size),
        st.sampled_from(["", "\n", "9" * 5000, "1_0", "1.2.3", "nan", "inf", "-5", "0x10", "1e400", "\x1b]0;x\x07",
                         "[" * 5000, "{" * 5000, "\ufeff1", "１２", "²"]),
        st.builds(lambda a, b: a + b, st.text(max_size=20), st.sampled_from(["\x1b[2J", "\r", "\x00", "\x9b"])),
    )
