# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's connection: containers.podman.podman (the pinned 1.18.0) with pipelining.

The pinned plugin declares has_pipelining = False and runs `podman exec` without -i, so stdin never
reaches the container: every module costs a `podman mount`, a temp dir, a file copy, a chmod and
the run (four podman calls). Production's ssh connection pipelines (ansible.cfg); the lab and the
molecule containers go through this subclass, which does the same over `podman exec --interactive`:
one podman call per module, and the container is mounted only when a file is copied in or out.
Everything else (options, put/fetch, the user) is the pinned plugin's own.
"""
from __future__ import annotations

DOCUMENTATION = """
    name: podman_pipelined
    short_description: containers.podman.podman with pipelining, for the lab's containers
    description:
        - The pinned containers.podman.podman connection, running modules through C(podman exec --interactive)
          with pipelining (one podman call per module) and mounting the container only for file transfers.
    options:
      remote_addr:
        description:
          - The ID of the container you want to access.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description:
          - User (name or UID) the commands run as inside the container.
        ini:
          - section: defaults
            key: remote_user
        env:
          - name: ANSIBLE_REMOTE_USER
        vars:
          - name: ansible_user
      podman_extra_args:
        description:
          - Extra arguments to pass to the podman command line.
        default: ''
        ini:
          - section: defaults
            key: podman_extra_args
        vars:
          - name: ansible_podman_extra_args
        env:
          - name: ANSIBLE_PODMAN_EXTRA_ARGS
      podman_executable:
        description:
          - Executable for podman command.
        default: podman
        vars:
          - name: ansible_podman_executable
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
      pipelining:
        description:
          - Send modules over stdin (C(podman exec --interactive)) instead of copying them into the container.
            On by default here (this connection exists for it); C(ANSIBLE_PIPELINING=false) measures without.
        default: true
        type: boolean
        env:
          - name: ANSIBLE_PIPELINING
        vars:
          - name: ansible_pipelining
"""

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection


class Connection(PodmanConnection):
    """containers.podman.podman, pipelined."""

    transport = "podman_pipelined"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._mounted = False

    def _connect(self):
        # The pinned plugin runs `podman mount` here, for every task; only put_file/fetch_file use it.
        self._connected = True
        return self

    def _mount(self):
        if not self._mounted:
            super()._connect()  # the pinned plugin's: podman mount (podman cp when it cannot)
            self._mounted = True

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        """As the pinned plugin, with --interactive when there is stdin to pass (a pipelined module)."""
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        exec_args = ["exec"]
        if in_data is not None:
            exec_args.append("--interactive")
        if self.user:
            exec_args.extend(("--user", self.user))
        return self._podman(exec_args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path, out_path):
        self._mount()
        super().put_file(in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mount()
        super().fetch_file(in_path, out_path)
