"""A module's main() in the test's own process, for the unit tests of plugins/modules: the arguments as Ansible
hands them over, the JSON result the module prints (failed or not)."""
import hashlib
import json
import os

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


def snapshot(root):
    """Every path under root with its type, mode, mtime and content hash (or link target): a change shows."""
    found = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if os.path.islink(path):
                found[path] = ("l", os.readlink(path))
            elif os.path.isdir(path):
                found[path] = ("d", st.st_mode)
            else:
                with open(path, "rb") as handle:
                    found[path] = ("f", st.st_mode, st.st_mtime_ns, hashlib.sha256(handle.read()).hexdigest())
    return found
