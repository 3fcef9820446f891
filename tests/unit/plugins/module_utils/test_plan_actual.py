"""plan_actual: what a gated endpoint really holds per device, against its plan (issue 18).

No GPU here, so the readers run on recorded facts: the B650 board's sysfs tree from the runbook
(tests/fixtures/gpu/make_boards.py) with the KFD per-process files and a llama-server /proc entry
added; the H200 nvidia-smi per-process figures recorded with every CUDA load of issue 9
(tests/fixtures/llamacpp/b11434-cuda-h200); the CPU loads of issue 3 for the CPU fold. The module
runs end to end through Ansible on such a tree; promtool checks the textfile.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

import fit_accuracy
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import plan_actual as pa
from ansible_collections.dankfleet.llm.tests.fixtures.gpu import make_boards as boards
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import ansible_doc, ansible_env

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

MIB = 1024 * 1024
GIB = 1024 * MIB
GPU_FIXTURES = os.path.join(REPO, "tests", "fixtures", "gpu")
PROMTOOL = shutil.which("promtool")


B650 = json.load(open(os.path.join(GPU_FIXTURES, "b650.facts.json")))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def proc_status(root, pid, rss, name="llama-server", anon=None):
    anon = rss if anon is None else anon
    write(os.path.join(root, "proc", str(pid), "status"),
          "Name:\t%s\nState:\tS (sleeping)\nPid:\t%d\nVmRSS:\t%8d kB\nRssAnon:\t%8d kB\nRssFile:\t%8d kB\n"
          "RssShmem:\t       0 kB\n" % (name, pid, rss // 1024, anon // 1024, (rss - anon) // 1024))


def gpu_plan(names, totals, host_total=600 * MIB):
    """A fit_plan-shaped result (the keys plan_actual reads) with these device totals."""
    devs = []
    for i, (n, t) in enumerate(zip(names, totals)):
        devs.append({"name": n, "index": i, "weights_bytes": t - 2 * GIB - 300 * MIB, "kv_bytes": GIB,
                     "recurrent_bytes": 0, "draft_bytes": 0, "mmproj_bytes": 0, "compute_bytes": GIB,
                     "overhead_bytes": 300 * MIB, "total_bytes": t})
    host = {"weights_bytes": 500 * MIB, "draft_weights_bytes": 0, "compute_bytes": 90 * MIB,
            "output_bytes": 10 * MIB, "draft_compute_bytes": 0, "draft_output_bytes": 0, "total_bytes": host_total}
    return {"devices": devs, "host": host, "tensor_split": [35, 30], "ctx_size": 262144, "parallel": 2,
            "profile": {"backend": "hip"}}


# --------------------------------------------------------------------------- the bound


def test_bounds_are_the_planners_own():
    """cpu/cuda: the total bound benchmarks/fit_accuracy.py holds the planner to; hip: the 0.8 GiB
    test_fit_plan_runbook.py holds the hip profile to against rocm-smi."""
    assert (pa.BOUNDS["cpu"]["rel"], pa.BOUNDS["cpu"]["abs"]) == (fit_accuracy.TOTAL_REL, fit_accuracy.TOTAL_ABS)
    assert (pa.BOUNDS["cuda"]["rel"], pa.BOUNDS["cuda"]["abs"]) == (fit_accuracy.TOTAL_REL, fit_accuracy.TOTAL_ABS)
    runbook = open(os.path.join(REPO, "tests", "unit", "plugins", "module_utils", "test_fit_plan_runbook.py")).read()
    assert "abs(got - used) <= 0.8 * GIB" in runbook and pa.BOUNDS["hip"]["abs"] == int(0.8 * GIB)
    assert pa.bound_bytes("cpu", 100 * MIB) == 64 * MIB
    assert pa.bound_bytes("cuda", 20 * GIB) == int(0.01 * 20 * GIB)


def test_verdicts():
    planned = {"CUDA0": {"total": 10 * GIB}, "host": {"total": GIB}}
    # the bound is 1 % of the measured total here (~102 MiB at 10 GiB), measured, not planned
    for actual, verdict in ((10 * GIB + 100 * MIB, "ok"), (10 * GIB + 110 * MIB, "under"), (10 * GIB - 150 * MIB, "over"),
                            (10 * GIB - 99 * MIB, "ok")):
        rows = pa.compare("cuda", planned, {"CUDA0": {"actual_bytes": actual}, "host": {"actual_bytes": 5 * GIB}})
        assert rows[0]["verdict"] == verdict, (actual, rows[0])
        assert rows[1]["device"] == "host" and rows[1]["verdict"] == "reported" and rows[1]["bound_bytes"] is None
    rows = pa.compare("cuda", planned, {"CUDA0": {"actual_bytes": None, "source": "x"}})
    assert rows[0]["verdict"] == "unmeasured"


# --------------------------------------------------------------------------- CPU: the process is the device


@pytest.fixture(scope="module")
def cpu_facts(tmp_path_factory):
    fixtures, models = fit_accuracy.load_fixtures(fit_accuracy.SETS["cpu"])
    return fixtures, fit_accuracy.Facts(models, tmp_path_factory.mktemp("sparse-gguf-pva"))


def test_the_cpu_fold_is_fit_accuracys(cpu_facts):
    """One CPU device, no RPC: the plan's device and host buffers fold into the llama-server process exactly as
    fit_accuracy folds them for its local loads; and the recorded process buffers are within the bound."""
    fixtures, facts = cpu_facts
    local = [fx for fx in fixtures if fx["config"]["devices"] == "local"]
    assert len(local) == 5
    for fx in local:
        pred, plan = fit_accuracy.predicted(fx, facts)
        tied = bool(facts(fx["model"]).get("output_tied"))
        planned = pa.planned_devices(plan, "cpu", output_tied=tied)
        assert list(planned) == ["CPU"], fx["id"]
        assert planned["CPU"]["total"] == pred["host"]["total"], fx["id"]
        measured = fx["measured"]["devices"]["host"]["total"]
        row = pa.compare("cpu", planned, {"CPU": {"actual_bytes": measured}})[0]
        assert row["verdict"] == "ok", (fx["id"], row)


def test_cpu_rpc_split_measures_each_worker(cpu_facts, tmp_path):
    """A CPU split over ggml-rpc-server workers: each RPCn is its worker's RSS, host the server's (reported)."""
    fixtures, facts = cpu_facts
    fx = next(f for f in fixtures if f["id"] == "dense-c8192-np1-ub2048-f16-rpc3-ts111")
    _, plan = fit_accuracy.predicted(fx, facts)
    root = str(tmp_path)
    meas = fx["measured"]["devices"]
    proc_status(root, 100, meas["host"]["total"] + 12 * MIB)
    for i in range(3):
        proc_status(root, 201 + i, meas["RPC%d" % i]["total"] + 3 * MIB, name="rpc-server")
    planned = pa.planned_devices(plan, "cpu")
    assert sorted(planned) == ["RPC0", "RPC1", "RPC2", "host"]
    actual, warnings = pa.measure(root, "cpu", 100, ["RPC0", "RPC1", "RPC2"],
                                  workers=[{"device": "RPC%d" % i, "pid": 201 + i} for i in range(3)])
    assert warnings == []
    rows = dict((r["device"], r) for r in pa.compare("cpu", planned, actual))
    for i in range(3):
        r = rows["RPC%d" % i]
        assert r["actual_bytes"] == meas["RPC%d" % i]["total"] // 1024 * 1024 + 3 * MIB
        assert r["source"] == "/proc/%d/status VmRSS" % (201 + i) and r["verdict"] == "ok", r
    assert rows["host"]["verdict"] == "reported"
    # a worker 200 MiB beyond its plan is an underestimate
    proc_status(root, 202, meas["RPC1"]["total"] + 200 * MIB, name="rpc-server")
    actual, _ = pa.measure(root, "cpu", 100, ["RPC0", "RPC1", "RPC2"],
                           workers=[{"device": "RPC%d" % i, "pid": 201 + i} for i in range(3)])
    assert [r["device"] for r in pa.compare("cpu", planned, actual) if r["verdict"] == "under"] == ["RPC1"]
    # a remote worker (no pid here) is unmeasured, with the reason
    actual, warnings = pa.measure(root, "cpu", 100, ["RPC0"], workers=[])
    assert actual["RPC0"]["actual_bytes"] is None and "remote worker" in warnings[0]


def test_a_gone_process_is_named():
    with pytest.raises(pa.PlanActualError, match="pid 4242 has no .*/proc/4242/status: the process is gone"):
        pa.measure("/nonexistent-root", "cpu", 4242, ["CPU"])


# --------------------------------------------------------------------------- AMD: recorded B650 tree


@pytest.fixture
def b650(tmp_path):
    root = boards.build_tree("b650", str(tmp_path / "b650"))
    return root


def _serving(root, used, kfd, pid=3300, rss=900 * MIB):
    """Cards ROCm0 (03:00.0, KFD node 1) and ROCm1 (0b:00.0, node 2) while serving: mem_info_vram_used per card
    and the KFD per-process vram_<gpu_id> of the server (gpu_id 40000 + node, as make_boards writes it)."""
    for bdf, value in zip(("0000:03:00.0", "0000:0b:00.0"), used):
        write(os.path.join(root, "sys", "bus", "pci", "devices", bdf, "mem_info_vram_used"), str(value))
    for node, value in zip((1, 2), kfd):
        write(os.path.join(root, "sys", "devices", "virtual", "kfd", "kfd", "proc", str(pid), "vram_%d" % (40000 + node)),
              str(value))
    proc_status(root, pid, rss, anon=400 * MIB)


@pytest.mark.parametrize("with_facts", [True, False])
def test_amd_cards_are_read_by_the_plans_names(b650, with_facts):
    """ROCm0/ROCm1 are the B650's two R9700s (the Raphael iGPU is hidden): by gpu_facts' pci_address, or
    without facts by the KFD node order with integrated GPUs left out, as gpu_facts names them."""
    plan = gpu_plan(["ROCm0", "ROCm1"], [int(30.5 * GIB), int(28.9 * GIB)])
    _serving(b650, used=[int(30.7 * GIB), int(28.7 * GIB)], kfd=[int(30.6 * GIB), int(28.6 * GIB)])
    gpus = B650["gpus"] if with_facts else []
    actual, warnings = pa.measure(b650, "hip", 3300, ["ROCm0", "ROCm1"], gpus=gpus)
    assert warnings == []
    assert actual["ROCm0"]["pci_address"] == "0000:03:00.0" and actual["ROCm1"]["pci_address"] == "0000:0b:00.0"
    assert actual["ROCm0"]["actual_bytes"] == int(30.7 * GIB)
    assert actual["ROCm0"]["source"] == "/sys/bus/pci/devices/0000:03:00.0/mem_info_vram_used"
    assert actual["ROCm1"]["kfd_process_bytes"] == {"3300": int(28.6 * GIB)}
    assert actual["host"]["actual_bytes"] == 900 * MIB and actual["host"]["rss_anon_bytes"] == 400 * MIB
    rows = pa.compare("hip", pa.planned_devices(plan, "hip"), actual)
    assert [(r["device"], r["verdict"]) for r in rows] == [("ROCm0", "ok"), ("ROCm1", "ok"), ("host", "reported")]
    assert rows[0]["error_bytes"] == int(30.7 * GIB) - int(30.5 * GIB)


def test_amd_underestimate_beyond_08_gib(b650):
    plan = gpu_plan(["ROCm0", "ROCm1"], [int(30.5 * GIB), int(28.9 * GIB)])
    _serving(b650, used=[int(30.5 * GIB) + int(0.8 * GIB) + MIB, int(28.9 * GIB)], kfd=[0, 0])
    actual, _ = pa.measure(b650, "hip", 3300, ["ROCm0", "ROCm1"], gpus=B650["gpus"])
    rows = pa.compare("hip", pa.planned_devices(plan, "hip"), actual)
    assert [r["verdict"] for r in rows] == ["under", "ok", "reported"]
    text = pa.table(rows)
    assert "ROCm0" in text.splitlines()[1] and text.splitlines()[1].endswith("under")


def test_amd_hip_visible_devices_and_a_card_that_is_not_there(b650):
    """HIP_VISIBLE_DEVICES=1 makes ROCm0 the second card; a ROCm2 the host lacks is unmeasured, not an error."""
    _serving(b650, used=[GIB, 2 * GIB], kfd=[0, 0])
    actual, warnings = pa.measure(b650, "hip", 3300, ["ROCm0"], visible_devices="1")
    assert actual["ROCm0"]["pci_address"] == "0000:0b:00.0" and actual["ROCm0"]["actual_bytes"] == 2 * GIB
    actual, warnings = pa.measure(b650, "hip", 3300, ["ROCm0", "ROCm1", "ROCm2"])
    assert actual["ROCm2"]["actual_bytes"] is None and any("ROCm2 not measured" in w for w in warnings)


# --------------------------------------------------------------------------- NVIDIA: the H200 records of issue 9


@pytest.fixture(scope="module")
def cuda_facts(tmp_path_factory):
    fixtures, models = fit_accuracy.load_fixtures(fit_accuracy.SETS["cuda-h200"])
    return fixtures, fit_accuracy.Facts(models, tmp_path_factory.mktemp("sparse-gguf-pva-cuda"))


def test_nvidia_per_process_figures_of_every_h200_load(cuda_facts, tmp_path):
    """For every recorded H200 load: nvidia-smi's used_memory of the llama-server process is CUDA0's actual, the
    ggml-rpc-server's (CUDA backend, same GPU) RPC0's; the error and verdict agree with fit_accuracy --smi."""
    fixtures, facts = cuda_facts
    root = str(tmp_path)
    seen = 0
    for fx in fixtures:
        smi = (fx.get("nvidia_smi") or {}).get("after_request")
        if not smi:
            continue
        apps = "".join("%s, %d\n" % (pid, mib) for pid, mib in sorted(smi["apps"].items()))   # pid, used_memory
        server = fx["pids"]["server"]
        workers = [{"device": "RPC%d" % i, "pid": p} for i, p in enumerate(fx["pids"].get("rpc") or [])]
        proc_status(root, server, 2 * GIB)
        _, plan = fit_accuracy.predicted(fx, facts)
        names = [d["name"] for d in plan["devices"]]
        actual, warnings = pa.measure(root, "cuda", server, names, workers=workers, compute_apps_text=apps)
        assert warnings == [], (fx["id"], warnings)
        rows = dict((r["device"], r) for r in pa.compare("cuda", pa.planned_devices(plan, "cuda"), actual))
        smi_rows = dict((r["device"], r) for r in fit_accuracy.smi_rows(fx, facts))
        for dev, want in smi_rows.items():
            assert rows[dev]["actual_bytes"] == want["smi_request_bytes"], (fx["id"], dev)
            assert rows[dev]["error_bytes"] == -want["error"] + plan["devices"][names.index(dev)]["mmproj_bytes"]
            assert (rows[dev]["verdict"] == "ok") == want["ok"], (fx["id"], dev)
        seen += 1
    assert seen >= 50


def test_nvidia_two_gpus_map_by_uuid(tmp_path):
    """Two H200s (the x2 recording): CUDA1 is the GPU whose uuid nvidia-smi gives index 1 (or, with
    CUDA_VISIBLE_DEVICES=1, CUDA0 is); a process on both GPUs is split by uuid."""
    root = str(tmp_path)
    proc_status(root, 6517, GIB)
    uuids = ("0, GPU-7a1c9c7e-0000-0000-0000-000000000006, 00000000:00:06.0\n"
             "1, GPU-7a1c9c7e-0000-0000-0000-000000000007, 00000000:00:07.0\n")
    apps = ("6517, GPU-7a1c9c7e-0000-0000-0000-000000000006, 3482\n"
            "6517, GPU-7a1c9c7e-0000-0000-0000-000000000007, 1500\n"
            "999, GPU-7a1c9c7e-0000-0000-0000-000000000007, 70000\n")
    actual, warnings = pa.measure(root, "cuda", 6517, ["CUDA0", "CUDA1"], compute_apps_text=apps,
                                  gpu_uuids_text=uuids)
    assert warnings == []
    assert (actual["CUDA0"]["actual_bytes"], actual["CUDA1"]["actual_bytes"]) == (3482 * MIB, 1500 * MIB)
    actual, _ = pa.measure(root, "cuda", 6517, ["CUDA0"], compute_apps_text=apps, gpu_uuids_text=uuids,
                           visible_devices="1")
    assert actual["CUDA0"]["actual_bytes"] == 1500 * MIB
    gpus = [{"name": "CUDA0", "pci_address": "0000:00:07.0"}]
    actual, _ = pa.measure(root, "cuda", 6517, ["CUDA0"], compute_apps_text=apps, gpu_uuids_text=uuids, gpus=gpus)
    assert actual["CUDA0"]["gpu_uuid"].endswith("07")
    # without the uuid table two GPUs cannot be told apart: unmeasured, with the fix
    actual, warnings = pa.measure(root, "cuda", 6517, ["CUDA0", "CUDA1"], compute_apps_text=apps)
    assert actual["CUDA0"]["actual_bytes"] is None and "give gpus from gpu_facts" in warnings[0]


def test_nvidia_smi_text_errors_name_the_query():
    with pytest.raises(pa.PlanActualError, match="line 1: expected 'pid, used_memory'.*--query-compute-apps"):
        pa.parse_compute_apps("6517; 3482\n")
    assert pa.parse_compute_apps("6517, [N/A]\n")[0]["used_bytes"] is None
    assert pa.parse_compute_apps("No running processes found\n") == []


# --------------------------------------------------------------------------- record and textfile


def _record(tmp_path, actual_rocm0=int(30.7 * GIB)):
    plan = gpu_plan(["ROCm0", "ROCm1"], [int(30.5 * GIB), int(28.9 * GIB)])
    actual = {"ROCm0": {"actual_bytes": actual_rocm0, "source": "s"}, "ROCm1": {"actual_bytes": int(28.7 * GIB),
                                                                                "source": "s"},
              "host": {"actual_bytes": 900 * MIB, "source": "s", "pid": 3300}}
    rows = pa.compare("hip", pa.planned_devices(plan, "hip"), actual)
    return pa.make_record("hip", rows, release="b11434-hip-gfx1201", model_sha="a" * 64,
                          model_path="/m/frank-medium.gguf", shape={"CTX_SIZE": "262144", "PARALLEL": "2"}, plan=plan,
                          now=1795951132.5)


def test_records_append_and_a_broken_history_is_named(tmp_path):
    path = str(tmp_path / pa.RECORD_FILE)
    assert pa.append_record(path, _record(tmp_path)) == 1
    assert pa.append_record(path, _record(tmp_path, actual_rocm0=32 * GIB)) == 2
    recs = json.load(open(path))
    assert recs[0]["time"] == "2026-11-29T11:18:52Z" and recs[0]["model_sha256"] == "a" * 64
    assert recs[0]["release"] == "b11434-hip-gfx1201" and recs[0]["shape"]["CTX_SIZE"] == "262144"
    d0 = recs[0]["devices"][0]
    assert d0["device"] == "ROCm0" and d0["planned"]["total"] == int(30.5 * GIB)
    assert set(d0["planned"]) == set(pa.KINDS) and d0["measured_total"] == int(30.7 * GIB)
    assert recs[0]["misses"] == [] and recs[1]["misses"] == ["ROCm0"]
    write(path, "{not json")
    with pytest.raises(pa.PlanActualError, match="not JSON.*move it aside"):
        pa.append_record(path, _record(tmp_path))
    assert open(path).read() == "{not json"


def test_env_file_shape_never_holds_the_key(tmp_path):
    env = tmp_path / "llama-server.env"
    env.write_text("# Managed\nMODEL_PATH=/m/a.gguf\nLLAMA_API_KEY='s3cret'\nCTX_SIZE=2048\n"
                   "ALIAS=\"frank \\\"lab\\\"\"\nLLAMA_RELEASE=b11434-cpu-test\n")
    parsed = pa.read_env_file(str(env))
    assert parsed["ALIAS"] == 'frank "lab"' and parsed["LLAMA_API_KEY"] == "s3cret"
    shape = pa.env_shape(parsed)
    assert shape == {"MODEL_PATH": "/m/a.gguf", "CTX_SIZE": "2048", "ALIAS": 'frank "lab"'}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian prometheus) not installed")
def test_textfile_passes_promtool_check_metrics(tmp_path):
    text = pa.render_textfile(_record(tmp_path))
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'llm_plan_device_bytes{device="ROCm0",kind="total"} %d' % int(30.5 * GIB) in text
    assert 'llm_actual_device_bytes{device="host"} %d' % (900 * MIB) in text
    assert 'llm_plan_device_bound_bytes{device="ROCm1"}' in text and 'bound_bytes{device="host"}' not in text
    bad = text.replace("# TYPE llm_actual_device_bytes gauge\n", "# TYPE llm_actual_device_bytes gauge\n"
                       "# TYPE llm_actual_device_bytes counter\n")
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=bad, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0        # the check can fail


def test_textfile_series_carry_the_unit_when_given(tmp_path):
    """Two endpoints' textfiles on one node-exporter: every series of each names its unit, so the rules of one
    (unit="frank-medium.service") never read the other's devices; without a unit, the labels are as before."""
    record = _record(tmp_path)
    text = pa.render_textfile(record, "frank-medium.service")
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert samples and all('unit="frank-medium.service"' in line for line in samples), samples
    assert 'llm_actual_device_bytes{device="host",unit="frank-medium.service"} %d' % (900 * MIB) in text
    assert text.replace(',unit="frank-medium.service"', "").replace('{unit="frank-medium.service"}', "") == (
        pa.render_textfile(record))
    if PROMTOOL:
        proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_textfile_is_written_atomically_and_only_on_change(tmp_path):
    text = pa.render_textfile(_record(tmp_path))
    path, changed = pa.write_textfile(str(tmp_path), text, "x.prom")
    assert changed and open(path).read() == text
    assert pa.write_textfile(str(tmp_path), text, "x.prom") == (path, False)
    assert sorted(os.listdir(str(tmp_path))) == ["x.prom"]


