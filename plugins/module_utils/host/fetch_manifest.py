# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gguf_fetch role's manifest entries with where each file lands, and its one report line per file.

Plain Python (no Ansible import); the filters ``fetch_entries`` and ``fetch_report`` are thin over it.

* ``manifest_entries``: each ``gguf_fetch_manifest`` entry plus ``dest_dir`` (its own, else
  ``<models_dir>/<name>``) and ``dest`` (``<dest_dir>/<file>``) -- the fetch role's layout;
* ``report_line``: what one ``dankfleet.llm.gguf_fetch`` result says to a person (status, bytes, rate, what
  went to the trash, which directories were made).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import payload_path


def manifest_entries(manifest, models_dir):
    """The manifest's entries, each with dest_dir and dest added (an empty dest_dir counts as none); dest is
    shape.payload_path's, the one layout the settle step and the plan use too (a dest_dir ending in ``/`` gives
    ``<dest_dir><file>``, never ``//``)."""
    out = []
    for entry in manifest or []:
        dest_dir = entry.get("dest_dir") or "%s/%s" % (models_dir, entry["name"])
        item = dict(entry)
        item.update({"dest_dir": dest_dir, "dest": payload_path(dict(entry, dest_dir=dest_dir, file=entry["file"]), models_dir)})
        out.append(item)
    return out


def _detail(result):
    status = result["status"]
    if status == "verified":
        return "by %s, %s bytes hashed" % (result.get("verified_by", ""), result["bytes_hashed"])
    transfer = "%s bytes in %s attempt(s) at %s B/s, %s bytes hashed" % (
        result["bytes_downloaded"], result["attempts"], result["rate_bytes_per_s"], result["bytes_hashed"])
    if status == "downloaded":
        return transfer
    if status == "resumed":
        return "from byte %s: %s" % (result["resumed_from"], transfer)
    return result.get("msg", "")


def report_line(result):
    """'<role> <dest>: <status>, <detail>[; moved to the trash: ...][; directories <path> <state>, ...]' of one
    loop result of the fetch task (its ``_gguf_fetch_entry`` is the manifest entry it fetched)."""
    entry = result["_gguf_fetch_entry"]
    line = "%s %s: %s, %s" % (entry["role"], entry["dest"], result["status"], _detail(result))
    if result["trashed"]:
        line += "; moved to the trash: " + ", ".join(t["path"] for t in result["trashed"])
    made = [d for d in result.get("directories") or [] if d.get("changed")]
    if made:
        line += "; directories " + ", ".join("%s %s" % (d["path"], d["state"]) for d in made)
    return line
