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
import urllib.request
from pathlib import Path

import pytest
import yaml

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


# The fleet's two endpoints (inventory/production): each its own rule file and dashboard.
FRANK_MEDIUM = {"llm_observability_alias": "frank-medium", "llm_observability_host": "dankserver"}
FRANK_ZEALOT = {"llm_observability_alias": "frank-zealot", "llm_observability_host": "frank-zealot"}


def render(out, *args, endpoints=(FRANK_MEDIUM,)):
    """The role on the controller (connection local) into out/rules and out/dashboards, once per endpoint (its
    role vars); the json callback's results -> {task name without its role: the host's result} (the last task of
    a name wins)."""
    common = {"llm_observability_rules_dir": f"{out}/rules", "llm_observability_dashboards_dir": f"{out}/dashboards",
              "llm_observability_spec_configured": True}
    playbook = out / "render.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "roles": [
        {"role": "dankfleet.llm.llm_observability", "vars": dict(common, **endpoint)} for endpoint in endpoints]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook), *args],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    return {t["task"]["name"].split(" : ", 1)[-1]: t["hosts"]["localhost"] for t in tasks}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Both endpoints' rule files and dashboards, {alias: {"rules": text, "dashboard": text}}."""
    out = tmp_path_factory.mktemp("obs")
    render(out, endpoints=(FRANK_MEDIUM, FRANK_ZEALOT))
    files = {}
    for alias in ("frank-medium", "frank-zealot"):
        files[alias] = {"rules": (out / "rules" / f"{alias}.rules.yml").read_text(),
                        "dashboard": (out / "dashboards" / f"{alias}.json").read_text()}
        json.loads(files[alias]["dashboard"])
    return files


@pytest.fixture(scope="module")
def rendered(fleet):
    return fleet["frank-medium"]


FILES = "Template the Prometheus rule file (promtool-validated) and the Grafana dashboard"


def test_a_rerun_reads_once_and_writes_nothing_an_edit_is_put_back(tmp_path):
    """The role's re-run cost: its one probe runs and render_files sends nothing (no host round trip), since the
    probe finds each directory and file as the role leaves it (the action renders what it wrote). An edited file
    is not current: it alone is sent, and put back."""
    first = render(tmp_path)
    assert first[FILES]["changed"] and first[FILES]["round_trips"] == 1
    assert [d["reasons"] for d in first[FILES]["directories"].values()] == [["absent"], ["absent"]]
    again = render(tmp_path)
    probe = again["Read promtool, the directories and the rendered files (one read-only probe)"]
    assert probe["commands"]["/usr/bin/promtool"] == "/usr/bin/promtool" and not probe["changed"]
    assert again[FILES]["round_trips"] == 0 and not again[FILES]["changed"]
    rules = tmp_path / "rules" / "frank-medium.rules.yml"
    dashboard = str(tmp_path / "dashboards" / "frank-medium.json")
    written = rules.read_text()
    rules.write_text(written.replace("LlmSpecDecodeOff", "LlmSpecDecodeOffEdited"))
    checked = render(tmp_path, "--check")
    assert checked[FILES]["changed"] is True and checked[FILES]["files"][str(rules)]["reasons"] == ["content"]
    assert "LlmSpecDecodeOffEdited" in rules.read_text()
    put_back = render(tmp_path)
    assert put_back[FILES]["files"][str(rules)]["changed"] is True
    assert put_back[FILES]["files"][dashboard]["changed"] is False
    assert rules.read_text() == written


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


