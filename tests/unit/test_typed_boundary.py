"""Every structure from outside is parsed by the one typed reader (issue 33): no plugin calls json.loads, json.load
or a JSONDecoder of its own, so no answer, file or record reaches code that indexes into it unbounded and untyped.

The exceptions are named with their reason; a new one must be added here on purpose, with its own shape."""
import ast
import os

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
PARSERS = {("json", "loads"), ("json", "load"), ("json", "JSONDecoder")}
ALLOWED = {
    # the reader itself
    "plugins/module_utils/base/typed_reader.py": "the one parser: bounds depth, size, numbers; shapes read the result",
    # llama-bench prints complete objects among partial output: each decoded object goes through bound() and
    # ROW_SHAPE before it is a row
    "plugins/module_utils/bench/bench_batch.py": "raw_decode of llama-bench's partial output, each object read by ROW_SHAPE",
}


def _calls(path):
    with open(path) as fh:
        tree = ast.parse(fh.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in PARSERS:
                yield node.lineno, "%s.%s" % (node.value.id, node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module == "json":
            for alias in node.names:
                if ("json", alias.name) in PARSERS:
                    yield node.lineno, "from json import %s" % alias.name


def test_no_plugin_parses_json_but_the_typed_reader():
    found = []
    for root, _dirs, files in os.walk(os.path.join(REPO, "plugins")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, REPO)
            if rel in ALLOWED:
                continue
            found += ["%s:%d %s" % (rel, line, what) for line, what in _calls(path)]
    assert not found, ("parse outside data with typed_reader.load_json(text, source, SHAPE), not json: %s"
                       % "; ".join(found))


def test_the_check_sees_a_parser():
    here = os.path.join(REPO, "plugins", "module_utils", "bench", "bench_batch.py")
    assert list(_calls(here)), "the walk must find bench_batch's JSONDecoder, or it finds nothing anywhere"
    assert all(os.path.exists(os.path.join(REPO, rel)) for rel in ALLOWED)
