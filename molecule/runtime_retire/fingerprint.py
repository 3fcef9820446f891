"""python3 fingerprint.py OUT PATH...: owner, group, mode and sha256 (or link target) of each PATH as JSON."""
import grp
import hashlib
import json
import os
import pwd
import stat
import sys

out = {}
for path in sys.argv[2:]:
    st = os.lstat(path)
    row = {"owner": pwd.getpwuid(st.st_uid).pw_name, "group": grp.getgrgid(st.st_gid).gr_name}
    if stat.S_ISLNK(st.st_mode):
        row["link"] = os.readlink(path)
    else:
        row["mode"] = "%04o" % stat.S_IMODE(st.st_mode)
        with open(path, "rb") as handle:
            row["sha256"] = hashlib.sha256(handle.read()).hexdigest()
    out[path] = row
with open(sys.argv[1], "w") as handle:
    json.dump(out, handle, indent=1, sort_keys=True)
