#!/usr/bin/env bash
# tests/ansible_test.sh COMMAND [ARGS]: ansible-test COMMAND (sanity, units) on the collection: copy the
# repo's files (not .venv, .lab, the collections/ link or git metadata) into a temp tree at
# ansible_collections/dankfleet/llm and run there, on the venv's Python (ansible-test wants its cwd
# inside an ansible_collections tree; the repo's collections/ link resolves out of it).
# Extra arguments go to ansible-test (e.g. sanity --test validate-modules).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
command=${1:?usage: tests/ansible_test.sh sanity|units [ansible-test arguments]}
shift
# ansible-test keeps its sanity venvs under ~/.ansible/test and removes and
# recreates them as it goes: two checkouts running sanity at once on one machine
# (helpers, CI runners) break each other's ("Directory not empty"). A HOME per
# checkout, as `make lint` has; pip's settings come from the environment or /etc.
export HOME="$repo/.lab/sanity-home"
mkdir -p "$HOME"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest="$tmp/ansible_collections/dankfleet/llm"
mkdir -p "$dest"
# Only what git would ship: tracked files plus new, not-ignored ones.
(cd "$repo" && git ls-files -z --cached --others --exclude-standard) \
  | grep -zv '^collections/' \
  | (cd "$repo" && xargs -0 -I{} cp --parents -P {} "$dest/")
cd "$dest"
# ansible-test wants a git tree or none; give it a clean one so it sees exactly these files.
git init -q && git add -A && git -c user.email=ci@localhost -c user.name=ci commit -qm sanity
# ansible-test bootstraps pip in its test venvs with a script it downloads from
# a host CI cannot reach; seed its cache with our ensurepip-based stand-in.
pip_version=$(python3 -c 'import ansible_test, os, re
src = open(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")).read()
print(re.search(r"pip=.([0-9.]+).", src).group(1))')
cache=~/.ansible/test/cache/get_pip_${pip_version//./_}.py
mkdir -p "$(dirname "$cache")"
cmp -s "$repo/tests/get_pip_offline.py" "$cache" || cp "$repo/tests/get_pip_offline.py" "$cache"
py=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ansible-test "$command" --color no --python "$py" --local "$@"
