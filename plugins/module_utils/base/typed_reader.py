# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one typed reader: how a structure from outside becomes values the collection may index into.

Every seam where something crosses in -- an HTTP answer (JSON, SSE, ``/metrics`` text), a job's results or
log file, ``/proc``, sysfs, nvidia-smi / rocm-smi output, a journal line, a state file, an inventory's nested
value -- reads it through a *shape* made of the nodes below, before any code indexes into it:

* ``Int``, ``Num``: integers / finite numbers inside a range (a bool is not a number; NaN, the infinities,
  5000-digit integers and ``1e400`` are refused);
* ``Str``: a length cap; a *name* (``Str(name=True)``) also refuses every control character -- a trailing
  newline included -- and may be held to a pattern, matched in full;
* ``Bool``, ``Enum``, ``Null``, ``Optional``, ``OneOf``;
* ``List`` (length bounds), ``Obj`` (typed fields, required ones; unknown keys are dropped, so nothing
  untyped travels on), ``Map`` (any keys, typed values), ``Json`` (any JSON value, bounded in depth and size).

``read(shape, value, source)`` returns the typed value or raises ``ShapeError``, whose text names the source
and the path inside it (``/props default_generation_settings: expected an object, got a list``) -- never a
TypeError, a KeyError, an OverflowError or a RecursionError from deep inside a check, never a default.
``load_json`` bounds JSON text before and after parsing; ``metrics`` reads the Prometheus exposition format
by its grammar (``1_0`` is not ten); ``int_text`` / ``num_text`` read one number from a kernel or tool line;
``text_lines`` reads a host's text (a journal) as bounded, printable lines; ``printable`` escapes control
characters before host text reaches the controller's terminal.

Stdlib only: the modules run it on the host.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import math
import re

# Bounds that hold when a caller names none: what no real answer of llama-server, the kernel or a tool comes near.
INT_LIMIT = 2 ** 63 - 1          # an int64: counters, bytes, PIDs
INT_DIGITS = 20                  # a longer run of digits is no int64 (and Python refuses 4300+ digits itself)
STR_MAX = 1 << 20                # characters of one string, unless the shape says otherwise
LIST_MAX = 100000                # elements of one list, unless the shape says otherwise
JSON_DEPTH = 64                  # nesting of any JSON value
JSON_NODES = 1000000             # values in one JSON document
JSON_BYTES = 64 << 20            # characters of one JSON document
REPR_MAX = 60                    # characters of an offending value quoted in a refusal
TEXT_LINES_MAX = 1000000         # lines of one host text (a journal, a log) read by text_lines
LINE_MAX = 16384                 # characters kept of one such line (llama-server writes none near it)

_CONTROL = re.compile(u'[\x00-\x1f\x7f-\x9f]')
_CONTROL_BUT_LINES = re.compile(u'[\x00-\x08\x0b-\x1f\x7f-\x9f]')
_DIGITS = re.compile(r'[+-]?[0-9]+\Z')
# A decimal number as the exposition format and the kernel write it; no '_' (Python's float('1_0') is 10),
# no hex, no words.
_DECIMAL = r'[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?'
_NUMBER = re.compile(_DECIMAL + r'\Z')


class ShapeError(ValueError):
    """A value from outside that is not of its shape. ``source`` says where it came from (``/props``, ``the
    results file /root/.ansible_async/j1``), ``path`` where inside it (``choices[0].message``)."""

    def __init__(self, source, path, problem):
        self.source, self.path, self.problem = source, path, problem
        where = ('%s %s' % (source, path)) if path else source
        ValueError.__init__(self, '%s: %s' % (where, problem))


def printable(text, lines=False, limit=None):
    """text with every control character (C0, DEL, C1; newlines too unless ``lines``) written as ``\\xNN``: a
    host's log line or a peer's error message cannot move the controller's cursor, recolour it or clear it."""
    if not isinstance(text, str):
        text = str(text)
    if limit is not None and len(text) > limit:
        text = text[:max(0, limit - 3)] + '...'
    pattern = _CONTROL_BUT_LINES if lines else _CONTROL
    return pattern.sub(lambda m: '\\x%02x' % ord(m.group(0)), text)


