"""A head and its llama.cpp RPC workers (issue 17, items 3-4): addresses, the --rpc list, the planner's device
list in llama.cpp's order, the worker overhead per backend, and what the gate reads from the log."""
import os

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import rpc_fleet
from ansible_collections.dankfleet.llm.plugins.module_utils.serve.rpc_fleet import (
    RpcFleetError, check_bind_address, devices_seen, missing_devices, rpc_devices, rpc_endpoints)

GIB, MIB = lib.GIB, lib.MIB


@pytest.mark.parametrize("addr", ["10.89.7.11", "192.168.1.20", "172.20.0.5", "100.101.102.103", "fd00::11",
                                  "127.0.0.1"])
def test_private_addresses_are_accepted(addr):
    assert check_bind_address(addr) == ""


@pytest.mark.parametrize("addr,why", [("0.0.0.0", "every interface"), ("::", "every interface"),
                                      ("8.8.8.8", "public address"), ("2001:4860::8888", "public address"),
                                      ("worker-1", "not an IP address"), ("", "dankfleet_private_address"),
                                      ("224.0.0.1", "unicast")])
def test_open_and_public_addresses_are_refused(addr, why):
    assert why in check_bind_address(addr)


WORKERS = [
    {"host": "w1", "address": "10.89.7.11", "backend": "cpu", "devices": None,
     "gpus": [{"name": "CPU", "vram_total_bytes": 16 * GIB}]},
    {"host": "w2", "address": "fd00::12", "backend": "cuda",
     "devices": [{"device": "CUDA1", "port": 50053}, {"device": "CUDA0", "port": 50052}],
     "gpus": {"gpus": [{"name": "CUDA0", "vram_total_bytes": 24 * GIB, "vram_reserved_bytes": 0},
                       {"name": "CUDA1", "vram_total_bytes": 12 * GIB, "vram_reserved_bytes": 0}]}},
]


def test_endpoints_follow_the_inventory_order():
    assert rpc_endpoints(WORKERS) == ["10.89.7.11:50052", "[fd00::12]:50053", "[fd00::12]:50052"]


