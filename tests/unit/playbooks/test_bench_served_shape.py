"""The bench playbooks run the served shape (issue 32, item 2), on their defaults: no bench input is given.

playbooks/bench_batch.yml in check mode against inventory/production and inventory/lab, each host on a local
connection, its env file where the llama_server role writes it (<llama_server_config_dir>/<service>.env; only the
directory is moved, to a temporary one). Check mode runs the preflight's read of the env file and returns every
llama-bench command the sweep would run, so the test reads the bench's effective inputs from the commands
themselves:

- with the env file the deploy rendered (its planned split and context, not the inventory's), every command
  benches its model on its devices, split, batches' cache types and threads with the llama-bench beside its
  llama-server, and the shape the bench says it runs carries its context, slots and spec chain;
- with none (nothing deployed), the sweep is refused naming the env file and the fix (deploy first, or set the
  llm_bench_* inputs) - the bench never guesses a shape from the serve role's inputs; with those inputs given
  explicitly it benches them as given.
~3 s per run."""
import json
import os
import shlex
import subprocess
import sys

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_env import parse
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import BIN, REPO, ansible_env
from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import render

REPORT = "Report the commands check mode would run"
SAY = "Say which shape the benchmarks run"
# The shape each host's deploy rendered: the planned values where the inventory leaves them to the plan
# (frank-zealot's split and context), the payload paths the fetch wrote.
DEPLOYED = {
    ("production", "dankserver"): {
        "llama_server_service_name": "frank-medium", "llama_server_alias": "frank-medium", "llama_server_port": 7770,
        "llama_server_bind_address": "0.0.0.0", "llama_server_binary": "/home/dank/llama.cpp/current/bin/llama-server",
        "llama_server_model_path": "/home/dank/models/Qwen3.8-27B-Uncensored-GGUF/Qwen3.8-27B-Uncensored-Q8_0.gguf",
        "llama_server_drafter_path": "/home/dank/models/Qwen3.8-27B-DFlash2-GGUF/Qwen3.8-27B-DFlash2-Q4_K_M.gguf",
        "llama_server_devices": ["ROCm0", "ROCm1"], "shape_tensor_split": [32, 33],
        "shape_ctx_size": 327680, "llama_server_parallel": 2, "llama_server_batch_size": 6144,
        "llama_server_ubatch_size": 512, "llama_server_spec_type": ["draft-dflash", "ngram-mod"],
        "llama_server_spec_draft_n_max": 7, "shape_cache_ram": 16384,
    },
    ("production", "frank-zealot"): {
        "llama_server_service_name": "frank-zealot", "llama_server_alias": "frank-zealot", "llama_server_port": 8080,
        "llama_server_binary": "/opt/llama.cpp/current/bin/llama-server",
        "llama_server_model_path": "/var/lib/dankfleet/models/zealot/zealot-Q4_K_M.gguf",
        "llama_server_devices": ["CUDA0"], "shape_tensor_split": [65],
        "shape_ctx_size": 131072, "llama_server_parallel": 1, "llama_server_cache_type_k": "q8_0",
        "llama_server_cache_type_v": "q8_0", "llama_server_spec_type": ["draft-mtp"], "llama_server_spec_draft_n_max": 3,
        "shape_cache_ram": 8192,
    },
    ("lab", "dankfleet-lab"): {
        "llama_server_service_name": "frank-medium", "llama_server_alias": "frank-medium", "llama_server_port": 18470,
        "llama_server_binary": "/opt/llama.cpp/current/bin/llama-server",
        "llama_server_model_path": "/var/lib/dankfleet/models/qwen35-mtp/qwen35-mtp.gguf", "llama_server_threads": 2,
        "llama_server_devices": [], "shape_tensor_split": [], "shape_ctx_size": 8192,
        "llama_server_parallel": 2, "llama_server_spec_type": ["draft-mtp"], "shape_cache_ram": 256,
    },
}
HOSTS = sorted(DEPLOYED)


