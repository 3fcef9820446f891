# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The settle step: every inventory value checked once, at the door, and the serve role's inputs derived from it.

Plain Python (no Ansible import): the action plugin ``dankfleet.llm.settle`` hands it the host's variables,
templated, and the roles' argument specs; unit tests call it directly.

* ``unknown_names``: a ``llama_server_*`` / ``llm_plan_*`` / ``gguf_fetch_*`` / ``runtime_retire_*`` /
  ``dankfleet_*`` name no role knows, with the closest known one (difflib);
* ``check_type``: a value against its argument spec's type by Ansible's rules, with no silent coercion
  (``"two"`` is not an int, a tensor split given as a string is not a list);
* ``placeholders``: every ``FILL-`` placeholder (and a manifest ``size: 0``) of every variable, in one list;
* ``serve_problems``: the cross-checks of the serve preflight (slots against the context, batches, the split
  against the devices, extra args that shadow a planned flag, HIP's bare environment names, the speculative
  chain, vision), each message naming the variable the operator edits and the fix;
* ``settle``: all of the above at once, and the serve role's inputs (install prefix, payload paths, the plan's
  serve settings with their origin, the port-handover units).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import difflib
import os
import re

from ansible_collections.dankfleet.llm.plugins.module_utils import llama_cpp_rules as rules
from ansible_collections.dankfleet.llm.plugins.module_utils.serve_guard import shadowed
from ansible_collections.dankfleet.llm.plugins.module_utils.strict_values import BOOLEANS_FALSE, BOOLEANS_TRUE

PREFIXES = ("llama_server_", "llm_plan_", "gguf_fetch_", "runtime_retire_", "dankfleet_")
# Placeholders are looked for in these too (the build's toolchain oid, the shapes an inventory selects from).
PLACEHOLDER_PREFIXES = PREFIXES + ("llama_cpp_build_", "llama_rpc_worker_", "llm_observability_", "llm_bench_")
PLACEHOLDER = re.compile(r"FILL[A-Za-z0-9_./-]*")
# Settings a host does not use, so a placeholder in them is nothing to fill: (prefix, the variable that
# decides, the values under which it is used).
INERT_UNLESS = (
    ("llama_cpp_build_toolchain_", "llama_cpp_build_backend", ("hip",)),
    ("llama_cpp_build_archive_", "llama_cpp_build_source_type", ("archive",)),
    ("llama_cpp_build_git_", "llama_cpp_build_source_type", ("git",)),
)

# The dankfleet_* names an inventory may set beyond the fleet-wide settings of roles/dankfleet (whose argument
# spec types those), and the results the collection publishes under that prefix.
DANKFLEET_NAMES = {
    "dankfleet_private_address": "str",
    "dankfleet_serving_now": "list",
    "dankfleet_rollback_retire": "list",
    "dankfleet_cache_in_container": "str",
    # published: the settle step's own result
    "dankfleet_settled": "dict",
}

# The serve settings the plan is made for (llm_plan_serve), each with the type it is settled to.
PLAN_SERVE = (
    ("backend", "str"), ("split_mode", "str"), ("tensor_split", "list"), ("ctx_size", "int"),
    ("cache_ram", "raw"), ("parallel", "int"), ("batch_size", "int"), ("ubatch_size", "int"),
    ("cache_type_k", "str"), ("cache_type_v", "str"), ("flash_attn", "raw"), ("spec_type", "list"),
    ("spec_draft_n_max", "int"), ("spec_draft_device", "str"), ("vision", "bool"), ("rpc", "list"),
)
PAYLOAD_ROLES = ("target", "drafter", "mmproj")
_INT_TEXT = re.compile(r"^[+-]?[0-9]+$")
_FLOAT_TEXT = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")


class Problem(object):
    """One thing the operator edits: the variable, and the message (which names it and says the fix)."""

    def __init__(self, variable, message, kind="value"):
        self.variable, self.message, self.kind = variable, message, kind

    def __repr__(self):
        return "Problem(%r, %r)" % (self.variable, self.message)

    def as_dict(self):
        return {"variable": self.variable, "msg": self.message}


class Invalid(Exception):
    """A value that does not have its spec's type; the message names the variable and the fix."""


