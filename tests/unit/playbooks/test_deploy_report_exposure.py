"""playbooks/tasks/deploy_report.yml names an unauthenticated endpoint on a non-loopback address: the
report's tasks run in check mode on three local stand-in hosts (no module leaves the controller)."""
import json
import os
import subprocess
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
REPORT = os.path.join(REPO, 'playbooks', 'tasks', 'deploy_report.yml')
BIN = os.path.dirname(sys.executable)

HOSTS = {
    'open-any': {'llama_server_bind_address': '0.0.0.0', 'llama_server_api_key': ''},
    'open-lan': {'llama_server_bind_address': '10.20.0.10', 'llama_server_api_key': ''},
    'keyed': {'llama_server_bind_address': '0.0.0.0', 'llama_server_api_key': 'sekrit'},
    'loopback': {'llama_server_bind_address': '127.0.0.1', 'llama_server_api_key': ''},
}


def _report_lines(tmp_path):
    inventory = {'all': {'hosts': {name: dict(v, ansible_connection='local', ansible_python_interpreter=sys.executable,
                                              llama_server_port=7770, llama_server_alias='frank-medium', llm_plan={})
                                   for name, v in HOSTS.items()}}}
    (tmp_path / 'hosts.yml').write_text(json.dumps(inventory))
    (tmp_path / 'play.yml').write_text(yaml.safe_dump([{
        'name': 'report', 'hosts': 'all', 'gather_facts': False,
        'tasks': [{'ansible.builtin.import_tasks': REPORT}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_STDOUT_CALLBACK='ansible.posix.json',
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'),
               PATH='%s:%s' % (BIN, os.environ['PATH']))
    run = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-C', '-i', str(tmp_path / 'hosts.yml'),
                          str(tmp_path / 'play.yml')], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(run.stdout)
    task = next(t for t in out['plays'][0]['tasks'] if t['task']['name'] == 'The endpoint')
    return {host: result['msg'][-1] for host, result in task['hosts'].items()}


def test_the_report_names_an_unauthenticated_non_loopback_endpoint(tmp_path):
    lines = _report_lines(tmp_path)
    for host, addr in (('open-any', '0.0.0.0'), ('open-lan', '10.20.0.10')):
        assert lines[host].startswith('WARNING: unauthenticated endpoint: http://%s:7770 on %s' % (addr, host))
        assert 'llama_server_api_key' in lines[host]
    assert lines['keyed'] == 'auth: an API key is required'
    assert lines['loopback'] == 'auth: none, loopback only'


def test_the_screen_and_the_file_carry_the_same_warning():
    """One definition of the warning, on the block that holds both the screen task and the file task."""
    tasks = yaml.safe_load(open(REPORT, encoding='utf-8'))
    defining = [t for t in tasks if '_deploy_report_exposure' in (t.get('vars') or {})]
    assert len(defining) == 1, defining
    inside = [t['name'] for t in defining[0].get('block', [])]
    assert 'The endpoint' in inside and 'The endpoint, written for the caller' in inside, inside
    assert not any('_deploy_report_exposure' in (t.get('vars') or {}) for t in defining[0]['block'])
