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
  serve settings with their origin, the port-handover units), the payload the plan finds (manifest, models dir) and
  where the service lives.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import difflib
import os
import re

from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_cpp_rules as rules
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.serve_guard import shadowed
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import ctx_parallel_problem, origin, payload_paths
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import split_devices_problem
from ansible_collections.dankfleet.llm.plugins.module_utils.base.strict_values import BOOLEANS_FALSE, BOOLEANS_TRUE

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
# Settings a host does not use once another is set: (prefix, the variable whose non-empty value makes them inert).
# An adopted tree bundles its own toolchain (llama_cpp_build_adopt_from): nothing is built, no tarball is read.
INERT_WHEN_SET = (
    ("llama_cpp_build_toolchain_", "llama_cpp_build_adopt_from"),
)

# The dankfleet_* names an inventory may set beyond the fleet-wide settings of roles/dankfleet (whose argument
# spec types those), and the results the collection publishes under that prefix: a type, or the option whose
# spec types it (the runtimes serving now are what runtime_retire retires).
DANKFLEET_NAMES = {
    "dankfleet_private_address": "str",
    "dankfleet_serving_now": "runtime_retire_runtimes",
    "dankfleet_rollback_retire": "runtime_retire_runtimes",
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
    ("n_cpu_moe", "raw"), ("cpu_moe", "bool"), ("load_mode", "str"),
    ("mmproj_device", "str"), ("mmproj_offload", "raw"), ("image_min_tokens", "int"), ("image_max_tokens", "int"),
)
PAYLOAD_ROLES = ("target", "drafter", "mmproj")
# gguf_fetch_models_dir's documented default (the action passes the spec's; a caller of settle() alone may not)
MODELS_DIR = "/var/lib/dankfleet/models"
# What the step's checks and its result read, whether or not the inventory sets them (the documented default fills
# the rest): the serve settings, what serve_problems cross-checks, the payload's, the build's and the retire's.
READS = tuple("llama_server_" + key for key, _ in PLAN_SERVE) + (
    "llama_server_devices", "llama_server_port", "llama_server_service_name", "llama_server_alias",
    "llama_server_extra_args", "llama_server_extra_env", "llama_server_gate_enabled", "llama_server_metrics",
    "llama_server_model_path", "llama_server_drafter_path", "llama_server_mmproj_path",
    "llama_server_env_file", "llama_server_user",
    "gguf_fetch_manifest", "gguf_fetch_models_dir", "llama_cpp_build_prefix", "runtime_retire_runtimes",
    "llama_cpp_build_backend", "llama_cpp_build_source_type")
# The results the roles publish under a governed prefix (set_fact / register), and the play variables a playbook
# passes that no spec documents as an option: known names, an inventory's never. tests/unit/roles/test_role_to_role.py
# holds this to what the roles' tasks and the playbooks set, so the step itself reads no task file.
PUBLISHED = ("gguf_fetch_changed", "gguf_fetch_paths", "llama_server_known_good_required", "llama_server_result",
             "runtime_retire_retired")
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,20}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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


def spec_defaults(options):
    """{option name: its documented default} of spec_options() (an option with none, as a required one, is left
    out)."""
    return dict((name, spec["default"]) for name, spec in options.items() if "default" in spec)


def known_names(options, extra=()):
    """Every name an inventory may set: the roles' options, the documented dankfleet_* names and extra
    (results the roles publish under a governed prefix)."""
    return set(options) | set(DANKFLEET_NAMES) | set(extra)


def unknown_names(names, known):
    """A Problem per governed name that no role knows, with the closest known name when one is close."""
    problems = []
    candidates = sorted(known)
    for name in sorted(n for n in names if governed(n) and n not in known):
        shown = tr.printable(name, limit=200)
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
        prefix = next(p for p in PREFIXES if name.startswith(p))
        if close:
            fix = "did you mean %s? Rename it in the inventory (or the -e that sets it)" % close[0]
        else:
            fix = ("no role reads a %s* variable of that name; remove it or see the roles' README for the "
                   "names they take" % prefix)
        problems.append(Problem(shown, "%s is not a variable of this collection: %s." % (shown, fix), kind="unknown"))
    return problems


# --- types ----------------------------------------------------------------------------------------------------
#
# Every value a host sets is read through a typed_reader shape made from its argument spec (spec_shape): the
# type, a list's elements, a dict's suboptions (required ones; a key no role reads is refused), choices. What a
# spec's type cannot say -- a number's domain, a name's characters -- is in the two tables below, keyed by where
# the value sits: the option, ``option[]`` for a list's element, ``option[].field`` for an entry's field.

