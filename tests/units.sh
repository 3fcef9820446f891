#!/usr/bin/env bash
# ansible-test units on the collection: the unit tests under ansible-test's own pytest config and collection
# loader, in a copy at ansible_collections/dankfleet/llm (tests/ansible_test.sh). The same tests as
# `make unit`; extra arguments go to ansible-test (e.g. tests/unit/plugins/filter/).
exec "$(dirname "$0")/ansible_test.sh" units "$@"
