"""dankfleet.llm.render_files through Ansible itself, on localhost: a template renders exactly as
ansible.builtin.template writes it (so a host_state probe of either finds the other current, and `known` then
skips the round trip), a comment-only change of an env file is written but notifies no handler while a value
change does, and check mode with diff shows the change and writes nothing."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

TEMPLATE = "# {{ note }}\n{% for k, v in env.items() %}\n{{ k }}={{ v }}\n{% endfor %}\n"

PLAY = """\
- hosts: localhost
  gather_facts: false
  vars:
    env: {ALIAS: frank-medium, CTX_SIZE: "{{ ctx }}"}
    owner: "{{ lookup('ansible.builtin.pipe', 'id -un') }}"
    group: "{{ lookup('ansible.builtin.pipe', 'id -gn') }}"
  tasks:
    - name: template
      ansible.builtin.template: {src: env.j2, dest: "{{ out }}/by-template.env", mode: "0640"}
      check_mode: false
    - name: probe
      dankfleet.llm.host_state_info:
        paths: ["{{ out }}/by-template.env", "{{ out }}/a.env", "{{ out }}/b.sh"]
      register: state
    - name: render
      dankfleet.llm.render_files:
        known: "{{ state.paths }}"
        files:
          - {src: env.j2, dest: "{{ out }}/a.env", owner: "{{ owner }}", group: "{{ group }}", mode: "0640",
             compare: values, validate: "grep -q ^CTX_SIZE= %s"}
          - {content: "#!/bin/sh\\necho {{ ctx }}\\n", dest: "{{ out }}/b.sh", mode: "0755", validate: "sh -n %s"}
      register: rendered
      changed_when: rendered.values_changed
      notify: restart
    - name: same  # what ansible.builtin.template wrote
      dankfleet.llm.render_files:
        known: "{{ state.paths }}"
        files:
          - {src: env.j2, dest: "{{ out }}/by-template.env", owner: "{{ owner }}", group: "{{ group }}", mode: "0640"}
      register: same
  handlers:
    - name: restart
      ansible.builtin.copy: {content: "{{ ctx }}\\n", dest: "{{ out }}/restarted-{{ ctx }}-{{ note | replace(' ', '_') }}", mode: "0644"}