# --- names ----------------------------------------------------------------------------------------------------

def governed(name):
    """A public name under one of the settle step's prefixes (private _x / __x never count)."""
    return isinstance(name, str) and not name.startswith("_") and name.startswith(PREFIXES)


def spec_options(argument_specs):
    """{role: argument_specs mapping} -> {option name: its spec}, the union over every role and entry point
    (main first, so its description and type win where an entry point repeats an option)."""
    out = {}
    for role in sorted(argument_specs):
        entries = argument_specs[role] or {}
        for entry in sorted(entries, key=lambda e: (e != "main", e)):
            for name, spec in ((entries[entry] or {}).get("options") or {}).items():
                out.setdefault(name, dict(spec or {}, role=role))
    return out


def known_names(options, extra=()):
    """Every name an inventory may set: the roles' options, the documented dankfleet_* names and extra
    (results the roles publish under a governed prefix)."""
    return set(options) | set(DANKFLEET_NAMES) | set(extra)


def unknown_names(names, known):
    """A Problem per governed name that no role knows, with the closest known name when one is close."""
    problems = []
    candidates = sorted(known)
    for name in sorted(n for n in names if governed(n) and n not in known):
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
        prefix = next(p for p in PREFIXES if name.startswith(p))
        if close:
            fix = "did you mean %s? Rename it in the inventory (or the -e that sets it)" % close[0]
        else:
            fix = ("no role reads a %s* variable of that name; remove it or see the roles' README for the "
                   "names they take" % prefix)
        problems.append(Problem(name, "%s is not a variable of this collection: %s." % (name, fix), kind="unknown"))
    return problems


# --- types ----------------------------------------------------------------------------------------------------

def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _to_int(name, value):
    if _is_int(value):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT_TEXT.match(value.strip()):
        return int(value.strip())
    raise Invalid("%s is %r, not a whole number: write it as a number (e.g. %s: 2), no quotes or words"
                  % (name, value, name))


