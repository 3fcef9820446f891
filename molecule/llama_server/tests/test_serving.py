"""After the scenario: shape (b) serves again (the rollback restored it from the failed shape (d)).

Every command goes through Ansible's podman connection, which costs seconds each; so one probe
script collects what a person would check by hand, as JSON, and the tests read that.
"""
import json

import pytest

UNIT = "llama-server.service"
ENV = "/etc/llama-server/llama-server.env"
LAUNCHER = "/usr/local/libexec/dankfleet/serve-llama-server"
MODELS = "/srv/dankfleet-cache/models"
TEXTFILE = "/var/lib/prometheus/node-exporter/llm_plan_actual_llama-server.prom"
MIB = 1024 * 1024

REFUSALS = {
    "model": ("MODEL_PATH=/nonexistent/model.gguf", "the model /nonexistent/model.gguf is missing"),
    "binary": ("LLAMA_BIN=/nonexistent/llama-server", "binary /nonexistent/llama-server is missing"),
    "drafter": ("DRAFT_MODEL_PATH=/nonexistent/draft.gguf", "the drafter /nonexistent/draft.gguf for draft-simple is missing"),
    "mmproj": ("VISION=on MMPROJ_PATH=/nonexistent/mmproj.gguf", "the mmproj /nonexistent/mmproj.gguf is missing"),
    "chain": ("SPEC_TYPE=draft-mtp,draft-dflash", "chains draft-mtp with draft-dflash"),
}

