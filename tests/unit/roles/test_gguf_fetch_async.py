"""gguf_fetch: the probe (check mode, every file) and the async download of one file call the module with
the same arguments, word for word: a file the probe verified is the file the download would fetch."""
import os

import yaml

ROLE = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'gguf_fetch', 'tasks'))


def _fetch_tasks(name):
    tasks = yaml.safe_load(open(os.path.join(ROLE, name), encoding='utf-8'))
    return [t for t in tasks if 'dankfleet.llm.gguf_fetch' in t]


def test_the_probe_and_the_download_send_the_same_arguments():
    (probe,) = _fetch_tasks('fetch.yml')
    (download,) = _fetch_tasks('fetch_file.yml')
    assert probe['dankfleet.llm.gguf_fetch'] == download['dankfleet.llm.gguf_fetch']
    assert probe['check_mode'] is True and 'async' not in probe
    assert download['poll'] == 0 and 'async' in download and 'check_mode' not in download


def test_only_what_the_probe_would_change_is_downloaded_and_never_in_a_dry_run():
    tasks = yaml.safe_load(open(os.path.join(ROLE, 'fetch.yml'), encoding='utf-8'))
    (include,) = [t for t in tasks if 'ansible.builtin.include_tasks' in t]
    assert include['ansible.builtin.include_tasks']['file'] == 'fetch_file.yml'
    assert include['loop'] == '{{ __gguf_fetch_results.results }}'
    assert include['when'] == ['_gguf_fetch_probed.changed', 'not ansible_check_mode']
