"""host_state + host_state_current through Ansible itself: what the template module writes, the
`lookup('ansible.builtin.template')` render of the same source compares as current - the roles skip
their template tasks on that answer, so if the two renders ever differ the skip silently dies (and
this fails). Also: a changed file, mode or owner is not current; check mode reads the same."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

TEMPLATES = {
    # plain text with a trailing newline and a loop (trim_blocks)
    "env.j2": "# {{ title }}\n{% for k, v in env.items() %}\n{{ k }}={{ v }}\n{% endfor %}\n",
    # a JSON document (the Grafana dashboard's kind): must stay text, not become a dict
    "dash.json.j2": '{"title": "{{ title }}", "panels": {{ panels | to_json }}, "n": {{ panels | length }}}\n',
    # a bare number and no trailing newline
    "num.j2": "{{ env | length }}",
}


def run_play(tmp_path, body, check=False):
    """Run the play on localhost with out=<tmp_path>; {task name: localhost's result}."""
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent(body))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    cmd = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play), "-e", "out=%s" % tmp_path] + (["--check"] if check else [])
    run = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(run.stdout)
    return {t["task"]["name"]: t["hosts"]["localhost"] for t in out["plays"][0]["tasks"]}


PLAY = """\
- hosts: localhost
  gather_facts: false
  vars:
    title: frank-medium
    env: {ALIAS: frank-medium, CTX_SIZE: 262144, TENSOR_SPLIT: "0.55,0.45"}
    panels: [{id: 1, title: "tokens/s"}, {id: 2, title: drafts}]
    files: [env.j2, dash.json.j2, num.j2]
    owner: "{{ lookup('ansible.builtin.pipe', 'id -un') }}"
    group: "{{ lookup('ansible.builtin.pipe', 'id -gn') }}"
  tasks:
    - name: write
      ansible.builtin.template: {src: "{{ item }}", dest: "{{ out }}/{{ item }}.out", mode: "0640"}
      loop: "{{ files }}"
    - name: probe
      dankfleet.llm.host_state_info:
        paths: "{{ files | map('regex_replace', '^(.*)$', out ~ '/\\\\1.out') | list + [out] }}"
        users: ["{{ owner }}"]
        commands: [sh, no-such-command-dankfleet]
      register: state
    - name: current
      ansible.builtin.debug:
        msg: >-
          {{ state.paths[out ~ '/' ~ item ~ '.out'] | dankfleet.llm.host_state_current(
               content=lookup('ansible.builtin.template', item), mode='0640', owner=owner, group=group) }}
      loop: "{{ files }}"
    - name: dir
      ansible.builtin.debug:
        msg: "{{ state.paths[out] | dankfleet.llm.host_state_current('directory', owner=owner) }}"
"""


def verdicts(result):
    return {r["item"]: r["msg"] for r in result["current"]["results"]}


def test_template_render_matches_lookup(tmp_path):
    for name, text in TEMPLATES.items():
        (tmp_path / name).write_text(text)
    first = run_play(tmp_path, PLAY)
    assert all(r["changed"] for r in first["write"]["results"])
    assert verdicts(first) == {name: True for name in TEMPLATES}, "the lookup render differs from the file written"
    assert first["dir"]["msg"] is True
    assert first["probe"]["changed"] is False
    assert first["probe"]["commands"]["sh"].endswith("/sh") and first["probe"]["commands"]["no-such-command-dankfleet"] is None
    assert first["probe"]["users"][first["probe"]["paths"][str(tmp_path)]["owner"]]["exists"] is True

    # drift: another byte, another mode -> not current; check mode reads the same and writes nothing
    (tmp_path / "env.j2.out").write_text("# edited by hand\n")
    os.chmod(tmp_path / "num.j2.out", 0o644)
    checked = run_play(tmp_path, PLAY, check=True)
    assert verdicts(checked) == {"env.j2": False, "dash.json.j2": True, "num.j2": False}
    # the template task itself ran under --check: it says it would put both back, and writes nothing
    assert {r["item"]: r["changed"] for r in checked["write"]["results"]} == \
        {"env.j2": True, "dash.json.j2": False, "num.j2": True}
    assert (tmp_path / "env.j2.out").read_text() == "# edited by hand\n"
    assert os.stat(tmp_path / "num.j2.out").st_mode & 0o777 == 0o644