def _to_float(name, value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
        return float(value)
    raise Invalid("%s is %r, not a number: write it as a number (e.g. %s: 0.7)" % (name, value, name))


def _to_bool(name, value):
    if isinstance(value, bool):
        return value
    key = value.lower().strip() if isinstance(value, str) else value
    try:
        if key in BOOLEANS_TRUE:
            return True
        if key in BOOLEANS_FALSE:
            return False
    except TypeError:
        pass
    raise Invalid("%s is %r, not a boolean: write true or false (yes/no, on/off also read as booleans)"
                  % (name, value))


def _to_str(name, value):
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise Invalid("%s is the boolean %s, not a string: quote it (%s: \"%s\") - YAML reads a bare on/off/yes/no "
                      "as a boolean" % (name, value, name, "on" if value else "off"))
    if isinstance(value, (int, float)):
        return str(value)
    raise Invalid("%s is a %s, not a string: give it one value, e.g. %s: \"...\""
                  % (name, _kind(value), name))


def _kind(value):
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _to_list(name, value, elements=None):
    if isinstance(value, str):
        parts = [p.strip() for p in re.split(r"[,:]", value) if p.strip()]
        raise Invalid("%s is the string %r, not a list: write it as a YAML list, %s: [%s] (a string would be read "
                      "character by character)" % (name, value, name, ", ".join(parts)))
    if not isinstance(value, (list, tuple)):
        raise Invalid("%s is %s %r, not a list: write it as a YAML list, %s: [...]" % (name, _article(value), value, name))
    if not elements or elements == "raw":
        return list(value)
    return [check_type("%s[%d]" % (name, i), item, {"type": elements}) for i, item in enumerate(value)]


def _article(value):
    kind = _kind(value)
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _to_dict(name, value):
    if isinstance(value, dict):
        return value
    raise Invalid("%s is %s, not a mapping: write it as a YAML mapping, %s: {key: value}" % (name, _article(value), name))


_CHECKS = {"int": _to_int, "float": _to_float, "bool": _to_bool, "str": _to_str, "path": _to_str, "dict": _to_dict}


def check_type(name, value, spec):
    """value settled to spec's type (type, elements, choices) by Ansible's rules, or Invalid naming name.

    Ints and floats are taken as numbers or as their plain text (an extra var given with -e is text); a
    boolean only by Ansible's boolean() words; a list only as a list (never a string split silently)."""
    kind = (spec or {}).get("type") or "raw"
    if value is None and kind != "raw":
        raise Invalid("%s is empty (null): give it a value or remove the line so the default applies" % name)
    if kind == "list":
        out = _to_list(name, value, (spec or {}).get("elements"))
    elif kind in _CHECKS:
        out = _CHECKS[kind](name, value)
    else:
        out = value
    choices = (spec or {}).get("choices")
    if choices:
        items = out if isinstance(out, list) else [out]
        bad = [v for v in items if v not in choices]
        if bad:
            raise Invalid("%s has %s, which is not one of %s"
                          % (name, ", ".join(repr(b) for b in bad), ", ".join(str(c) for c in choices)))
    return out


# --- placeholders ---------------------------------------------------------------------------------------------

def placeholders(values, derived=()):
    """Every FILL- placeholder in {variable: value}, one entry each: {variable, where, value}; a manifest entry's
    size 0 too (the Hub's size is not filled in). Sorted by variable, then where. A placeholder of a variable
    in derived (its inventory value is a template of another) is left out where a variable written out holds
    the same one: the operator edits that one."""
    found = []

    def walk(variable, where, value):
        if isinstance(value, dict) and value.get("size") in (0, "0") and "sha256" in value and "url" in value:
            # a payload entry (gguf_fetch_manifest's shape) whose Hub size is not filled in yet
            found.append({"variable": variable, "where": "%s.size" % where if where else "size",
                          "value": "0 (the file's size on the Hub)"})
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                walk(variable, "%s.%s" % (where, key) if where else str(key), value[key])
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                label = "[%s]" % (item.get("role") or item.get("name") or i) if isinstance(item, dict) else "[%d]" % i
                walk(variable, where + label, item)
        elif isinstance(value, str):
            for hit in sorted(set(PLACEHOLDER.findall(value))):
                found.append({"variable": variable, "where": where, "value": hit})

    for variable in sorted(values):
        walk(variable, "", values[variable])
    written = set(i["value"] for i in found if i["variable"] not in derived)
    unique, seen = [], set()
    for item in found:
        key = (item["variable"], item["where"], item["value"])
        if key in seen or (item["variable"] in derived and item["value"] in written):
            continue
        seen.add(key)
        unique.append(item)
    return unique


def checklist_lines(items):
    """One line per variable (per entry of a list of entries): what in it is still to fill."""
    groups, order = {}, []
    for i in items:
        if i["where"].startswith("["):
            entry = i["where"].split("]", 1)[0] + "]"
        else:
            entry = i["where"].split(".", 1)[0] if "." in i["where"] else ""
        field = i["where"][len(entry):].lstrip(".")
        key = (i["variable"], entry)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append("%s %s" % (field, i["value"]) if field else i["value"])
    return ["%s%s: %s" % (var, (" " + entry if entry.startswith("[") else "." + entry) if entry else "",
                          ", ".join(groups[(var, entry)]))
            for var, entry in order]


def inert(name, values):
    """name is a setting this host does not use (INERT_UNLESS), judged where the deciding variable is known."""
    for prefix, decider, used in INERT_UNLESS:
        if name.startswith(prefix) and decider in values and values[decider] not in used:
            return True
    return False


# --- the serve role's inputs ----------------------------------------------------------------------------------

def payload_paths(manifest, models_dir, fallback=None):
    """{target/drafter/mmproj: path}: <dest_dir>/<file> or <models_dir>/<name>/<file> per manifest entry (the
    fetch role's layout), else the inventory's own llama_server_*_path (fallback) where it set one."""
    out = {}
    for item in manifest or []:
        if not isinstance(item, dict) or not item.get("role") or not item.get("file"):
            continue
        base = item.get("dest_dir") or "%s/%s" % (models_dir, item.get("name", ""))
        out[item["role"]] = "%s/%s" % (base.rstrip("/"), item["file"])
    for role, path in (fallback or {}).items():
        if role not in out and path:
            out[role] = path
    return out


def handover_units(runtimes):
    """The systemd units of runtime_retire_runtimes that may hold the serve port until the retire stage stops
    them: each runtime's units by name, and each quadlet's generated service (podman's naming:
    x.container / x.kube -> x.service, x.pod -> x-pod.service ...)."""
    out = []
    for runtime in runtimes or []:
        if not isinstance(runtime, dict):
            continue
        for unit in runtime.get("units") or []:
            if isinstance(unit, dict) and unit.get("name"):
                out.append(unit["name"])
        for quadlet in runtime.get("quadlets") or []:
            if not isinstance(quadlet, dict) or not quadlet.get("path"):
                continue
            stem, ext = os.path.splitext(os.path.basename(quadlet["path"]))
            if ext in (".container", ".kube"):
                out.append(stem + ".service")
            elif ext in (".pod", ".network", ".volume", ".build", ".image"):
                out.append("%s-%s.service" % (stem, ext[1:]))
            else:
                out.append(os.path.basename(quadlet["path"]))
    return out


def int_like(value):
    """A whole number, or its text ("8192"); never a boolean."""
    return _is_int(value) or (isinstance(value, str) and _INT_TEXT.match(value.strip()) is not None)


def pinned(serve):
    """{tensor_split, ctx_size, cache_ram: bool}: which of the three the inventory set (the planner chooses the rest).
    Reads both shapes: the settled serve values ([] / 0 / auto open) and fit_plan's serve dict (auto / max / an
    absent or auto cache_ram_mib open)."""
    split = serve.get("tensor_split")
    ctx = serve.get("ctx_size")
    cache = serve.get("cache_ram", serve.get("cache_ram_mib"))
    return {
        "tensor_split": isinstance(split, (list, tuple)) and len(split) > 0,
        "ctx_size": int_like(ctx) and int(ctx) > 0,
        "cache_ram": cache is not None and str(cache) != "auto",
    }


def origin(serve):
    """pinned (the inventory set it) or open (the planner chooses) for the split, the context and the cache-ram."""
    return dict((key, "pinned" if set_here else "open") for key, set_here in pinned(serve).items())


# --- the serve preflight's cross-checks -----------------------------------------------------------------------

def serve_problems(v, payload=None):
    """The serve preflight's cross-checks of settled llama_server_* values (v: name -> value; payload: the
    payload paths), one Problem each, naming the variable the operator edits and the fix. A value missing
    from v is not checked."""
    p = []
    payload = payload or {}

    def has(*names):
        return all(n in v and v[n] is not None for n in names)

    if has("llama_server_service_name") and not _UNIT_NAME.match(str(v["llama_server_service_name"])):
        p.append(Problem("llama_server_service_name", "llama_server_service_name is %r: use a plain unit name "
                         "([A-Za-z0-9][A-Za-z0-9_.@-]*)" % v["llama_server_service_name"]))
    if has("llama_server_port") and _is_int(v["llama_server_port"]) and not 0 < v["llama_server_port"] < 65536:
        p.append(Problem("llama_server_port", "llama_server_port is %s: give a TCP port 1-65535" % v["llama_server_port"]))
    if has("llama_server_alias") and not str(v["llama_server_alias"]):
        p.append(Problem("llama_server_alias", "llama_server_alias is empty: name the model id /v1/models shows"))
    parallel = v.get("llama_server_parallel")
    if _is_int(parallel) and parallel < 1:
        p.append(Problem("llama_server_parallel", "llama_server_parallel is %s: give 1 or more slots" % parallel))
    ctx = v.get("llama_server_ctx_size")
    if _is_int(ctx) and ctx < 0:
        p.append(Problem("llama_server_ctx_size", "llama_server_ctx_size is %s: give a positive context, or 0 for "
                         "the plan's" % ctx))
    elif _is_int(ctx) and ctx > 0 and _is_int(parallel) and parallel >= 1 and ctx % parallel:
        lower, upper = ctx - ctx % parallel, ctx - ctx % parallel + parallel
        p.append(Problem("llama_server_ctx_size", "llama_server_ctx_size %d does not divide over llama_server_parallel "
                         "%d slots (llama.cpp rounds the pool down): set llama_server_ctx_size to a multiple of %d "
                         "(%d or %d), or 0 for the plan's, or change llama_server_parallel"
                         % (ctx, parallel, parallel, lower, upper)))
    batch, ubatch = v.get("llama_server_batch_size"), v.get("llama_server_ubatch_size")
    if _is_int(batch) and _is_int(ubatch) and ubatch > batch:
        p.append(Problem("llama_server_ubatch_size", "llama_server_ubatch_size %d is larger than llama_server_batch_size "
                         "%d: lower the ubatch or raise the batch" % (ubatch, batch)))
    split, devices = v.get("llama_server_tensor_split"), v.get("llama_server_devices")
    if isinstance(split, list) and isinstance(devices, list) and split and devices and len(split) != len(devices):
        p.append(Problem("llama_server_tensor_split", "llama_server_tensor_split %s has %d share(s) but "
                         "llama_server_devices %s names %d device(s): give one share per device, or [] for the "
                         "plan's" % (split, len(split), devices, len(devices))))
    if isinstance(split, list):
        bad = [s for s in split if not (isinstance(s, (int, float)) and not isinstance(s, bool) and s >= 0)]
        if bad:
            p.append(Problem("llama_server_tensor_split", "llama_server_tensor_split has %s: every share is a number "
                             ">= 0, e.g. [32, 33]" % ", ".join(repr(b) for b in bad)))
    cache = v.get("llama_server_cache_ram")
    if "llama_server_cache_ram" in v and str(cache) != "auto" and not (
            _is_int(cache) or (isinstance(cache, str) and _INT_TEXT.match(cache))):
        p.append(Problem("llama_server_cache_ram", "llama_server_cache_ram is %r: give MiB as a number, or auto"
                         % (cache,)))
    flash = v.get("llama_server_flash_attn")
    if "llama_server_flash_attn" in v and not isinstance(flash, bool) and str(flash) not in rules.ON_OFF_AUTO:
        p.append(Problem("llama_server_flash_attn", "llama_server_flash_attn is %r: give on, off or auto" % (flash,)))
    args, env = v.get("llama_server_extra_args"), v.get("llama_server_extra_env")
    if isinstance(args, list) or isinstance(env, dict):
        for msg in shadowed([str(a) for a in (args if isinstance(args, list) else [])],
                            env if isinstance(env, dict) else {}):
            p.append(Problem("llama_server_extra_env" if msg.startswith("llama_server_extra_env") else
                             "llama_server_extra_args", msg))
    if isinstance(env, dict):
        bare = sorted(set(env) & set(rules.HIP_BARE_ENV))
        if bare:
            p.append(Problem("llama_server_extra_env", "llama_server_extra_env sets %s: HIP reads %s bare from the "
                             "environment (2026-08-13 incident) - llama.cpp takes --host/--port/--temp as flags, so "
                             "set llama_server_bind_address, llama_server_port and llama_server_temperature instead"
                             % (", ".join(bare), ", ".join(rules.HIP_BARE_ENV[:-1]) + " and " + rules.HIP_BARE_ENV[-1])))
        odd = sorted(str(k) for k in env if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(k)))
        if odd:
            p.append(Problem("llama_server_extra_env", "llama_server_extra_env has %s: an environment name is "
                             "[A-Za-z_][A-Za-z0-9_]*" % ", ".join(odd)))
    types = v.get("llama_server_spec_type")
    if isinstance(types, list):
        unknown = rules.unknown_spec_types(types)
        conflict = rules.spec_chain_conflict(types)
        if unknown:
            p.append(Problem("llama_server_spec_type", "llama_server_spec_type names %s, which llama-server %s does "
                             "not know (%s)" % (", ".join(unknown), rules.RELEASE, ", ".join(rules.SPEC_TYPES))))
        elif conflict:
            p.append(Problem("llama_server_spec_type", "llama_server_spec_type chains %s with %s: a chain has ONE draft "
                             "context, so it dies at load; keep one of them (an n-gram type may ride beside either)"
                             % conflict))
        elif rules.model_drafters(types) and not (payload.get("drafter") or v.get("llama_server_drafter_path")):
            p.append(Problem("llama_server_spec_type", "llama_server_spec_type %s loads a drafter model, but no drafter "
                             "is named: add a gguf_fetch_manifest entry with role: drafter (or set "
                             "llama_server_drafter_path), or drop it from llama_server_spec_type"
                             % ", ".join(rules.model_drafters(types))))
        if types and v.get("llama_server_gate_enabled") is True and v.get("llama_server_metrics") is False:
            p.append(Problem("llama_server_metrics", "llama_server_spec_type configures a drafter and the gate proves "
                             "it on /metrics: set llama_server_metrics true (or llama_server_gate_enabled false)"))
    if v.get("llama_server_vision") is True and not (payload.get("mmproj") or v.get("llama_server_mmproj_path")):
        p.append(Problem("llama_server_vision", "llama_server_vision is on but no mmproj is named: add a "
                         "gguf_fetch_manifest entry with role: mmproj (or set llama_server_mmproj_path), or set "
                         "llama_server_vision false"))
    return p