def quote(value):
    """A short, printable rendering of an offending value for a refusal."""
    if isinstance(value, (dict, list)):
        return kind(value)
    try:
        text = repr(value)
    except (ValueError, RecursionError):     # an int too long to print
        return kind(value)
    return printable(text, limit=REPR_MAX)


def kind(value):
    """What a value is, in the words a refusal uses."""
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'a boolean'
    if isinstance(value, int):
        return 'an integer'
    if isinstance(value, float):
        return 'a number' if math.isfinite(value) else 'a non-finite number'
    if isinstance(value, str):
        return 'a string'
    if isinstance(value, bytes):
        return 'bytes'
    if isinstance(value, (list, tuple)):
        return 'a list'
    if isinstance(value, dict):
        return 'an object'
    return 'a %s' % type(value).__name__


def join(path, key):
    if isinstance(key, int):
        return '%s[%d]' % (path, key)
    key = printable(key, limit=REPR_MAX)
    return '%s.%s' % (path, key) if path else key


class Shape(object):
    """A node of a shape: ``read(value, source, path)`` returns the typed value or raises ShapeError."""
    expect = 'a value'

    def read(self, value, source, path=''):
        raise NotImplementedError

    def refuse(self, value, source, path, why=None):
        raise ShapeError(source, path, why or 'expected %s, got %s' % (self.expect, _got(value)))


def _got(value):
    if isinstance(value, (dict, list, tuple)) or value is None:
        return kind(value)
    return '%s %s' % (kind(value), quote(value))


class Int(Shape):
    """An integer in [lo, hi]. An integral float (``3.0``) is read as the integer; ``text`` also takes a string
    of digits (a tool's or the kernel's output)."""

    def __init__(self, lo=-INT_LIMIT, hi=INT_LIMIT, text=False):
        self.lo, self.hi, self.text = lo, hi, text
        self.expect = 'an integer from %s to %s' % (lo, hi)

    def read(self, value, source, path=''):
        number = value
        if self.text and isinstance(value, str):
            number = _int_of(value.strip())
        elif isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) <= INT_LIMIT:
            number = int(value)
        if isinstance(number, bool) or not isinstance(number, int):
            self.refuse(value, source, path)
        if not self.lo <= number <= self.hi:
            self.refuse(value, source, path, '%s is out of range: expected %s' % (quote(value), self.expect))
        return number


def _int_of(text):
    if _DIGITS.match(text) and len(text.lstrip('+-')) <= INT_DIGITS:
        return int(text)
    return None


class Num(Shape):
    """A finite number in [lo, hi] (an int or a float, never a bool, NaN or an infinity); ``text`` also takes a
    decimal string by the exposition format's grammar."""

    def __init__(self, lo=-float(INT_LIMIT), hi=float(INT_LIMIT), text=False):
        self.lo, self.hi, self.text = lo, hi, text
        self.expect = 'a finite number from %s to %s' % (lo, hi)

    def read(self, value, source, path=''):
        number = value
        if self.text and isinstance(value, str):
            number = _float_of(value.strip())
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            self.refuse(value, source, path)
        if isinstance(number, int) and abs(number) > INT_LIMIT:
            self.refuse(value, source, path, '%s is out of range: expected %s' % (quote(value), self.expect))
        if not math.isfinite(float(number)):
            self.refuse(value, source, path, '%s is not finite: expected %s' % (quote(value), self.expect))
        if not self.lo <= number <= self.hi:
            self.refuse(value, source, path, '%s is out of range: expected %s' % (quote(value), self.expect))
        return number


def _float_of(text):
    if _NUMBER.match(text) and len(text) <= 64:
        return float(text)
    return None


