"""No task in roles/ or playbooks/ disables (or masks) a unit.

Seed 001_: `systemctl disable` deleted a unit file on dankserver (2026-08-26). A failed shape is stopped
and its boot links go through the trash with a MANIFEST (_common tasks_from unit_off_boot); a retired
runtime's the same way (runtime_retire). This walks every YAML task of roles/ and playbooks/ (and the
root playbooks) for a systemd/service module with `enabled` false or `masked` true, and every string a
command/shell task runs, every template and every file the roles install, for a `systemctl ... disable|mask`.
"""
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TREES = [REPO / "roles", REPO / "playbooks"]
SYSTEMD_MODULES = {"systemd", "systemd_service", "service", "ansible.builtin.systemd", "ansible.builtin.systemd_service",
                   "ansible.builtin.service", "ansible.legacy.systemd", "ansible.legacy.systemd_service",
                   "ansible.legacy.service"}
SYSTEMCTL_OFF = re.compile(r"\bsystemctl\b[^\n;|&]*\b(disable|mask)\b")
COMMAND_MODULES = {prefix + name for prefix in ("", "ansible.builtin.", "ansible.legacy.")
                   for name in ("command", "shell", "raw", "script", "expect")}
FALSE = (False, "false", "False", "no", "off", 0)


class _AnyTag(yaml.SafeLoader):
    pass


_AnyTag.add_multi_constructor("!", lambda loader, suffix, node: None)


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _strings(node):
    """Every string, and every list of strings joined (an argv)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        yield " ".join(str(item) for item in node if isinstance(item, (str, int)))
        for item in node:
            yield from _strings(item)


def findings(doc, where):
    out = []
    for node in _walk(doc):
        for key, args in node.items():
            if key in SYSTEMD_MODULES and isinstance(args, dict):
                if args.get("enabled", True) in FALSE:
                    out.append("%s: %s with enabled: %r (%s)" % (where, key, args.get("enabled"), node.get("name")))
                if args.get("masked") not in (None, *FALSE):
                    out.append("%s: %s with masked (%s)" % (where, key, node.get("name")))
            if key in COMMAND_MODULES:
                for text in _strings(args):
                    if SYSTEMCTL_OFF.search(text):
                        out.append("%s: %s %r (%s)" % (where, key, text[:120], node.get("name")))
    return out


def text_findings(text, where):
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return ["%s: %r" % (where, line.strip()) for line in lines if SYSTEMCTL_OFF.search(line)]


def task_files():
    for tree in TREES:
        for path in sorted(tree.rglob("*.yml")):
            if "meta" in path.relative_to(tree).parts:  # argument_specs describe the rule ("never ... disable")
                continue
            yield path
    yield from sorted(REPO.glob("*.yml"))


def installed_files():
    for tree in TREES:
        for sub in ("templates", "files"):
            for path in sorted(tree.rglob(sub + "/*")):
                if path.is_file():
                    yield path


def test_no_task_disables_or_masks_a_unit():
    found = []
    for path in task_files():
        doc = yaml.load(path.read_text(), Loader=_AnyTag)
        found += findings(doc, str(path.relative_to(REPO)))
    assert not found, "\n".join(found)


def test_no_installed_file_runs_systemctl_disable():
    found = []
    for path in installed_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += text_findings(text, str(path.relative_to(REPO)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("task", [
    {"name": "x", "ansible.builtin.systemd_service": {"name": "a.service", "state": "stopped", "enabled": False}},
    {"name": "x", "ansible.builtin.service": {"name": "a", "enabled": "no"}},
    {"name": "x", "systemd": {"name": "a", "masked": True}},
    {"block": [{"name": "x", "ansible.builtin.command": {"argv": ["systemctl", "--user", "disable", "--now", "a"]}}]},
    {"name": "x", "ansible.builtin.shell": "systemctl stop a && systemctl disable a"},
    {"name": "x", "ansible.builtin.command": "runuser -u dank -- systemctl --user mask a.service"},
])
def test_the_scan_finds_every_spelling(task):
    """The scan itself can fail: each spelling of 'disable a unit' is caught."""
    assert findings([task], "t")


def test_the_scan_leaves_stop_and_enable_alone():
    doc = [{"name": "x", "ansible.builtin.systemd_service": {"name": "a", "state": "stopped"}},
           {"name": "y", "ansible.builtin.systemd_service": {"name": "a", "enabled": True}},
           {"name": "z", "ansible.builtin.command": "systemctl show -p NRestarts a"},
           {"name": "w", "dankfleet.llm.trash_files": {"comments": ["links moved instead of a systemctl disable"]}}]
    assert findings(doc, "t") == []
    assert text_findings("# never systemctl disable here\nExecStart=/bin/true\n", "t") == []