PROBE = r"""
import json, os, subprocess, urllib.request
def run(cmd, **kw):
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, **kw)
    return {"rc": p.returncode, "out": p.stdout, "err": p.stderr}
def get(path, body=None):
    req = urllib.request.Request("http://127.0.0.1:18310" + path, data=body and json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read().decode()
out = {}
show = run("systemctl show %(unit)s -p NRestarts,ActiveState,MainPID,UnitFileState,User,LimitMEMLOCK,"
           "NoNewPrivileges,ProtectSystem,PrivateTmp,DevicePolicy,Restart,ReadWritePaths,RestartPreventExitStatus")
out["show"] = dict(l.split("=", 1) for l in show["out"].splitlines())
st = os.stat("%(env)s")
out["env_stat"] = [st.st_uid, st.st_gid, oct(st.st_mode & 0o777), run("id -g llama")["out"].strip()]
out["env"] = open("%(env)s").read()
out["plan"] = open("/etc/llama-server/llama-server.plan.txt").read()
out["sha"] = {}
for live, name in (("%(env)s", "env"), ("%(launcher)s", "launcher"), ("/etc/systemd/system/%(unit)s", "unit")):
    out["sha"][name] = [run("sha256sum " + live)["out"].split()[0],
                        run("sha256sum /var/lib/llama-server/rollback/" + name)["out"].split()[0]]
out["pending"] = os.path.exists("/var/lib/llama-server/gate-pending")
out["release"] = os.readlink("/opt/llama.cpp/current")
out["chat"] = json.loads(get("/v1/chat/completions", {"model": "frank-medium-lab", "max_tokens": 16, "temperature": 0,
                                                      "messages": [{"role": "user", "content": "the quick brown fox " * 8}]}))
out["models"] = json.loads(get("/v1/models"))
out["metrics"] = get("/metrics")
out["refusals"] = {}
for key, override in %(refusals)s.items():
    out["refusals"][key] = run("set -a; . %(env)s; set +a; export " + override + "; runuser -u llama -- %(launcher)s",
                               executable="/bin/bash")
out["args"] = run("runuser -u llama -- %(launcher)s --port 1")
out["pva"] = json.load(open("/var/lib/llama-server/plan-vs-actual.json"))
out["pva_text"] = open("%(textfile)s").read()
out["pva_promtool"] = run("promtool check metrics < %(textfile)s")
out["model_sha"] = dict((m, run("sha256sum %(models)s/" + m)["out"].split()[0])
                        for m in ("qwen35-mtp.gguf", "dense-llama.gguf"))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(host):
    script = PROBE % {"unit": UNIT, "env": ENV, "launcher": LAUNCHER, "textfile": TEXTFILE, "models": MODELS,
                      "refusals": repr(dict((k, v[0]) for k, v in REFUSALS.items()))}
    cmd = host.run("python3 -c %s", script)
    assert cmd.rc == 0, cmd.stderr
    return json.loads(cmd.stdout)


def test_the_unit_is_enabled_running_and_never_restarted(probe):
    show = probe["show"]
    assert (show["ActiveState"], show["UnitFileState"], show["NRestarts"]) == ("active", "enabled", "0")
    assert show["MainPID"] != "0"


def test_the_unit_is_hardened(probe):
    show = dict((k, probe["show"][k]) for k in (
        "User", "LimitMEMLOCK", "NoNewPrivileges", "ProtectSystem", "PrivateTmp", "DevicePolicy", "Restart",
        "ReadWritePaths", "RestartPreventExitStatus"))
    assert show == {
        "User": "llama", "LimitMEMLOCK": "infinity", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
        "PrivateTmp": "yes", "DevicePolicy": "closed", "Restart": "on-failure",
        "ReadWritePaths": "/var/lib/llama-server/cache", "RestartPreventExitStatus": "78",
    }


def test_the_env_file_is_root_owned_0640_and_carries_shape_b(probe):
    uid, gid, mode, llama_gid = probe["env_stat"]
    assert (uid, str(gid), mode) == (0, llama_gid, "0o640")
    text = probe["env"]
    assert "\nSPEC_TYPE=draft-simple,ngram-mod\n" in text
    assert "\nDRAFT_MODEL_PATH=%s/draft-small.gguf\n" % MODELS in text
    assert "\nCHAT_TEMPLATE_FILE=\n" in text  # the failed shape's template is gone again
    assert "LLAMA_API_KEY" not in text  # shape (b) has no key; shape (a) had one
    assert "No plan was given" in probe["plan"]  # the narrative lives beside the env file
    assert "No plan was given" not in text and "per device (GiB)" not in text
    assert "\nLLAMA_RELEASE=/opt/llama.cpp/releases/b11434-cpu-test\n" in text


def test_the_rollback_restored_the_release_link(probe):
    # the failed shape (d) came with a relink to the "next" release
    assert probe["release"] == "/opt/llama.cpp/releases/b11434-cpu-test"


def test_the_rollback_snapshot_is_the_live_shape_and_no_gate_is_pending(probe):
    for name, (live, snapshot) in probe["sha"].items():
        assert live == snapshot, name
    assert probe["pending"] is False


def test_the_endpoint_answers_with_tokens_and_drafts(probe):
    assert probe["chat"]["usage"]["completion_tokens"] >= 1
    assert "frank-medium-lab" in [m["id"] for m in probe["models"]["data"]]
    drafts = [line for line in probe["metrics"].splitlines()
              if line.startswith("llamacpp:spec_decode_num_drafts_total ")]
    assert drafts and float(drafts[0].split()[1]) > 0


@pytest.mark.parametrize("key", sorted(REFUSALS))
def test_the_launcher_refuses_to_start_without_its_inputs(probe, key):
    result, reason = probe["refusals"][key], REFUSALS[key][1]
    assert result["rc"] == 78, result
    assert "refusing to start" in result["err"] and reason in result["err"], result["err"]


def test_the_launcher_takes_no_arguments(probe):
    assert probe["args"]["rc"] == 78
    assert "takes no arguments" in probe["args"]["err"]


def test_every_passing_gate_left_a_plan_vs_actual_record(probe):
    """(a) converge, (e) the RPC shape, (b): one record each; the dry run, the idempotence runs and the failed
    shape (d) none."""
    models = [r["shape"]["MODEL_PATH"].rsplit("/", 1)[1] for r in probe["pva"]]
    assert models == ["qwen35-mtp.gguf", "dense-llama.gguf", "dense-llama.gguf"]
    for rec, model in zip(probe["pva"], models):
        assert rec["release"] == "/opt/llama.cpp/releases/b11434-cpu-test" and rec["backend"] == "cpu"
        assert rec["model_sha256"] == probe["model_sha"][model]
        assert rec["shape"]["CTX_SIZE"] == "2048" and rec["shape"]["PARALLEL"] == "2"
    assert "lab-secret-key-a" not in json.dumps(probe["pva"])      # (a) ran with an API key


def test_the_cpu_process_is_within_the_planners_bound(probe):
    """(a): the plan's single CPU device is the llama-server process; its RSS after the gate's real request is
    within max(1 %, 64 MiB) of the planned total (host buffers folded in)."""
    rec = probe["pva"][0]
    assert [d["device"] for d in rec["devices"]] == ["CPU"]
    cpu = rec["devices"][0]
    assert cpu["verdict"] == "ok", cpu
    assert cpu["bound"] == max(int(0.01 * cpu["measured_total"]), 64 * MIB)
    assert abs(cpu["measured_total"] - cpu["planned"]["total"]) <= cpu["bound"]
    assert cpu["planned"]["weights"] > 0 and cpu["planned"]["kv"] + cpu["planned"]["recurrent"] > 0
    assert cpu["planned"]["draft"] > 0                          # the MTP head's context
    assert rec["misses"] == []


def test_the_rpc_worker_is_measured_as_its_device(probe):
    rec = probe["pva"][1]
    dev = dict((d["device"], d) for d in rec["devices"])
    assert sorted(dev) == ["RPC0", "host"]
    assert dev["RPC0"]["verdict"] == "ok" and dev["RPC0"]["source"].endswith("VmRSS"), dev["RPC0"]
    assert abs(dev["RPC0"]["measured_total"] - dev["RPC0"]["planned"]["total"]) <= dev["RPC0"]["bound"]
    assert dev["host"]["verdict"] == "reported" and dev["host"]["bound"] is None


def test_an_unplanned_deploy_records_what_it_holds(probe):
    rec = probe["pva"][2]                                      # (b) was deployed without a plan
    assert rec["plan"] is None and [(d["device"], d["verdict"]) for d in rec["devices"]] == [("host", "unplanned")]
    assert rec["devices"][0]["measured_total"] > 0


def test_the_textfile_is_the_last_record_and_valid(probe):
    assert probe["pva_promtool"]["rc"] == 0, probe["pva_promtool"]
    host = probe["pva"][2]["devices"][0]["measured_total"]
    assert 'llm_actual_device_bytes{device="host",unit="llama-server.service"} %d\n' % host in probe["pva_text"]
    assert "llm_plan_device_bytes{" not in probe["pva_text"]    # (b) had no plan