class Str(Shape):
    """A string of at most ``max_len`` characters. ``name``: no control character at all (a newline in a unit
    name or an alias is an env-file injection) and, with ``pattern``, matched in full (``\\Z``, never ``$``,
    which matches before a trailing newline)."""

    def __init__(self, max_len=STR_MAX, min_len=0, name=False, pattern=None, lines=True, what=None):
        self.max_len, self.min_len, self.name, self.lines = max_len, min_len, name, lines
        self.pattern = re.compile('(?:%s)\\Z' % pattern) if isinstance(pattern, str) else pattern
        self.expect = what or ('a name' if name else 'a string')

    def read(self, value, source, path=''):
        if not isinstance(value, str):
            self.refuse(value, source, path)
        if len(value) > self.max_len:
            self.refuse(value, source, path, 'a string of %d characters: at most %d' % (len(value), self.max_len))
        if len(value) < self.min_len:
            self.refuse(value, source, path, '%s: expected %s of at least %d character(s)'
                        % (quote(value), self.expect, self.min_len))
        if self.name and _CONTROL.search(value):
            self.refuse(value, source, path, '%s holds a control character: expected %s' % (quote(value), self.expect))
        if not self.lines and _CONTROL_BUT_LINES.search(value):
            self.refuse(value, source, path, '%s holds a control character' % quote(value))
        if self.pattern is not None and not self.pattern.match(value):
            self.refuse(value, source, path, '%s is not %s' % (quote(value), self.expect))
        return value


class Bool(Shape):
    """A JSON boolean, exactly (``"no"`` and ``0`` are not booleans here: strict_values reads inventory words)."""
    expect = 'true or false'

    def read(self, value, source, path=''):
        if not isinstance(value, bool):
            self.refuse(value, source, path)
        return value


class Null(Shape):
    expect = 'null'

    def read(self, value, source, path=''):
        if value is not None:
            self.refuse(value, source, path)
        return None


class Enum(Shape):
    """One of the given values (compared with their type: ``1`` is not ``"1"``)."""

    def __init__(self, *choices):
        self.choices = choices
        self.expect = 'one of %s' % ', '.join(quote(c) for c in choices)

    def read(self, value, source, path=''):
        for choice in self.choices:
            if type(value) is type(choice) and value == choice:
                return value
        self.refuse(value, source, path)


class OneOf(Shape):
    """The first of the shapes that reads the value."""

    def __init__(self, *shapes):
        self.shapes = shapes
        self.expect = ' or '.join(s.expect for s in shapes)

    def read(self, value, source, path=''):
        errors = []
        for shape in self.shapes:
            try:
                return shape.read(value, source, path)
            except ShapeError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        # the refusal of the alternative that got furthest in (a deeper path), else the summary
        deepest = max(errors, key=lambda e: len(e.path or ''))
        if (deepest.path or '') != (path or ''):
            raise deepest
        self.refuse(value, source, path)


def Optional(shape):
    """null or the shape."""
    return OneOf(Null(), shape)


class List(Shape):
    def __init__(self, item, min_len=0, max_len=LIST_MAX):
        self.item, self.min_len, self.max_len = item, min_len, max_len
        self.expect = 'a list'

    def read(self, value, source, path=''):
        if not isinstance(value, (list, tuple)):
            self.refuse(value, source, path)
        if not self.min_len <= len(value) <= self.max_len:
            self.refuse(value, source, path, 'a list of %d item(s): expected %s' % (
                len(value), ('%d' % self.min_len) if self.min_len == self.max_len
                else '%d to %d' % (self.min_len, self.max_len)))
        return [self.item.read(v, source, join(path, i)) for i, v in enumerate(value)]


class Obj(Shape):
    """An object with typed ``fields`` ({key: shape}); ``required`` keys must be present. A key not in
    ``fields`` is dropped (``extra=None``), read by ``extra`` (a shape for every other value), or refused
    (``extra=False``). An absent optional field stays absent: no default is made up here."""
    expect = 'an object'

    def __init__(self, fields, required=(), extra=None):
        self.fields, self.extra = dict(fields), extra
        self.required = tuple(self.fields) if required is True else tuple(required)

    def read(self, value, source, path=''):
        if not isinstance(value, dict):
            self.refuse(value, source, path)
        missing = [k for k in self.required if k not in value]
        if missing:
            raise ShapeError(source, path, 'no %s: expected an object with %s'
                             % (', '.join(missing), ', '.join(self.required)))
        out = {}
        for key, item in value.items():
            shape = self.fields.get(key)
            if shape is None:
                if self.extra is False:
                    raise ShapeError(source, join(path, key), 'not a known key: expected one of %s'
                                     % ', '.join(sorted(self.fields)))
                if self.extra is None:
                    continue
                shape = self.extra
            out[key] = shape.read(item, source, join(path, key))
        return out


