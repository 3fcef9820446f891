"""The rule file and dashboard name only series a real llama-server exports.

The runbook's lesson: the predecessor's rules named vllm: series that no longer
existed and nothing noticed. Here the llm_observability role's templates are
rendered by Ansible (promtool-validated), every `llamacpp:` series they name is
collected, and a real llama-server b11434 with --metrics and a drafter is
scraped after a generation: every named series must be exported.
"""
import json
import os
import re
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERIES_RE = re.compile(r"\b([a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+)\b")


def exported_series(exposition: str) -> set:
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def named_series(text: str) -> set:
    """llamacpp: series named in PromQL, ignoring our own recording rules (llm:...)."""
    return {m for m in SERIES_RE.findall(text) if m.startswith("llamacpp:")}


def missing_series(rendered: str, exposition: str) -> set:
    return named_series(rendered) - exported_series(exposition)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("obs")
    playbook = out / "render.yml"
    playbook.write_text(textwrap.dedent(f"""\
        - hosts: localhost
          gather_facts: false
          roles:
            - role: dankfleet.llm.llm_observability
              vars:
                llm_observability_rules_dir: {out}/rules
                llm_observability_dashboards_dir: {out}/dashboards
                llm_observability_spec_configured: true
        """))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rules = (out / "rules" / "frank-medium.rules.yml").read_text()
    dashboard = (out / "dashboards" / "frank-medium.json").read_text()
    json.loads(dashboard)
    return {"rules": rules, "dashboard": dashboard}


def test_rules_carry_the_spec_decode_alert(rendered):
    assert "alert: LlmSpecDecodeOff" in rendered["rules"]
    assert "llamacpp:spec_decode_num_drafts_total" in rendered["rules"]
    expressions = "\n".join(line for line in (rendered["rules"] + rendered["dashboard"]).splitlines()
                            if not line.lstrip().startswith("#"))
    assert not [m for m in SERIES_RE.findall(expressions) if m.startswith("vllm:")]


def test_every_named_series_is_exported_by_the_real_server(rendered, llama_server, lab_models):
    target = lab_models["dense-llama"]["path"]
    drafter = lab_models["draft-small"]["path"]
    with llama_server(target, "--metrics", "--spec-type", "draft-simple",
                      "--spec-draft-model", drafter) as srv:
        srv.post_json("/completion", {"prompt": "one two three", "n_predict": 16, "temperature": 0})
        with urllib.request.urlopen(srv.base_url + "/metrics", timeout=30) as resp:
            exposition = resp.read().decode()
    assert exported_series(exposition) >= {"llamacpp:spec_decode_num_drafts_total"}
    for name, text in rendered.items():
        assert named_series(text), f"{name} names no llamacpp: series at all"
        assert not missing_series(text, exposition), (
            f"{name} names series llama-server does not export: {sorted(missing_series(text, exposition))}")


def test_the_check_catches_a_stale_series():
    """The comparison itself must be able to fail: a rule naming a series the
    server never exported (the stale vllm:-style mistake) is reported."""
    exposition = "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 3\n"
    assert missing_series('expr: rate(llamacpp:kv_cache_usage_ratio[5m])', exposition) == {
        "llamacpp:kv_cache_usage_ratio"}
    assert missing_series('expr: rate(llamacpp:prompt_tokens_total[5m])', exposition) == set()
