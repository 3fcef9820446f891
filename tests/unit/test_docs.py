"""The documentation and metadata against the tree, discovered so a new module, filter or role is caught
the day it lands: README.md and docs/DEVELOPING.md name every one, every role has a README, and every
role's license is the collection's (galaxy.yml, COPYING)."""
import os
import re

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS = ("README.md", os.path.join("docs", "DEVELOPING.md"))


def plugins(kind):
    folder = os.path.join(REPO, "plugins", kind)
    return sorted(n[:-3] for n in os.listdir(folder) if n.endswith(".py") and not n.startswith("__"))


def roles(base="roles"):
    folder = os.path.join(REPO, base)
    return sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d, "tasks")))


NAMES = [("module", n) for n in plugins("modules")] + [("filter", n) for n in plugins("filter")] + \
    [("role", n) for n in roles()]


def test_the_tree_is_discovered():
    assert {("module", "gguf_fetch"), ("filter", "fit_plan"), ("role", "llama_server")} <= set(NAMES)


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_name_every_module_filter_and_role(doc):
    with open(os.path.join(REPO, doc)) as handle:
        text = handle.read()
    missing = ["%s %s" % (kind, name) for kind, name in NAMES if not re.search(r"(?<![\w.])%s(?!\w)" % re.escape(name), text)]
    assert missing == [], "%s does not name: %s (add each to its lists of modules, filters and roles)" % (
        doc, ", ".join(missing))


@pytest.mark.parametrize("role", roles())
def test_every_role_has_a_readme(role):
    path = os.path.join(REPO, "roles", role, "README.md")
    assert os.path.isfile(path), "roles/%s has no README.md" % role
    with open(path) as handle:
        title = handle.readline()
    assert title.startswith("# ") and role in title, "roles/%s/README.md starts with %r" % (role, title)


def test_one_license():
    with open(os.path.join(REPO, "galaxy.yml")) as handle:
        galaxy = yaml.safe_load(handle)["license"]
    assert galaxy == ["GPL-3.0-or-later"] and os.path.isfile(os.path.join(REPO, "COPYING"))
    metas = [os.path.join(base, role) for base in ("roles", os.path.join("tests", "lab", "roles")) for role in roles(base)]
    licenses = {}
    for role in metas:
        meta = os.path.join(REPO, role, "meta", "main.yml")
        if not os.path.isfile(meta):
            licenses[role] = "no meta/main.yml"
            continue
        with open(meta) as handle:
            licenses[role] = ((yaml.safe_load(handle) or {}).get("galaxy_info") or {}).get("license")
    assert dict((r, lic) for r, lic in licenses.items() if lic not in galaxy) == {}
