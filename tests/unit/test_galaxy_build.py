# -*- coding: utf-8 -*-
"""The Galaxy artifact as a user of Galaxy gets it: `ansible-galaxy collection build` of this tree, then
`ansible-galaxy collection install --offline` of the tarball into an empty project (a clean HOME, no
ansible.cfg, only the collections it declares: none of the ones the `ansible` package brings), and the
installed copy read back with ansible-doc and ansible-inventory.

- the tarball holds the content and nothing of the site or the tooling: its top level and its
  inventories are allowlists (a new top-level dev file or directory fails here until galaxy.yml's
  build_ignore or this list decides), and every path the issue named stays out;
- the dependencies it declares are exactly the collections its roles, playbooks and plugins name;
- `ansible-doc -l` lists every module of plugins/modules and every redirect of meta/runtime.yml
  resolves; `ansible-doc -t role` documents every role; inventory/sample parses, its shared
  group_vars link included; every playbook of playbooks/ passes --syntax-check by its collection name;
- the execution-environment files it points to ship.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import re
import subprocess
import sys
import tarfile

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
BIN = os.path.dirname(sys.executable)

# What may sit at the top of the tarball; the rest of the repository is the site and its tooling.
TOP_LEVEL = {'MANIFEST.json', 'FILES.json', 'README.md', 'COPYING', 'CHANGELOG.rst', 'bindep.txt', 'changelogs',
             'docs', 'group_vars', 'inventory', 'meta', 'playbooks', 'plugins', 'roles'}
INVENTORIES = {'sample'}
# The list, checked by name as well (a prefix, or the file itself).
FORBIDDEN = ('inventory/production', 'inventory/rehearsal', 'inventory/lab', 'tests', 'molecule', 'benchmarks',
             '.config', '.ci', 'Makefile', 'ansible.cfg', 'collections', 'requirements.txt', 'requirements-controller.txt', 'pytest.ini',
             'changelogs/fragments')


def _run(args, env, cwd, timeout=120):
    run = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, '%s failed (%d):\n%s\n%s' % (' '.join(args), run.returncode, run.stdout[-3000:],
                                                             run.stderr[-3000:])
    return run.stdout


@pytest.fixture(scope='module')
def galaxy(tmp_path_factory):
    """Build, install into an empty project; {tarball, members, installed, env, project}."""
    base = tmp_path_factory.mktemp('galaxy')
    home, project, dist = base / 'home', base / 'project', base / 'dist'
    for folder in (home, project, dist):
        folder.mkdir()
    collections = project / 'collections'
    env = {
        'PATH': BIN + os.pathsep + os.environ.get('PATH', '/usr/bin:/bin'),
        'HOME': str(home),
        'LANG': 'C.UTF-8',
        'ANSIBLE_COLLECTIONS_PATH': str(collections),
        # only what the tarball declares: not the collections the `ansible` package installs
        'ANSIBLE_COLLECTIONS_SCAN_SYS_PATH': 'false',
        'ANSIBLE_LOCAL_TEMP': str(home / '.ansible' / 'tmp'),
        'ANSIBLE_NOCOLOR': '1',
    }
    _run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'build', '--output-path', str(dist), REPO],
         env, str(project))
    tarballs = sorted(dist.glob('dankfleet-llm-*.tar.gz'))
    assert len(tarballs) == 1, tarballs
    with tarfile.open(str(tarballs[0])) as tar:
        members = {m.name.rstrip('/'): m for m in tar.getmembers()}
    _run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '--offline', '-p', str(collections),
          str(tarballs[0])], env, str(project))
    installed = collections / 'ansible_collections' / 'dankfleet' / 'llm'
    assert (installed / 'MANIFEST.json').is_file(), 'nothing installed at %s' % installed
    return {'tarball': tarballs[0], 'members': members, 'installed': installed, 'env': env, 'project': str(project)}


def _tree(kind):
    folder = os.path.join(REPO, 'plugins', kind)
    return sorted(n[:-3] for n in os.listdir(folder) if n.endswith('.py') and not n.startswith('__'))


def _roles():
    return sorted(d for d in os.listdir(os.path.join(REPO, 'roles'))
                  if os.path.isdir(os.path.join(REPO, 'roles', d, 'tasks')))


def test_the_tarball_holds_the_content_and_no_site(galaxy):
    names = set(galaxy['members'])
    top = {n.split('/', 1)[0] for n in names}
    assert top <= TOP_LEVEL, 'not content, add it to build_ignore: %s' % sorted(top - TOP_LEVEL)
    inventories = {n.split('/')[1] for n in names if n.startswith('inventory/') and n.count('/') >= 1}
    assert inventories == INVENTORIES, inventories
    shipped = sorted(n for n in names for bad in FORBIDDEN if n == bad or n.startswith(bad + '/'))
    assert not shipped, shipped
    hidden = sorted(n for n in names if any(part.startswith('.') for part in n.split('/')))
    assert not hidden, hidden
    wanted = ['roles/%s/tasks' % role for role in _roles()] + \
        ['plugins/modules/%s.py' % name for name in _tree('modules')] + \
        ['plugins/filter/%s.py' % name for name in _tree('filter')] + \
        ['playbooks/%s' % n for n in os.listdir(os.path.join(REPO, 'playbooks')) if n.endswith('.yml')] + \
        ['inventory/sample/hosts.yml', 'meta/runtime.yml', 'meta/execution-environment.yml', 'README.md', 'COPYING',
         'changelogs/changelog.yaml', 'docs/ARCHITECTURE.md']
    assert [n for n in wanted if n not in names] == []


def test_every_link_in_the_tarball_stays_inside_it(galaxy):
    for name, member in galaxy['members'].items():
        if member.issym():
            target = os.path.normpath(os.path.join(os.path.dirname(name), member.linkname))
            assert target in galaxy['members'] and not target.startswith('..'), '%s -> %s' % (name, member.linkname)


CORE_IMPORT = re.compile(r'^\s*(?:from|import)\s+ansible\.[\w.]+.*$', re.M)


def _collections_named(folders):
    """Every collection (namespace.name) the `ansible` package knows that a shipped file names."""
    import ansible_collections
    known = set()
    for root in ansible_collections.__path__:
        for namespace in os.listdir(root):
            if os.path.isdir(os.path.join(root, namespace)):
                known.update('%s.%s' % (namespace, n) for n in os.listdir(os.path.join(root, namespace))
                             if os.path.isdir(os.path.join(root, namespace, n)) and not n.startswith('_'))
    known -= {'dankfleet.llm', 'ansible.builtin'}
    pattern = re.compile(r'(?<![\w.])(%s)\.\w' % '|'.join(re.escape(k) for k in sorted(known)))
    named = set()
    for folder in folders:
        for root, _dirs, files in os.walk(os.path.join(REPO, folder)):
            for name in files:
                if name.endswith(('.yml', '.yaml', '.py', '.j2')):
                    with open(os.path.join(root, name), errors='replace') as handle:
                        text = handle.read()
                    if name.endswith('.py'):
                        # ansible-core's own packages (ansible.utils.display) are no collection
                        text = CORE_IMPORT.sub('', text)
                    named.update(m.group(1) for m in pattern.finditer(text))
    return named


def test_the_dependencies_are_what_the_content_uses(galaxy):
    with open(os.path.join(str(galaxy['installed']), 'MANIFEST.json')) as handle:
        declared = set(json.load(handle)['collection_info']['dependencies'] or {})
    assert declared == _collections_named(('roles', 'playbooks', 'plugins'))


def _doc_list(galaxy, kind):
    out = _run([os.path.join(BIN, 'ansible-doc'), '-t', kind, '-l', 'dankfleet.llm', '-j'], galaxy['env'],
               galaxy['project'])
    return {name.split('.', 2)[-1] for name in json.loads(out)}


def test_ansible_doc_lists_every_module_and_every_redirect_resolves(galaxy):
    assert _doc_list(galaxy, 'module') >= set(_tree('modules'))
    with open(os.path.join(REPO, 'meta', 'runtime.yml')) as handle:
        routing = (yaml.safe_load(handle).get('plugin_routing') or {}).get('modules') or {}
    for old, route in sorted(routing.items()):
        if 'redirect' in route:
            out = _run([os.path.join(BIN, 'ansible-doc'), '-t', 'module', '-j', 'dankfleet.llm.' + old],
                       galaxy['env'], galaxy['project'])
            assert json.loads(out), 'dankfleet.llm.%s documents nothing' % old


def test_ansible_doc_documents_every_filter_and_role(galaxy):
    assert _doc_list(galaxy, 'filter') >= {'fit_plan', 'serve_shadowed', 'host_state_current'}
    assert _doc_list(galaxy, 'role') >= set(_roles())
    out = _run([os.path.join(BIN, 'ansible-doc'), '-t', 'role', 'dankfleet.llm.llm_plan'], galaxy['env'],
               galaxy['project'])
    assert 'ENTRY POINT: *main*' in out and 'llm_plan_floor_bytes' in out, out[:2000]


def test_the_sample_inventory_parses_from_the_installed_copy(galaxy):
    sample = os.path.join(str(galaxy['installed']), 'inventory', 'sample')
    out = _run([os.path.join(BIN, 'ansible-inventory'), '-i', sample, '--list'], galaxy['env'], galaxy['project'])
    inventory = json.loads(out)
    assert sorted(inventory['llm_endpoints']['hosts']) == ['gpu-node-1', 'gpu-node-2']
    hostvars = inventory['_meta']['hostvars']['gpu-node-1']
    # group_vars/all is the project's shared file through a link: it resolves in the installed copy, and the
    # host's own values arrive
    assert os.path.isfile(os.path.join(sample, 'group_vars', 'all', 'dankfleet.yml'))
    assert hostvars['ansible_host'] == '192.0.2.11'


PLAYBOOKS = sorted(n[:-4] for n in os.listdir(os.path.join(REPO, 'playbooks')) if n.endswith('.yml'))


@pytest.mark.parametrize('playbook', PLAYBOOKS)
def test_every_playbook_runs_by_its_collection_name(galaxy, playbook):
    """From the installed copy, with the sample inventory: nothing it imports is left in the repository."""
    sample = os.path.join(str(galaxy['installed']), 'inventory', 'sample')
    out = _run([os.path.join(BIN, 'ansible-playbook'), '-i', sample, 'dankfleet.llm.' + playbook, '--syntax-check'],
               galaxy['env'], galaxy['project'])
    assert os.path.join('dankfleet', 'llm', 'playbooks', playbook + '.yml') in out, out


def test_the_execution_environment_files_ship(galaxy):
    installed = str(galaxy['installed'])
    with open(os.path.join(installed, 'meta', 'execution-environment.yml')) as handle:
        ee = yaml.safe_load(handle)
    files = ee['dependencies']
    assert set(files) == {'python', 'system'}
    for path in files.values():
        assert os.path.isfile(os.path.join(installed, path)), path
    with open(os.path.join(installed, files['python'])) as handle:
        python = handle.read()
    # bench_report plots on the controller
    assert re.search(r'^matplotlib\b', python, re.M), python
