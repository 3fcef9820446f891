"""A module's main() in the test's own process, for the unit tests of plugins/modules: the arguments as Ansible
hands them over, the JSON result the module prints (failed or not)."""
import json

import pytest
from ansible.module_utils.testing import patch_module_args


def run_module(capsys, main, check_mode=False, **args):
    """main() with these arguments (check_mode: as under --check); its result, parsed."""
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            main()
    return json.loads(capsys.readouterr().out)
