#!/usr/bin/env python
"""A synthetic private ROCm toolchain with the real directory shapes, for the hip path.

No ROCm toolchain is on any reachable registry, so the hip-specific parts of
llama_cpp_build (toolchain unpack, environment scrubbing, cmake arguments,
bundling of shared and device-code libraries, verification) are tested against
this tree instead. The shared libraries are real ELF files compiled here with
the host's cc, so readelf and ldd see true NEEDED/SONAME/RUNPATH entries:

    bin/clang                                   stub script (HIPCXX)
    lib/llvm/bin/clang                          stub script (TheRock's place)
    lib/libamdhip64.so.7 -> .7.0.0              NEEDED librocm_sysdeps_numa.so.1, RUNPATH $ORIGIN/rocm_sysdeps/lib
    lib/librocblas.so.5 -> .5.0.0               NEEDED libamdhip64.so.7, RUNPATH $ORIGIN
    lib/libhipblas.so.3 -> .3.0.0               NEEDED librocblas.so.5, RUNPATH $ORIGIN
    lib/libamd_comgr.so.3 -> .3.0.0             opened with dlopen by the HIP runtime (not NEEDED)
    lib/rocm_sysdeps/lib/librocm_sysdeps_numa.so.1
    lib/rocblas/library/TensileLibrary.dat      the index rocBLAS reads first
    lib/rocblas/library/*gfx1201* and *gfx1100* device code
    lib/hipblaslt/library/gfx1201/..., gfx1100/...

`stub_cmake` writes a cmake stand-in that records its argv and environment and
"builds" llama-server & co. as tiny programs linked against the toolchain, with
RUNPATH $ORIGIN/../lib as the real build gets it.

    python3 tests/lab/synthetic_toolchain.py DIR   # writes DIR/toolchain, DIR/toolchain.tar.gz, DIR/cmake
"""

from __future__ import (absolute_import, division, print_function)

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap

GFX_TARGETS = ('gfx1201', 'gfx1100')


def _cc(out, source, args):
    src = out + '.c'
    with open(src, 'w') as handle:
        handle.write(source)
    subprocess.check_call(['cc', '-shared', '-fPIC', '-o', out, src] + list(args))
    os.remove(src)


def _lib(lib_dir, name, version, body, needed=(), runpath=None, link_dirs=()):
    """lib<name>.so.<major> -> lib<name>.so.<version>, with a real SONAME/NEEDED/RUNPATH."""
    major = version.split('.')[0]
    soname = 'lib%s.so.%s' % (name, major)
    real = os.path.join(lib_dir, 'lib%s.so.%s' % (name, version))
    args = ['-Wl,-soname,' + soname]
    for d in link_dirs:
        args.append('-L' + d)
    for n in needed:
        args.append('-l:' + n)
    if runpath:
        args += ['-Wl,--enable-new-dtags', '-Wl,-rpath,' + runpath]
    _cc(real, body, args)
    link = os.path.join(lib_dir, soname)
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.basename(real), link)
    dev = os.path.join(lib_dir, 'lib%s.so' % name)
    if not os.path.lexists(dev):
        os.symlink(soname, dev)
    return soname


def _write(path, data, mode=0o644):
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path))
    with open(path, 'w') as handle:
        handle.write(data)
    os.chmod(path, mode)


def make_toolchain(root):
    """Create the synthetic toolchain tree under root (replaced if present)."""
    if os.path.lexists(root):
        shutil.rmtree(root)
    lib = os.path.join(root, 'lib')
    sysdeps = os.path.join(lib, 'rocm_sysdeps', 'lib')
    os.makedirs(sysdeps)
    clang = '#!/bin/sh\n# synthetic toolchain: stands in for the private ROCm clang\necho "AMD clang version 20.0.0 (synthetic)"\n'
    _write(os.path.join(root, 'bin', 'clang'), clang, 0o755)
    _write(os.path.join(root, 'lib', 'llvm', 'bin', 'clang'), clang, 0o755)
    _write(os.path.join(root, 'bin', 'hipconfig'), '#!/bin/sh\necho 7.14.0-synthetic\n', 0o755)
    _lib(sysdeps, 'rocm_sysdeps_numa', '1.0.0', 'int numa_synthetic(void){return 1;}\n')
    _lib(lib, 'amdhip64', '7.0.0', 'int numa_synthetic(void);\nint hip_synthetic(void){return numa_synthetic();}\n',
         needed=['librocm_sysdeps_numa.so.1'], runpath='$ORIGIN/rocm_sysdeps/lib', link_dirs=[sysdeps])
    _lib(lib, 'rocblas', '5.0.0', 'int hip_synthetic(void);\nint rocblas_synthetic(void){return hip_synthetic();}\n',
         needed=['libamdhip64.so.7'], runpath='$ORIGIN', link_dirs=[lib, sysdeps])
    _lib(lib, 'hipblas', '3.0.0', 'int rocblas_synthetic(void);\nint hipblas_synthetic(void){return rocblas_synthetic();}\n',
         needed=['librocblas.so.5'], runpath='$ORIGIN', link_dirs=[lib, sysdeps])
    _lib(lib, 'amd_comgr', '3.0.0', 'int comgr_synthetic(void){return 3;}\n')
    rocblas = os.path.join(lib, 'rocblas', 'library')
    _write(os.path.join(rocblas, 'TensileLibrary.dat'), 'synthetic rocBLAS Tensile index\n')
    for gfx in GFX_TARGETS:
        _write(os.path.join(rocblas, 'TensileLibrary_lazy_%s.dat' % gfx), 'lazy %s\n' % gfx)
        _write(os.path.join(rocblas, 'Kernels.so-000-%s.hsaco' % gfx), 'hsaco %s\n' % gfx)
        hipblaslt = os.path.join(lib, 'hipblaslt', 'library', gfx)
        _write(os.path.join(hipblaslt, 'TensileLibrary_%s.dat' % gfx), 'hipblaslt %s\n' % gfx)
        _write(os.path.join(hipblaslt, 'hipblasltTransform.hsaco'), 'transform %s\n' % gfx)
    return root


