"""roles/llama_cpp_build: defaults/main.yml and meta/argument_specs.yml cannot drift.

Every public variable has a spec entry (type, description), every spec entry is a
default, literal defaults are equal in both files, and the module's spec keys are
the ones vars/main.yml passes it.
"""
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "llama_cpp_build"

DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
OPTIONS = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def test_every_default_has_a_spec_entry_and_back():
    assert sorted(set(DEFAULTS) - set(OPTIONS)) == []
    assert sorted(set(OPTIONS) - set(DEFAULTS)) == []


def test_public_names_are_prefixed():
    assert all(name.startswith("llama_cpp_build_") for name in DEFAULTS)


def test_every_option_has_type_and_description():
    for name, option in OPTIONS.items():
        assert option.get("type"), name
        assert option.get("description"), name
        if option["type"] == "list":
            assert option.get("elements"), name


def test_literal_defaults_agree():
    for name, value in DEFAULTS.items():
        if isinstance(value, str) and "{{" in value:
            continue  # derived from other variables at run time
        assert "default" in OPTIONS[name], name
        assert OPTIONS[name]["default"] == value, name


def test_choices_hold_their_default():
    for name, option in OPTIONS.items():
        if "choices" in option:
            assert DEFAULTS[name] in option["choices"], name


def test_vars_pass_the_module_exactly_its_spec_keys():
    from ansible_collections.dankfleet.llm.plugins.modules import llama_cpp_release as module
    spec = yaml.safe_load((ROLE / "vars/main.yml").read_text())["_llama_cpp_build_spec"]
    assert set(spec) == set(module.SPEC_OPTIONS)
    assert set(spec["source"]) == set(module.SOURCE_OPTIONS)