# --------------------------------------------------------------------------- the module, through Ansible


def ansible(args, check=False):
    env = ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                      ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                      ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_LOCALHOST_WARNING="false")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", "dankfleet.llm.plan_actual",
           "-a", json.dumps(args)] + (["--check"] if check else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = json.loads(proc.stdout)
    return out["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_module_records_an_h200_load_and_check_mode_writes_nothing(cuda_facts, tmp_path):
    fixtures, facts = cuda_facts
    fx = next(f for f in fixtures if f["id"] == "dense_g-c16384-np1-ub2048-q8_0-ts11")
    _, plan = fit_accuracy.predicted(fx, facts)
    root, state, textdir = tmp_path / "root", tmp_path / "state", tmp_path / "textfile"
    state.mkdir()
    textdir.mkdir()
    proc_status(str(root), 6517, 2 * GIB)
    apps = tmp_path / "apps.csv"
    apps.write_text("6507, 3096\n6517, 3482\n")
    env = tmp_path / "llama-server.env"
    env.write_text("MODEL_PATH=%s\nLLAMA_RELEASE=b11434-cuda-sm90\nLLAMA_API_KEY=s3cret\nCTX_SIZE=16384\n"
                   % (tmp_path / "absent.gguf"))
    args = {"plan": plan, "backend": "cuda", "pid": 6517, "workers": [{"device": "RPC0", "pid": 6507}],
            "env_file": str(env), "state_dir": str(state), "textfile_dir": str(textdir), "sysfs_root": str(root),
            "nvidia_smi_output_file": str(apps), "model_sha256": "b" * 64}
    res = ansible(args, check=True)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True and res["records"] is None and res["textfile"] == str(textdir / pa.TEXTFILE_NAME)
    assert os.listdir(str(state)) == [] and os.listdir(str(textdir)) == []
    res = ansible(args)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True and res["records"] == 1 and res["misses"] == []
    rows = dict((r["device"], r) for r in res["devices"])
    assert rows["CUDA0"]["actual_bytes"] == 3482 * MIB and rows["RPC0"]["actual_bytes"] == 3096 * MIB
    rec = json.load(open(str(state / pa.RECORD_FILE)))[0]
    assert rec["release"] == "b11434-cuda-sm90" and rec["model_sha256"] == "b" * 64
    assert "s3cret" not in json.dumps(rec) and "s3cret" not in open(res["textfile"]).read()
    assert res["textfile"] == str(textdir / pa.TEXTFILE_NAME)


def test_module_warns_on_a_miss_and_fails_only_on_bad_input(tmp_path):
    root = tmp_path / "root"
    proc_status(str(root), 77, 3 * GIB)
    env = tmp_path / "e.env"
    env.write_text("LLAMA_RELEASE=b11434-cpu-test\n")
    plan = {"devices": [{"name": "CPU", "weights_bytes": GIB, "kv_bytes": 0, "recurrent_bytes": 0, "draft_bytes": 0,
                         "mmproj_bytes": 0, "compute_bytes": 0, "overhead_bytes": 0, "total_bytes": GIB}],
            "host": {"weights_bytes": 0, "total_bytes": 0}}
    args = {"plan": plan, "backend": "cpu", "pid": 77, "env_file": str(env), "state_dir": str(tmp_path),
            "sysfs_root": str(root)}
    res = ansible(args)
    assert not res.get("failed"), res.get("msg")
    assert res["underestimated"] == ["CPU"] and any("CPU underestimated by 2048.0 MiB" in w for w in res["warnings"])
    res = ansible(dict(args, textfile_dir=str(tmp_path / "nope")))
    assert res["failed"] and "textfile_dir %s does not exist" % (tmp_path / "nope") in res["msg"]
    assert json.load(open(str(tmp_path / pa.RECORD_FILE))).__len__() == 1     # nothing appended by the failure
    res = ansible(dict(args, textfile_dir=str(tmp_path / "nope"), textfile_dir_optional=True))
    assert not res.get("failed") and res["textfile"] is None and res["records"] == 2
    assert any("textfile_dir %s is not a directory" % (tmp_path / "nope") in w for w in res["warnings"])
    res = ansible(dict(args, service="llama-server.service"))
    assert res["failed"] and "mutually exclusive: pid|service" in res["msg"]
    res = ansible(dict(((k, v) for k, v in args.items() if k != "pid"), service="llama-server.service"))
    assert res["failed"] and "llama-server.service" in res["msg"] and "Traceback" not in res.get("module_stderr", "")
    res = ansible(dict(args, plan={"devices": "x"}))
    assert res["failed"] and "plan must be the dankfleet.llm.fit_plan result" in res["msg"]


def test_ansible_doc_renders():
    text = ansible_doc("dankfleet.llm.plan_actual")
    assert "state_dir" in text and "underestimated" in text


# --------------------------------------------------------------------------- fit_accuracy --records


def test_fit_accuracy_folds_collected_records(tmp_path, capsys):
    """Records collected from two hosts fold into fit_accuracy's report: a total row per device and deploy
    with the record's own bound, host reported; a miss is a FAIL and the exit status says so."""
    for host, rocm0 in (("dankserver", int(30.7 * GIB)), ("frank-zealot", 32 * GIB)):
        d = tmp_path / host / "var" / "lib" / "llama-server"
        d.mkdir(parents=True)
        pa.append_record(str(d / pa.RECORD_FILE), _record(tmp_path, actual_rocm0=rocm0))
    rc = fit_accuracy.main(["--records", str(tmp_path), "--json"])
    rows = [r for r in json.loads(capsys.readouterr().out) if r.get("backend")]
    assert rc == 0 and len(rows) == 6
    miss = [r for r in rows if not r["ok"]]
    assert [(r["config"].split("/")[0], r["device"]) for r in miss] == [("frank-zealot", "ROCm0")]
    assert miss[0]["error"] == int(30.5 * GIB) - 32 * GIB and miss[0]["bound"] == int(0.8 * GIB)
    assert all(r["bound"] is None for r in rows if r["device"] == "host")
    rc = fit_accuracy.main(["--records", str(tmp_path), "--failures"])
    out = capsys.readouterr().out
    assert rc == 1 and "frank-zealot/var/lib/llama-server@2026-11-29T11:18:52Z ROCm0  total" in out
    assert "records hip   devices    4  mean error" in out and "outside bound 1" in out
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / pa.RECORD_FILE).write_text("{}")
    with pytest.raises(SystemExit, match="not the list of records"):
        fit_accuracy.main(["--records", str(tmp_path)])
