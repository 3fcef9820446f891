#!/usr/bin/env bash
# ansible-test sanity on the collection (tests/ansible_test.sh copies it into an ansible_collections tree).
# Extra arguments go to ansible-test (e.g. --test validate-modules).
exec "$(dirname "$0")/ansible_test.sh" sanity --skip-test pylint "$@"
