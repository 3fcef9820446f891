"""A payload path that is a symbolic link loop is there and unreadable, never absent (issue 33: os.path.exists()
said False for it, and gguf_info reported the payload missing)."""
import os

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts, gguf_files
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError


@pytest.fixture
def loop(tmp_path):
    (tmp_path / 'a.gguf').symlink_to(tmp_path / 'b.gguf')
    (tmp_path / 'b.gguf').symlink_to(tmp_path / 'a.gguf')
    return str(tmp_path / 'a.gguf')


def test_a_link_loop_is_unreadable_not_absent(loop, tmp_path):
    (tmp_path / 'dangling.gguf').symlink_to(tmp_path / 'nowhere')
    files = gguf_files({'target': loop, 'below': os.path.join(loop, 'x.gguf'), 'absent': str(tmp_path / 'none.gguf'),
                        'dangling': str(tmp_path / 'dangling.gguf')})
    assert files['target']['exists'] is True
    assert files['target']['error'] == '%s: unreadable: a symbolic link loop (or a chain of more links than the ' \
                                       'kernel follows)' % loop
    assert files['below']['exists'] is True and 'symbolic link loop' in files['below']['error']
    assert files['absent'] == {'path': str(tmp_path / 'none.gguf'), 'exists': False}
    assert files['dangling']['exists'] is False        # a link to nothing: nothing at the end of it


def test_reading_a_link_loop_names_the_loop(loop):
    with pytest.raises(GGUFError, match='unreadable: a symbolic link loop'):
        gguf_facts(loop)
