#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
---
module: gguf_fetch
short_description: Resumable, byte-verified download of a large model file
version_added: 0.1.0
author:
  - dankfleet engineers (@dankfleet)
description:
  - Downloads O(url) to O(dest) through C(<dest>.part), resuming an interrupted
    download with an HTTP Range request, and computes sha256 while the bytes
    arrive, so a multi-GB file is read once.
  - O(dest) appears only by an atomic rename, and only when both O(size) and
    O(sha256) match the declared values. Declare them from the inventory
    manifest (the Hub's LFS oid is the sha256), never from a local file.
  - A present O(dest) is verified first, by its stamp C(<dest>.verified.json)
    (size, mtime, inode, sha256; written after a full hash matched) or, with
    O(verify=full), by re-hashing it. A present file that does not match is
    moved into O(trash_dir), never deleted, and then downloaded again. A
    complete C(.part) that does not match is moved to the trash too and the
    task fails.
  - A present O(dest) whose size differs from O(size) but equals the size the
    server reports for O(url) is refused before anything moves, naming both
    numbers and the fix, because the declared size is the wrong one (the runbook's
    DSpark incident, a size recorded from a local file 96 MB short of the Hub's).
  - Each move gets a directory of its own, C(<trash_dir>/<UTC time>-<file>/),
    in M(dankfleet.llm.trash_files)' format - the file (with its stamp) at its
    absolute path below it and a C(MANIFEST) of owner, group, mode and sha256
    whose comments say what was expected and found - so
    M(dankfleet.llm.trash_files) with C(state=restored)
    puts it back byte-identical.
  - Connection loss, stalls (no byte for O(timeout) seconds) and HTTP
    408/425/429/5xx are retried with exponential backoff from where the
    C(.part) ends. A server that ignores Range (200 instead of 206) restarts
    the C(.part) from zero; 416 on a complete C(.part) goes to verification.
  - Before downloading, the destination filesystem must have the bytes still
    to download plus O(disk_margin_bytes) free, or the task fails naming the
    numbers and nothing is downloaded.
  - Proxies come from the environment (C(http_proxy), C(https_proxy), C(no_proxy)).
    The bearer token is sent only to the origin of O(url), not to a redirect
    target on another host (the Hub redirects to a signed CDN URL).
  - Every redirect is held to the policy O(url) passed (http or https, a host, no
    https to http downgrade); one that fails it is refused, not followed. A link-local
    address (C(169.254.0.0/16), C(fe80::/10), where cloud metadata services answer) is never fetched, and a
    redirect from a public host to a loopback or private address is refused (a private mirror
    named in O(url) itself is fine). The connection goes to the address that was checked.
  - Credentials in O(url) (C(user:password@)) and a O(token) with surrounding whitespace (a
    trailing newline from a YAML C(|) block) or a control character are refused by name before
    anything is sent, without showing them.
  - A fetch always ends. An attempt that receives less than 16 KiB in any O(timeout) seconds
    is cut off as too slow and retried (a server dribbling bytes); progress is new bytes past the furthest byte an earlier
    attempt reached (a server restarting every range at byte 0 makes none), a
    malformed C(Content-Length) or C(Content-Range) fails naming it, and one run
    makes at most (O(retries) + 1) x 20 attempts.
  - One fetch per destination file at a time (C(flock) on C(<dest>.lock), removed
    afterwards); different files in one directory download at once. A O(dest),
    C(.part) or C(.lock) that exists and is not a regular file (a FIFO, a device)
    is refused before anything is read or moved.
  - Unlike M(ansible.builtin.get_url), it resumes, and check mode verifies what
    is on disk instead of sending a HEAD request.
options:
  url:
    description:
      - HTTP or HTTPS URL of the file, for example
        C(https://huggingface.co/<repo>/resolve/<revision>/<file>).
    type: str
    required: true
  dest:
    description:
      - Absolute path of the file to create (a relative path is refused). Its directory must exist, or be one of
        O(directories).
      - The download goes to C(<dest>.part) and the stamp to C(<dest>.verified.json).
      - Its directory may belong to another user (the service user's models directory); every name in it is
        used relative to the opened directory, and a C(dest), C(.part), C(.lock) or stamp that is a symbolic
        link, FIFO, socket or directory is refused before anything changes, as is a link among the directory's
        components below a directory another user can write (see docs/SECURITY.md).
      - The file name may be at most 241 bytes, so that C(<dest>.verified.json) fits the filesystem's 255.
    type: path
    required: true
  size:
    description:
      - Declared size in bytes, from the manifest. A server that reports another
        size fails the task before any byte is written.
    type: int
    required: true
  sha256:
    description:
      - Declared sha256, 64 hex digits (an optional C(sha256:) prefix is accepted).
    type: str
    required: true
  token:
    description:
      - "Bearer token for gated repositories, sent as C(Authorization: Bearer <token>), only to the origin of O(url).
        Never logged (C(no_log)); one with surrounding whitespace or a control character is refused unshown."
    type: str
  verify:
    description:
      - How a present O(dest) is verified.
      - V(stamp) trusts a stamp whose size, mtime, ctime, inode and sha256 all match the
        file and the declared values, and re-hashes otherwise. ctime is set only by the kernel, so bytes
        rewritten in place with the mtime set back are re-hashed; a stamp without C(ctime_ns) (written by an
        older release) or of any other shape vouches for nothing.
      - V(full) always re-hashes the whole file (the runbook's C(--verify-only)).
    type: str
    choices: [stamp, full]
    default: stamp
  retries:
    description:
      - How many consecutive failed attempts to retry. An attempt that received
        at least 16 KiB past the furthest byte reached before resets the count, so a
        flaky link still finishes a long download; a run makes at most
        (O(retries) + 1) x 20 attempts, whatever the progress.
    type: int
    default: 5
  retry_delay:
    description:
      - Seconds before the first retry; doubles per consecutive failure, capped at 60.
    type: float
    default: 2.0
  timeout:
    description:
      - Seconds an attempt has for the connection, the redirects and the answer's headers together
        (a server sending its headers a byte at a time is cut off), and for the next byte of the body
        before the attempt counts as stalled and is retried; an attempt that receives less than 16 KiB in
        any such period counts as stalled too. Bytes received before a stall or a reset are kept.
    type: float
    default: 30.0
  trash_dir:
    description:
      - Where mismatching files are moved, each move in a directory of its own with a C(MANIFEST)
        (M(dankfleet.llm.trash_files)' format).
      - Defaults to C(.trash) in the directory of O(dest) (same filesystem, so the move is a rename).
      - Must be absolute.
    type: path
  progress_log:
    description:
      - File to append progress lines to (start, resume, retries, bytes, rate, ETA,
        trash moves, the result), for C(tail -f) during a long download.
      - Not written in check mode. Omit for no log.
      - Absent or a regular file; appended without following a link.
    type: path
  progress_interval:
    description:
      - Seconds between progress lines in O(progress_log).
    type: float
    default: 10.0
  disk_margin_bytes:
    description:
      - Free bytes to leave on the destination filesystem after the download.
    type: int
    default: 1073741824
  validate_certs:
    description:
      - Verify the server's TLS certificate.
    type: bool
    default: true
  directories:
    description:
      - Directories to make sure of first, each C(path) (absolute) with an optional C(owner), C(group) and C(mode),
        as M(ansible.builtin.file) with C(state=directory) does - a missing one is created (missing parents too,
        with the same owner, group and mode), a present one gets the owner, group and mode given.
      - Every input is checked before the first directory is made; a path that exists and is not a directory
        fails the task before anything is created.
      - In check mode nothing is created or changed; RV(directories) says what would be.
      - So one call per file is the whole fetch on a host where everything is already in place (the
        C(dankfleet.llm.gguf_fetch) role passes its models directory, the file's own directory, the trash and
        the progress log's directory).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      owner:
        description: Its owner (name or uid).
        type: str
      group:
        description: Its group (name or gid).
        type: str
      mode:
        description: Its mode, as M(ansible.builtin.file) takes it (V('0755'), V(u=rwx,g=rx,o=rx)).
        type: raw
  fsync:
    description:
      - Flush the C(.part) to disk before the rename, so a crash cannot leave a
        verified-looking name over unwritten blocks.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.files
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
attributes:
  check_mode:
    support: full
    details:
      - Verifies what is on disk (stamp or hash) and reports V(verified),
        V(would_download), V(would_resume) or V(mismatch) without writing,
        moving or downloading anything. The disk preflight still applies.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - The stamp does not survive a copy, a C(touch), a write, a C(chmod) or C(chown) of O(dest) by anyone
    else (mtime, ctime or inode change); the next run then re-hashes once and writes a new stamp.
    The module's own O(owner), O(group) and O(mode) are applied before the stamp is written.
seealso:
  - module: ansible.builtin.get_url
"""

EXAMPLES = r"""
- name: Fetch the target model, verified against the manifest
  dankfleet.llm.gguf_fetch:
    url: https://huggingface.co/orcarouter/Qwen3.8-27B-Uncensored-GGUF/resolve/main/model-Q8_0.gguf
    dest: /var/lib/dankfleet/models/my-model/model-Q8_0.gguf
    size: 31457990112
    sha256: "{{ model_sha256 }}"
    token: "{{ hf_token | default(omit) }}"
    owner: llm
    group: llm
    mode: "0644"
    progress_log: /var/log/dankfleet/gguf_fetch.log
  register: fetched

- name: Re-hash everything, like the runbook's --verify-only
  dankfleet.llm.gguf_fetch:
    url: "{{ item.url }}"
    dest: "{{ item.dest }}"
    size: "{{ item.size }}"
    sha256: "{{ item.sha256 }}"
    verify: full
  loop: "{{ models }}"
  check_mode: true
"""

RETURN = r"""
status:
  description:
    - V(verified) (present and matching), V(downloaded) (fetched from byte 0),
      V(resumed) (continued an existing C(.part)); in check mode
      V(would_download), V(would_resume) or V(mismatch).
  returned: always
  type: str
  sample: resumed
path:
  description: The destination path.
  returned: always
  type: str
  sample: /var/lib/dankfleet/models/my-model/model-Q8_0.gguf
declared_size:
  description: The declared size in bytes.
  returned: always
  type: int
  sample: 31457990112
size:
  description: On-disk size of O(dest) after the run (with owner, group, mode, uid, gid, state, as Ansible adds for a path).
  returned: when dest exists
  type: int
  sample: 31457990112
declared_sha256:
  description: The declared sha256, normalised to lower case.
  returned: always
  type: str
  sample: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
bytes_downloaded:
  description: Body bytes received over the network in this run (including bytes discarded by a restart).
  returned: always
  type: int
  sample: 1048576
bytes_hashed:
  description:
    - Bytes fed to sha256 in this run; 0 when a stamp vouched for the file,
      the size for a full verify, the C(.part) prefix plus the new bytes for a resume.
  returned: always
  type: int
  sample: 0
resumed_from:
  description:
    - Byte offset of the existing C(.part) this run continued from (0 for a fresh
      download or when the server forced a restart); in check mode, where it would resume.
  returned: always
  type: int
  sample: 524288
rate_bytes_per_s:
  description: Average transfer rate of this run's downloading, bytes per second.
  returned: always
  type: int
  sample: 104857600
elapsed_s:
  description: Seconds from the first request to the end of the download.
  returned: always
  type: float
  sample: 12.5
attempts:
  description: HTTP attempts made (1 when nothing failed; 0 when nothing was downloaded).
  returned: always
  type: int
  sample: 1
resumes:
  description: Attempts that continued with a Range request after a failure within this run.
  returned: always
  type: int
  sample: 0
restarts:
  description: Times the C(.part) was restarted from byte 0 because the server ignored Range.
  returned: always
  type: int
  sample: 0
would_download_bytes:
  description: In check mode, the bytes a real run would download.
  returned: always
  type: int
  sample: 0
verified_by:
  description: V(stamp) or V(sha256), how a present file was verified.
  returned: when status is verified
  type: str
  sample: stamp
stamp:
  description: The stamp beside the verified file (size, mtime_ns, ctime_ns, inode, sha256, verified_at, source).
  returned: when the file is verified or was promoted
  type: dict
  sample: {"size": 1048576, "mtime_ns": 1764410000000000000, "ctime_ns": 1764410000000000000, "inode": 1234, "sha256": "2c26...e7ae"}
mismatch:
  description: What was wrong with the present file (reason, found_size, found_sha256).
  returned: when a present file did not match
  type: dict
  sample: {"reason": "size mismatch: expected 1455376576 bytes, found 1359284737", "found_size": 1359284737, "found_sha256": null}
trashed:
  description:
    - Files moved to the trash in this run, each with C(path) (where it is now), C(from), C(reason),
      C(trash_dir) (the move's own directory, what M(dankfleet.llm.trash_files) restores),
      C(manifest) (its MANIFEST) and C(note) (the same MANIFEST, whose comments say what was expected and found).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/var/lib/dankfleet/models/.trash/20260916T101500.000000Z-x.gguf/var/lib/dankfleet/models/m/x.gguf",
            "trash_dir": "/var/lib/dankfleet/models/.trash/20260916T101500.000000Z-x.gguf",
            "manifest": "/var/lib/dankfleet/models/.trash/20260916T101500.000000Z-x.gguf/MANIFEST",
            "note": "/var/lib/dankfleet/models/.trash/20260916T101500.000000Z-x.gguf/MANIFEST",
            "reason": "sha256 mismatch: ...", "from": "/var/lib/dankfleet/models/m/x.gguf"}]
disk:
  description: The free-disk preflight (free_bytes, needed_bytes, to_download_bytes, margin_bytes, path).
  returned: when a download was considered
  type: dict
  sample: {"free_bytes": 80000000000, "needed_bytes": 2147483648, "to_download_bytes": 1073741824,
           "margin_bytes": 1073741824, "path": /var/lib/dankfleet/models/m}
progress_log:
  description: The progress log path, if any.
  returned: always
  type: str
  sample: /var/log/dankfleet/gguf_fetch.log
directories:
  description:
    - One entry per O(directories) item, in order - C(path), C(state) (V(present); V(created) or V(updated) - its
      owner, group or mode set; in check mode V(would_create) or V(would_update)) and C(changed).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/var/lib/dankfleet/models", "state": "present", "changed": false},
           {"path": "/var/lib/dankfleet/models/my-model", "state": "created", "changed": true}]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import FetchError, Fetcher, fetch
from ansible_collections.dankfleet.llm.plugins.module_utils.base.http_client import url_credentials
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import FileRefused, open_dir


def ensure_directories(module, directories):
    """ansible.builtin.file state=directory for each item, in one call; check mode reports and changes nothing."""
    for d in directories:  # every path is checked before the first directory is made
        if not os.path.isabs(d["path"]):
            module.fail_json(msg="directories: %s is not an absolute path. Nothing was changed" % d["path"],
                             directories=[])
        if os.path.lexists(d["path"]) and not os.path.isdir(d["path"]):
            module.fail_json(msg="directories: %s exists and is not a directory: move it aside or point the "
                                 "directory elsewhere. Nothing was changed" % d["path"], directories=[])
        try:  # no link below a directory another user can write, no file where a directory belongs
            found = open_dir(os.path.normpath(d["path"]), "directories item", must_exist=False)
        except FileRefused as e:
            module.fail_json(msg="directories: %s. Nothing was changed" % e, directories=[])
        if found is not None:
            found.close()
    out = []
    for d in directories:
        path = os.path.normpath(d["path"])
        attrs = dict(owner=d.get("owner"), group=d.get("group"), mode=d.get("mode"), follow=False)
        missing = []
        cur = path
        while not os.path.lexists(cur):
            missing.append(cur)
            cur = os.path.dirname(cur)
        entry = {"path": path, "state": "present", "changed": False}
        if missing and module.check_mode:
            entry.update(state="would_create", changed=True)
        elif missing:
            for p in reversed(missing):
                try:  # made relative to its opened parent, never through a link
                    open_dir(p, "directories item", create_mode=0o755).close()
                except (FileRefused, OSError) as e:
                    module.fail_json(msg="directories: could not create %s: %s" % (p, to_native(e)), directories=out)
                module.set_fs_attributes_if_different(module.load_file_common_arguments(attrs, path=p), True)
            entry.update(state="created", changed=True)
        elif module.set_fs_attributes_if_different(module.load_file_common_arguments(attrs, path=path), False):
            entry.update(state="would_update" if module.check_mode else "updated", changed=True)
        out.append(entry)
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            size=dict(type="int", required=True),
            sha256=dict(type="str", required=True),
            token=dict(type="str", no_log=True),
            verify=dict(type="str", default="stamp", choices=["stamp", "full"]),
            retries=dict(type="int", default=5),
            retry_delay=dict(type="float", default=2.0),
            timeout=dict(type="float", default=30.0),
            trash_dir=dict(type="path"),
            progress_log=dict(type="path"),
            progress_interval=dict(type="float", default=10.0),
            disk_margin_bytes=dict(type="int", default=1073741824),
            validate_certs=dict(type="bool", default=True),
            fsync=dict(type="bool", default=True),
            directories=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                owner=dict(type="str"),
                group=dict(type="str"),
                mode=dict(type="raw"),
            )),
        ),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    p = module.params
    for secret in url_credentials(p["url"]) + ([p["token"].strip()] if (p["token"] or "").strip() else []):
        module.no_log_values.add(secret)    # refused below; never in the invocation or a message
    args = (p["url"], p["dest"], p["size"], p["sha256"])
    kwargs = dict(
        token=p["token"], verify=p["verify"], retries=p["retries"],
        retry_delay=p["retry_delay"], timeout=p["timeout"], trash_dir=p["trash_dir"],
        progress_log=p["progress_log"], progress_interval=p["progress_interval"],
        disk_margin_bytes=p["disk_margin_bytes"], validate_certs=p["validate_certs"],
        fsync=p["fsync"], check_mode=module.check_mode,
        # owner/mode before the stamp: a chown moves ctime, and a stamp written before it would never match again
        attributes=lambda path: module.set_fs_attributes_if_different(module.load_file_common_arguments(p, path=path), False),
    )
    directories = []
    try:
        if p["directories"]:
            Fetcher(*args, **kwargs).check_inputs()  # bad input fails before a directory is made
            directories = ensure_directories(module, p["directories"])
        result = fetch(*args, **kwargs)
    except FetchError as e:
        module.fail_json(msg=e.msg, directories=directories, **e.result)
    result["directories"] = directories
    result["changed"] = result["changed"] or any(d["changed"] for d in directories)

    # Ownership and mode of a file a stamp vouched for (a verified or downloaded one got them before its stamp).
    if os.path.exists(result["path"]):
        file_args = module.load_file_common_arguments(p, path=result["path"])
        result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
