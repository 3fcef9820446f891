"""Every test session (unit, integration) ends by checking the one import path: no file of this repo was
imported under two module names (e.g. `fit_plan` and `ansible_collections.dankfleet.llm.plugins.
module_utils.plan.fit_plan` - two copies of one module, each with its own state and its own exceptions).

`ansible-test units` runs pytest with its own config file, not pytest.ini, and its own collection loader
(ansible_collections.* from the copy it tests): pytest.ini's pythonpath (the lab tools, the benchmarks) is
put on sys.path here then, from pytest.ini itself, so the tests import alike under both."""
import configparser
import os
import sys

import pytest
from hypothesis import settings

# Hypothesis draws the same examples on every run (CI included): a property test fails because of the code, never
# because a run drew a rarer example than the last. DANKFLEET_HYPOTHESIS=explore draws new ones while developing.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("DANKFLEET_HYPOTHESIS", "repeatable"))

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
VENV = os.path.join(REPO, ".venv") + os.sep


def pytest_configure(config):
    ini = os.path.join(REPO, "pytest.ini")
    if config.inipath and os.path.realpath(str(config.inipath)) == ini:
        return  # pytest read pytest.ini: its pythonpath is already in place
    parser = configparser.ConfigParser()
    parser.read(ini)
    for entry in parser["pytest"]["pythonpath"].split():
        path = os.path.join(REPO, entry)
        # collections/ is the repo's link for plain pytest; ansible-test's loader serves ansible_collections
        if entry != "collections" and os.path.isdir(path) and path not in sys.path:
            sys.path.append(path)


def modules_by_file(modules):
    """{real path of a repo file: sorted module names it is loaded as} for the files loaded twice or more."""
    names = {}
    for name, module in list(modules.items()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        real = os.path.realpath(path)
        # a package Ansible's collection loader synthesizes has a __file__ that is no file: not a copy of one
        if real.startswith(REPO + os.sep) and not real.startswith(VENV) and os.path.exists(real):
            names.setdefault(real, set()).add(name)
    return dict((path, sorted(n)) for path, n in names.items() if len(n) > 1)


@pytest.fixture(scope="session", autouse=True)
def one_name_per_module():
    yield
    twice = modules_by_file(sys.modules)
    assert not twice, "imported under two names (one import path: pytest.ini, no sys.path in tests): %s" % twice