class Map(Shape):
    """An object with any keys (each a string of ``key``'s shape) and values of one shape."""
    expect = 'an object'

    def __init__(self, value, key=None, max_len=LIST_MAX):
        self.value, self.key, self.max_len = value, key or Str(max_len=256), max_len

    def read(self, value, source, path=''):
        if not isinstance(value, dict):
            self.refuse(value, source, path)
        if len(value) > self.max_len:
            self.refuse(value, source, path, 'an object of %d keys: at most %d' % (len(value), self.max_len))
        out = {}
        for key, item in value.items():
            self.key.read(key, source, join(path, '<key %s>' % quote(key)))
            out[key] = self.value.read(item, source, join(path, key))
        return out


class Json(Shape):
    """Any JSON value, bounded: nesting depth, number of values, finite numbers, int64 integers."""
    expect = 'a JSON value'

    def __init__(self, max_depth=JSON_DEPTH, max_nodes=JSON_NODES):
        self.max_depth, self.max_nodes = max_depth, max_nodes

    def read(self, value, source, path=''):
        bound(value, source, path, self.max_depth, self.max_nodes)
        return value


def bound(value, source, path='', max_depth=JSON_DEPTH, max_nodes=JSON_NODES):
    """Refuse a parsed value deeper than max_depth, with more than max_nodes values, with a non-finite number,
    an integer beyond int64 or anything JSON cannot hold. Iterative: no recursion on hostile depth."""
    stack = [(path, value, 0)]
    nodes = 0
    while stack:
        at, v, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise ShapeError(source, path, 'more than %d values: not an answer this reader takes' % max_nodes)
        if depth > max_depth:
            raise ShapeError(source, at, 'nested deeper than %d levels' % max_depth)
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise ShapeError(source, at, 'a key %s is not a string' % quote(k))
                stack.append((join(at, k), x, depth + 1))
        elif isinstance(v, (list, tuple)):
            stack.extend((join(at, i), x, depth + 1) for i, x in enumerate(v))
        elif isinstance(v, bool) or v is None or isinstance(v, str):
            continue
        elif isinstance(v, int):
            if abs(v) > INT_LIMIT:
                raise ShapeError(source, at, 'an integer beyond 64 bits')
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ShapeError(source, at, '%s is not a finite number (NaN and the infinities are not numbers JSON '
                                 'allows)' % quote(v))
        else:
            raise ShapeError(source, at, '%s is not a JSON value' % kind(v))


def read(shape, value, source, path=''):
    """value read through shape (see the module's docstring); ShapeError names source and path."""
    return shape.read(value, source, path)


def _constant(name):
    # NaN, Infinity and -Infinity are no JSON numbers: read them as floats so that bound() refuses each by its path
    # inside the document (``gpus[0].narrowest_link_gbps: nan is not a finite number``)
    return float(name.replace('Infinity', 'inf'))


def _parse_int(text):
    if len(text.lstrip('-')) > INT_DIGITS:
        raise ValueError('an integer of %d digits' % len(text))
    return int(text)


