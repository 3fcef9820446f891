"""The production rehearsal, after side_effect (a broken first deploy, the predecessor restored),
converge (the real first deploy) and idempotence. Tests run in file order and build on each other:

1. the gated endpoint answers on :7770 with the production alias, from production's paths, serving production's
   placement (two RPC devices for ROCm0/ROCm1, split 32:33, the drafter on the second) and its serve settings
   unchanged, every verify check passed;
2. the stand-in predecessor is in ~dank/.AGENTTRASH/<date>-radiance-tp2-retire with a MANIFEST;
3. dank's passwd/shadow/group entries are byte-identical to before any deploy;
4. every `ansible-playbook` command of inventory/production/README.md's operating section runs as written (its
   `-i inventory/production` pointed at this rehearsal): both `--check --diff` dry runs (the one
   against the B850 facts among them) change nothing - checksums of every touched path before and
   after - and the `--tags` runs print the fit table (the mtp shape's among them);
5. the dspark shape is planned and checked like the default, an undeclared shape refused;
6. the rollback refuses, changing nothing, a shape that is not a layer split;
7. from radiance-like units holding :7770 (put back with the README's restore command) the README's
   rollback command brings the layer split back;
8. from radiance-like units again, with no gated record: the README's `--tags stage` adopts a tree built by hand
   (the converged release's bin/ and lib/ copied out, no stamp: a real CPU build bundled as the runbook's is) without
   a rebuild and leaves them serving (their unit untouched, :7770 answering throughout, frank-medium not started);
   its `--tags switch` retires them, starts the adopted release, gates and verifies the layer split; a switch with
   nothing staged is refused, changing nothing.
No test depends on another having run: what converge left (1-3) is read once, before any test (the
autouse `converged` probe); every other test takes its own before/after or builds its own starting state.
"""
import base64
import json
import re
import shlex

import pytest
import yaml

from ansible_collections.dankfleet.llm.molecule.shared import endpoint_checks as checks

PORT = "7770"
UNIT = "frank-medium"
TOUCHED = ["/home/dank/llama.cpp", "/home/dank/models", "/home/dank/.AGENTTRASH", "/home/dank/dankserver",
           "/home/dank/.config/systemd", "/etc/llama-server", "/usr/local/libexec/dankfleet",
           "/var/lib/frank-medium", "/etc/systemd/system", "/var/cache/llama-cpp-build/ccache",
           "/etc/prometheus/rules.d", "/var/lib/grafana/dashboards", "/var/log/dankfleet", "/etc/passwd", "/etc/group",
           "/etc/shadow"]
REPO = checks.REPO
playbook = checks.playbook
inventory = checks.scenario_inventory


def snapshot(host):
    return checks.snapshot(host, TOUCHED, UNIT)


def chat(host):
    return checks.chat(host, PORT)


def env_file(host):
    text = host.file("/etc/llama-server/frank-medium.env").content_string
    return dict(re.findall(r"(?m)^([A-Z_]+)=(.*)$", text))


