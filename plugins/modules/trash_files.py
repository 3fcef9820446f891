#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: trash_files
short_description: Move files into a dated trash directory with a MANIFEST, or put them back byte-identical
version_added: 0.1.0
description:
  - With O(state=trashed), moves every file in O(paths), plus each unit of O(units) - its unit file in the
    unit configuration directory, the files of its drop-in directory and every C(.wants/), C(.requires/)
    and C(.upholds/) link to it - into O(trash_dir), below its original absolute path.
  - Symlinks move as symlinks, so a unit file that is a link into a repository stays a link. Nothing is
    deleted; a move across filesystems copies, fsyncs, checks the copy's sha256 and only then unlinks the
    original; a failure (a full trash) removes the half copy and leaves the original where it was.
  - Writes C(MANIFEST) (v3) in O(trash_dir) as a write-ahead log - each file's row (original path, owner,
    group, mode, sha256 or link target, the path as it was given, the device:inode of its directory) is
    written and fsynced before the file moves, and a C(moved) (or C(failed)) record after; the state each
    unit had before (as passed in O(units)) and O(comments) come first. Every byte outside printable ASCII
    is written C(\xHH), records end at a newline only, so any file name (one that is not UTF-8 included)
    and any comment round-trip.
  - Every directory is opened one component at a time, never through a symlink, and a move never replaces
    an existing entry.
  - Every parent of a given path (and of O(trash_dir)) is resolved before anything is decided, component by
    component - a symlink is followed only in a directory nobody but root (or the running user) can write, and
    one at any depth in a directory another user can write is refused by name; the last component is left
    alone, so a symlink moves as a symlink. The MANIFEST records both the path moved
    and the path given; a MANIFEST v1 (without the given column) or v2 (written after the moves) still restores.
  - Refuses, before anything moves, a system tree (C(/), C(/etc), C(/usr), C(/home), C(/var), a user's home
    directory, the unit directories ...) or any directory above one, a mount point (bind mounts included - the
    mount table C(/proc/self/mountinfo) decides, not the device number), a directory with a mount point inside
    it, a relative O(trash_dir), a O(trash_dir) that is a symlink or that another user owns,
    and a unit name that is not a systemd unit name.
  - Two spellings of one file (a symlinked parent, a bind mount) move it once; the others are reported in
    RV(duplicates) and warned about.
  - With O(state=restored), moves every file of the MANIFEST back to its original path, checks owner, group,
    mode and sha256 (or link target) against the MANIFEST, and renames the MANIFEST to
    C(MANIFEST.restored-<UTC time>).
  - Before anything moves back, refuses by name a MANIFEST or trash directory that neither root nor the
    running user owns (or that others can write), a MANIFEST that is a symlink or not UTF-8 (naming the line), a target whose parent
    directory has a symlinked component or is not the directory the file was retired from, and a MANIFEST
    that accounts for fewer files than the trash directory holds (cut short or edited).
  - A file whose move the MANIFEST left unconfirmed (a crash, a full trash) is restored from wherever it is.
  - Idempotent both ways; in check mode it reports the moves it would make and changes nothing.
  - With C(--diff), the paths that move are listed where they were (before) and where they go (after).
  - Stops no unit and reloads no manager; the role C(dankfleet.llm.runtime_retire) does that around it.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  trash_dir:
    description:
      - The trash directory of one retire, for example C(/var/lib/dankfleet/trash/20260916-vllm-radiance-retire).
      - Must be absolute and not a system tree.
    type: path
    required: true
  state:
    description:
      - C(trashed) moves the files into O(trash_dir); C(restored) moves them back from its MANIFEST.
    type: str
    choices: [trashed, restored]
    default: trashed
  paths:
    description:
      - Files, symlinks or directories (every file below it) to retire. Absent paths that already sit in
        the trash count as retired; absent paths found nowhere are reported in RV(missing).
    type: list
    elements: path
    default: []
  units:
    description:
      - Units whose files to retire and whose state before to record. Only O(state=trashed) reads this.
    type: list
    elements: dict
    default: []
    suboptions:
      unit:
        description:
          - Unit name, for example C(vllm-radiance-proxy.service) - C([A-Za-z0-9:_.@-]) and a unit type suffix,
            never a path.
        type: str
        required: true
      scope:
        description: C(system) reads C(/etc/systemd/system); C(user) reads C(~user/.config/systemd/user).
        type: str
        choices: [system, user]
        default: system
      user:
        description: Owner of a user-scope unit.
        type: str
      active_state:
        description: C(ActiveState) before the retire, as C(systemctl show) reported it.
        type: str
      unit_file_state:
        description: C(UnitFileState) before the retire.
        type: str
      sub_state:
        description: C(SubState) before the retire.
        type: str
  comments:
    description: Lines written as comments at the top of a new MANIFEST (what was retired, by whom, why).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details:
      - Reports the moves it would make (RV(moves)) and changes nothing.
  diff_mode:
    support: full
    details:
      - The before/after listing of every path that moves (original path and trash path).
  platform:
    platforms: linux
