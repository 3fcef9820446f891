"""Every test session (unit, integration) ends by checking the one import path: no file of this repo was
imported under two module names (e.g. `fit_plan` and `ansible_collections.dankfleet.llm.plugins.
module_utils.fit_plan` - two copies of one module, each with its own state and its own exceptions)."""
import os
import sys

import pytest

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
VENV = os.path.join(REPO, ".venv") + os.sep


def modules_by_file(modules):
    """{real path of a repo file: sorted module names it is loaded as} for the files loaded twice or more."""
    names = {}
    for name, module in list(modules.items()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        real = os.path.realpath(path)
        if real.startswith(REPO + os.sep) and not real.startswith(VENV):
            names.setdefault(real, set()).add(name)
    return dict((path, sorted(n)) for path, n in names.items() if len(n) > 1)


@pytest.fixture(scope="session", autouse=True)
def one_name_per_module():
    yield
    twice = modules_by_file(sys.modules)
    assert not twice, "imported under two names (one import path: pytest.ini, no sys.path in tests): %s" % twice
