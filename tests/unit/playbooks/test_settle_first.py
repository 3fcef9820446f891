"""Every play that settles the inventory contacts no host before it (issue 32): it gathers no facts, and only the
shape preflight (on the controller) comes before the settle step. tests/integration/test_settle_first.py runs it."""
import glob
import os

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import REPO

SETTLE, PREFLIGHT = "tasks/settle.yml", "tasks/deploy_preflight.yml"


def settling_plays():
    for path in sorted(glob.glob(os.path.join(REPO, "playbooks", "*.yml"))):
        with open(path) as handle:
            for play in yaml.safe_load(handle) or []:
                imports = [t.get("ansible.builtin.import_tasks") for t in play.get("tasks", [])]
                if SETTLE in imports:
                    yield "%s: %s" % (os.path.basename(path), play["name"]), play, imports


PLAYS = list(settling_plays())


def test_the_deploy_the_rollback_and_the_plan_settle():
    names = " ".join(name for name, _, _ in PLAYS)
    for book in ("deploy_endpoints.yml", "rollback_endpoints.yml", "plan.yml"):
        assert book in names, names


@pytest.mark.parametrize("name,play,imports", PLAYS, ids=[name for name, _, _ in PLAYS])
def test_nothing_contacts_the_host_before_the_settle_step(name, play, imports):
    assert play.get("gather_facts") is False, name
    assert imports[:imports.index(SETTLE)] in ([], [PREFLIGHT]), (name, imports)
    # the play's roles before its tasks: only the fleet-wide settings (defaults, no task)
    assert [r["role"] if isinstance(r, dict) else r for r in play.get("roles", [])] in ([], ["dankfleet.llm.dankfleet"])