PLAN_ACTUAL_TEST = """\
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  # {name}: ROCm0 held 1 GiB more than planned (bound 0.8 GiB); ROCm1 100 MiB more (within); host is not bounded
  - interval: 1m
    input_series:
      - series: 'llm_plan_device_bytes{{job="node",instance="dankserver:9100",unit="frank-medium.service",device="ROCm0",kind="total"}}'
        values: '32749125632x20'
      - series: 'llm_actual_device_bytes{{job="node",instance="dankserver:9100",unit="frank-medium.service",device="ROCm0"}}'
        values: '{rocm0}x20'
      - series: 'llm_plan_device_bound_bytes{{job="node",instance="dankserver:9100",unit="frank-medium.service",device="ROCm0"}}'
        values: '858993459x20'
      - series: 'llm_plan_device_bytes{{job="node",instance="dankserver:9100",unit="frank-medium.service",device="ROCm1",kind="total"}}'
        values: '31030239232x20'
      - series: 'llm_actual_device_bytes{{job="node",instance="dankserver:9100",unit="frank-medium.service",device="ROCm1"}}'
        values: '31135096832x20'
      - series: 'llm_plan_device_bound_bytes{{job="node",instance="dankserver:9100",unit="frank-medium.service",device="ROCm1"}}'
        values: '858993459x20'
      - series: 'llm_plan_device_bytes{{job="node",instance="dankserver:9100",unit="frank-medium.service",device="host",kind="total"}}'
        values: '629145600x20'
      - series: 'llm_actual_device_bytes{{job="node",instance="dankserver:9100",unit="frank-medium.service",device="host"}}'
        values: '4294967296x20'
    alert_rule_test:
      - eval_time: 3m
        alertname: LlmPlanUnderestimated
        exp_alerts: []
      - eval_time: 10m
        alertname: LlmPlanUnderestimated
        exp_alerts: {expected}
"""
FIRES = """
          - exp_labels: {severity: warning, endpoint: frank-medium, host: dankserver, device: ROCm0,
                         instance: "dankserver:9100", job: node, unit: frank-medium.service}
            exp_annotations:
              summary: "frank-medium: ROCm0 holds more than the plan said"
              description: >-
                At the last gated deploy ROCm0 on dankserver:9100 held 1GiB more than dankfleet.llm.fit_plan
                planned, beyond the planner's own bound: the profile underestimates this shape, and the floor it
                keeps free is smaller than it thinks. Read <state_dir>/plan-vs-actual.json and fold it in with
                benchmarks/fit_accuracy.py --records."""


def promtool_test_rules(rendered, tmp_path, name, rocm0, expected):
    (tmp_path / "rules.yml").write_text(rendered["rules"])
    (tmp_path / "test.yml").write_text(PLAN_ACTUAL_TEST.format(name=name, rocm0=rocm0, expected=expected))
    return subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


def test_plan_underestimated_fires_beyond_the_bound(rendered, tmp_path):
    """ROCm0 1 GiB beyond its plan (bound 0.8 GiB) fires after the `for`; ROCm1 within and host do not."""
    run = promtool_test_rules(rendered, tmp_path, "fires", 32749125632 + 1073741824, FIRES)
    assert run.returncode == 0, run.stdout + run.stderr


def test_plan_underestimated_stays_quiet_within_the_bound(rendered, tmp_path):
    """ROCm0 0.5 GiB beyond its plan is within the bound: nothing fires; and the same fixture expecting an
    alert fails, so the test can fail."""
    run = promtool_test_rules(rendered, tmp_path, "quiet", 32749125632 + 536870912, "[]")
    assert run.returncode == 0, run.stdout + run.stderr
    run = promtool_test_rules(rendered, tmp_path, "quiet", 32749125632 + 536870912, FIRES)
    assert run.returncode != 0 and "LlmPlanUnderestimated" in run.stdout + run.stderr


def test_the_dashboard_has_the_plan_vs_actual_panel(rendered):
    panels = json.loads(rendered["dashboard"])["panels"]
    panel = next(p for p in panels if p["title"].startswith("Plan vs actual"))
    exprs = [t["expr"] for t in panel["targets"]]
    assert 'llm_actual_device_bytes{job="node",unit="frank-medium.service"}' in exprs
    assert panel["fieldConfig"]["defaults"]["unit"] == "bytes"
    assert [t["legendFormat"] for t in panel["targets"]][:2] == ["{{device}} planned", "{{device}} actual"]