# (lo, hi, why) of the numbers whose domain is known; any other int is an int64, any other float finite.
BOUNDS = {
    "llama_server_port": (1, 65535, "a TCP port 1-65535"),
    "llama_server_ctx_size": (0, 1 << 24, "tokens of the whole context, 0 for the plan's; no model is trained past 16M"),
    "llama_server_parallel": (1, 1024, "slots share one context: 1 or more, and 1024 leaves each a sliver"),
    "llama_server_batch_size": (1, 1 << 20, "tokens of a logical batch; llama.cpp sizes its buffers by it"),
    "llama_server_ubatch_size": (1, 1 << 20, "tokens of a physical batch; the compute buffer grows with it"),
    "llama_server_tensor_split[]": (0, 1e6, "one device's share: a layer count or a proportion"),
    "llama_server_cache_ram": (-1, 1 << 24, "MiB of host RAM for prompt caches (-1 no limit); 16 TiB is no host's"),
    "llama_server_n_cpu_moe": (0, 512, "blocks whose experts stay in host RAM; no model has more than 512 (LLAMA_MAX_LAYERS)"),
    "llama_server_image_min_tokens": (0, 1 << 20, "tokens of one image, 0 for the projector type's own"),
    "llama_server_image_max_tokens": (0, 1 << 20, "tokens of one image, 0 for the projector type's own"),
    "llama_server_temperature": (0, 10, "a sampling temperature: 0 is greedy, above 10 is noise"),
    "llama_server_top_p": (0, 1, "a probability mass"),
    "llama_server_min_p": (0, 1, "a probability"),
    "llama_server_presence_penalty": (-2, 2, "the OpenAI range llama.cpp follows"),
    "llama_server_top_k": (0, 1 << 20, "tokens kept; no vocabulary is larger"),
    "llama_server_gpu_layers": (-1, 100000, "layers on the GPUs (999: all of them)"),
    "llama_server_threads": (-1, 4096, "CPU threads"),
    "llama_server_threads_batch": (-1, 4096, "CPU threads"),
    "llama_server_ctx_checkpoints": (0, 4096, "KV snapshots per slot"),
    "llama_server_reasoning_budget": (-1, 1 << 24, "tokens of thinking (-1 unlimited); no more than a context"),
    "llama_server_spec_draft_n_max": (0, 1024, "draft tokens per step"),
    "llama_server_spec_ngram_mod_n_match": (0, 1 << 16, "tokens of an n-gram"),
    "llama_server_spec_ngram_mod_n_min": (0, 1 << 16, "tokens of an n-gram"),
    "llama_server_spec_ngram_mod_n_max": (0, 1 << 16, "tokens of an n-gram"),
    "llama_server_verify_window_fraction": (0, 1, "a fraction of the context"),
    "llama_server_verify_window_deep_tokens": (0, 1 << 21, "prompt tokens of one slot (no trained window is 2 Mi)"),
    "llama_server_plan_actual_workers[].pid": (1, 1 << 22, "a Linux process id (pid_max is at most 4194304)"),
    "llama_rpc_worker_devices[].port": (1, 65535, "a TCP port 1-65535"),
    "gguf_fetch_manifest[].size": (0, 1 << 44, "bytes of one file (0 until filled from the Hub); no GGUF is 16 TiB"),
    "gguf_fetch_progress_interval": (0, 86400, "seconds"),
    "gguf_fetch_retry_delay": (0, 3600, "seconds"),
    "gguf_fetch_timeout": (0, 86400, "seconds"),
    "runtime_retire_runtimes[].ports[]": (1, 65535, "a TCP port 1-65535"),
    "llm_bench_batch_sizes[]": (0, 1 << 20, "tokens of a logical batch; a cell llama-bench refuses is recorded as failed"),
    "llm_bench_batch_ubatch_sizes[]": (0, 1 << 20, "tokens of a physical batch; a cell llama-bench refuses is recorded as failed"),
    "llm_bench_batch_depths[]": (0, 1 << 24, "tokens of context already filled"),
}

