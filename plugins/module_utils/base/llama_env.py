# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one reader of the llama_server role's env file, stdlib only.

The service reads the file through systemd's ``EnvironmentFile=``, so this reads it the same way:
``KEY=VALUE`` lines, ``#``/``;`` comments, single quotes literal, double quotes with backslash escapes
of ``" \\ ` $`` (systemd's env-file.c, without line continuations). Every Python reader of a live
env file imports this (the gate module, plan_actual, the benchmarks). The role's host-side checker
``roles/llama_server/files/llama_env_check.py`` runs as a template's ``validate`` command with no
collection on the host: the role installs this very file beside it, and the checker loads it from
there (from the source tree, from here). Keep it stdlib-only and importable as a plain file.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import re
import stat

try:
    from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import read_text
except ImportError:  # installed alone beside llama_env_check.py on the host: the same rules, stdlib only
    def read_text(path, what, max_bytes):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError('%s is not a regular file' % path)
            data = os.read(fd, max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > max_bytes:
            raise OSError('%s is more than the %d bytes a %s can be' % (path, max_bytes, what))
        try:
            return data.decode('utf-8')
        except UnicodeDecodeError as exc:
            raise OSError('%s is not UTF-8 text: byte offset %d' % (path, exc.start))

NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
DOUBLE_QUOTE_ESCAPES = '"\\`$'
# The variable that holds the API key: never returned, logged or recorded.
SECRET_KEYS = ('LLAMA_API_KEY',)


class LlamaEnvError(Exception):
    """The env file cannot be read; the message names the path and the cause."""


def parse_value(raw):
    """systemd's reading of the text after '=' (env-file.c, without line continuations)."""
    out = []
    raw = raw.strip()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "'":
            end = raw.find("'", i + 1)
            if end < 0:
                raise ValueError('unterminated single quote')
            out.append(raw[i + 1:end])
            i = end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    raise ValueError('unterminated double quote')
                c = raw[i]
                if c == '"':
                    i += 1
                    break
                if c == '\\' and i + 1 < n and raw[i + 1] in DOUBLE_QUOTE_ESCAPES:
                    out.append(raw[i + 1])
                    i += 2
                    continue
                out.append(c)
                i += 1
        elif c == '\\' and i + 1 < n:
            out.append(raw[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def parse(text):
    """(variables, problems) of an env file's text; the first assignment of a name wins."""
    variables, problems = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith('#') or stripped.startswith(';'):
            continue
        if '=' not in stripped:
            problems.append('line %d is neither a comment nor NAME=VALUE: %r' % (number, line))
            continue
        name, raw = stripped.split('=', 1)
        name = name.strip()
        if not NAME.match(name):
            problems.append('line %d: %r is not a valid variable name' % (number, name))
            continue
        if name in variables:
            problems.append('line %d: %s is set twice (first value %r)' % (number, name, variables[name]))
            continue
        try:
            variables[name] = parse_value(raw)
        except ValueError as exc:
            problems.append('line %d: %s: %s' % (number, name, exc))
    return variables, problems


ENV_FILE_MAX_BYTES = 1024 * 1024


def read_env_file(path):
    """(variables, problems) of the env file at ``path``; LlamaEnvError when it cannot be read."""
    try:  # a regular UTF-8 file of at most ENV_FILE_MAX_BYTES: never a FIFO (blocks) or a device
        text = read_text(path, 'env file', ENV_FILE_MAX_BYTES)
    except (IOError, OSError) as exc:
        raise LlamaEnvError('the env file %s is not readable (%s)' % (path, getattr(exc, 'cause', None) or exc))
    return parse(text)


def without_secrets(variables):
    """The variables minus the API key, for anything returned, logged or recorded."""
    return dict((k, v) for k, v in variables.items() if k not in SECRET_KEYS)
