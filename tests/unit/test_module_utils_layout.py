"""The layout of plugins/module_utils (issue 32): grouped by stage over a base, each group an importable package.

Every file sits in one group folder (none at the top, no other folder), each group has the empty __init__.py
AnsiballZ needs to bundle a module's module_utils, docs/ARCHITECTURE.md's table lists every file in its group,
and the base imports nothing from the stages (an exception would be named here with its reason)."""
import ast
import os
import re

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
MU = os.path.join(REPO, "plugins", "module_utils")
PKG = "ansible_collections.dankfleet.llm.plugins.module_utils"
GROUPS = ['base', 'host', 'plan', 'serve', 'bench']
STAGES = [g for g in GROUPS if g != "base"]
# (base file, "<group>.<file>" it imports): why. None today: a base file that needs a stage's code moves the
# code (the VRAM reader went to bench/bench_vram.py), or names the import here with its reason.
BASE_EXCEPTIONS = {}


def _files(group):
    return sorted(n[:-3] for n in os.listdir(os.path.join(MU, group)) if n.endswith(".py") and n != "__init__.py")


def _imports(path):
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PKG + "."):
            rest = node.module[len(PKG) + 1:]
            if "." in rest:
                yield rest
            else:
                for alias in node.names:
                    yield rest + "." + alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PKG + "."):
                    yield alias.name[len(PKG) + 1:]


def test_every_file_is_in_a_group():
    entries = sorted(n for n in os.listdir(MU) if n != "__pycache__")
    assert entries == sorted(GROUPS), "plugins/module_utils holds only the group folders %s" % GROUPS
    for group in GROUPS:
        assert _files(group), group
        for name in os.listdir(os.path.join(MU, group)):
            assert name == "__pycache__" or name.endswith(".py"), (group, name)


def test_each_group_is_a_package_ansiballz_can_bundle():
    for group in GROUPS:
        init = os.path.join(MU, group, "__init__.py")
        assert os.path.isfile(init) and os.path.getsize(init) == 0, "%s: an empty __init__.py (empty-init)" % init


def test_architecture_lists_every_file_in_its_group():
    with open(os.path.join(REPO, "docs", "ARCHITECTURE.md")) as handle:
        text = handle.read()
    rows = dict((m.group(1), sorted(re.findall(r"`(\w+)`", m.group(2))))
                for m in re.finditer(r"(?m)^\| `(\w+)/` \|[^|]*\| ([^|]*) \|$", text))
    assert rows == dict((group, _files(group)) for group in GROUPS), \
        "docs/ARCHITECTURE.md's module_utils table names each group's files (add a moved or new file to its group's row)"


def test_every_import_names_a_file():
    missing = []
    for top, _dirs, files in os.walk(os.path.join(REPO, "plugins")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(top, name)
                missing += ["%s: %s" % (os.path.relpath(path, REPO), target) for target in _imports(path)
                            if not os.path.isfile(os.path.join(MU, *target.split(".")) + ".py")
                            and not os.path.isdir(os.path.join(MU, *target.split(".")))]
    assert missing == []


def _stage_imports(base_dir, exceptions):
    """["base/<file>.py imports <group>.<file>"] for every import of a stage in base_dir's files but the exceptions."""
    found = []
    for name in sorted(n[:-3] for n in os.listdir(base_dir) if n.endswith(".py") and n != "__init__.py"):
        for target in _imports(os.path.join(base_dir, name + ".py")):
            if target.split(".")[0] in STAGES and (name, target) not in exceptions:
                found.append("base/%s.py imports %s" % (name, target))
    return found


def test_the_base_imports_no_stage():
    found = _stage_imports(os.path.join(MU, "base"), BASE_EXCEPTIONS)
    assert found == [], "the base stands under the stages; move the code, or name the exception with its reason"


def test_the_check_sees_a_stage_import(tmp_path):
    # the walk must find what it checks: every import form of a stage in a base file, and only those
    (tmp_path / "__init__.py").write_text(u"")
    (tmp_path / "reader.py").write_text(u"\n".join([
        "import json",
        "from %s.base.typed_reader import Int" % PKG,
        "from %s.host.gpu_facts import VRAM_MAX_BYTES" % PKG,
        "from %s.serve import plan_actual" % PKG,
        "import %s.bench.bench_vram" % PKG,
        "def late():",
        "    from %s.plan.shape import Shape" % PKG,
        "    return Shape", ""]))
    assert _stage_imports(str(tmp_path), {}) == [
        "base/reader.py imports host.gpu_facts", "base/reader.py imports serve.plan_actual",
        "base/reader.py imports bench.bench_vram", "base/reader.py imports plan.shape"]
    assert _stage_imports(str(tmp_path), {("reader", "host.gpu_facts"): "a reason"})[0] == \
        "base/reader.py imports serve.plan_actual"


def test_every_named_exception_is_still_an_import():
    # a stale exception (its import gone) would let the same import come back unseen
    seen = set((name, target) for name in _files("base") for target in _imports(os.path.join(MU, "base", name + ".py")))
    assert set(BASE_EXCEPTIONS) <= seen