# --- the step -------------------------------------------------------------------------------------------------

def settle(values, options, given, host="this host", extra_known=(), placeholders_refused=True, derived=(),
           scanned=()):
    """Check every input at once and derive the serve role's inputs.

    values: {name: templated value} of every variable the step reads (the inventory's and the roles' defaults);
    options: spec_options() of the roles; given: the names the host's variables set (inventory, -e, play vars:
    those are type-checked, and any governed one no role knows is refused); extra_known: names the roles
    publish; derived: names whose inventory value is a template of another variable; scanned: other names
    (no governed prefix) read for their placeholders only. Returns {problems: [Problem], checklist: [placeholder], ...the serve role's inputs}."""
    problems = []
    known = known_names(options, extra_known)
    problems.extend(unknown_names(given, known))
    settled = dict(values)
    for name in sorted(n for n in given if n in values):
        spec = options.get(name)
        if spec is None and name in DANKFLEET_NAMES:
            spec = {"type": DANKFLEET_NAMES[name]}
        if spec is None:
            continue
        try:
            settled[name] = check_type(name, values[name], spec)
        except Invalid as exc:
            problems.append(Problem(name, str(exc)))
            settled.pop(name, None)

    manifest = settled.get("gguf_fetch_manifest")
    manifest = manifest if isinstance(manifest, list) else []
    fallback = dict((role, settled.get("llama_server_%s_path" % ("model" if role == "target" else role)))
                    for role in PAYLOAD_ROLES)
    paths = payload_paths(manifest, settled.get("gguf_fetch_models_dir", "/var/lib/dankfleet/models"),
                          dict((r, p) for r, p in fallback.items() if isinstance(p, str) and p))
    if "target" not in paths:
        problems.append(Problem("gguf_fetch_manifest", "%s names no target model: gguf_fetch_manifest has no entry with "
                                "role: target (and llama_server_model_path is empty). A new endpoint host needs its "
                                "own host_vars/%s.yml with gguf_fetch_manifest (name, role: target, repo, file, url, "
                                "size, sha256) and its llama_server_* settings - copy another host's" % (host, host)))
    problems.extend(serve_problems(settled, paths))

    checklist = placeholders(dict((n, v) for n, v in values.items()
                                  if isinstance(n, str) and not n.startswith("_") and not inert(n, settled)
                                  and (n.startswith(PLACEHOLDER_PREFIXES) or n in scanned)),
                             derived)
    if placeholders_refused and checklist:
        problems.append(Problem(", ".join(sorted(set(i["variable"] for i in checklist))),
                                "still to fill (the seeds do not record them): " + "; ".join(checklist_lines(checklist))))

    serve = {}
    for key, kind in PLAN_SERVE:
        name = "llama_server_" + key
        value = settled.get(name)
        empty = {"list": [], "str": "", "int": 0, "bool": False}
        serve[key] = value if value is not None or kind == "raw" else empty[kind]
    if isinstance(serve["tensor_split"], list):
        serve["tensor_split"] = [s for s in serve["tensor_split"]]
    return {
        "problems": problems,
        "checklist": checklist,
        "install_prefix": settled.get("llama_cpp_build_prefix") or settled.get("llama_server_install_prefix", ""),
        "payload_paths": paths,
        "serve": serve,
        "origin": origin(serve),
        "port_handover_units": handover_units(settled.get("runtime_retire_runtimes")),
    }
