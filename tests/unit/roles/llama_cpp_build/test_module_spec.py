"""roles/llama_cpp_build: vars/main.yml passes dankfleet.llm.llama_cpp_release exactly its spec keys.

(defaults/main.yml against meta/argument_specs.yml, as for every role: tests/unit/roles/test_argument_specs.py.)
"""
from pathlib import Path

import yaml

from ansible_collections.dankfleet.llm.plugins.modules import llama_cpp_release as module

ROLE = Path(__file__).resolve().parents[4] / "roles" / "llama_cpp_build"


def test_vars_pass_the_module_exactly_its_spec_keys():
    spec = yaml.safe_load((ROLE / "vars/main.yml").read_text())["_llama_cpp_build_spec"]
    assert set(spec) == set(module.SPEC_OPTIONS)
    assert set(spec["source"]) == set(module.SOURCE_OPTIONS)