def make_tarball(root, tarball):
    """Pack the tree's contents (no leading directory) and return its sha256."""
    with tarfile.open(tarball, 'w:gz') as tar:
        for name in sorted(os.listdir(root)):
            tar.add(os.path.join(root, name), arcname=name)
    return sha256(tarball)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def make_source_archive(tarball, top='fake-llama.cpp-b11434', subdir='llama.cpp'):
    """A tiny 'sdist': <top>/<subdir>/CMakeLists.txt, returns its sha256."""
    staging = tarball + '.d'
    if os.path.lexists(staging):
        shutil.rmtree(staging)
    _write(os.path.join(staging, top, subdir, 'CMakeLists.txt'), 'project(synthetic-llama)\n')
    _write(os.path.join(staging, top, 'PKG-INFO'), 'Name: synthetic\n')
    with tarfile.open(tarball, 'w:gz') as tar:
        tar.add(os.path.join(staging, top), arcname=top)
    shutil.rmtree(staging)
    return sha256(tarball)


STUB_CMAKE = r'''#!/usr/bin/env python3
# Stand-in for cmake in the hip tests: records every call (argv + the complete
# environment) to <build>/cmake-calls.jsonl and builds llama-server & co. as tiny
# programs linked like the real ones (libggml-hip.so -> hipblas/rocblas/amdhip64,
# RUNPATH $ORIGIN/../lib unless -DSTUB_NO_RUNPATH=ON; --version's commit
# from -DSTUB_COMMIT, else unknown).
import json, os, subprocess, sys

argv = sys.argv[1:]
if '--build' in argv:
    build = argv[argv.index('--build') + 1]
else:
    build = argv[argv.index('-B') + 1]
os.makedirs(build, exist_ok=True)
with open(os.path.join(build, 'cmake-calls.jsonl'), 'a') as log:
    log.write(json.dumps({'argv': argv, 'env': dict(os.environ)}) + '\n')

if '--build' not in argv:
    flags = dict(a[2:].split('=', 1) for a in argv if a.startswith('-D'))
    with open(os.path.join(build, 'CMakeCache.txt'), 'w') as cache:
        for k, v in sorted(flags.items()):
            cache.write('%s:STRING=%s\n' % (k, v))
    print('-- Configuring done (stub)')
    sys.exit(0)

flags = {}
with open(os.path.join(build, 'CMakeCache.txt')) as cache:
    for line in cache:
        k, v = line.rstrip('\n').split('=', 1)
        flags[k.split(':')[0]] = v
targets = argv[argv.index('--target') + 1:]
rocm = os.environ['ROCM_PATH']
number = flags['LLAMA_BUILD_NUMBER']
gpus = flags.get('GPU_TARGETS', '').split(';')
rpath = [] if flags.get('STUB_NO_RUNPATH') == 'ON' else ['-Wl,--enable-new-dtags', "-Wl,-rpath,$ORIGIN/../lib"]
bindir = os.path.join(build, 'bin')
os.makedirs(bindir, exist_ok=True)
src = os.path.join(build, 'ggml-hip.c')
with open(src, 'w') as f:
    f.write('int hipblas_synthetic(void);\nint ggml_hip_devices(void){return hipblas_synthetic();}\n')
lib = os.path.join(rocm, 'lib')
subprocess.check_call(['cc', '-shared', '-fPIC', '-o', os.path.join(bindir, 'libggml-hip.so'), src,
                       '-Wl,-soname,libggml-hip.so', '-L' + lib, '-L' + os.path.join(lib, 'rocm_sysdeps', 'lib'),
                       '-l:libhipblas.so.3', '-Wl,-rpath-link,' + lib,
                       '-Wl,-rpath-link,' + os.path.join(lib, 'rocm_sysdeps', 'lib')] + rpath)
main = os.path.join(build, 'main.c')
with open(main, 'w') as f:
    f.write("""#include <stdio.h>
#include <string.h>
int ggml_hip_devices(void);
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        fprintf(stderr, "version: 0.6.0-dev (build %s, commit %s)\\nbuilt with synthetic for x86_64-linux-gnu\\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--list-devices") == 0) {
        printf("Available devices:\\n");
        if (ggml_hip_devices() == 1) {
%s        }
        return 0;
    }
    return 0;
}
""" % (number, flags.get('STUB_COMMIT', 'unknown'),
       ''.join('            printf("  ROCm%d: AMD Radeon AI PRO R9700 %s (32624 MiB, 32000 MiB free)\\n");\n' % (i, g)
                        for i, g in enumerate(gpus))))
for target in targets:
    print('[stub] building %s' % target)
    subprocess.check_call(['cc', '-o', os.path.join(bindir, target), main, '-L' + bindir, '-l:libggml-hip.so',
                           '-Wl,-rpath-link,' + lib, '-Wl,-rpath-link,' + os.path.join(lib, 'rocm_sysdeps', 'lib')]
                          + rpath)
print('[stub] built %s' % ' '.join(targets))
'''


def stub_cmake(path):
    _write(path, STUB_CMAKE, 0o755)
    return path


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    out = os.path.abspath(argv[1])
    root = make_toolchain(os.path.join(out, 'toolchain'))
    digest = make_tarball(root, os.path.join(out, 'toolchain.tar.gz'))
    stub_cmake(os.path.join(out, 'cmake'))
    print('%s  %s' % (digest, os.path.join(out, 'toolchain.tar.gz')))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
