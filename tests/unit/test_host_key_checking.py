"""The production config checks host keys, and no inventory turns the check off behind its back."""
import configparser
import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
# What switches ssh's host key check off for a host or a group, in an inventory or a config.
OFF = re.compile(r'StrictHostKeyChecking\s*=?\s*no|UserKnownHostsFile\s*=?\s*/dev/null'
                 r'|host_key_checking\s*[:=]\s*(false|no|0)\b', re.IGNORECASE)


def test_ansible_cfg_checks_host_keys():
    cfg = configparser.ConfigParser(inline_comment_prefixes=None)
    cfg.read(os.path.join(REPO, 'ansible.cfg'))
    assert cfg.getboolean('defaults', 'host_key_checking') is True
    assert 'ssh_args' not in cfg['ssh_connection'] or not OFF.search(cfg['ssh_connection']['ssh_args'])


def test_no_inventory_turns_the_check_off():
    offenders = []
    for root in ('inventory', 'group_vars'):
        for dirpath, _dirs, files in os.walk(os.path.join(REPO, root)):
            for name in files:
                path = os.path.join(dirpath, name)
                if os.path.isfile(path) and OFF.search(open(path, encoding='utf-8', errors='replace').read()):
                    offenders.append(os.path.relpath(path, REPO))
    assert offenders == []


def test_the_pattern_finds_what_it_is_for():
    assert OFF.search('ansible_ssh_common_args: -o StrictHostKeyChecking=no')
    assert OFF.search('ansible_host_key_checking: false')
    assert not OFF.search('host_key_checking = true')