def load_json(text, source, shape=None, max_bytes=JSON_BYTES, max_depth=JSON_DEPTH, max_nodes=JSON_NODES):
    """Parse JSON text from outside and, with ``shape``, read it through it. Refused (ShapeError naming source):
    bytes that are not UTF-8, text over max_bytes, malformed JSON, NaN/Infinity/1e400, integers over 20 digits,
    nesting deeper than max_depth (200,000 levels end here, not in a RecursionError)."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode('utf-8')
        except UnicodeDecodeError as exc:
            raise ShapeError(source, '', 'not UTF-8 (byte %d)' % exc.start)
    if not isinstance(text, str):
        raise ShapeError(source, '', 'expected JSON text, got %s' % kind(text))
    if len(text) > max_bytes:
        raise ShapeError(source, '', 'an answer of %d characters: at most %d' % (len(text), max_bytes))
    try:
        value = json.loads(text, parse_constant=_constant, parse_int=_parse_int)
    except RecursionError:
        raise ShapeError(source, '', 'nested deeper than %d levels' % max_depth)
    except ValueError as exc:
        raise ShapeError(source, '', 'not JSON: %s (%s)' % (printable(str(exc), limit=200),
                                                            printable(text.strip(), limit=REPR_MAX) or 'empty'))
    bound(value, source, '', max_depth, max_nodes)
    return value if shape is None else shape.read(value, source, '')


def text_lines(text, source, max_chars=JSON_BYTES, max_lines=TEXT_LINES_MAX, line_max=LINE_MAX):
    """A host's text (a journal, a log) as its lines, each printable (control characters escaped, then cut
    at ``line_max``): lines split on ``\\n`` only (a ``\\x85`` or ``\\u2028`` inside a line is escaped, it starts no
    line), ``\\r`` escaped. More than ``max_chars`` characters or ``max_lines`` lines is a ShapeError naming the
    source, never a partial read that a check would take for the whole."""
    if not isinstance(text, str):
        raise ShapeError(source, '', 'expected text, got %s' % kind(text))
    if len(text) > max_chars:
        raise ShapeError(source, '', '%d characters: at most %d are read' % (len(text), max_chars))
    lines = text.split('\n')
    if lines and lines[-1] == '':
        lines.pop()
    if len(lines) > max_lines:
        raise ShapeError(source, '', '%d lines: at most %d are read' % (len(lines), max_lines))
    out = [printable(line) for line in lines]
    return [line if len(line) <= line_max else line[:max(0, line_max - 3)] + '...' for line in out]


def int_text(text, source, lo=-INT_LIMIT, hi=INT_LIMIT):
    """One integer from a kernel's or a tool's text (``/proc`` VmRSS, an smi column): digits only, at most 20."""
    return Int(lo, hi, text=True).read(text, source)


def num_text(text, source, lo=-float(INT_LIMIT), hi=float(INT_LIMIT)):
    """One finite decimal number from text, by the exposition format's grammar (no ``1_0``, ``nan``, ``inf``)."""
    return Num(lo, hi, text=True).read(text, source)


# --- the Prometheus text exposition format ------------------------------------------------------------------

_METRIC_NAME = r'[a-zA-Z_:][a-zA-Z0-9_:]*'
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(r'(?P<series>(?P<name>%s)(?:\{(?:%s(?:,%s)*,?)?\})?)[ \t]+(?P<value>%s|[+-]?Inf|NaN)'
                     r'(?:[ \t]+[+-]?[0-9]+)?[ \t]*\Z' % (_METRIC_NAME, _LABEL, _LABEL, _DECIMAL))
METRICS_MAX_LINES = 100000


def metrics(text, source):
    """Prometheus exposition text -> {series (labels kept in the key): float}. Every sample line must follow
    the format's grammar and name a series once; a malformed line is refused by its number, never skipped
    or read as something near it (``1_0``). Values are floats as written (NaN and +Inf included: the caller
    decides what a count may be)."""
    if not isinstance(text, str):
        raise ShapeError(source, '', 'expected exposition text, got %s' % kind(text))
    out = {}
    lines = text.split('\n')
    if len(lines) > METRICS_MAX_LINES:
        raise ShapeError(source, '', '%d lines: at most %d' % (len(lines), METRICS_MAX_LINES))
    for number, line in enumerate(lines, 1):
        line = line.rstrip('\r')
        if not line.strip() or line.startswith('#'):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise ShapeError(source, 'line %d' % number, '%s is not a sample of the exposition format'
                             % quote(line))
        series = match.group('series')
        if series in out:
            raise ShapeError(source, 'line %d' % number, 'the series %s appears twice' % printable(series, limit=200))
        out[series] = float(match.group('value'))
    return out
