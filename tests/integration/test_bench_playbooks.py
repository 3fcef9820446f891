"""The bench playbooks against a systemd lab container (podman, the lab image, host network):

- dankfleet.llm.bench_spec A/Bs configurations through the real serve role (dankfleet.llm.llama_server, its
  inputs from the settle step as the playbook settles them), writes TSV/JSON/PNG, and restores the deployed unit; a configuration that changes the greedy
  text fails the run loudly and the deployed unit is still restored - also after a configuration
  that cannot start; check mode and a misspelt variable change nothing.
- dankfleet.llm.bench_batch runs every cell as a transient unit (User=nobody, LimitMEMLOCK) with
  two ggml-rpc-server processes on the host as the devices; llama-bench reports RPC0/RPC1 as one
  device list; the cell llama-bench cannot create costs one row.
- dankfleet.llm.bench_turns writes its per-turn latencies.
One container for the module (~2 min on 2 cores).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.integration.bench_servers import PNG_MAGIC, bench_port, rpc_servers

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
IMAGE = os.environ.get("LAB_IMAGE", "localhost/dankfleet-lab:bookworm")
CACHE_IN_CONTAINER = "/srv/dankfleet-cache"
MODELS_IN_CONTAINER = "/srv/bench-models"
UNIT = "llama-server.service"
# The serve role the spec A/B drives: the real one, through the settle step, as bench_spec.yml runs it on an
# endpoint (a converge + gate costs ~1 min a configuration on 2 cores).
SERVE_ROLE = "dankfleet.llm.llama_server"
SMALL_SPEC = {"llm_bench_spec_prose_words": 40, "llm_bench_spec_prose_n_predict": 24,
              "llm_bench_spec_echo_words": 40, "llm_bench_spec_echo_n_predict": 24,
              "llm_bench_spec_structured_records": 4, "llm_bench_spec_structured_n_predict": 24}


def _podman_env() -> dict:
    conf = subprocess.run(["bash", "-c", "source tests/lab/podman-env.sh && echo $CONTAINERS_CONF"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout.strip()
    return dict(os.environ, CONTAINERS_CONF=conf)


class Lab:
    def __init__(self, name, inventory, env, port):
        self.name, self.inventory, self.env, self.port = name, inventory, env, port

    def playbook(self, playbook, extra: dict, *args, timeout=600):
        extra_file = Path(self.inventory).with_name(f"extra-{time.monotonic_ns()}.json")
        extra_file.write_text(json.dumps(extra))
        env = {k: v for k, v in self.env.items() if not k.startswith("ANSIBLE_")}
        env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
                   ANSIBLE_ROLES_PATH=f"{REPO / 'roles'}:{REPO / 'tests' / 'lab' / 'roles'}", ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0")
        out = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(playbook),
                              "-e", f"@{extra_file}", *args], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=timeout)
        out.text = out.stdout + out.stderr
        return out

    def sh(self, command: str) -> str:
        return subprocess.run(["podman", "exec", self.name, "bash", "-c", command], env=self.env, capture_output=True,
                              text=True, check=True, timeout=60).stdout.strip()

    def unit(self, *props) -> dict:
        text = self.sh(f"systemctl show {UNIT} " + " ".join(f"-p {p}" for p in props))
        return dict(line.split("=", 1) for line in text.splitlines())

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False


@pytest.fixture(scope="module")
def lab(tmp_path_factory, llama_prefix, lab_models):
    if not shutil.which("podman"):
        pytest.fail("podman is not installed: run `make host-deps` (tests/lab/host-deps.sh lists the OS packages)", pytrace=False)
    env = _podman_env()
    if subprocess.run(["podman", "image", "exists", IMAGE], env=env).returncode != 0:
        pytest.fail(f"lab image {IMAGE} is missing: run `make lab-image` (tests/lab/build-image.sh)", pytrace=False)
    import gen_models
    work = tmp_path_factory.mktemp("bench-lab")
    models = work / "models"
    gen_models.write_model("dense-llama", models / "dense-llama-f32.gguf", tensor_type="f32")
    models.chmod(0o755)  # the real role's service user reads it
    (models / "dense-llama-f32.gguf").chmod(0o644)
    name = f"dankfleet-bench-{os.getpid()}"
    port = bench_port()
    subprocess.run(["podman", "rm", "-f", name], env=env, capture_output=True)
    subprocess.run(["podman", "run", "-d", "--name", name, "--hostname", name, "--systemd=always", "--network", "host",
                    "--cap-add", "SYS_ADMIN", "-v", f"{llama_prefix.parent}:{CACHE_IN_CONTAINER}:ro",
                    "-v", f"{models}:{MODELS_IN_CONTAINER}:ro", IMAGE, "/sbin/init"],
                   env=env, check=True, capture_output=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            state = subprocess.run(["podman", "exec", name, "systemctl", "is-system-running"], env=env,
                                   capture_output=True, text=True).stdout.strip()
            if state in ("running", "degraded"):
                break
            assert time.monotonic() < deadline, f"lab container {name} did not boot: {state!r}"
            time.sleep(0.5)
        host = {
            "ansible_connection": "containers.podman.podman", "ansible_python_interpreter": "/usr/bin/python3",
            "llama_server_binary": f"{CACHE_IN_CONTAINER}/{llama_prefix.name}/bin/llama-server",
            "llama_server_model_path": f"{MODELS_IN_CONTAINER}/dense-llama-f32.gguf",
            "llama_server_port": port, "llama_server_ctx_size": 8192, "llama_server_parallel": 2,
            "llama_server_threads": 1, "llm_bench_spec_serve_role": SERVE_ROLE, "llm_bench_spec_health_timeout": 60,
        }
        # the real role, as its molecule scenario runs it on the CPU build, plus the exact numerics
        host.update(llama_server_backend="cpu", llama_server_batch_size=512, llama_server_ubatch_size=256,
                    llama_server_ctx_checkpoints=0, llama_server_cache_ram=256, llama_server_cache_type_k="f32",
                    llama_server_cache_type_v="f32", llama_server_flash_attn="off",
                    llama_server_gate_health_timeout_base=60)
        inventory = work / "hosts.yml"
        inventory.write_text(yaml.safe_dump({"all": {"children": {"llm_endpoints": {"hosts": {name: host}}}}}))
        (work / "deploy.yml").write_text(yaml.safe_dump([{
            "name": "Deploy the stand-in endpoint", "hosts": "llm_endpoints", "gather_facts": False,
            "tasks": [{"name": "Settle the inventory", "dankfleet.llm.settle": {"placeholders": "list"},
                       "register": "dankfleet_settled"},
                      {"name": "Serve", "ansible.builtin.include_role": {"name": SERVE_ROLE}}]}]))
        lab = Lab(name, inventory, env, port)
        out = lab.playbook(work / "deploy.yml", {})
        assert out.returncode == 0, out.text[-3000:]
        assert lab.healthy()
        yield lab
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "2", name], env=env, capture_output=True)


def _result(tmp_path: Path, harness: str):
    found = sorted(tmp_path.glob(f"*/*-{harness}*.json"))
    assert len(found) == 1, f"expected one {harness} result under {tmp_path}: {found}"
    base = found[0].with_suffix("")
    files = {ext: base.with_suffix("." + ext) for ext in ("tsv", "json", "png")}
    for path in files.values():
        assert path.is_file() and path.stat().st_size > 0, path
    assert files["png"].read_bytes()[:8] == PNG_MAGIC
    return json.loads(files["json"].read_text()), files


def _deployed_shape(lab) -> str:
    """What the serve role rendered: the unit (the stand-in's command line) and the env file (the real role's)."""
    return lab.sh("cat /etc/systemd/system/llama-server.service /etc/llama-server/llama-server.env 2>/dev/null || true")


def test_spec_check_mode_and_a_misspelt_variable_change_nothing(lab, tmp_path):
    before = (lab.unit("MainPID"), _deployed_shape(lab))
    configs = [{"name": "none", "vars": {"llama_server_spec_type": []}},
               {"name": "ngram-mod", "vars": {"llama_server_spec_type": ["ngram-mod"]}}]
    out = lab.playbook(REPO / "playbooks" / "bench_spec.yml",
                       {"llm_bench_results_dir": str(tmp_path), "llm_bench_spec_configurations": configs}, "--check")
    assert out.returncode == 0, out.text[-3000:]
    assert "check mode: would A/B none, ngram-mod" in out.text
    typo = [{"name": "typo", "vars": {"llama_server_spce_type": ["ngram-mod"]}}]
    out = lab.playbook(REPO / "playbooks" / "bench_spec.yml",
                       {"llm_bench_results_dir": str(tmp_path), "llm_bench_spec_configurations": typo})
    assert out.returncode != 0
    assert f"llama_server_spce_type: not a variable of {SERVE_ROLE}" in out.text, out.text[-3000:]
    assert (lab.unit("MainPID"), _deployed_shape(lab)) == before
    assert not list(tmp_path.iterdir()), "nothing may be written before the run starts"


def test_spec_ab_playbook(lab, tmp_path):
    deployed = _deployed_shape(lab)
    pid_before = lab.unit("MainPID")["MainPID"]
    draft = f"{CACHE_IN_CONTAINER}/models/draft-small.gguf"
    configs = [
        {"name": "none", "vars": {"llama_server_spec_type": []}},
        {"name": "draft-simple,ngram-mod@4", "vars": {"llama_server_spec_type": ["draft-simple", "ngram-mod"],
                                                      "llama_server_drafter_path": draft,
                                                      "llama_server_spec_draft_n_max": 4}},
    ]
    out = lab.playbook(REPO / "playbooks" / "bench_spec.yml",
                       dict(SMALL_SPEC, llm_bench_results_dir=str(tmp_path), llm_bench_spec_configurations=configs,
                            llm_bench_label="pytest"))
    assert out.returncode == 0, out.text[-4000:]
    doc, files = _result(tmp_path, "spec-pytest")
    assert doc["greedy_identical"] is True and doc["mismatches"] == []
    assert doc["builds"] == ["b11434-unknown"]
    assert [c["name"] for c in doc["configurations"]] == ["none", "draft-simple,ngram-mod@4"]
    chain = doc["configurations"][1]
    assert chain["vars"]["llama_server_spec_draft_n_max"] == 4
    assert sum(s["metric_drafts"] for s in chain["shapes"].values()) > 0, "the chain never drafted"
    assert all(s["metric_drafts"] == 0 for s in doc["configurations"][0]["shapes"].values())
    assert doc["meta"]["deployed"]["llama_server_spec_type"] == []
    # each configuration was planned before it was served, and the restored one again
    assert out.stdout.count(f"capacity of {lab.name} (cpu profile") >= 3, out.stdout[-3000:]
    rows = files["tsv"].read_text().splitlines()
    assert rows[0].startswith("configuration\tshape\tstatus\tdecode_tps") and len(rows) == 1 + 2 * 3
    # every configuration ran in a process of its own, and the deployed shape serves again
    pids = {c["main_pid"] for c in doc["configurations"]}
    assert len(pids) == 2 and pid_before not in pids
    assert _deployed_shape(lab) == deployed
    assert lab.unit("ActiveState")["ActiveState"] == "active" and lab.healthy()
    print("\n".join(line for line in out.stdout.splitlines() if "tok/s decode" in line))


def test_spec_mismatch_fails_the_run_and_the_deployed_unit_is_restored(lab, tmp_path):
    deployed = _deployed_shape(lab)
    configs = [
        {"name": "none", "vars": {"llama_server_spec_type": []}},
        # the negative control: a sampler that is not greedy must change the text
        {"name": "hot-sampler", "vars": {"llama_server_spec_type": []}, "request": {"temperature": 1.5, "seed": 7}},
        # a configuration that cannot start: the run goes on, records it, and restores anyway
        {"name": "missing-drafter", "vars": {"llama_server_spec_type": ["draft-simple"],
                                             "llama_server_drafter_path": "/nonexistent/draft.gguf"}},
        # a shape only the planner refuses (the prompt cache above half the host's RAM): each configuration is
        # planned before it is served, so it fails there, before its restart
        {"name": "oversized-cache", "vars": {"llama_server_cache_ram": 16 * 1048576}},
    ]
    out = lab.playbook(REPO / "playbooks" / "bench_spec.yml",
                       dict(SMALL_SPEC, llm_bench_results_dir=str(tmp_path), llm_bench_spec_configurations=configs,
                            llm_bench_spec_shapes=["prose"]))
    assert out.returncode != 0, out.text[-3000:]
    assert "GREEDY TEXT MISMATCH" in out.text
    assert "greedy text differs between configurations 'none' and 'hot-sampler' on shape 'prose' at token" in out.text
    assert "missing-drafter:" in out.text
    doc, _ = _result(tmp_path, "spec")
    assert doc["greedy_identical"] is False
    assert [(m["reference"], m["configuration"]) for m in doc["mismatches"]] == [("none", "hot-sampler")]
    assert isinstance(doc["mismatches"][0]["token"], int)
    failed = [c for c in doc["configurations"] if c.get("error")]
    assert [c["name"] for c in failed] == ["missing-drafter", "oversized-cache"]
    assert "does not fit" in failed[1]["error"] and "llama_server_cache_ram" in failed[1]["error"], failed[1]
    # restored: the deployed ExecStart, running, answering
    assert _deployed_shape(lab) == deployed
    assert lab.unit("ActiveState")["ActiveState"] == "active" and lab.healthy()


def test_batch_playbook_transient_units_and_separators(lab, llama_prefix, tmp_path):
    hard_memlock = lab.sh("ulimit -Hl")
    with rpc_servers(llama_prefix, tmp_path) as endpoints:
        out = lab.playbook(REPO / "playbooks" / "bench_batch.yml", {
            "llm_bench_results_dir": str(tmp_path),
            "llm_bench_batch_llama_bench": f"{CACHE_IN_CONTAINER}/{llama_prefix.name}/bin/llama-bench",
            "llm_bench_batch_model": f"{CACHE_IN_CONTAINER}/models/dense-llama.gguf",
            "llm_bench_batch_sizes": [0, 64], "llm_bench_batch_ubatch_sizes": [0, 32], "llm_bench_batch_depths": [0],
            "llm_bench_batch_n_prompt": 32, "llm_bench_batch_n_gen": 8, "llm_bench_batch_repetitions": 1,
            "llm_bench_batch_threads": 1, "llm_bench_batch_flash_attn": "auto",
            "llm_bench_batch_rpc": endpoints,
            # the service's own forms; llama-bench must get RPC0/RPC1 and 1/1
            "llm_bench_batch_devices": "RPC0,RPC1", "llm_bench_batch_tensor_split": "1,1",
            "llm_bench_batch_user": "nobody",
            # the deployed service runs f32 KV (the spec A/B's exact numerics); llama-bench's -ctk takes no f32
            "llm_bench_batch_cache_type_k": "f16", "llm_bench_batch_cache_type_v": "f16",
        })
    assert out.returncode == 0, out.text[-4000:]
    doc, _ = _result(tmp_path, "batch")
    rows = {(r["batch"], r["ubatch"]): r for r in doc["rows"]}
    assert sorted(rows) == [(0, 0), (64, 0), (64, 32)]
    for key in ((64, 0), (64, 32)):
        row = rows[key]
        assert row["status"] == "ok" and row["devices"] == ["RPC0/RPC1"] and row["tensor_split"] == ["1.00/1.00"], row
        assert row["pp_tps"] > 0 and row["tg_tps"] > 0 and row["peak_rss_mib"] > 0
        assert "-dev RPC0/RPC1 -ts 1/1" in row["command"]
        # the limit the unit really got: LimitMEMLOCK=infinity, capped by the container's hard limit
        want = "infinity" if hard_memlock == "unlimited" else int(hard_memlock) * 1024
        assert row["memlock"] == want, (row["memlock"], hard_memlock)
    assert rows[(0, 0)]["status"] == "failed" and "failed to create context" in rows[(0, 0)]["error"]
    if hard_memlock != "unlimited":
        assert "although LimitMEMLOCK=infinity was asked for" in out.text
    assert "1 of 3 cells did not complete" in out.text
    assert doc["meta"]["devices"] == "RPC0,RPC1"
    # transient units are collected, nothing is left behind
    assert lab.sh("systemctl list-units --all --no-legend 'llm-bench-*' | wc -l") == "0"


def test_turns_playbook(lab, tmp_path):
    out = lab.playbook(REPO / "playbooks" / "bench_turns.yml", {
        "llm_bench_results_dir": str(tmp_path), "llm_bench_turns_families": 2, "llm_bench_turns_turns": 2,
        "llm_bench_turns_document_words": 150, "llm_bench_turns_growth_words": 40, "llm_bench_turns_n_predict": 16})
    assert out.returncode == 0, out.text[-4000:]
    doc, _ = _result(tmp_path, "turns")
    got = [(r["family"], r["turn"], r["status"]) for r in doc["rows"]]
    assert got == [(0, 1, "ok"), (0, 2, "ok"), (1, 1, "ok"), (1, 2, "ok")]
    assert all(r["cache_n"] > 0 for r in doc["rows"] if r["turn"] == 2)
    assert doc["meta"]["slots"] == 2 and doc["builds"] == ["b11434-unknown"]