"""


def run_play(tmp_path, ctx, note, check=False):
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "templates" / "env.j2").write_text(TEMPLATE)
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent(PLAY))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    cmd = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play), "-e", "out=%s" % tmp_path,
           "-e", "ctx=%s" % ctx, "-e", "note='%s'" % note] + (["--check", "--diff"] if check else [])
    run = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(run.stdout)
    tasks = {t["task"]["name"]: t["hosts"]["localhost"] for t in out["plays"][0]["tasks"]}
    assert {"render", "same"} <= set(tasks), sorted(tasks)
    return tasks


def restarts(tmp_path):
    return sorted(p.name for p in tmp_path.glob("restarted-*"))


def test_a_comment_only_change_is_written_without_a_restart_a_value_change_restarts(tmp_path):
    first = run_play(tmp_path, 4096, "one")
    assert first["render"]["changed"] and first["render"]["round_trips"] == 1
    assert restarts(tmp_path) == ["restarted-4096-one"]
    # the action renders byte for byte what ansible.builtin.template wrote: known finds it current, no round trip
    assert first["same"]["round_trips"] == 0 and not first["same"]["changed"]
    assert (tmp_path / "a.env").read_text() == (tmp_path / "by-template.env").read_text()

    again = run_play(tmp_path, 4096, "one")
    assert again["render"]["round_trips"] == 0 and not again["render"]["changed"]

    reworded = run_play(tmp_path, 4096, "two words")
    files = reworded["render"]["files"]
    assert files[str(tmp_path / "a.env")]["changed"] and not files[str(tmp_path / "a.env")]["values_changed"]
    assert not reworded["render"]["changed"]          # changed_when: values_changed
    assert (tmp_path / "a.env").read_text().startswith("# two words\n")
    assert restarts(tmp_path) == ["restarted-4096-one"]  # no handler ran

    value = run_play(tmp_path, 8192, "two words")
    assert value["render"]["changed"] and value["render"]["values_changed"]
    assert restarts(tmp_path) == ["restarted-4096-one", "restarted-8192-two_words"]


def test_check_mode_diffs_and_writes_nothing(tmp_path):
    run_play(tmp_path, 4096, "one")
    before = (tmp_path / "a.env").read_text()
    checked = run_play(tmp_path, 8192, "one", check=True)
    assert checked["render"]["changed"] and checked["render"]["values_changed"]
    (diff,) = [d for d in checked["render"]["diff"] if d["after_header"].endswith("a.env")]
    assert "CTX_SIZE=4096" in diff["before"] and "CTX_SIZE=8192" in diff["after"]
    assert (tmp_path / "a.env").read_text() == before
    assert restarts(tmp_path) == ["restarted-4096-one"]


def test_a_refused_validate_fails_the_task_and_writes_nothing(tmp_path):
    run_play(tmp_path, 4096, "one")
    (tmp_path / "templates" / "env.j2").write_text("# {{ note }}\nALIAS=x\n")  # no CTX_SIZE: the grep refuses
    play = tmp_path / "play.yml"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
                          "-e", "out=%s" % tmp_path, "-e", "ctx=1", "-e", "note=x"],
                         env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode != 0
    assert "a.env: the validate command refused the new file" in run.stdout
    assert "CTX_SIZE=4096" in (tmp_path / "a.env").read_text()


ITEMS_PLAY = """\
- hosts: localhost
  gather_facts: false
  vars:
    devices: [{device: CPU0, port: 50052}, {device: CPU1, port: 50053}]
  tasks:
    - name: probe
      dankfleet.llm.host_state_info:
        paths: ["{{ out }}/etc", "{{ out }}/etc/units", "{{ out }}/etc/units/a", "{{ out }}/etc/units/b"]
      register: state
    - name: render
      dankfleet.llm.render_files:
        known: "{{ state.paths }}"
        directories:
          - {path: "{{ out }}/etc", mode: "0750"}
          - {path: "{{ out }}/etc/units", mode: "0755"}
        files: >-
          {{ dict(['a', 'b'] | map('regex_replace', '^', out ~ '/etc/units/') | zip(devices))
             | dict2items(key_name='dest', value_name='item') | map('combine', {'src': 'unit.j2', 'mode': '0644'}) }}
      register: rendered
"""


def test_directories_and_one_template_per_item_in_one_round_trip_then_none(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "unit.j2").write_text("-d {{ item.device }} -p {{ item.port }}\n")
    (tmp_path / "play.yml").write_text(ITEMS_PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")

    def play(*extra):
        run = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "play.yml",
                              "-e", "out=%s" % tmp_path] + list(extra), env=env, cwd=tmp_path,
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        tasks = json.loads(run.stdout)["plays"][0]["tasks"]
        return {t["task"]["name"]: t["hosts"]["localhost"] for t in tasks}["render"]

    checked = play("--check", "--diff")
    assert checked["changed"] and not (tmp_path / "etc").exists()
    assert checked["directories"][str(tmp_path / "etc")]["reasons"] == ["absent"]
    first = play()
    assert first["changed"] and first["round_trips"] == 1
    assert (tmp_path / "etc" / "units" / "a").read_text() == "-d CPU0 -p 50052\n"
    assert (tmp_path / "etc" / "units" / "b").read_text() == "-d CPU1 -p 50053\n"
    assert oct(os.stat(str(tmp_path / "etc")).st_mode & 0o7777) == "0o750"
    # the probe found every directory and file as wanted: nothing is sent
    again = play()
    assert not again["changed"] and again["round_trips"] == 0
    assert again["directories"] == {str(tmp_path / "etc"): {"changed": False, "reasons": []},
                                    str(tmp_path / "etc" / "units"): {"changed": False, "reasons": []}}