_UNIT_CHARS = r"(?![.@])[A-Za-z0-9:_.@\\-]+"            # systemd.unit(5), as runtime_retire and trash_files check
_UNIT_TYPES = r"\.(?:service|socket|device|mount|automount|swap|target|path|timer|slice|scope)"
_LOGIN = (r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?", "a login name ([A-Za-z_][A-Za-z0-9_.-]*, at most 32 characters)")
_COMPONENT = (r"(?!\.\.?\Z)[A-Za-z0-9][A-Za-z0-9._+-]*", "one path component ([A-Za-z0-9][A-Za-z0-9._+-]*)")
_ABSOLUTE = (r"/.*", "an absolute path")
_PORT_UNIT = (_UNIT_CHARS + _UNIT_TYPES, "a systemd unit name like foo.service")
# (pattern, what) of the strings that become names: matched in full (never `$`, which matches before a trailing
# newline); every string refuses control characters unless it is FREE_TEXT (a newline is an env-file injection).
NAMES = {
    "llama_server_service_name": (r"[A-Za-z0-9][A-Za-z0-9_.@-]*", "a plain unit name ([A-Za-z0-9][A-Za-z0-9_.@-]*)"),
    "llama_server_alias": (r"\S*", "a model id without spaces"),
    "llama_server_user": _LOGIN, "llama_server_group": _LOGIN, "gguf_fetch_owner": _LOGIN,
    "gguf_fetch_group": _LOGIN, "llama_cpp_build_user": _LOGIN, "llama_cpp_build_group": _LOGIN,
    "llm_observability_owner": _LOGIN, "llm_observability_group": _LOGIN, "llm_bench_batch_user": _LOGIN,
    "llama_server_port_handover_units[]": _PORT_UNIT,
    "llm_observability_unit": _PORT_UNIT,
    "gguf_fetch_manifest[].name": _COMPONENT,
    "gguf_fetch_manifest[].file": _COMPONENT,
    "gguf_fetch_manifest[].url": (r"https?://\S+", "an http(s) URL"),
    "gguf_fetch_manifest[].sha256": (r"(?:sha256:)?[0-9a-fA-F]{64}|FILL[A-Za-z0-9_./-]*",
                                     "64 hex digits (the Hub's LFS oid), or a FILL- placeholder"),
    "gguf_fetch_manifest[].dest_dir": _ABSOLUTE,
    "gguf_fetch_models_dir": _ABSOLUTE,
    "runtime_retire_runtimes[].name": (r"[A-Za-z0-9][A-Za-z0-9._-]*", "a name of [A-Za-z0-9._-]"),
    "runtime_retire_runtimes[].tag": (r"[A-Za-z0-9][A-Za-z0-9._-]*", "a tag of [A-Za-z0-9._-]"),
    "runtime_retire_runtimes[].units[].name": _PORT_UNIT,
    "runtime_retire_runtimes[].units[].user": _LOGIN,
    "runtime_retire_runtimes[].quadlets[].path": (
        r"/(?:.*/)?" + _UNIT_CHARS + r"\.(?:container|kube|pod|network|volume|build|image)",
        "an absolute path to a .container/.kube/.pod/.network/.volume/.build/.image file"),
    "runtime_retire_runtimes[].quadlets[].user": _LOGIN,
    "runtime_retire_runtimes[].files[]": _ABSOLUTE,
}
# A value each number's refusal shows as the fix (the role's default or a common setting); a number with none here
# is told to be a number, with no example (one example for all read "e.g. llama_server_ctx_size: 2").
SAMPLES = {
    "llama_server_port": 8080, "llama_server_ctx_size": 32768, "llama_server_parallel": 2,
    "llama_server_batch_size": 2048, "llama_server_ubatch_size": 512, "llama_server_tensor_split[]": 32,
    "llama_server_cache_ram": 8192, "llama_server_n_cpu_moe": 8, "llama_server_image_min_tokens": 256,
    "llama_server_image_max_tokens": 1024, "llama_server_temperature": 0.7, "llama_server_top_p": 0.95,
    "llama_server_min_p": 0.05, "llama_server_top_k": 40, "llama_server_gpu_layers": 999, "llama_server_threads": 8,
    "llama_server_threads_batch": 8, "llama_server_spec_draft_n_max": 3, "gguf_fetch_manifest[].size": 31457990112,
}
# Numbers that also take one word: the number's BOUNDS, or the word (the planner chooses the number).
OR_WORD = {"llama_server_n_cpu_moe": "auto"}
# Strings that are prose (a prompt): a newline or a tab is theirs, other control characters are not.
FREE_TEXT = frozenset(("llama_server_gate_prompt", "llama_server_gate_spec_prompt"))
# Values never quoted in a refusal.
SECRET_SUFFIXES = ("_token", "_api_key", "_password")
PROBLEMS_PER_VARIABLE = 20


class _Said(tr.ShapeError):
    """A refusal that reads as a sentence about the value: ``x is 'two', not a whole number: ...``."""


def _say(source, path, text):
    raise _Said(source, path, text)


def _field(source, path):
    """The name the fix spells (``size: 2``): the field or the variable, None for a list's element."""
    if not path:
        return source
    return None if path.endswith("]") else path.rsplit(".", 1)[-1]


def _example(source, path, sample):
    """`` (e.g. <field>: <sample>)``, or nothing without a sample worth showing."""
    if sample is None:
        return ""
    field = _field(source, path)
    return " (e.g. %s: %s)" % (field, sample) if field else " (e.g. %s)" % sample


def _present(value, source, path):
    if value is None:
        _say(source, path, "is empty (null): give it a value or remove the line so the default applies")


def _within(number, value, bounds, source, path):
    lo, hi, why = bounds
    if not lo <= number <= hi:
        _say(source, path, "is %s, out of range: give a number from %s to %s (%s)" % (tr.quote(value), lo, hi, why))
    return number


class _Whole(tr.Shape):
    """An int by Ansible's rules (a number, an integral float, its digits as text: -e gives text), bounded."""
    expect = "a whole number"

    def __init__(self, bounds=None, sample=None):
        self.bounds = bounds or (-tr.INT_LIMIT, tr.INT_LIMIT, "a 64-bit integer")
        self.sample = sample

    def read(self, value, source, path=""):
        _present(value, source, path)
        try:
            number = tr.Int(text=True).read(value, source, path)
        except tr.ShapeError:
            _say(source, path, "is %s, not a whole number: write it as a number%s, no quotes or words"
                 % (tr.quote(value), _example(source, path, self.sample)))
        return _within(number, value, self.bounds, source, path)


class _WholeOrWord(_Whole):
    """A whole number in its bounds, or the one word that leaves the number to the planner (n_cpu_moe: auto)."""

    def __init__(self, bounds, word, sample=None):
        _Whole.__init__(self, bounds, sample)
        self.word = word
        self.expect = "a whole number or %s" % word

    def read(self, value, source, path=""):
        _present(value, source, path)
        if isinstance(value, str) and value.strip().lower() == self.word:
            return self.word
        try:
            number = tr.Int(text=True).read(value, source, path)
        except tr.ShapeError:
            _say(source, path, "is %s, neither a whole number nor %s: write a number%s, or %s for the planner's choice"
                 % (tr.quote(value), self.word, _example(source, path, self.sample), self.word))
        lo, hi, why = self.bounds
        if not lo <= number <= hi:
            _say(source, path, "is %s, out of range: give a number from %s to %s (%s), or %s for the planner's choice"
                 % (tr.quote(value), lo, hi, why, self.word))
        return number


class _Number(tr.Shape):
    """A finite number (or its decimal text), bounded; never a boolean, NaN or an infinity."""
    expect = "a number"

    def __init__(self, bounds=None, sample=None):
        self.bounds = bounds or (-float(tr.INT_LIMIT), float(tr.INT_LIMIT), "a finite number")
        self.sample = sample

    def read(self, value, source, path=""):
        _present(value, source, path)
        try:
            number = tr.Num(text=True).read(value, source, path)
        except tr.ShapeError:
            _say(source, path, "is %s, not a finite number: write it as a number%s"
                 % (tr.quote(value), _example(source, path, self.sample)))
        return _within(number, value, self.bounds, source, path)


class _Boolean(tr.Shape):
    """A boolean by Ansible's words (yes/no, on/off, 1/0 ...), never by Python's truth."""
    expect = "a boolean"

    def read(self, value, source, path=""):
        _present(value, source, path)
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
        _say(source, path, "is %s, not a boolean: write true or false (yes/no, on/off also read as booleans)"
             % tr.quote(value))


class _Text(tr.Shape):
    """A string, no control character (a name: matched in full by its pattern). A whole number is taken as its
    digits where the spec says str (YAML reads a git ref or a CUDA arch of digits as a number), never for a path."""
    expect = "a string"

    def __init__(self, path_type, name, free):
        self.path_type = path_type
        pattern, what = name or (None, None)
        self.inner = tr.Str(max_len=255 if name else tr.STR_MAX, name=not free, lines=not free, pattern=pattern,
                            what=what or ("a path" if path_type else "a string"))

    def read(self, value, source, path=""):
        _present(value, source, path)
        if isinstance(value, bool):
            _say(source, path, "is the boolean %s, not a string: quote it%s - YAML reads a bare on/off/yes/no as "
                 "a boolean" % (value, _example(source, path, '"%s"' % ("on" if value else "off"))))
        if _is_int(value) and not self.path_type and abs(value) <= tr.INT_LIMIT:
            value = str(value)
        if not isinstance(value, str):
            _say(source, path, "is %s, not a %s: give it one value%s"
                 % (_got(value), "path" if self.path_type else "string", _example(source, path, '"..."')))
        return self.inner.read(value, source, path)


class _Choice(tr.Shape):
    """The inner shape's value, one of the spec's choices."""

    def __init__(self, inner, choices):
        self.inner, self.choices = inner, list(choices)
        self.expect = "one of %s" % ", ".join(str(c) for c in self.choices)

    def read(self, value, source, path=""):
        out = self.inner.read(value, source, path)
        for choice in self.choices:
            if isinstance(out, bool) is isinstance(choice, bool) and out == choice:
                return out
        _say(source, path, "has %s, which is not one of %s" % (tr.quote(out), ", ".join(str(c) for c in self.choices)))


class _Seq(tr.List):
    """A list of the spec's elements; a string is refused, never read character by character."""

    def read(self, value, source, path=""):
        self.whole(value, source, path)
        return tr.List.read(self, value, source, path)

    def whole(self, value, source, path):
        _present(value, source, path)
        field = _field(source, path) or "the entry"
        if isinstance(value, str):
            parts = [p.strip() for p in re.split(r"[,:]", value[:200]) if p.strip()]
            _say(source, path, "is the string %s, not a list: write it as a YAML list, %s: [%s] (a string would be "
                 "read character by character)" % (tr.quote(value), field, tr.printable(", ".join(parts), limit=80)))
        if not isinstance(value, (list, tuple)):
            _say(source, path, "is %s, not a list: write it as a YAML list, %s: [...]" % (_got(value), field))
        if len(value) > self.max_len:
            _say(source, path, "has %d items: at most %d" % (len(value), self.max_len))


class _Entry(tr.Obj):
    """A dict of the spec's suboptions: every required one present, none that no role reads."""

    def __init__(self, fields, required):
        tr.Obj.__init__(self, fields, required=required, extra=False)

    def read(self, value, source, path=""):
        self.whole(value, source, path)
        problems = self.keys(value, source, path)
        if problems:
            raise problems[0]
        return tr.Obj.read(self, value, source, path)

    def whole(self, value, source, path):
        _present(value, source, path)
        if not isinstance(value, dict):
            _say(source, path, "is %s, not a mapping: write it as a YAML mapping with %s"
                 % (_got(value), ", ".join(sorted(self.fields))))

    def keys(self, value, source, path):
        """A refusal per required field missing and per key no role reads."""
        out = []
        for key in self.required:
            if key not in value:
                out.append(_Said(source, tr.join(path, key), "is missing: every entry sets %s (the role's argument "
                                 "spec)" % ", ".join(self.required)))
        for key in value:
            if key not in self.fields:
                close = difflib.get_close_matches(key, sorted(self.fields), n=1, cutoff=0.75) if isinstance(key, str) else []
                out.append(_Said(source, tr.join(path, key if isinstance(key, str) else tr.quote(key)),
                                 "is not a field of an entry: %sthe fields are %s"
                                 % ("did you mean %s? " % close[0] if close else "", ", ".join(sorted(self.fields)))))
        return out


class _Mapping(tr.Map):
    """A dict the spec gives no fields for: string keys, any bounded JSON values."""

    def __init__(self):
        tr.Map.__init__(self, tr.Json())

    def read(self, value, source, path=""):
        _present(value, source, path)
        if not isinstance(value, dict):
            _say(source, path, "is %s, not a mapping: write it as a YAML mapping, %s: {key: value}"
                 % (_got(value), _field(source, path) or "the entry"))
        return tr.Map.read(self, value, source, path)


def _got(value):
    kind = tr.kind(value)
    return kind if isinstance(value, (dict, list, tuple)) or value is None else "%s %s" % (kind, tr.quote(value))


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def spec_shape(spec, key):
    """The typed_reader shape of an argument-spec option (type, elements, options, required, choices), with the
    BOUNDS and NAMES of key (where the option sits: name, name[], name[].field)."""
    spec = spec or {}
    kind = spec.get("type") or "raw"
    if kind == "list":
        item = dict(type=spec.get("elements") or "raw", options=spec.get("options"), choices=spec.get("choices"))
        return _Seq(spec_shape(item, key + "[]"))
    if kind == "dict" and spec.get("options"):
        fields = dict((field, spec_shape(sub, "%s.%s" % (key, field))) for field, sub in spec["options"].items())
        shape = _Entry(fields, [f for f, sub in sorted(spec["options"].items()) if (sub or {}).get("required")])
    elif kind == "dict":
        shape = _Mapping()
    elif kind == "int":
        shape = _Whole(BOUNDS.get(key), SAMPLES.get(key))
    elif kind == "raw" and key in OR_WORD:
        shape = _WholeOrWord(BOUNDS.get(key), OR_WORD[key], SAMPLES.get(key))
    elif kind == "float" or (kind == "raw" and key in BOUNDS and key.endswith("[]")):
        shape = _Number(BOUNDS.get(key), SAMPLES.get(key))
    elif kind == "bool":
        shape = _Boolean()
    elif kind in ("str", "path"):
        shape = _Text(kind == "path", NAMES.get(key), key in FREE_TEXT)
    else:
        shape = tr.Json()
    return _Choice(shape, spec["choices"]) if spec.get("choices") else shape


def _gather(shape, value, source, path, errors):
    """shape.read, but each element of a list and each field of an entry read on its own: every refusal in errors."""
    try:
        if isinstance(shape, _Seq):
            shape.whole(value, source, path)
            return [_gather(shape.item, v, source, tr.join(path, i), errors) for i, v in enumerate(value)]
        if isinstance(shape, _Entry):
            shape.whole(value, source, path)
            errors.extend(shape.keys(value, source, path))
            return dict((k, _gather(shape.fields[k], v, source, tr.join(path, k), errors))
                        for k, v in value.items() if k in shape.fields)
        return shape.read(value, source, path)
    except tr.ShapeError as exc:
        errors.append(exc)
    return None


def _message(name, exc, secret):
    where = name + ("" if not exc.path or exc.path.startswith("[") else ".") + (exc.path or "")
    if secret:
        return "%s does not have its type (the value is not shown: it is a secret): fix it where it is set" % where
    return ("%s %s" if isinstance(exc, _Said) else "%s: %s") % (where, exc.problem)


def settle_value(name, value, spec, key=None):
    """(the value settled to its spec, [message]) - every refusal inside it, each naming name and the element or
    field (gguf_fetch_manifest[1].sha256) with the fix; key: the option whose tables apply (default name)."""
    errors = []
    out = _gather(spec_shape(spec, key or name), value, name, "", errors)
    secret = bool((spec or {}).get("no_log")) or name.endswith(SECRET_SUFFIXES)
    messages = [_message(name, exc, secret) for exc in errors]
    if len(messages) > PROBLEMS_PER_VARIABLE:
        messages = messages[:PROBLEMS_PER_VARIABLE] + ["%s: %d more problem(s) like these"
                                                       % (name, len(messages) - PROBLEMS_PER_VARIABLE)]
    return out, messages


def check_type(name, value, spec):
    """value settled to spec's type (type, elements, suboptions, choices, bounds) by Ansible's rules, or Invalid
    naming name and the first problem. Ints and floats are taken as numbers or as their plain text (an extra var
    given with -e is text); a boolean only by Ansible's boolean() words; a list only as a list (never a string
    split silently)."""
    out, messages = settle_value(name, value, spec)
    if messages:
        raise Invalid(messages[0])
    return out


# --- placeholders ---------------------------------------------------------------------------------------------

def placeholders(values, derived=()):
    """Every FILL- placeholder in {variable: value}, one entry each: {variable, where, value}, and url when it is
    inside a payload entry (manifest-shaped: url, size, sha256 - payload adoption matches it by that); a manifest entry's
    size 0 too (the Hub's size is not filled in). Sorted by variable, then where. A placeholder of a variable
    in derived (its inventory value is a template of another) is left out where a variable written out holds
    the same one: the operator edits that one."""
    found = []

    def walk(variable, where, value, url=None):
        payload = isinstance(value, dict) and "sha256" in value and "url" in value
        if payload and isinstance(value["url"], str):
            url = value["url"]  # a payload entry (gguf_fetch_manifest's shape): its items name it, for adoption
        if payload and value.get("size") in (0, "0"):
            # a payload entry whose Hub size is not filled in yet
            found.append(dict({"variable": variable, "where": "%s.size" % where if where else "size",
                               "value": "0 (the file's size on the Hub)"}, **({"url": url} if url else {})))
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                label = tr.printable(key, limit=80)
                walk(variable, "%s.%s" % (where, label) if where else label, value[key], url)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                label = next((x for x in (item.get("role"), item.get("name")) if isinstance(x, str) and x), i) \
                    if isinstance(item, dict) else i
                label = "[%s]" % tr.printable(label, limit=80)
                walk(variable, where + label, item, url)
        elif isinstance(value, str):
            for hit in sorted(set(PLACEHOLDER.findall(value))):
                found.append(dict({"variable": variable, "where": where, "value": hit}, **({"url": url} if url else {})))

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
    return [line for _, line in checklist_entries(items)]


def to_fill(items):
    """The placeholders as a run that changes the host refuses them: one per checklist line, naming the variable."""
    return [Problem(variable, "%s - still to fill" % line, kind="placeholder")
            for variable, line in checklist_entries(items)]


def checklist_entries(items):
    """[(variable, line)]: checklist_lines with the variable each line is about."""
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
    return [(var, "%s%s: %s%s" % (var, (" " + entry if entry.startswith("[") else "." + entry) if entry else "",
                                  ", ".join(groups[(var, entry)]), waived_by(var)))
            for var, entry in order]


def waived_by(name):
    """The way out of filling `name` at all (INERT_WHEN_SET), as a checklist line's tail; '' when there is none."""
    for prefix, decider in INERT_WHEN_SET:
        if name.startswith(prefix):
            return " (or nothing: set %s to a tree already built on the host, which is adopted instead)" % decider
    return ""


def inert(name, values):
    """name is a setting this host does not use (INERT_UNLESS, INERT_WHEN_SET), judged where the deciding variable is
    known."""
    for prefix, decider, used in INERT_UNLESS:
        if name.startswith(prefix) and decider in values and values[decider] not in used:
            return True
    for prefix, decider in INERT_WHEN_SET:
        if name.startswith(prefix) and isinstance(values.get(decider), str) and values[decider].strip():
            return True
    return False


# --- the serve role's inputs ----------------------------------------------------------------------------------

def handover_units(runtimes):
    """The systemd units of runtime_retire_runtimes that may hold the serve port until the retire stage stops
    them: each runtime's units by name, and each quadlet's generated service (podman's naming:
    x.container / x.kube -> x.service, x.pod -> x-pod.service ...)."""
    out = []
    for runtime in runtimes or []:
        if not isinstance(runtime, dict):
            continue
        units, quadlets = runtime.get("units"), runtime.get("quadlets")
        for unit in units if isinstance(units, list) else []:
            if isinstance(unit, dict) and isinstance(unit.get("name"), str) and unit["name"]:
                out.append(unit["name"])
        for quadlet in quadlets if isinstance(quadlets, list) else []:
            if not isinstance(quadlet, dict) or not isinstance(quadlet.get("path"), str) or not quadlet["path"]:
                continue
            stem, ext = os.path.splitext(os.path.basename(quadlet["path"]))
            if ext in (".container", ".kube"):
                out.append(stem + ".service")
            elif ext in (".pod", ".network", ".volume", ".build", ".image"):
                out.append("%s-%s.service" % (stem, ext[1:]))
            else:
                out.append(os.path.basename(quadlet["path"]))
    return out


# --- the serve preflight's cross-checks -----------------------------------------------------------------------

def serve_problems(v, payload=None, payload_known=True):
    """The serve preflight's cross-checks of settled llama_server_* values (v: name -> value; payload: the
    payload paths), one Problem each, naming the variable the operator edits and the fix. A value missing
    from v is not checked; each value alone (its type, bounds, a name's characters) is settle_value's.
    payload_known false (the manifest was refused): what the payload lacks is not judged."""
    p = []
    payload = payload or {}

    def has(*names):
        return all(n in v and v[n] is not None for n in names)

    if has("llama_server_alias") and not str(v["llama_server_alias"]):
        p.append(Problem("llama_server_alias", "llama_server_alias is empty: name the model id /v1/models shows"))
    ctx, parallel = v.get("llama_server_ctx_size"), v.get("llama_server_parallel")
    if _is_int(ctx) and _is_int(parallel):
        problem = ctx_parallel_problem(ctx, parallel)
        if problem:
            p.append(Problem(*problem))
    batch, ubatch = v.get("llama_server_batch_size"), v.get("llama_server_ubatch_size")
    if _is_int(batch) and _is_int(ubatch) and ubatch > batch:
        p.append(Problem("llama_server_ubatch_size", "llama_server_ubatch_size %d is larger than llama_server_batch_size "
                         "%d: lower the ubatch or raise the batch" % (ubatch, batch)))
    problem = split_devices_problem(v.get("llama_server_tensor_split"), v.get("llama_server_devices"))
    if problem:
        p.append(Problem(*problem))
    cache = v.get("llama_server_cache_ram")
    if "llama_server_cache_ram" in v and not (isinstance(cache, str) and cache == "auto"):
        lo, hi, why = BOUNDS["llama_server_cache_ram"]
        if not (_is_int(cache) or (isinstance(cache, str) and _INT_TEXT.match(cache))) or not lo <= int(cache) <= hi:
            p.append(Problem("llama_server_cache_ram", "llama_server_cache_ram is %s: give MiB as a whole number from "
                             "%d to %d (%s), or auto" % (tr.quote(cache), lo, hi, why)))
    flash = v.get("llama_server_flash_attn")
    if "llama_server_flash_attn" in v and not isinstance(flash, bool) and not (
            isinstance(flash, str) and flash in rules.ON_OFF_AUTO):
        p.append(Problem("llama_server_flash_attn", "llama_server_flash_attn is %s: give on, off or auto"
                         % tr.quote(flash)))
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
        odd = sorted(tr.quote(k) for k in env if not (isinstance(k, str) and _ENV_NAME.match(k)))
        if odd:
            p.append(Problem("llama_server_extra_env", "llama_server_extra_env has %s: an environment name is "
                             "[A-Za-z_][A-Za-z0-9_]*" % ", ".join(odd)))
        # a value is one line of the unit's env file: a newline in it would add a line of its own
        lines = sorted(tr.quote(k) for k, x in env.items() if isinstance(x, (dict, list)) or (
            isinstance(x, str) and tr.printable(x) != x))
        if lines:
            p.append(Problem("llama_server_extra_env", "llama_server_extra_env %s: a value is one line of text or a "
                             "number, with no control character (a newline would add a line to the env file)"
                             % ", ".join(lines)))
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
        elif payload_known and rules.model_drafters(types) and not (payload.get("drafter") or v.get("llama_server_drafter_path")):
            p.append(Problem("llama_server_spec_type", "llama_server_spec_type %s loads a drafter model, but no drafter "
                             "is named: add a gguf_fetch_manifest entry with role: drafter (or set "
                             "llama_server_drafter_path), or drop it from llama_server_spec_type"
                             % ", ".join(rules.model_drafters(types))))
        if types and v.get("llama_server_gate_enabled") is True and v.get("llama_server_metrics") is False:
            p.append(Problem("llama_server_metrics", "llama_server_spec_type configures a drafter and the gate proves "
                             "it on /metrics: set llama_server_metrics true (or llama_server_gate_enabled false)"))
    if payload_known and v.get("llama_server_vision") is True and not (payload.get("mmproj") or v.get("llama_server_mmproj_path")):
        p.append(Problem("llama_server_vision", "llama_server_vision is on but no mmproj is named: add a "
                         "gguf_fetch_manifest entry with role: mmproj (or set llama_server_mmproj_path), or set "
                         "llama_server_vision false"))
    return p


def _deeper_than(value, limit):
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((x, depth + 1) for x in node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend((x, depth + 1) for x in node)
    return False


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
        spec, key = options.get(name), name
        if spec is None and name in DANKFLEET_NAMES:
            key = DANKFLEET_NAMES[name]
            spec = options.get(key) or {"type": key}
        if spec is None:
            continue
        settled[name], messages = settle_value(name, values[name], spec, key)
        if messages:
            problems.extend(Problem(name, m) for m in messages)
            settled.pop(name, None)

    payload = payload_record(settled)
    manifest = payload["manifest"]
    fallback = dict((role, settled.get("llama_server_%s_path" % ("model" if role == "target" else role)))
                    for role in PAYLOAD_ROLES)
    paths = payload_paths(manifest, payload["models_dir"],
                          dict((r, p) for r, p in fallback.items() if isinstance(p, str) and p))
    # a manifest refused above is the one cause: not a second refusal per payload file it cannot name
    manifest_read = not any(p.variable == "gguf_fetch_manifest" for p in problems)
    if "target" not in paths and manifest_read:
        problems.append(Problem("gguf_fetch_manifest", "%s names no target model: gguf_fetch_manifest has no entry with "
                                "role: target (and llama_server_model_path is empty). A new endpoint host needs its "
                                "own host_vars/%s.yml with gguf_fetch_manifest (name, role: target, repo, file, url, "
                                "size, sha256) and its llama_server_* settings - copy another host's" % (host, host)))
    problems.extend(serve_problems(settled, paths, payload_known=manifest_read))

    # placeholders are looked for in every value read, typed or not: one nested deeper than a reader takes is
    # refused instead (the walk would not end in a result)
    scan = {}
    for n, v in values.items():
        if isinstance(n, str) and not n.startswith("_") and not inert(n, settled) and (
                n.startswith(PLACEHOLDER_PREFIXES) or n in scanned):
            if _deeper_than(v, tr.JSON_DEPTH):
                problems.append(Problem(n, "%s is nested deeper than %d levels: no variable of this collection is; "
                                        "write it out flat" % (n, tr.JSON_DEPTH)))
            else:
                scan[n] = v
    checklist = placeholders(scan, derived)
    if placeholders_refused:
        problems.extend(to_fill(checklist))

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
        "payload": payload,
        "serve": serve,
        "origin": origin(serve),
        "port_handover_units": handover_units(settled.get("runtime_retire_runtimes")),
        "service": service_record(settled),
    }


def payload_record(settled):
    """The payload as the fetch role declares it, settled: ``manifest`` (gguf_fetch_manifest's entries as typed above;
    [] where the inventory's value was refused - that refusal is the step's failure) and ``models_dir``
    (gguf_fetch_models_dir, its documented default where unset or refused) - what the plan reads to find the payload,
    so no role reads the fetch role's inputs. Never the fetch's token: this result is printed."""
    manifest = settled.get("gguf_fetch_manifest")
    models_dir = settled.get("gguf_fetch_models_dir")
    return {"manifest": manifest if isinstance(manifest, list) else [],
            "models_dir": models_dir if isinstance(models_dir, str) and models_dir else MODELS_DIR}


def service_record(settled):
    """Where the endpoint's service lives on the host, as the inventory names it: its unit's name, the env file the
    launcher reads (the served shape) and the user it runs as - what a benchmark needs to find what is served
    before it reads the served shape itself. An empty string where the inventory's value is not a string."""
    def text(name):
        value = settled.get(name)
        return value if isinstance(value, str) else ""
    return {"name": text("llama_server_service_name"), "env_file": text("llama_server_env_file"),
            "user": text("llama_server_user")}