def test_devices_are_rpc_first_then_local_in_llama_cpp_order():
    local = [{"name": "ROCm0", "vram_total_bytes": 32 * GIB}]
    devs = rpc_devices(WORKERS, local)
    assert [d["name"] for d in devs] == ["RPC0", "RPC1", "RPC2", "ROCm0"]
    assert [d.get("host") for d in devs] == ["w1", "w2", "w2", None]
    assert [d["vram_total_bytes"] // GIB for d in devs] == [16, 12, 24, 32]     # CUDA1 is RPC1: the list's order
    assert devs[1]["endpoint"] == "[fd00::12]:50053" and devs[1]["rpc_backend"] == "cuda"


def test_a_public_or_duplicate_worker_is_refused_naming_the_host():
    with pytest.raises(RpcFleetError, match="w1: 8.8.8.8 is a public address"):
        rpc_endpoints([dict(WORKERS[0], address="8.8.8.8")])
    with pytest.raises(RpcFleetError, match="used twice"):
        rpc_endpoints([dict(WORKERS[0], devices=[{"device": "CPU", "port": 1}, {"device": "CPU", "port": 1}])])
    with pytest.raises(RpcFleetError, match="w1: no device facts"):
        rpc_devices([dict(WORKERS[0], gpus=None)])


def test_the_plan_charges_each_worker_its_own_backends_overhead_and_names_the_host():
    m = lib.fixture("frank_medium")
    devs = rpc_devices(WORKERS[:1], [{"name": "CUDA0", "vram_total_bytes": 24 * GIB}])
    serve = {"backend": "cuda", "ctx_size": 32768, "parallel": 1, "tensor_split": "auto"}
    r = fit_plan.plan(devs, m, serve)
    over = [d["overhead_bytes"] for d in r["devices"]]
    assert over == [fit_plan.RPC_SERVER_OVERHEAD_BYTES["cpu"], fit_plan.PROFILES["cuda"]["device_overhead_bytes"]]
    assert r["devices"][0]["host"] == "w1" and r["devices"][0]["endpoint"] == "10.89.7.11:50052"
    first, last = r["devices"][0]["layer_range"], r["devices"][1]["layer_range"]
    assert "RPC0 on w1 (10.89.7.11:50052, cpu ggml-rpc-server): blocks %d-%d" % tuple(first) in r["table"]
    assert "CUDA0 on this host: blocks %d-%d + output" % tuple(last) in r["table"]
    # without a host the plan and table are what they were
    plain = fit_plan.plan([dict(d, host=None, rpc_backend=None) for d in devs], m, serve)
    assert " on " not in plain["table"] and plain["devices"][0]["overhead_bytes"] == over[1]


LOG = """llama_model_load_from_file_impl: using device RPC0 (10.89.7.11:50052) (unknown id) - 15877 MiB free
llama_model_load_from_file_impl: using device RPC1 (127.0.0.1:50052) (unknown id) - 15877 MiB free
"""


def test_the_gate_reads_every_worker_device_with_its_memory():
    assert [d["name"] for d in devices_seen(LOG)] == ["RPC0", "RPC1"]
    assert missing_devices(LOG, ["10.89.7.11:50052", "127.0.0.1:50052"]) == ""
    assert "RPC2 (10.89.7.12:50052) is not among" in missing_devices(LOG, ["10.89.7.11:50052", "127.0.0.1:50052",
                                                                           "10.89.7.12:50052"])
    assert "RPC0 is 10.89.7.11:50052, expected 10.89.7.99:50052" in missing_devices(LOG, ["10.89.7.99:50052"])
    assert "no free memory" in missing_devices(LOG.replace("15877 MiB", "0 MiB"), ["10.89.7.11:50052"])
    # a restart's second load replaces the first one's lines
    assert len(devices_seen(LOG + LOG.split("\n")[0])) == 1


# b11434 with --spec-draft-model on the second device (--spec-draft-device RPC1): the drafter's load prints its own
# device line, as the production rehearsal's journal has it (issue 35)
DRAFT_LOG = """0.00.069.016 I llama_prepare_model_devices: using device RPC0 (127.0.0.1:18352) (unknown id) - 24105 MiB free
0.00.069.158 I llama_prepare_model_devices: using device RPC1 (127.0.0.1:18353) (unknown id) - 24105 MiB free
0.00.073.455 I load_tensors: RPC0[127.0.0.1:18352] model buffer size =     0.55 MiB
0.00.095.247 I common_speculative_init_result: loading draft model '/home/dank/models/d/Draft-Q4_K_M.gguf'
0.00.095.476 I llama_model_loader: loaded meta data with 37 key-value pairs and 36 tensors
0.00.095.632 I llama_prepare_model_devices: using device RPC1 (127.0.0.1:18353) (unknown id) - 24105 MiB free
0.00.095.693 I load_arch_hparams: DFlash extract_layers = [1, 4, 7]
"""


def test_a_drafters_device_line_is_not_a_new_load_of_the_target():
    eps = ["127.0.0.1:18352", "127.0.0.1:18353"]
    assert [(d["name"], d["endpoint"]) for d in devices_seen(DRAFT_LOG)] == list(zip(["RPC0", "RPC1"], eps))
    assert missing_devices(DRAFT_LOG, eps) == ""
    # a restart after it is still a new load: its target lines replace the first start's
    again = DRAFT_LOG.replace("24105", "100").splitlines()[0]
    assert devices_seen(DRAFT_LOG + again) == [{"name": "RPC0", "endpoint": eps[0], "free_mib": 100}]
    # the drafter's line alone (its target's lines lost) proves nothing of the target
    assert "RPC0 (127.0.0.1:18352) is not among" in missing_devices("\n".join(DRAFT_LOG.splitlines()[3:]), eps)


def test_the_roles_default_devices_are_the_filters():
    path = os.path.join(lib.ROOT, "roles", "llama_rpc_worker", "defaults", "main.yml")
    with open(path) as fh:
        defaults = yaml.safe_load(fh)
    assert defaults["llama_rpc_worker_devices"] == rpc_fleet.DEFAULT_DEVICES