notes:
  - In the results, bytes of a name that are not UTF-8 are shown as C(\xHH) (JSON carries text only);
    the MANIFEST and the files keep the real bytes.
  - docs/SECURITY.md, "The trash record" says who can write where and what each check stops.
seealso:
  - module: ansible.builtin.systemd_service
'''

EXAMPLES = r'''
- name: Retire the vLLM proxy unit and its helper script
  dankfleet.llm.trash_files:
    trash_dir: /var/lib/dankfleet/trash/20260916-vllm-radiance-retire
    paths:
      - /home/ops/.config/containers/systemd/vllm-radiance.container
      - /opt/vllm-radiance/proxy.py
    units:
      - unit: vllm-radiance-proxy.service
        scope: system
        active_state: active
        unit_file_state: enabled
        sub_state: running

- name: Put it all back
  dankfleet.llm.trash_files:
    trash_dir: /var/lib/dankfleet/trash/20260916-vllm-radiance-retire
    state: restored
'''

RETURN = r'''
trash_dir:
  description: The trash directory.
  returned: always
  type: str
manifest:
  description: Path of the MANIFEST (after a restore, its C(MANIFEST.restored-*) name).
  returned: always
  type: str
moves:
  description: Every move made (or, in check mode, that would be made).
  returned: always
  type: list
  elements: dict
  contains:
    src:
      description: Where the file was.
      type: str
    dest:
      description: Where it went.
      type: str
    kind:
      description: C(file) or C(link).
      type: str
    sha256:
      description: sha256 of a file, C(-) for a link.
      type: str
    link_target:
      description: Target of a link, C(-) for a file.
      type: str
diff:
  description: With C(--diff), the moved paths where they were (C(before)) and where they went (C(after)), one a line.
  returned: when diff mode is on
  type: dict
  sample: {before: "/opt/vllm-radiance/proxy.py\n", after: "/var/lib/dankfleet/trash/x/opt/vllm-radiance/proxy.py\n"}
already_retired:
  description: Paths absent from their original place that already sit in the trash (O(state=trashed)).
  returned: when state is trashed
  type: list
  elements: dict
missing:
  description: Paths found neither at their original place nor in the trash (O(state=trashed)).
  returned: when state is trashed
  type: list
  elements: str
duplicates:
  description: Later spellings of a file already in the plan (C(given), C(same_as), C(path)); moved once.
  returned: when state is trashed
  type: list
  elements: dict
in_place:
  description: MANIFEST paths already back and identical (O(state=restored)).
  returned: when state is restored
  type: list
  elements: str
already_restored:
  description: True when the MANIFEST had been restored before (only C(MANIFEST.restored-*) is left).
  returned: when state is restored
  type: bool
units:
  description: The unit rows of the MANIFEST, with the state each unit had before it was retired.
  returned: when state is restored
  type: list
  elements: dict
leftovers:
  description:
    - Copies in the trash of files whose move never completed (a crash mid-copy) while the original is back
      in place; kept, never deleted, for a person to look at.
  returned: when state is restored and there are any
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.host.trash_files import (
    TrashError, moves_diff, restore, retire, shown, unit_paths)


ARGUMENT_SPEC = dict(
    trash_dir=dict(type='path', required=True),
    state=dict(type='str', choices=['trashed', 'restored'], default='trashed'),
    paths=dict(type='list', elements='path', default=[]),
    units=dict(type='list', elements='dict', default=[], options=dict(
        unit=dict(type='str', required=True),
        scope=dict(type='str', choices=['system', 'user'], default='system'),
        user=dict(type='str'),
        active_state=dict(type='str'),
        unit_file_state=dict(type='str'),
        sub_state=dict(type='str'),
    )),
    comments=dict(type='list', elements='str', default=[]),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        if params['state'] == 'restored':
            result = restore(params['trash_dir'], check_mode=module.check_mode)
        else:
            paths = list(params['paths'])
            for unit in params['units']:
                if unit['scope'] == 'user' and not unit['user']:
                    module.fail_json(msg='unit %s has scope user but no user: name its owner' % unit['unit'])
                paths.extend(unit_paths(unit['unit'], unit['scope'], unit['user']))
            result = retire(params['trash_dir'], paths, units=params['units'],
                            check_mode=module.check_mode, comments=params['comments'])
    except TrashError as exc:
        module.fail_json(msg=shown(str(exc)))
    except (IOError, OSError) as exc:
        module.fail_json(msg=shown('%s: %s' % (getattr(exc, 'filename', None) or params['trash_dir'], exc)))
    if module._diff:
        result['diff'] = moves_diff(result)
    result = _printable(result)
    for dup in result.get('duplicates') or []:
        module.warn('%s and %s name the same file %s: it moved once' % (dup['same_as'], dup['given'], dup['path']))
    module.exit_json(**result)


def _printable(value):
    """The result with every name that is not UTF-8 spelled with \\xHH escapes (JSON cannot carry raw bytes)."""
    if isinstance(value, dict):
        return dict((k, _printable(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_printable(v) for v in value]
    if isinstance(value, str):
        return shown(value)
    return value


if __name__ == '__main__':
    main()