def bench(inventory, config_dir, limit, refused=False, extra=()):
    env = ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                      PATH="%s:%s" % (BIN, os.environ["PATH"]))
    # how the host is reached and where its config directory is (the settle step's dankfleet_settled.service.env_file
    # follows it): no input of the bench role
    run = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "inventory/%s" % inventory, "--limit", limit,
                          "playbooks/bench_batch.yml", "--check", "-e", "ansible_connection=local",
                          "-e", "ansible_become=false", "-e", "ansible_python_interpreter=%s" % sys.executable,
                          "-e", "llama_server_config_dir=%s" % config_dir] + list(extra),
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert (run.returncode != 0) == refused, run.stdout[-3000:] + run.stderr[-3000:]
    out = {}
    for play in json.loads(run.stdout)["plays"]:
        for task in play["tasks"]:
            name = task["task"]["name"].split(" : ", 1)[-1]
            if limit in task["hosts"] and (name in (REPORT, SAY) or task["hosts"][limit].get("failed")):
                out[name] = task["hosts"][limit]["msg"]
    return out


def flags(command):
    """(binary, {flag: value}) of one llama-bench command line."""
    argv = shlex.split(command)
    return argv[0], dict(zip(argv[1::2], argv[2::2]))


@pytest.mark.parametrize("inventory,host", HOSTS)
def test_the_sweep_benches_the_deployed_env_files_shape(tmp_path, inventory, host):
    deployed = DEPLOYED[(inventory, host)]
    text = render("llama_server", "llama-server.env.j2", dict(deployed, _llama_server_release_target="/opt/r/fb27a525"))
    (tmp_path / ("%s.env" % deployed["llama_server_service_name"])).write_text(text)
    served = parse(text)[0]
    out = bench(inventory, tmp_path, host)
    commands = out[REPORT]
    assert len(commands) == 12
    want = {"-m": served["MODEL_PATH"], "-sm": served["SPLIT_MODE"], "-ngl": served["NGL"],
            "-fa": served["FLASH_ATTN"], "-ctk": served["CACHE_TYPE_K"], "-ctv": served["CACHE_TYPE_V"]}
    if served["DEVICES"]:
        want["-dev"] = served["DEVICES"].replace(",", "/")
    if served["TENSOR_SPLIT"]:
        want["-ts"] = served["TENSOR_SPLIT"].replace(",", "/")
    if served["NUM_THREADS"] not in ("", "0"):
        want["-t"] = served["NUM_THREADS"]
    for command in commands:
        binary, got = flags(command)
        assert binary == os.path.join(os.path.dirname(served["LLAMA_BIN"]), "llama-bench"), command
        assert dict((k, got.get(k)) for k in want) == want, command
        assert ("-ts" in got) == bool(served["TENSOR_SPLIT"]) and ("-dev" in got) == bool(served["DEVICES"]), command
    # context, slots and spec chain: the shape the bench says it runs (and records beside its rows) is the file's
    said = out[SAY]
    assert said.startswith("%s/%s.env: " % (tmp_path, deployed["llama_server_service_name"])), said
    shape = said.split(".env: ", 1)[1]
    for key, name in (("ctx_size", "CTX_SIZE"), ("parallel", "PARALLEL"), ("spec_draft_n_max", "SPEC_DRAFT_N_MAX")):
        assert "'%s': %s" % (key, served[name]) in shape, (key, shape)
    assert "'spec_type': %r" % served["SPEC_TYPE"].split(",") in shape, shape


@pytest.mark.parametrize("inventory,host", HOSTS)
def test_nothing_deployed_is_refused_naming_the_fix_unless_the_inputs_are_given(tmp_path, inventory, host):
    out = bench(inventory, tmp_path, host, refused=True)
    assert "no env file (nothing deployed there)" in out[SAY]
    (refusal,) = [msg for name, msg in out.items() if name not in (REPORT, SAY)]
    assert "llm_bench_batch_model and llm_bench_batch_llama_bench (got '' and ''" in refusal, refusal
    assert "%s/" % tmp_path in refusal and "deploy the endpoint first" in refusal, refusal
    # the operator's explicit inputs: benched as given, nothing guessed
    out = bench(inventory, tmp_path, host, extra=("-e", "llm_bench_batch_model=/m/x.gguf",
                                                  "-e", "llm_bench_batch_llama_bench=/b/llama-bench"))
    assert set(flags(c)[:1] + (flags(c)[1]["-m"],) for c in out[REPORT]) == {("/b/llama-bench", "/m/x.gguf")}
    assert not any("-ts" in flags(c)[1] or "-dev" in flags(c)[1] for c in out[REPORT])
