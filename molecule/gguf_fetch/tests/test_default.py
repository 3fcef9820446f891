"""gguf_fetch on the lab host: what a person would check by hand after the scenario.

converge fetched three files from the mirror (the drafter through a dropped
connection), side_effect removed/corrupted/truncated them and the role repaired
them; here every file must match the source's manifest, carry a stamp that
vouches for this very inode, be owned by the serve user, and the corrupted
drafter must sit in the trash with its stamp, in a directory of its own with
trash_files' MANIFEST (expected vs found in its comments), not be gone.

The host's state is collected by one script in the container (each testinfra
call through the ansible backend costs seconds on the shared CI box).
"""
import json

import pytest

MODELS = "/var/lib/dankfleet/models"
FILES = {
    "target": ("qwen35-mtp", f"{MODELS}/qwen35-mtp/qwen35-mtp.gguf"),
    "drafter": ("draft-dflash", f"{MODELS}/draft-dflash/draft-dflash.gguf"),
    "mmproj": ("swa-dense", f"{MODELS}/qwen35-mtp/swa-dense.gguf"),
}
COLLECT = r"""
import grp, hashlib, json, os, pwd, subprocess, sys
models, files = sys.argv[1], json.loads(sys.argv[2])
def sha(p):
    with open(p, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
out = {"files": {}, "trash": {}}
for role, path in files.items():
    st = os.stat(path)
    out["files"][role] = {
        "size": st.st_size, "inode": st.st_ino, "mode": st.st_mode & 0o7777,
        "user": pwd.getpwuid(st.st_uid).pw_name, "group": grp.getgrgid(st.st_gid).gr_name,
        "sha256": sha(path), "part": os.path.exists(path + ".part"),
        "stamp": json.load(open(path + ".verified.json")),
    }
trash = os.path.join(models, ".trash")
out["trash_mode"] = os.stat(trash).st_mode & 0o7777
for event in sorted(os.listdir(trash)):
    top = os.path.join(trash, event)
    out["trash"][event] = {"mode": os.stat(top).st_mode & 0o7777, "manifest": open(os.path.join(top, "MANIFEST")).read(),
                           "files": {}}
    for root, dirs, names in os.walk(top):
        for name in names:
            p = os.path.join(root, name)
            if p != os.path.join(top, "MANIFEST"):
                out["trash"][event]["files"]["/" + os.path.relpath(p, top)] = sha(p)
out["log"] = open("/var/log/dankfleet/gguf_fetch.log").read()
out["dirs"] = {}
for d in (models, models + "/qwen35-mtp", models + "/draft-dflash", "/var/log/dankfleet"):
    st = os.stat(d)
    out["dirs"][d] = [pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name, "%04o" % (st.st_mode & 0o7777)]
out["manifest"] = json.load(open("/srv/dankfleet-cache/models/MANIFEST.json"))
out["mirror"] = subprocess.run(["systemctl", "is-active", "gguf-fetch-mirror"],
                               capture_output=True, text=True).stdout.strip()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def state(host):
    r = host.run("python3 -c %s %s %s", COLLECT, MODELS, json.dumps({k: v[1] for k, v in FILES.items()}))
    assert r.rc == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("role", sorted(FILES))
def test_file_matches_source_and_is_owned_by_serve_user(state, role):
    name, _ = FILES[role]
    f, src = state["files"][role], state["manifest"][name]
    assert (f["size"], f["sha256"]) == (src["size"], src["sha256"])
    assert (f["user"], f["group"], f["mode"]) == ("llama", "llama", 0o644)
    assert not f["part"]


@pytest.mark.parametrize("role", sorted(FILES))
def test_stamp_vouches_for_this_inode(state, role):
    name, _ = FILES[role]
    f = state["files"][role]
    assert (f["stamp"]["inode"], f["stamp"]["size"]) == (f["inode"], f["size"])
    assert f["stamp"]["sha256"] == state["manifest"][name]["sha256"]


def test_corrupted_drafter_is_in_the_trash_with_its_manifest(state):
    src, drafter = state["manifest"]["draft-dflash"], FILES["drafter"][1]
    assert state["trash_mode"] == 0o700
    (event,) = state["trash"].values()
    assert event["mode"] == 0o700
    moved = event["files"][drafter]
    assert moved != src["sha256"]  # the corrupted bytes, kept at their own path below the trash directory
    assert sorted(event["files"]) == [drafter, drafter + ".verified.json"]
    manifest = event["manifest"]
    assert manifest.startswith("# dankfleet.llm trash MANIFEST v3\n")
    rows = dict((cells[1], cells) for cells in (line.split("\t") for line in manifest.splitlines())
                if cells[0] == "file")
    assert rows[drafter][2:6] == ["llama", "llama", "0644", moved]  # what restore puts back and checks
    assert rows[drafter + ".verified.json"][5] == event["files"][drafter + ".verified.json"]
    assert f"expected size {src['size']} sha256 {src['sha256']}" in manifest
    assert f"found    size {src['size']} sha256 {moved}" in manifest


def test_progress_log_shows_the_dropped_connection_and_the_resume(state):
    log = state["log"]
    assert "draft-dflash.gguf attempt 1 failed: the server ended the body at byte 65536" in log
    assert "swa-dense.gguf resume from byte" in log
    assert log.count("verified and promoted") == 6  # three files in converge, three repaired


def test_directories_have_their_owner_and_mode(state):
    """Made by the fetch module's own call (its directories option), as the role's file tasks made them."""
    serve = ["llama", "llama", "0755"]
    assert state["dirs"] == {MODELS: serve, MODELS + "/qwen35-mtp": serve, MODELS + "/draft-dflash": serve,
                             "/var/log/dankfleet": ["root", "root", "0755"]}


def test_mirror_still_serving(state):
    assert state["mirror"] == "active"
