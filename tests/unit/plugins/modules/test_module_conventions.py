"""community.general's module conventions over every module in plugins/modules, discovered so a new one is held to
them the day it lands: an attributes section from the collection's fragment (check_mode, diff_mode, platform, each
with its support), read-only modules named *_info, and every old name in meta/runtime.yml redirecting to a module
that exists."""
import ast
import os

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
MODULES = os.path.join(REPO, "plugins", "modules")
NAMES = sorted(n[:-3] for n in os.listdir(MODULES) if n.endswith(".py") and not n.startswith("__"))
SUPPORT = {"full", "partial", "none", "N/A"}


def documentation(name):
    """The module's DOCUMENTATION, RETURN and its AnsibleModule(...) keywords, read without importing it."""
    with open(os.path.join(MODULES, name + ".py")) as handle:
        tree = ast.parse(handle.read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "id", None) in (
                "DOCUMENTATION", "RETURN"):
            out[node.targets[0].id] = yaml.safe_load(node.value.value) or {}
    return out


def test_every_module_is_discovered():
    assert {"gguf_info", "gpu_info", "trash_files", "llama_cpp_release"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_attributes_from_the_fragment_with_a_support_each(name):
    doc = documentation(name)["DOCUMENTATION"]
    fragments = doc.get("extends_documentation_fragment") or []
    attributes = doc.get("attributes") or {}
    if name != "controller_file":  # an action: its attributes come from ansible.builtin's action fragments
        assert {"dankfleet.llm.attributes", "dankfleet.llm.attributes.platform"} <= set(fragments), fragments
    info = "dankfleet.llm.attributes.info_module" in fragments
    for attribute in ("check_mode", "diff_mode"):
        default = ("full" if attribute == "check_mode" else "N/A") if info else None
        support = (attributes.get(attribute) or {}).get("support") or default
        assert support in SUPPORT, "%s: attributes.%s has support %r" % (name, attribute, support)
        if support == "partial":
            assert attributes[attribute].get("details"), "%s: partial %s says what is missing (details)" % (
                name, attribute)
    platforms = (attributes.get("platform") or {}).get("platforms")
    assert platforms or name == "controller_file", "%s: attributes.platform names its platforms" % name


@pytest.mark.parametrize("name", NAMES)
def test_read_only_modules_are_named_info_and_no_module_is_named_facts(name):
    fragments = documentation(name)["DOCUMENTATION"].get("extends_documentation_fragment") or []
    assert not name.endswith("_facts"), "%s: a module that returns plain keys is a *_info module" % name
    assert ("dankfleet.llm.attributes.info_module" in fragments) == name.endswith("_info"), (
        "%s: read-only modules are *_info and declare attributes.info_module; others are not named *_info" % name)


def test_old_names_redirect_to_modules_that_exist():
    with open(os.path.join(REPO, "meta", "runtime.yml")) as handle:
        routing = (yaml.safe_load(handle).get("plugin_routing") or {}).get("modules") or {}
    assert {"gpu_facts", "host_state"} <= set(routing)
    for old, route in routing.items():
        target = route["redirect"]
        assert target.startswith("dankfleet.llm.") and target.split(".")[-1] in NAMES, (old, target)
        assert old not in NAMES, "%s is both a module and a redirect" % old


def ansible_module(fqcn, args):
    """One module run through the ansible command line on localhost (a redirect resolves as a play's would)."""
    import json
    import subprocess
    import sys
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_LOCALHOST_WARNING="false")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", fqcn,
                           "-a", json.dumps(args)], env=env, capture_output=True, text=True, timeout=120, check=False)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.mark.parametrize("old, new, args", [
    ("gpu_facts", "gpu_info", {"facts_file": os.path.join(REPO, "tests", "fixtures", "gpu", "b850-proart.facts.json")}),
    ("host_state", "host_state_info", {"paths": [os.path.join(REPO, "galaxy.yml")], "commands": ["sh"]}),
])
def test_an_old_name_still_runs_with_the_same_result(old, new, args):
    via_old = ansible_module("dankfleet.llm." + old, args)
    via_new = ansible_module("dankfleet.llm." + new, args)
    assert not via_old.get("failed") and not via_new.get("failed"), (via_old.get("msg"), via_new.get("msg"))

    def shown(result):
        return dict((k, v) for k, v in result.items()
                    if not k.startswith("_ansible") and k not in ("action", "invocation", "deprecations"))
    assert shown(via_old) == shown(via_new)
    # the old name says it is going, and when; the new one says nothing of the kind
    (said,) = via_old["deprecations"]
    assert "dankfleet.llm.%s" % new in said["msg"] and said.get("version") == "1.0.0", said
    assert not via_new.get("deprecations")
    assert {"gpu_facts": "gpus", "host_state": "paths"}[old] in via_old