def readme_commands():
    """`ansible-playbook` commands of the 'Operating frank-medium' section (inventory/production/README.md, beside
    the inventory it operates), continuations joined."""
    text = (REPO / "inventory" / "production" / "README.md").read_text()
    section = text.split("## Operating frank-medium", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for cmd in re.sub(r"\\\n\s*", " ", block).splitlines():
            cmd = cmd.split(" #", 1)[0].strip()
            if cmd.startswith("ansible-playbook"):
                commands.append(cmd)
    return commands


def run_readme(command, **subst):
    """A README command as written, with its inventory pointed at the rehearsal (and $PWD, <...> filled)."""
    assert "-i inventory/production" in command, command
    command = command.replace("-i inventory/production", "-i " + inventory()).replace("$PWD", str(REPO))
    for key, value in subst.items():
        command = command.replace("<%s>" % key, value)
    assert "<" not in command, command
    return playbook(*shlex.split(command)[1:])


PREDECESSOR_FILES = ("/home/dank/dankserver/frank-medium/entrypoint.sh",
                     "/home/dank/dankserver/frank-medium/healthcheck.sh",
                     "/home/dank/.config/systemd/user/frank-medium-radiance.service")


@pytest.fixture(scope="module", autouse=True)
def converged(host):
    """What side_effect, converge and idempotence left, read before any test of this file runs (whatever their
    order): the gated endpoint, and the predecessor in the trash."""
    svc = host.service(UNIT)
    trash = host.run("ls -d /home/dank/.AGENTTRASH/*-radiance-tp2-retire").stdout.split()
    manifest = host.file(trash[0] + "/MANIFEST") if len(trash) == 1 else None
    return {
        "running": svc.is_running, "enabled": svc.is_enabled,
        "restarts": host.run("systemctl show -p NRestarts --value %s", UNIT).stdout.strip(),
        "models": [m["id"] for m in checks.models(host, PORT)["data"]],
        "completion_tokens": chat(host)["usage"]["completion_tokens"],
        "env": env_file(host),
        "unit_user_dank": host.file("/etc/systemd/system/frank-medium.service").contains("^User=dank$"),
        "rollback_env": host.file("/var/lib/frank-medium/rollback/env").exists,
        "record": json.loads(host.file("/var/lib/frank-medium/plan-vs-actual.json").content_string)[-1],
        "standin": host.run("runuser -u dank -- env XDG_RUNTIME_DIR=/run/user/1000 systemctl --user is-active "
                            "frank-medium-radiance.service").stdout.strip(),
        "entrypoint": host.file("/home/dank/dankserver/frank-medium/entrypoint.sh").exists,
        "trash": trash,
        "manifest": manifest.content_string if manifest is not None and manifest.exists else None,
        "trashed": {path: host.file(trash[0] + path).exists for path in PREDECESSOR_FILES} if trash else {},
        # this start's own lines (its systemd invocation, as the gate reads them) and llama-server's argv
        "journal": host.run("journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID=$(systemctl show -p InvocationID "
                            "--value %s.service)", UNIT).stdout,
        "argv": host.run("tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value %s.service)/cmdline",
                         UNIT).stdout.splitlines(),
    }


def test_endpoint_is_gated_from_production_paths(converged):
    assert converged["running"] and converged["enabled"]
    assert converged["restarts"] == "0"
    assert converged["models"] == ["frank-medium"]
    assert converged["completion_tokens"] >= 1
    env = converged["env"]
    # production's own paths and geometry (the one variable from build to serve: /home/dank/llama.cpp)
    assert env["LLAMA_BIN"] == "/home/dank/llama.cpp/current/bin/llama-server"
    assert env["MODEL_PATH"] == "/home/dank/models/Qwen3.8-27B-Uncensored-GGUF/Qwen3.8-27B-Uncensored-Q8_0.gguf"
    assert env["DRAFT_MODEL_PATH"] == "/home/dank/models/Qwen3.8-27B-DFlash2-GGUF/Qwen3.8-27B-DFlash2-Q4_K_M.gguf"
    # two slots as in production, each the lab model's trained window (the one rehearsal override)
    assert (env["LISTEN_PORT"], env["CTX_SIZE"], env["PARALLEL"]) == ("7770", "8192", "2")
    assert env["SPEC_TYPE"] == "draft-dflash,ngram-mod" and env["SPEC_DRAFT_N_MAX"] == "7"
    assert converged["unit_user_dank"]
    assert converged["rollback_env"]
    # the verify stage: production's bounded window (0.25 of a slot), every slot drafting, its time recorded
    record = converged["record"]
    verify = {c["name"]: c for c in record["verify"]["checks"]}
    assert record["verify"]["passed"] is True, record["verify"]
    assert verify["window"]["status"] == "pass" and verify["window"]["figures"]["fraction"] == 0.25
    assert verify["window"]["figures"]["seconds"] > 0
    assert all(s["draft_n"] > 0 for s in verify["slots"]["figures"]["slots"]), verify["slots"]


PRODUCTION_VARS = REPO / "inventory" / "production" / "host_vars" / "dankserver.yml"
REHEARSAL_VARS = REPO / "inventory" / "rehearsal" / "host_vars" / "dankserver" / "50-rehearsal.yml"
# What the rehearsal takes from production unchanged: the serve settings the issue names (flash-attn, KV types,
# sampler values, reasoning budget, ngram window) and the placement (split, split mode, layers on the devices)
UNCHANGED = ("llama_server_flash_attn", "llama_server_cache_type_k", "llama_server_cache_type_v",
             "llama_server_temperature", "llama_server_top_p", "llama_server_top_k", "llama_server_reasoning",
             "llama_server_reasoning_format", "llama_server_reasoning_budget", "llama_server_spec_ngram_mod_n_match",
             "llama_server_spec_ngram_mod_n_min", "llama_server_spec_ngram_mod_n_max", "llama_server_tensor_split",
             "llama_server_split_mode", "llama_server_gpu_layers", "llama_server_fit", "llama_server_spec_type",
             "llama_server_spec_draft_n_max", "llama_server_parallel", "llama_server_batch_size",
             "llama_server_ubatch_size", "llama_server_ctx_checkpoints", "llama_server_mmproj_device",
             "frank_medium_shape", "frank_medium_shapes", "frank_medium")


def start_blocks(journal):
    """This start's journal cut where llama-server loads the drafter: (the target's lines, the drafter's)."""
    target, _, draft = journal.partition("loading draft model")
    return target, draft.split("clip_model_loader", 1)[0]


def test_production_placement_and_settings_are_served(converged):
    """Issue 35 item 6: production's placement - two RPC devices standing in for ROCm0/ROCm1, split 32:33, the
    drafter on the second - and production's flash-attn, KV types, sampler values, reasoning budget and ngram
    window, from inventory/production's host_vars unchanged: the env file carries them, llama-server's own lines
    of this start (and its argv, for the budget it reports nowhere) show them served, and every verify check
    passed with its figures."""
    prod = yaml.safe_load(PRODUCTION_VARS.read_text())
    shape = prod["frank_medium_shapes"][prod["frank_medium_shape"]]
    rehearsal = yaml.safe_load(REHEARSAL_VARS.read_text())
    # the rehearsal overrides the two device NAMES of the placement and nothing it takes from production
    assert not set(rehearsal) & set(UNCHANGED), sorted(set(rehearsal) & set(UNCHANGED))
    assert (rehearsal["llama_server_devices"], rehearsal["llama_server_spec_draft_device"]) == (["RPC0", "RPC1"], "RPC1")
    endpoints = ["%s:%d" % (rehearsal["dankfleet_private_address"], d["port"])
                 for d in rehearsal["llama_rpc_worker_devices"]]
    assert len(endpoints) == len(prod["llama_server_devices"]) == 2

    env = converged["env"]
    assert env["RPC"] == ",".join(endpoints)
    assert env["DEVICES"] == "RPC0,RPC1"
    # the drafter on the device that stands where production's draft device stands (ROCm1: the second)
    assert env["DEVICES"].split(",").index(env["SPEC_DRAFT_DEVICE"]) == prod["llama_server_devices"].index(
        prod["llama_server_spec_draft_device"]) == 1
    assert env["TENSOR_SPLIT"] == ",".join(str(n) for n in shape["tensor_split"]) == "32,33"
    assert env["SPLIT_MODE"] == prod["llama_server_split_mode"] == "layer"
    assert env["NGL"] == str(prod["llama_server_gpu_layers"])
    assert env["SPEC_TYPE"] == ",".join(shape["spec_type"]) and env["SPEC_DRAFT_N_MAX"] == str(shape["spec_draft_n_max"])
    for name, var in (("FLASH_ATTN", "flash_attn"), ("CACHE_TYPE_K", "cache_type_k"), ("CACHE_TYPE_V", "cache_type_v"),
                      ("TOP_K", "top_k"), ("REASONING", "reasoning"), ("REASONING_FORMAT", "reasoning_format"),
                      ("REASONING_BUDGET", "reasoning_budget"), ("SPEC_NGRAM_MOD_N_MATCH", "spec_ngram_mod_n_match"),
                      ("SPEC_NGRAM_MOD_N_MIN", "spec_ngram_mod_n_min"), ("SPEC_NGRAM_MOD_N_MAX", "spec_ngram_mod_n_max")):
        assert env[name] == str(prod["llama_server_" + var]), (name, env[name], prod["llama_server_" + var])
    for name, var in (("TEMPERATURE", "temperature"), ("TOP_P", "top_p")):
        assert float(env[name]) == prod["llama_server_" + var], (name, env[name])

    # served: llama-server's own lines of this start (LOG_VERBOSITY 4, which RPC sets: the gate reads them too)
    target, draft = start_blocks(converged["journal"])
    assert draft, "no drafter load in this start's journal"
    using = r"using device (\S+) \(([^)]*)\)"
    assert re.findall(using, target) == [("RPC0", endpoints[0]), ("RPC1", endpoints[1])], re.findall(using, target)
    assert re.findall(using, draft) == [("RPC1", endpoints[1])], re.findall(using, draft)
    held = r"load_tensors: \S+\[([^]]+)\] model buffer size"
    assert sorted(set(re.findall(held, target))) == endpoints       # the split puts layers on both devices
    assert set(re.findall(held, draft)) == {endpoints[1]}           # the drafter's weights on the second only
    assert re.findall(r"flash_attn\s+=\s+(\w+)", target + draft) == ["enabled", "enabled"]   # FLASH_ATTN on
    kv = re.findall(r"llama_kv_cache: size = .* K \((\w+)\): .* V \((\w+)\):", target)
    assert kv and set(kv) == {(prod["llama_server_cache_type_k"], prod["llama_server_cache_type_v"])}, kv
    window = re.search(r"adding speculative implementation 'ngram-mod'[^\n]*\n[^\n]*- n_match=(\d+), n_max=(\d+), "
                       r"n_min=(\d+)", converged["journal"])
    assert window and tuple(int(x) for x in window.groups()) == (
        prod["llama_server_spec_ngram_mod_n_match"], prod["llama_server_spec_ngram_mod_n_max"],
        prod["llama_server_spec_ngram_mod_n_min"]), window and window.groups()
    # the reasoning budget: b11434 reports it nowhere (neither /props nor the log), so what llama-server was given
    argv = converged["argv"]
    assert argv[argv.index("--reasoning-budget") + 1] == str(prod["llama_server_reasoning_budget"])
    assert argv[argv.index("--spec-draft-device") + 1] == "RPC1" and argv[argv.index("--tensor-split") + 1] == "32,33"

    # the plan planned that placement, and the verify stage passed every check, each with its figures
    record = converged["record"]
    assert [int(n) for n in record["plan"]["tensor_split"]] == shape["tensor_split"]
    assert [d["device"] for d in record["devices"] if d["planned"] and d["device"] != "host"] == ["RPC0", "RPC1"], \
        record["devices"]
    verify = {c["name"]: c for c in record["verify"]["checks"]}
    assert record["verify"]["passed"] is True
    assert list(verify) == ["stream", "tools", "reasoning_effort", "vision", "slots", "prefix_cache", "window",
                            "drafter", "defaults", "isolation", "settings"]
    assert {c["status"] for c in verify.values()} == {"pass"}, {n: (c["status"], c["reason"]) for n, c in verify.items()}
    defaults = verify["defaults"]["figures"]
    for key in ("temperature", "top_p", "top_k"):
        assert defaults[key]["configured"] == prod["llama_server_" + key]
        assert abs(defaults[key]["served"] - prod["llama_server_" + key]) <= 1e-6, defaults
    drafter = verify["drafter"]["figures"]
    assert sorted(drafter["found"]) == sorted(shape["spec_type"]) and not drafter["missing"] and not drafter["unlogged"]
    assert drafter["n_match"] == prod["llama_server_spec_ngram_mod_n_match"]
    assert all(s["draft_n"] > 0 for s in drafter["slots"]) and len(drafter["slots"]) == shape["parallel"]
    assert all(s["draft_n"] > 0 for s in verify["slots"]["figures"]["slots"])
    assert verify["window"]["figures"]["fraction"] == 0.25 and verify["window"]["figures"]["prompt_tokens"] > 0
    assert all(s["identical"] for s in verify["isolation"]["figures"]["slots"])
    # the verify stage itself compared what the journal and argv show with the env file (LOG_VERBOSITY 4: all logged)
    settings = verify["settings"]["figures"]["settings"]
    drafter_kv = tuple(n for n in ("SPEC_DRAFT_TYPE_K", "SPEC_DRAFT_TYPE_V") if env.get(n))
    compared = ("FLASH_ATTN", "CACHE_TYPE_K", "CACHE_TYPE_V", "SPEC_NGRAM_MOD_N_MATCH", "SPEC_NGRAM_MOD_N_MIN",
                "SPEC_NGRAM_MOD_N_MAX", "REASONING_BUDGET") + drafter_kv
    assert {name: row["status"] for name, row in settings.items()} == dict.fromkeys(compared, "pass"), settings
    assert settings["FLASH_ATTN"]["served"] == ["enabled", "enabled"] and settings["REASONING_BUDGET"]["served"] == [
        prod["llama_server_reasoning_budget"]], settings


WATCH = "frank-medium-watch"
WATCH_TEXTFILE = "/var/lib/prometheus/node-exporter/llm_watch_frank-medium.prom"
# the runbook's lines (000_), as llama-server writes them, sent into the journal from inside the unit
WATCH_LINES = ("srv  update: - prompt state size 11388.990 MiB exceeds cache size limit 8192.000 MiB, skipping",
               "slot update_slots: id  1 | task 812 | forcing full prompt re-processing due to lack of cache data",
               "ROCm error: an illegal memory access was encountered")
KERNEL_EXPORT = REPO / "tests" / "fixtures" / "watch" / "kernel-amdgpu-sdma0-utcl2.json"
# UNIT LINE: LINE into the journal from inside UNIT's cgroup, as the unit's own processes write it. The sender
# lives a second past its line: journald reads a stream client's unit from /proc while the client runs.
UNIT_SAY = """pid=$(systemctl show -p MainPID --value "$1")
path=$(sed -n 's/^0:://p' /proc/$pid/cgroup)
root=/sys/fs/cgroup; [ -e $root/cgroup.controllers ] || root=/sys/fs/cgroup/unified
echo $$ > "$root$path/cgroup.procs" || exit 1
exec systemd-cat -t frank-medium -p warning sh -c 'printf "%s\\n" "$1"; sleep 1' sh "$2"
"""


def watch_metrics(host, *extra):
    """Run the watch once - the installed unit, or its own ExecStart with extra arguments - and read the textfile."""
    if extra:
        argv = host.run("systemctl show -p ExecStart --value %s.service", WATCH).stdout
        cmd = re.search(r"argv\[\]=(.*?) ;", argv).group(1)
        run = host.run(cmd + " " + " ".join(shlex.quote(a) for a in extra))
    else:
        run = host.run("systemctl start %s.service", WATCH)
    assert run.rc == 0, run.stdout + run.stderr
    text = host.file(WATCH_TEXTFILE).content_string
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_the_watch_counts_real_journal_lines(host, tmp_path):
    """Item 2 of issue 25: the watch is installed with the endpoint (timer enabled and running), and real journal
    lines - systemd-cat from inside the unit's cgroup - move its textfile metrics, once (the same lines from outside
    the unit under its identifier, as any user's `logger -t` writes them, add nothing): a second run adds nothing
    (the cursor). The container has no kernel ring of its own, so the kernel's amdgpu lines come from a recorded
    journal export (tests/fixtures/watch/), counted once as well."""
    timer = host.service(WATCH + ".timer")
    assert timer.is_enabled and timer.is_running
    assert host.run("mkdir -p /var/lib/prometheus/node-exporter").rc == 0
    u = 'unit="frank-medium.service"'
    before = watch_metrics(host)
    assert before["llm_watch_unit_restarts{%s}" % u] == int(
        host.run("systemctl show -p NRestarts --value %s", UNIT).stdout.strip())
    # The watch counts the unit's lines by journald's _SYSTEMD_UNIT (never a SYSLOG_IDENTIFIER any user can
    # write): the sender joins the unit's cgroup first, as the unit's own processes are.
    assert host.run("echo %s | base64 -d > /root/unit-say.sh",
                    base64.b64encode(UNIT_SAY.encode()).decode()).rc == 0
    for line in WATCH_LINES:
        said = host.run("sh /root/unit-say.sh %s %s", UNIT, line)   # run() quotes both
        assert said.rc == 0, said.stdout + said.stderr
        # the same line as any local user writes it, under the unit's identifier: not counted
        assert host.run("runuser -u dank -- logger -t frank-medium -p warning %s", line).rc == 0
    host.run("journalctl --sync")
    after = watch_metrics(host)
    for key in ("llm_watch_prompt_cache_refused_total{%s}" % u, "llm_watch_full_reprocess_total{%s}" % u,
                'llm_watch_gpu_page_faults_total{%s,kind="illegal_memory_access"}' % u):
        assert after[key] == before[key] + 1, (key, before, after)
    assert counts(watch_metrics(host)) == counts(after)   # the cursor: nothing counted twice
    assert after["llm_watch_journal_up{%s}" % u] == 1
    export = "/root/" + KERNEL_EXPORT.name
    data = base64.b64encode(KERNEL_EXPORT.read_bytes()).decode()
    assert host.run("echo %s | base64 -d > %s", data, export).rc == 0
    kernel = watch_metrics(host, "--import", export)
    for kind in ("page_fault", "utcl2"):
        key = 'llm_watch_gpu_page_faults_total{%s,kind="%s"}' % (u, kind)
        assert kernel[key] == after[key] + 1, (key, kernel)
    assert counts(watch_metrics(host, "--import", export)) == counts(kernel)


def counts(metrics):
    return {k: v for k, v in metrics.items() if "last_run" not in k}


def test_predecessor_is_in_the_trash_with_a_manifest(converged):
    assert converged["standin"] != "active"
    assert not converged["entrypoint"]
    found = converged["trash"]
    assert len(found) == 1 and re.search(r"/\d{8}-radiance-tp2-retire$", found[0]), found
    assert converged["manifest"] is not None
    for path in PREDECESSOR_FILES:
        assert path in converged["manifest"]
        assert converged["trashed"][path], path


def test_dank_is_byte_identical(host):
    for name, cmd in (("passwd", "grep '^dank:' /etc/passwd"), ("shadow", "grep '^dank:' /etc/shadow"),
                      ("group", "grep -E '(^dank:|[:,]dank(,|$))' /etc/group")):
        now = host.run(cmd).stdout
        assert now == host.file("/root/before." + name).content_string, name
    assert host.run("getent passwd dank").stdout.strip().split(":")[2:] == ["1000", "1000", "", "/home/dank",
                                                                            "/bin/bash"]


def test_readme_production_commands_run_as_written(host):
    commands = readme_commands()
    rollback = [c for c in commands if "rollback-frank-medium.yml" in c]
    restore = [c for c in commands if "runtime_restore.yml" in c]
    checks = [c for c in commands if "--check" in c]
    halves = [c for c in commands if re.search(r"--tags (stage|switch)$", c)]
    tagged = [c for c in commands if "--tags" in c and c not in checks and c not in halves]
    # the plain deploy is converge itself; the rollback and the restore run in the rollback test, the two halves
    # in the stage/switch test
    assert rollback and restore and len(checks) == 2 and len(tagged) == 2 and len(halves) == 2, commands
    before = snapshot(host)
    for command in checks:
        run = run_readme(command)
        assert run.returncode == 0, command + "\n" + run.stdout[-4000:] + run.stderr[-2000:]
        assert "Topology verdict" in run.stdout and "collectives_legal: true" in run.stdout
        assert re.search(r"changed=0 ", run.stdout), run.stdout[-3000:]
        assert "up to date" in run.stdout and "verified" in run.stdout   # the build's and fetch's verdicts
    assert snapshot(host) == before
    for command in tagged:
        run = run_readme(command)
        assert run.returncode == 0, command + "\n" + run.stdout[-4000:] + run.stderr[-2000:]
        assert "Fit table" in run.stdout and "<- chosen" in run.stdout, run.stdout[-3000:]


def test_the_readme_byte_proof_command_rehashes_and_changes_nothing(host):
    """The troubleshooting table's byte-proof command, as written: every payload file re-hashed, nothing changed."""
    section = (REPO / "inventory" / "production" / "README.md").read_text().split("### Troubleshooting", 1)[1].split("\n#", 1)[0]
    (command,) = re.findall(r"`(ansible-playbook [^`]*gguf_fetch_verify=full)`", section)
    before = snapshot(host)
    run = run_readme(command)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    said = " ".join(run.stdout.split())  # the yaml callback folds a long msg over lines
    assert said.count(" verified, by sha256, ") >= 3 and " mismatch, " not in said, run.stdout[-3000:]
    assert re.search(r"changed=0 ", run.stdout), run.stdout[-3000:]
    assert snapshot(host) == before


def test_other_shapes_are_planned_and_checked(host):
    # mtp: the README's `--tags fetch,plan -e frank_medium_shape=mtp` above
    for shape in ("dspark",):
        run = playbook("-i", inventory(), "deploy-frank-medium.yml", "--tags", "fetch,plan",
                       "-e", "frank_medium_shape=" + shape)
        assert run.returncode == 0, shape + "\n" + run.stdout[-4000:] + run.stderr[-2000:]
        assert "serve shape: " + shape in run.stdout
        assert "Fit table" in run.stdout and "<- chosen" in run.stdout
    bad = playbook("-i", inventory(), "deploy-frank-medium.yml", "--tags", "plan", "-e", "frank_medium_shape=nope")
    assert bad.returncode != 0 and "declares only dflash2 | mtp | dspark" in bad.stdout


def test_rollback_refuses_a_shape_that_is_not_a_layer_split(host):
    before = snapshot(host)
    run = playbook("-i", inventory(), "rollback-frank-medium.yml", "-e", "llama_server_state_dir=/var/lib/no-such-shape",
                   "-e", "llama_server_split_mode=row")
    assert run.returncode != 0
    assert "not a layer split" in run.stdout and "Nothing was changed" in run.stdout
    assert snapshot(host) == before


def test_rollback_from_radiance_like_units(host, tmp_path):
    # Today's dankserver: the layer split was replaced by radiance TP=2. Here: frank-medium retired into
    # the trash, then radiance-like units put back on :7770 with the README's restore command as written.
    retire = checks.retire_playbook(tmp_path / "retire.yml", "Replace frank-medium by radiance TP=2",
                                    "frank-medium-layer-split", PORT, trash_dir="/home/dank/.AGENTTRASH")
    run = playbook("-i", inventory(), str(retire))
    assert run.returncode == 0, run.stdout[-4000:]
    assert not host.file("/etc/systemd/system/frank-medium.service").exists

    restore = [c for c in readme_commands() if "runtime_restore.yml" in c][0]
    day = host.run("ls -d /home/dank/.AGENTTRASH/*-radiance-tp2-retire").stdout.split()[0].split("/")[-1][:8]
    run = run_readme(restore, YYYYMMDD=day)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert host.file("/home/dank/dankserver/frank-medium/entrypoint.sh").exists
    assert "radiance-standin" in host.run("sleep 1; curl -sf http://127.0.0.1:%s/v1/models", PORT).stdout

    rollback = [c for c in readme_commands() if "rollback-frank-medium.yml" in c][0]
    run = run_readme(rollback)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "the last gated shape recorded in /var/lib/frank-medium/rollback" in run.stdout
    assert "gate (rolled-back shape) passed" in run.stdout
    assert "verify passed" in run.stdout

    assert host.service(UNIT).is_running
    models = checks.models(host, PORT)
    assert [m["id"] for m in models["data"]] == ["frank-medium"] and "radiance-standin" not in json.dumps(models)
    assert chat(host)["usage"]["completion_tokens"] >= 1
    assert env_file(host)["SPLIT_MODE"] == "layer"
    # radiance is in the trash again, with a fresh MANIFEST beside the restored ones
    assert not host.file("/home/dank/dankserver/frank-medium/entrypoint.sh").exists
    assert host.file("/home/dank/.AGENTTRASH/%s-radiance-tp2-retire/MANIFEST" % day).exists


STANDIN = ("runuser -u dank -- env XDG_RUNTIME_DIR=/run/user/1000 systemctl --user show -p ActiveState -p MainPID "
           "-p ActiveEnterTimestampMonotonic frank-medium-radiance.service")


def standin_unit(host):
    """The stand-in's unit as KEY=VALUE (systemctl prints properties in its own order, not in -p's)."""
    return dict(line.split("=", 1) for line in host.run(STANDIN).stdout.splitlines() if "=" in line)


HAND_BUILT = "/home/dank/llama.cpp-handbuilt"
# every path of the hand-built tree with its type, mode, mtime and bytes: adoption only reads it
HAND_BUILT_PRINT = "cd %s && find . -printf '%%p %%y %%m %%T@ %%l\\n' | sort && find . -type f -print0 | sort -z | " \
    "xargs -0 sha256sum" % HAND_BUILT


def unit_state(host):
    """frank-medium's ActiveState and SubState: 'activating auto-restart' is not running either, but it is started."""
    return host.run("systemctl show -p ActiveState -p SubState --value %s.service", UNIT).stdout.split()


def test_stage_leaves_radiance_serving_and_switch_swaps_it(host, tmp_path):
    """Issue 36: the README's two halves, from radiance-like units and no gated record (a state dir of its own),
    the runtime adopted from a tree built by hand."""
    retire = checks.retire_playbook(tmp_path / "retire.yml", "Replace frank-medium by radiance TP=2",
                                    "frank-medium-day-one", PORT, trash_dir="/home/dank/.AGENTTRASH")
    run = playbook("-i", inventory(), str(retire))
    assert run.returncode == 0, run.stdout[-4000:]
    restore = [c for c in readme_commands() if "runtime_restore.yml" in c][0]
    day = host.run("ls -d /home/dank/.AGENTTRASH/*-radiance-tp2-retire").stdout.split()[0].split("/")[-1][:8]
    run = run_readme(restore, YYYYMMDD=day)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    # the runbook's layout: bin/llama-server and the lib/ bundled beside it (RUNPATH $ORIGIN/../lib), no stamp
    made = host.run("rm -rf {0} && mkdir -p {0} && cp -a /home/dank/llama.cpp/current/bin /home/dank/llama.cpp/current/lib "
                    "{0}/ && chown -R dank:dank {0}".format(HAND_BUILT))
    assert made.rc == 0, made.stderr
    hand_built = host.run(HAND_BUILT_PRINT).stdout
    releases = set(host.run("ls /home/dank/llama.cpp/releases").stdout.split())
    day_one = " -e llama_server_state_dir=/var/lib/frank-medium-day-one -e llama_cpp_build_adopt_from=" + HAND_BUILT
    (stage,) = [c for c in readme_commands() if c.endswith("--tags stage")]
    (switch,) = [c for c in readme_commands() if c.endswith("--tags switch")]

    before = snapshot(host)
    run = run_readme(switch + day_one)
    said = " ".join(run.stdout.split())  # the yaml callback folds a long msg over lines
    assert run.returncode != 0 and "nothing is staged for frank-medium" in said, run.stdout[-4000:]
    assert snapshot(host) == before

    standin = standin_unit(host)
    assert standin["ActiveState"] == "active", standin
    # :7770 polled every 0.2 s for the whole stage, by a transient unit of the container's systemd
    poll = host.run("rm -f /root/standin.poll; systemd-run --unit=standin-poll bash -c 'while sleep 0.2; do curl -s -o "
                    "/dev/null -w \"%%{http_code}\\n\" http://127.0.0.1:%s/health >> /root/standin.poll; done'", PORT)
    assert poll.rc == 0, poll.stderr
    run = run_readme(stage + day_one)
    polled = host.run("systemctl stop standin-poll.service; cat /root/standin.poll").stdout.split()
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    said = " ".join(run.stdout.split())
    assert "staged: frank-medium recorded in /var/lib/frank-medium-day-one/staged.json" in said, run.stdout[-3000:]
    assert len(polled) > 10 and set(polled) == {"200"}, polled          # :7770 answered throughout the stage
    assert standin_unit(host) == standin                                # the stand-in's unit untouched
    # not started at all (a held restart once left it crash-looping on the taken port: 'activating auto-restart')
    assert unit_state(host) == ["inactive", "dead"], unit_state(host)
    # adopted, not built: one new release, the hand-built tree's, current on it; the tree itself untouched
    adopted = set(host.run("ls /home/dank/llama.cpp/releases").stdout.split()) - releases
    assert len(adopted) == 1 and "-adopted-" in list(adopted)[0], adopted
    (adopted,) = adopted
    assert "adopted %s (copy) as /home/dank/llama.cpp/releases/%s" % (HAND_BUILT, adopted) in said, run.stdout[-3000:]
    assert "TASK [dankfleet.llm.llama_cpp_build : Build" not in run.stdout
    assert host.run("readlink /home/dank/llama.cpp/current").stdout.strip().endswith(adopted)
    assert host.run(HAND_BUILT_PRINT).stdout == hand_built
    assert "radiance-standin" in json.dumps(checks.models(host, PORT))

    run = run_readme(switch + day_one)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    said = " ".join(run.stdout.split())
    assert "gate (new shape) passed" in said and "verify passed" in said and "switched: staged" in said, run.stdout[-3000:]
    assert host.service(UNIT).is_running
    models = checks.models(host, PORT)
    assert [m["id"] for m in models["data"]] == ["frank-medium"] and "radiance-standin" not in json.dumps(models)
    assert standin_unit(host)["ActiveState"] != "active"
    # the layer split runs the adopted release
    exe = host.run("readlink -f /proc/$(systemctl show -p MainPID --value %s.service)/exe", UNIT).stdout.strip()
    assert exe == "/home/dank/llama.cpp/releases/%s/bin/llama-server" % adopted, exe
    record = json.loads(host.file("/var/lib/frank-medium-day-one/staged.json").content_string)
    assert record["switched_at"] and record["switch_seconds"] > 0 and record["stage_seconds"] > 0
