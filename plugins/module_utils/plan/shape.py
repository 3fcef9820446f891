# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serve shape: what llama-server runs, made once (llm_plan publishes it) and written once (the env file).

Plain Python, stdlib only. Each rule that crosses the serve settings is written here once, and the settle step,
the plan's result and the serve role's env file import it:

* ``pinned`` / ``origin``: a value the inventory set is ``pinned``; one it left open (a split of ``[]``, a context
  of ``0``, a cache-ram or n_cpu_moe of ``auto``) is ``planned`` - the planner chooses it (``llm_plan.planned``
  says whether a plan has run yet). Two words, everywhere;
* ``payload_path`` / ``payload_paths``: the payload layout ``<models_dir>/<name>/<file>`` (or ``<dest_dir>/<file>``,
  one ``/`` where dest_dir ends in one), the fetch's, the settle step's and the plan's;
* ``ctx_parallel_problem`` / ``split_devices_problem``: a context that does not divide over the slots, a split
  with another number of shares than devices - llama.cpp would round the pool down, or die at load;
* ``served``: the complete shape from the settled serve settings and the plan's choices (each with its origin);
* ``env_line``: the ONE writer of a line of the env file, quoted so ``llama_env.parse`` (systemd's reading, and
  bash's) gives the value back unchanged, with the reasons as comments above it.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re
import textwrap

ORIGINS = ("pinned", "planned")
# the four values a plan may choose, and what leaves each open
PLANNED_KEYS = ("tensor_split", "ctx_size", "cache_ram", "n_cpu_moe")
# without a plan, --cache-ram keeps llama.cpp's own default
DEFAULT_CACHE_RAM_MIB = 8192
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,20}\Z")
# a value bash and systemd both read back unquoted
_BARE = re.compile(r"[A-Za-z0-9_./:,+@%=-]*\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CONTROL = re.compile(u"[\x00-\x1f\x7f]")
# the width of the reasons above each line (the runbook's)
REASON_WIDTH = 94


def int_like(value):
    """A whole number, or its text ("8192"); never a boolean."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and _INT_TEXT.match(value.strip()) is not None


# --- origin ---------------------------------------------------------------------------------------------------

def pinned(serve):
    """{tensor_split, ctx_size, cache_ram, n_cpu_moe: bool}: which of the four the inventory set (the planner chooses
    the rest). Reads both shapes: the settled serve values ([] / 0 / auto open) and fit_plan's serve dict (auto /
    max / an absent or auto cache_ram_mib open). n_cpu_moe is open only as auto: absent, it is the role's default
    0 (plan_result marks it planned where fit_plan chose it for an absent one)."""
    split = serve.get("tensor_split")
    ctx = serve.get("ctx_size")
    cache = serve.get("cache_ram", serve.get("cache_ram_mib"))
    return {
        "tensor_split": isinstance(split, (list, tuple)) and len(split) > 0,
        "ctx_size": int_like(ctx) and int(ctx) > 0,
        "cache_ram": cache is not None and str(cache) != "auto",
        "n_cpu_moe": str(serve.get("n_cpu_moe")) != "auto",
    }


def origin(serve):
    """pinned (the inventory set it) or planned (the inventory left it to the planner) per planned value."""
    return dict((key, ORIGINS[0] if set_here else ORIGINS[1]) for key, set_here in pinned(serve).items())


# --- payload --------------------------------------------------------------------------------------------------

def payload_path(item, models_dir):
    """Where the fetch places one manifest entry: <dest_dir>/<file>, else <models_dir>/<name>/<file>; None for an
    entry that names no file."""
    if not isinstance(item, dict) or not isinstance(item.get("file"), str):
        return None
    base = item.get("dest_dir")
    base = base if isinstance(base, str) and base else "%s/%s" % (models_dir, item.get("name", ""))
    return "%s/%s" % (base.rstrip("/"), item["file"])


def payload_paths(manifest, models_dir, fallback=None):
    """{target/drafter/mmproj: path}: payload_path per manifest entry (the fetch role's layout), else fallback's
    path (the inventory's own llama_server_*_path, or what the settle step derived) for a role no entry declares."""
    out = {}
    for item in manifest or []:
        path = payload_path(item, models_dir)
        if path is not None and isinstance(item.get("role"), str):
            out[item["role"]] = path
    for role, path in (fallback or {}).items():
        if role not in out and path:
            out[role] = path
    return out


# --- the cross rules ------------------------------------------------------------------------------------------

def ctx_parallel_problem(ctx, parallel, planned=False):
    """(variable, message) when the context does not divide over the slots, else None. planned: the value is the
    plan's (the fix is to plan again), not the inventory's."""
    if not (int_like(ctx) and int_like(parallel)) or int(parallel) < 1 or int(ctx) <= 0 or int(ctx) % int(parallel) == 0:
        return None
    ctx, parallel = int(ctx), int(parallel)
    if planned:
        return ("llama_server_ctx_size", "the context %d does not divide over llama_server_parallel %d slots (llama.cpp "
                "rounds the pool down): set llama_server_ctx_size to a multiple of %d, or plan again"
                % (ctx, parallel, parallel))
    lower = ctx - ctx % parallel
    return ("llama_server_ctx_size", "llama_server_ctx_size %d does not divide over llama_server_parallel %d slots "
            "(llama.cpp rounds the pool down): set llama_server_ctx_size to a multiple of %d (%d or %d), or 0 for the "
            "plan's, or change llama_server_parallel" % (ctx, parallel, parallel, lower, lower + parallel))


def split_devices_problem(split, devices, planned=False):
    """(variable, message) when a split has another number of shares than there are devices, else None."""
    if not (isinstance(split, (list, tuple)) and isinstance(devices, (list, tuple)) and split and devices) \
            or len(split) == len(devices):
        return None
    if planned:
        return ("llama_server_tensor_split", "the split %s needs one share per device of llama_server_devices %s: give "
                "one share per device, or plan again" % (list(split), list(devices)))
    return ("llama_server_tensor_split", "llama_server_tensor_split %s has %d share(s) but llama_server_devices %s "
            "names %d device(s): give one share per device, or [] for the plan's"
            % (list(split), len(split), list(devices), len(devices)))


# --- the shape ------------------------------------------------------------------------------------------------

def served(serve, chosen=None, origins=None):
    """The complete serve shape: every settled serve setting, the four planned values filled in, and their origin.

    serve: the settled serve settings (dankfleet_settled.serve, llm_plan_serve); chosen: the planner's choices
    {tensor_split, ctx_size, cache_ram, n_cpu_moe} for the values left open (None: no plan ran - a split left open
    is llama.cpp's default [], a context 0 the model's, a cache-ram auto llama.cpp's 8192 MiB, n_cpu_moe auto 0);
    origins: where each came from, when the planner says it better than the settings do (it chose an n_cpu_moe
    the settings did not name)."""
    chosen = chosen or {}
    origins = dict(origin(serve), **(origins or {}))
    here = dict(serve)
    here.setdefault("cache_ram", serve.get("cache_ram_mib"))
    value = dict((key, here.get(key) if origins[key] == ORIGINS[0] else chosen.get(key)) for key in PLANNED_KEYS)
    shape = dict(serve)
    shape.pop("cache_ram_mib", None)
    shape["tensor_split"] = list(value["tensor_split"]) if isinstance(value["tensor_split"], (list, tuple)) else []
    shape["ctx_size"] = int(value["ctx_size"]) if int_like(value["ctx_size"]) else 0
    shape["cache_ram"] = int(value["cache_ram"]) if int_like(value["cache_ram"]) else DEFAULT_CACHE_RAM_MIB
    shape["n_cpu_moe"] = int(value["n_cpu_moe"]) if int_like(value["n_cpu_moe"]) else 0
    shape["origin"] = origins
    return shape


# --- the env file ---------------------------------------------------------------------------------------------

def onoff(value, allow_auto=False):
    """A switch as llama-server reads it: on or off (auto where the flag takes it)."""
    text = str(value).lower()
    if allow_auto and text == "auto":
        return "auto"
    return "on" if text in ("true", "on", "yes", "1") else "off"


def quote(value):
    """value as text that systemd's EnvironmentFile= and bash both read back unchanged: bare when it can be,
    else single-quoted, else double-quoted with \\ " ` $ escaped. A control character (a newline would add a line
    of its own) is refused."""
    text = value if isinstance(value, str) else str(value)
    if _CONTROL.search(text):
        raise ValueError("an env file value is one line with no control character, got %r" % text)
    if _BARE.match(text):
        return text
    if "'" not in text:
        return "'%s'" % text
    for char in ("\\", '"', "`", "$"):
        text = text.replace(char, "\\" + char)
    return '"%s"' % text


def _wrapped(text):
    """Jinja's wordwrap(width, break_long_words=false), line by line, so a rendered file keeps its bytes."""
    out = []
    for line in str(text).splitlines():
        out.extend(textwrap.wrap(line, width=REASON_WIDTH, expand_tabs=False, replace_whitespace=False,
                                 break_long_words=False, break_on_hyphens=True) or [""])
    return out


def env_line(name, value, reasons=None, comments=None):
    """One variable of the env file: its reason (reasons[name]) and the operator's comment (comments[name]) as
    comment lines, then NAME=<quoted value>; a trailing newline after each line."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise ValueError("%r is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)" % (name,))
    lines = []
    for source in (reasons or {}, comments or {}):
        if name in source and source[name] not in (None, ""):
            lines.extend("# " + line for line in _wrapped(source[name]))
    lines.append("%s=%s" % (name, quote(value)))
    return "".join(line + "\n" for line in lines)