# ---- the journal watch's alerts over the textfile the watch itself writes ---------------------------------
WATCH_SCRIPT = REPO / "roles" / "llama_server" / "files" / "llm_watch.py"
WATCH_LABELS = 'job="node",instance="dankserver:9100",unit="frank-medium.service"'


def watch_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("llm_watch", WATCH_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def watch_series(moved):
    """promtool input series from the watch's own textfile (its names and labels, never a copy): every series
    flat at 0 for 5 minutes, then the ones in `moved` step up by their count and stay."""
    lines = []
    text = watch_module().render(watch_module().empty_state(), "frank-medium.service", 0, True, 0)
    for line in text.splitlines():
        if line.startswith("#") or "last_run" in line or "journal_up" in line:
            continue
        series = line.rsplit(" ", 1)[0].replace('unit="frank-medium.service"', WATCH_LABELS)
        step = next((n for key, n in moved.items() if key in series), 0)
        lines.append("      - series: '%s'\n        values: '0x5 %dx15'" % (series, step))
    return "\n".join(lines)


WATCH_FIRING = {
    "LlmGpuPageFault": """
          - exp_labels: {severity: critical, endpoint: frank-medium, host: dankserver, instance: "dankserver:9100",
                         unit: frank-medium.service}
            exp_annotations:
              summary: "frank-medium: GPU fault on dankserver:9100 (frank-medium.service)"
              description: >-
                The kernel logged an amdgpu page fault / UTCL2 client fault, or the server an illegal memory access
                or ggml_abort, in the last 15m. The runbook's 39:26 split died this way in the cross-card boundary
                copy: it is not an OOM and no headroom prevents it. Read journalctl -k and journalctl -u
                frank-medium.service; Restart=on-failure brings the unit back silently.""",
    "LlmPromptCacheRefused": """
          - exp_labels: {severity: warning, endpoint: frank-medium, host: dankserver, instance: "dankserver:9100",
                         unit: frank-medium.service, job: node}
            exp_annotations:
              summary: "frank-medium: prompt states refused by the cache-ram cap"
              description: >-
                3 prompt state(s) larger than the whole --cache-ram cap were refused ("exceeds cache size limit ...,
                skipping") in 1h: each such conversation is re-prefilled in full (llm_watch_full_reprocess_total).
                Raise llama_server_cache_ram to the planner's state law for a full slot (fit_plan's cache_ram), or
                shorten the slots.""",
    "LlmUnitRestarted": """
          - exp_labels: {severity: warning, endpoint: frank-medium, host: dankserver, instance: "dankserver:9100",
                         unit: frank-medium.service, job: node}
            exp_annotations:
              summary: "frank-medium: frank-medium.service restarted on dankserver:9100"
              description: >-
                systemd restarted frank-medium.service (NRestarts rose) in the last 15m: Restart=on-failure hides a
                crash from every client. Read the journal around the restart; LlmGpuPageFault says whether it was a
                GPU fault.""",
}


def promtool_watch(rendered, tmp_path, moved, expected):
    tests = []
    for alert in WATCH_FIRING:
        tests.append("      - eval_time: 4m\n        alertname: %s\n        exp_alerts: []" % alert)
        tests.append("      - eval_time: 10m\n        alertname: %s\n        exp_alerts:%s"
                     % (alert, expected.get(alert, " []")))
    (tmp_path / "rules.yml").write_text(rendered["rules"])
    (tmp_path / "test.yml").write_text(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n"
        + watch_series(moved) + "\n    alert_rule_test:\n" + "\n".join(tests) + "\n")
    return subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


def test_watch_alerts_fire_when_the_watch_counts(rendered, tmp_path):
    """One illegal memory access, three refused prompt states and one restart, as the watch's textfile
    carries them: each alert fires after the step and not before."""
    moved = {'kind="illegal_memory_access"': 1, "llm_watch_prompt_cache_refused_total": 3,
             "llm_watch_unit_restarts": 1}
    run = promtool_watch(rendered, tmp_path, moved, WATCH_FIRING)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("kind", ["page_fault", "utcl2", "ggml_abort"])
def test_every_fault_kind_fires_the_page_fault_alert(rendered, tmp_path, kind):
    run = promtool_watch(rendered, tmp_path, {'kind="%s"' % kind: 1},
                         {"LlmGpuPageFault": WATCH_FIRING["LlmGpuPageFault"]})
    assert run.returncode == 0, run.stdout + run.stderr


def test_watch_alerts_stay_quiet_while_the_counts_stand_still(rendered, tmp_path):
    """Flat series (the full-reprocess counter alone moving) fire nothing; expecting the alerts then fails."""
    run = promtool_watch(rendered, tmp_path, {"llm_watch_full_reprocess_total": 5}, {})
    assert run.returncode == 0, run.stdout + run.stderr
    run = promtool_watch(rendered, tmp_path, {}, WATCH_FIRING)
    assert run.returncode != 0 and "LlmGpuPageFault" in run.stdout + run.stderr


def test_the_rules_name_only_series_the_watch_writes(rendered):
    text = watch_module().render(watch_module().empty_state(), "x.service", 0, True, 0)
    written = {line.split("{", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}
    named = set(re.findall(r"\bllm_watch_[a-z_]+", rendered["rules"])) - {"llm_watch_full_reprocess_total"}
    assert named and named <= written, named - written


# ---- one endpoint per rule file: selectors, labels, and two endpoints on one Prometheus --------------------
RAW_SERIES_RE = re.compile(r"\b(llamacpp:[a-z_:]+|llm_[a-z_]+)(\{[^}]*\})?")


def unselected(expr, alias):
    """Raw series in a PromQL expression not selected to this endpoint alone: llamacpp: series need its
    scrape job, the node-exporter textfiles' llm_* series the node job and its unit."""
    want = {"llamacpp:": 'job="%s"' % alias, "llm_": 'job="node",unit="%s.service"' % alias}
    bad = []
    for name, selector in RAW_SERIES_RE.findall(expr):
        prefix = "llamacpp:" if name.startswith("llamacpp:") else "llm_"
        if not selector.startswith("{" + want[prefix]):
            bad.append(name + selector)
    return bad


def rule_exprs(rules_text):
    return [rule for group in yaml.safe_load(rules_text)["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("alias,host", [("frank-medium", "dankserver"), ("frank-zealot", "frank-zealot")])
def test_every_series_and_alert_is_its_endpoints(fleet, alias, host):
    """Every selector of the rules and the dashboard names the endpoint (job; unit on the textfiles), and every
    recorded series and alert carries its endpoint and host labels."""
    rules = rule_exprs(fleet[alias]["rules"])
    targets = [t["expr"] for p in json.loads(fleet[alias]["dashboard"])["panels"] for t in p["targets"]]
    assert rules and targets
    for expr in [r["expr"] for r in rules] + targets:
        assert RAW_SERIES_RE.search(expr), expr
        assert not unselected(expr, alias), (expr, unselected(expr, alias))
    for rule in rules:
        assert {k: rule["labels"].get(k) for k in ("endpoint", "host")} == {"endpoint": alias, "host": host}, rule


def test_the_selector_check_can_fail():
    """The selectors this role once wrote (job="node" alone, a bare series) are caught."""
    assert unselected('llm_actual_device_bytes{job="node"} > 0', "frank-medium") == [
        'llm_actual_device_bytes{job="node"}']
    assert unselected("rate(llamacpp:tokens_predicted_total[5m])", "frank-medium") == [
        "llamacpp:tokens_predicted_total"]
    assert unselected('llamacpp:requests_deferred{job="frank-zealot"}', "frank-medium")
    assert not unselected('llm_plan_device_bytes{job="node",unit="frank-medium.service",kind="total"}',
                          "frank-medium")


def test_the_acceptance_ratio_has_its_own_axis(rendered):
    """Acceptance (0-1) beside drafts/s and accepted tokens/s: its own percent axis on the right, the counts
    on the panel's; so is every ratio in a panel of counts."""
    panels = json.loads(rendered["dashboard"])["panels"]
    spec = next(p for p in panels if p["title"] == "Speculative decoding")
    refs = {t["legendFormat"]: t["refId"] for t in spec["targets"]}
    overrides = {o["matcher"]["options"]: {prop["id"]: prop["value"] for prop in o["properties"]}
                 for o in spec["fieldConfig"]["overrides"] if o["matcher"]["id"] == "byFrameRefID"}
    assert spec["fieldConfig"]["defaults"]["unit"] == "short"
    assert set(overrides) == {refs["acceptance"]}, overrides        # drafts/s stays on the panel's axis
    acceptance = overrides[refs["acceptance"]]
    assert acceptance["unit"] == "percentunit" and acceptance["custom.axisPlacement"] == "right"
    assert (acceptance["min"], acceptance["max"]) == (0, 1)
    for panel in panels:
        moved = {o["matcher"]["options"] for o in panel["fieldConfig"]["overrides"]}
        for target in panel["targets"]:
            if " / " in target["expr"] and panel["fieldConfig"]["defaults"]["unit"] != "percentunit":
                assert target["refId"] in moved, (panel["title"], target)


def promtool_fleet(fleet, tmp_path, input_series, tests):
    """promtool test rules with BOTH endpoints' rule files loaded on one Prometheus."""
    for alias in fleet:
        (tmp_path / f"{alias}.rules.yml").write_text(fleet[alias]["rules"])
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": [f"{alias}.rules.yml" for alias in fleet], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, **tests}]}, sort_keys=False))
    return subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


# Both endpoints' textfiles as the llama_server role writes them (unit-labelled), one card each over or within
# its plan: dankserver ROCm0 (plan 30.5 GiB) and frank-zealot CUDA0 (plan 22 GiB), each bound 0.8 GiB.
GIB = 1 << 30


def plan_actual_series(host, unit, device, planned, actual):
    labels = 'job="node",instance="%s:9100",unit="%s",device="%s"' % (host, unit, device)
    return [{"series": "llm_plan_device_bytes{%s,kind=\"total\"}" % labels, "values": "%dx20" % planned},
            {"series": "llm_actual_device_bytes{%s}" % labels, "values": "%dx20" % actual},
            {"series": "llm_plan_device_bound_bytes{%s}" % labels, "values": "%dx20" % int(0.8 * GIB)}]


def underestimated(alias, host, device):
    return {"exp_labels": {"severity": "warning", "endpoint": alias, "host": host, "device": device, "job": "node",
                           "instance": f"{host}:9100", "unit": f"{alias}.service"},
            "exp_annotations": {
                "summary": f"{alias}: {device} holds more than the plan said",
                "description": f"At the last gated deploy {device} on {host}:9100 held 1GiB more than "
                               "dankfleet.llm.fit_plan planned, beyond the planner's own bound: the profile "
                               "underestimates this shape, and the floor it keeps free is smaller than it thinks. "
                               "Read <state_dir>/plan-vs-actual.json and fold it in with "
                               "benchmarks/fit_accuracy.py --records."}}


@pytest.mark.parametrize("over", ["frank-medium", "frank-zealot"])
def test_two_endpoints_each_alert_only_for_their_own_devices(fleet, tmp_path, over):
    """One card 1 GiB beyond its plan: exactly one LlmPlanUnderestimated, from its own endpoint's rules, with
    its endpoint and host. With job="node" alone both rule files would fire for it (two alerts, one
    mislabelled), so the exact list fails on mixing."""
    medium_actual = int(30.5 * GIB) + (GIB if over == "frank-medium" else 0)
    zealot_actual = 22 * GIB + (GIB if over == "frank-zealot" else 0)
    series = (plan_actual_series("dankserver", "frank-medium.service", "ROCm0", int(30.5 * GIB), medium_actual)
              + plan_actual_series("frank-zealot", "frank-zealot.service", "CUDA0", 22 * GIB, zealot_actual))
    expected = {"frank-medium": underestimated("frank-medium", "dankserver", "ROCm0"),
                "frank-zealot": underestimated("frank-zealot", "frank-zealot", "CUDA0")}[over]
    tests = {"alert_rule_test": [{"eval_time": "10m", "alertname": "LlmPlanUnderestimated", "exp_alerts": [expected]}]}
    run = promtool_fleet(fleet, tmp_path, series, tests)
    assert run.returncode == 0, run.stdout + run.stderr
    # the same input expecting the other endpoint's alert as well fails: the test can fail on mixing
    other = {"frank-medium": underestimated("frank-medium", "dankserver", "CUDA0"),
             "frank-zealot": underestimated("frank-zealot", "frank-zealot", "ROCm0")}[over]
    tests["alert_rule_test"][0]["exp_alerts"].append(other)
    assert promtool_fleet(fleet, tmp_path, series, tests).returncode != 0


def test_two_endpoints_restarts_stay_apart(fleet, tmp_path):
    """frank-zealot's unit restarted, frank-medium's did not: one LlmUnitRestarted, frank-zealot's."""
    series = [{"series": 'llm_watch_unit_restarts{job="node",instance="dankserver:9100",unit="frank-medium.service"}',
               "values": "0x20"},
              {"series": 'llm_watch_unit_restarts{job="node",instance="frank-zealot:9100",unit="frank-zealot.service"}',
               "values": "0x5 1x15"}]
    alert = {"exp_labels": {"severity": "warning", "endpoint": "frank-zealot", "host": "frank-zealot", "job": "node",
                            "instance": "frank-zealot:9100", "unit": "frank-zealot.service"},
             "exp_annotations": {
                 "summary": "frank-zealot: frank-zealot.service restarted on frank-zealot:9100",
                 "description": "systemd restarted frank-zealot.service (NRestarts rose) in the last 15m: "
                                "Restart=on-failure hides a crash from every client. Read the journal around the "
                                "restart; LlmGpuPageFault says whether it was a GPU fault."}}
    tests = {"alert_rule_test": [{"eval_time": "10m", "alertname": "LlmUnitRestarted", "exp_alerts": [alert]}]}
    run = promtool_fleet(fleet, tmp_path, series, tests)
    assert run.returncode == 0, run.stdout + run.stderr


def test_two_endpoints_record_their_own_acceptance(fleet, tmp_path):
    """Two llama-servers, each its own scrape job: each rule file records its endpoint's acceptance only
    (0.5 and 0.25), labelled with its endpoint and host."""
    def counters(job, host, accepted):
        labels = 'job="%s",instance="%s:8080"' % (job, host)
        return [{"series": "llamacpp:spec_decode_num_draft_tokens_total{%s}" % labels, "values": "0+60x30"},
                {"series": "llamacpp:spec_decode_num_accepted_tokens_total{%s}" % labels,
                 "values": "0+%dx30" % accepted}]

    def sample(job, host, value):
        return {"labels": 'llm:spec_decode_acceptance:rate15m{endpoint="%s",host="%s",instance="%s:8080",job="%s"}'
                % (job, host, host, job), "value": value}

    series = counters("frank-medium", "dankserver", 30) + counters("frank-zealot", "frank-zealot", 15)
    tests = {"promql_expr_test": [{"expr": "llm:spec_decode_acceptance:rate15m", "eval_time": "20m", "exp_samples": [
        sample("frank-medium", "dankserver", 0.5), sample("frank-zealot", "frank-zealot", 0.25)]}]}
    run = promtool_fleet(fleet, tmp_path, series, tests)
    assert run.returncode == 0, run.stdout + run.stderr
