"""Docs at the moment of need (issue 37): the serve role says first which few variables a new host needs,
in its README and in `ansible-doc -t role`'s main entry point, each a real option of the collection's roles."""
import os
import re

import yaml

from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NEW_HOST = ["llama_server_backend", "llama_cpp_build_backend", "llama_server_devices", "gguf_fetch_manifest",
            "llama_server_service_name", "llama_server_port", "llama_server_bind_address", "runtime_retire_runtimes"]


def _read(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return handle.read()


def _all_defaults():
    names = set()
    for role in os.listdir(os.path.join(REPO, "roles")):
        path = os.path.join(REPO, "roles", role, "defaults", "main.yml")
        if os.path.exists(path):
            names.update(yaml.safe_load(_read(path)) or {})
    return names


def test_the_new_host_list_names_real_options():
    assert set(NEW_HOST) <= _all_defaults()


def test_the_serve_readme_starts_with_the_new_host_list():
    text = _read("roles", "llama_server", "README.md")
    top = text[:text.index("| file | default path")]  # before the role's own details
    assert "A new host needs only these" in top
    missing = [name for name in NEW_HOST if "`%s`" % name not in top]
    assert missing == []


def test_the_main_entry_point_starts_with_the_new_host_list():
    main = role_yaml.load(_read("roles", "llama_server", "meta", "argument_specs.yml"))["argument_specs"]["main"]
    first = main["description"][0]
    assert first.startswith("A new host needs only")
    missing = [name for name in NEW_HOST if not re.search(r"C\(%s\)" % name, first)]
    assert missing == []


def test_fit_plan_doc_states_each_profile_measured_not_a_placeholder():
    import ast
    tree = ast.parse(_read("plugins", "filter", "fit_plan.py"))
    doc = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
               and getattr(node.targets[0], "id", "") == "DOCUMENTATION")
    assert "placeholder" not in doc.lower()
    assert "PROFILE_ACCURACY" in doc and "H200" in doc


SITE_NAMES = re.compile(r"frank[-_]medium_manifest|\bowner: dank\b|\bgroup: dank\b|\buser: dank\b|frank-medium\.(?:env|service)"
                        r"|http://dankserver|/home/dank/|Refuse a frank-medium|Deploy the frank-medium|frank_medium_shape")


def test_shipped_examples_and_names_speak_of_endpoints_not_the_site():
    # issue 37: module docs, role specs and READMEs, playbooks; the site keeps its names in inventory/production and
    # the root entry points (deploy-frank-medium.yml ...), which galaxy.yml does not ship
    found = []
    for top in ("plugins/modules", "playbooks", "roles"):
        for folder, _, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if not name.endswith((".py", ".yml", ".md")):
                    continue
                path = os.path.join(folder, name)
                for number, line in enumerate(_read(path).splitlines(), 1):
                    if SITE_NAMES.search(line):
                        found.append("%s:%d: %s" % (os.path.relpath(path, REPO), number, line.strip()))
    assert found == []


def test_the_shipped_deploy_play_and_its_shape_check_are_generic():
    plays = yaml.safe_load(_read("playbooks", "deploy_endpoints.yml"))
    assert plays[0]["name"] == "Deploy the llama.cpp endpoints"
    tasks = yaml.safe_load(_read("playbooks", "tasks", "deploy_preflight.yml"))
    assert tasks[0]["name"] == "Refuse a serve shape the inventory does not declare"
