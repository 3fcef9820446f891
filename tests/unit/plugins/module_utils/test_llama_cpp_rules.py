# -*- coding: utf-8 -*-
"""llama_cpp_rules is the one home of llama.cpp b11434's rules; every copy that must live without it agrees.

The copies: the env checker (stdlib, runs on the host), the launcher's case arms (bash), the role's
vars/main.yml and meta/argument_specs.yml (YAML the preflight reads). The importers (fit_plan,
serve_guard) must hold the very objects, not copies.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import importlib.util
import os
import re

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan, serve_guard
from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_cpp_rules as rules
from ansible_collections.dankfleet.llm.tests.unit import role_yaml

ROLE = os.path.join(os.path.dirname(rules.__file__), "..", "..", "..", "roles", "llama_server")
LAUNCHER = os.path.join(ROLE, "templates", "serve-llama-server.sh.j2")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return role_yaml.load(handle)


@pytest.fixture(scope="module")
def env_check():
    spec = importlib.util.spec_from_file_location("llama_env_check_copy", os.path.join(ROLE, "files", "llama_env_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def launcher_arms():
    """The SPEC_TYPE case arms of the launcher: {variable it sets ('' for none): [types]}."""
    text = open(LAUNCHER).read()
    block = text.split('for t in "${spec[@]}"; do', 1)[1].split("esac", 1)[0]
    arms = {}
    for patterns, action in re.findall(r"^\s+([a-z0-9|-]+)\)\s*(.*?);;", block, re.M):
        var = action.split("=", 1)[0].strip()
        arms.setdefault(var, []).extend(patterns.split("|"))
    return arms


def test_the_type_families_partition_the_spec_types():
    assert set(rules.MODEL_DRAFT_TYPES) | set(rules.SELF_DRAFT_TYPES) | set(rules.NGRAM_TYPES) == set(rules.SPEC_TYPES)
    assert not set(rules.MODEL_DRAFT_TYPES) & set(rules.SELF_DRAFT_TYPES)
    assert set(rules.BLOCK_DRAFT_TYPES) <= set(rules.MODEL_DRAFT_TYPES)
    assert rules.NGRAM_MOD_TYPE in rules.NGRAM_TYPES
    assert len(set(rules.SPEC_TYPES)) == len(rules.SPEC_TYPES)


def test_chain_helpers():
    assert rules.spec_chain_conflict(["ngram-mod", "draft-mtp", "draft-dflash"]) == ("draft-mtp", "draft-dflash")
    assert rules.spec_chain_conflict(["draft-mtp", "ngram-mod"]) is None
    assert rules.spec_chain_conflict(["draft-dflash", "ngram-mod"]) is None
    assert rules.unknown_spec_types(["draft-mtp", "draft-magic", "ngram"]) == ["draft-magic", "ngram"]
    assert rules.model_drafters(["ngram-mod", "draft-eagle3"]) == ["draft-eagle3"]


def test_spellings_name_every_form_and_refuse_an_unknown_flag():
    expected = ("-c", "--ctx-size", "--spec-draft-model", "-md", "--model-draft")
    assert rules.spellings("--ctx-size", "--spec-draft-model") == expected
    for long_form, forms in rules.FLAG_SPELLINGS.items():
        assert long_form in forms
    with pytest.raises(KeyError):
        rules.spellings("--ctx-sise")
    assert set(rules.UNSIZED_PLACEMENT_FLAGS) <= set(rules.FLAG_SPELLINGS)


def test_the_planner_imports_the_rules_rather_than_copying_them():
    for name in ("SPEC_TYPES", "MODEL_DRAFT_TYPES", "CONTEXT_DRAFT_TYPES", "BLOCK_DRAFT_TYPES"):
        assert getattr(fit_plan, name) is getattr(rules, name), name


def test_serve_guard_guards_every_spelling_and_every_device_env():
    for flags, _var in serve_guard._ROLE_FLAGS:
        for flag in rules.spellings(*flags):
            assert flag in serve_guard.FLAG_VARIABLE, flag
    assert set(serve_guard._UNPLANNED_FLAGS) == set(rules.spellings(*rules.UNSIZED_PLACEMENT_FLAGS))
    assert not set(serve_guard.FLAG_VARIABLE) & set(serve_guard._UNPLANNED_FLAGS)
    assert set(rules.DEVICE_ENV) | {rules.DEVICE_ORDER_ENV} <= set(serve_guard._GUARDED_ENV)
    for name in rules.DEVICE_ENV:
        (problem,) = serve_guard.shadowed([], {name: "0"})
        assert name in problem


def test_every_flag_the_launcher_writes_is_in_the_spelling_table():
    text = open(LAUNCHER).read()
    written = set(re.findall(r"opt (--[a-z-]+) ", text)) | set(re.findall(r"args\+=\((--[a-z-]+)", text))
    assert "--spec-draft-model" in written and "--ctx-size" in written, "the launcher's flags were not parsed"
    assert sorted(written - set(rules.FLAG_SPELLINGS)) == []


def test_the_env_checker_copy_agrees(env_check):
    assert tuple(env_check.SPEC_TYPES) == rules.SPEC_TYPES
    assert tuple(env_check.MODEL_BACKED) == rules.MODEL_DRAFT_TYPES
    assert tuple(env_check.HIP_BARE) == rules.HIP_BARE_ENV
    assert tuple(env_check.CHOICES["SPLIT_MODE"]) == rules.SPLIT_MODES
    assert set(env_check.CHOICES["FLASH_ATTN"]) == set(rules.ON_OFF_AUTO)
    assert set(env_check.CHOICES["REASONING"]) == set(rules.ON_OFF_AUTO)
    assert tuple(env_check.CHOICES["LOAD_MODE"]) == rules.LOAD_MODES


def test_the_launcher_copy_agrees(launcher_arms):
    assert sorted(launcher_arms["model_backed"]) == sorted(rules.MODEL_DRAFT_TYPES)
    assert sorted(launcher_arms["mtp"]) == sorted(rules.SELF_DRAFT_TYPES)
    assert launcher_arms["ngram_mod"] == [rules.NGRAM_MOD_TYPE]
    assert sorted(launcher_arms["ngram_mod"] + launcher_arms[""]) == sorted(rules.NGRAM_TYPES)
    assert sorted(t for arm in launcher_arms.values() for t in arm) == sorted(rules.SPEC_TYPES)


def test_the_role_vars_copy_agrees():
    v = _yaml("vars", "main.yml")
    assert tuple(v["_llama_server_model_backed_drafters"]) == rules.MODEL_DRAFT_TYPES
    # the rest of the rules are the settle step's (Python), not copied into the role
    assert "_llama_server_spec_types_known" not in v and "_llama_server_hip_bare_env" not in v


def test_the_argument_specs_choices_agree():
    options = _yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert tuple(options["llama_server_spec_type"]["choices"]) == rules.SPEC_TYPES
    assert tuple(options["llama_server_split_mode"]["choices"]) == rules.SPLIT_MODES
    assert tuple(options["llama_server_load_mode"]["choices"]) == rules.LOAD_MODES
    assert sorted(rules.LOAD_MODE_MEMORY) == sorted(rules.LOAD_MODES)


def test_every_variable_the_env_checker_types_is_one_the_launcher_reads(env_check):
    """The checker's typed names and the launcher's flags are two tables of one env file: a name the
    launcher never reads would be checked and then silently ignored."""
    text = open(LAUNCHER).read()
    read = set(re.findall(r"opt --[a-z-]+ ([A-Z_]+)", text)) | set(re.findall(r"\$\{?([A-Z_]+)", text))
    assert {"CTX_SIZE", "LISTEN_PORT", "METRICS", "VISION", "SPEC_TYPE"} <= read, "the launcher's variables were not parsed"
    typed = set(env_check.REQUIRED) | set(env_check.INTEGERS) | set(env_check.NUMBERS) | set(env_check.CHOICES)
    assert sorted(typed - read) == []
