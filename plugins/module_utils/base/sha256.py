# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one sha256-of-a-file helper (stdlib only): gguf_fetch, trash_files, llama_cpp_release and
plan_actual all hash through it.

An unbuffered ``readinto`` of 1 MiB into one reused buffer: no per-chunk allocation, and hashlib
releases the GIL for buffers that large, so a multi-GiB GGUF hashes at the speed of sha256 itself.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib
import os

from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import open_regular

HASH_READ_CHUNK = 1024 * 1024


def hash_file(path, chunk=HASH_READ_CHUNK, limit=None, hasher=None, fd=None):
    """sha256 of path's first ``limit`` bytes (all if None), continuing ``hasher`` if given; (hasher, nbytes).

    path is opened through the file layer (a regular file only, never blocking on a FIFO); with fd,
    that open descriptor is read from byte 0 instead (pread: its offset is left alone) and path only names it.
    """
    h = hasher or hashlib.sha256()
    n = 0
    buf = bytearray(chunk)
    mv = memoryview(buf)
    if fd is not None:
        while limit is None or n < limit:
            want = chunk if limit is None else min(chunk, limit - n)
            got = os.preadv(fd, [mv[:want]], n)
            if not got:
                break
            h.update(mv[:got])
            n += got
        return h, n
    with open_regular(path, what="file to hash") as f:
        while limit is None or n < limit:
            want = chunk if limit is None else min(chunk, limit - n)
            got = f.readinto(mv[:want])
            if not got:
                break
            h.update(mv[:got])
            n += got
    return h, n


def sha256_file(path):
    """The hex sha256 of a whole file."""
    return hash_file(path)[0].hexdigest()
