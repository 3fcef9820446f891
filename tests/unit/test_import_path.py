"""The one import path (pytest.ini), kept: no test, helper, fixture builder or verifier changes sys.path or
loads a repo module by file path, and none imports a module_utils file by its bare name (it has one name:
ansible_collections.dankfleet.llm.plugins.module_utils.<name>). tests/conftest.py checks what a session
actually imported; this checks every file, imported this session or not."""
import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# {name: its path below plugins/module_utils}: the group folders (base/, host/, plan/, serve/, bench/) walked
MODULE_UTILS_PATHS = dict((n[:-3], os.path.join(top, n)) for top, _dirs, files
                          in os.walk(os.path.join(REPO, "plugins", "module_utils"))
                          for n in files if n.endswith(".py") and not n.startswith("__"))
MODULE_UTILS = sorted(MODULE_UTILS_PATHS)
GROUPS = sorted(set(os.path.basename(os.path.dirname(p)) for p in MODULE_UTILS_PATHS.values()) - {"module_utils"})
BARE = re.compile(r"(?m)^\s*(?:import|from)\s+(%s)\b" % "|".join(MODULE_UTILS + GROUPS))
# A role's files/*.py goes to the host alone: no package's module, so a test loads it by path - that only
# (serve_roles_helpers.load_role_script); a file that loads by path must name a role's files/ directory.
ROLE_FILES = re.compile(r"[\"']files[\"']|/files/")
SELF = os.path.relpath(os.path.abspath(__file__), REPO)
# The one file that may touch sys.path: it applies pytest.ini's own pythonpath, read from pytest.ini, when
# pytest ran under another config file (ansible-test units') - the same path, not another.
APPLIES_PYTEST_INI = "tests/conftest.py"
# a test module imported by another test runs twice and is loaded under a second name: shared code goes to a
# tests/unit/*_testlib.py helper instead
TEST_MODULE_IMPORT = re.compile(r"(?m)^\s*(?:from\s+([\w.]*\btest_\w+)\s+import|from\s+[\w.]+\s+import\s+\(?\s*(test_\w+)"
                                r"|import\s+([\w.]*\btest_\w+))")


def sources():
    for top in ("tests", "molecule"):
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "llamacpp")]
            for name in files:
                path = os.path.join(root, name)
                if name.endswith((".py", ".sh")) and os.path.relpath(path, REPO) != SELF:
                    with open(path) as handle:
                        yield os.path.relpath(path, REPO), handle.read()


def test_module_utils_are_discovered():
    assert {"fit_plan", "gguf_reader", "gpu_facts", "typed_reader", "endpoint_client"} <= set(MODULE_UTILS)
    assert {"base", "host", "plan", "serve", "bench"} <= set(GROUPS)


def test_no_sys_path_and_no_loading_by_path():
    found = [path for path, text in sources() if ("sys.path.insert" in text or "sys.path.append" in text)
             and not (path == APPLIES_PYTEST_INI and 'parser["pytest"]["pythonpath"]' in text)
             or ("spec_from_file_location" in text and not ROLE_FILES.search(text))]
    assert found == [], "put what they import on pytest.ini's pythonpath instead (docs/DEVELOPING.md)"


def test_no_bare_module_utils_import():
    found = dict((path, BARE.findall(text)) for path, text in sources() if BARE.search(text))
    assert found == {}, "import ansible_collections.dankfleet.llm.plugins.module_utils.<name> instead"


def test_module_utils_import_each_other_by_their_one_name():
    # no `else: from sha256 import ...` fallback for a plain-Python run with plugins/module_utils on sys.path:
    # nothing runs them that way (benchmarks/import_paths.py puts collections/ on the path)
    found = {}
    for name in MODULE_UTILS:
        with open(MODULE_UTILS_PATHS[name]) as handle:
            bare = BARE.findall(handle.read())
        if bare:
            found[name] = bare
    assert found == {}, "import ansible_collections.dankfleet.llm.plugins.module_utils.<name> instead"


def test_no_test_module_imports_another():
    found = dict((path, ["".join(m) for m in TEST_MODULE_IMPORT.findall(text)]) for path, text in sources()
                 if TEST_MODULE_IMPORT.search(text))
    assert found == {}, "move what both use to a tests/unit/*_testlib.py helper"
