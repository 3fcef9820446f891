"""rpc_split: what a person would check by hand after the converge, on both containers."""
import functools
import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

# podman exec, not an ansible run per command: the checks take seconds, not minutes
testinfra_hosts = ["podman://dankfleet-rpc-worker", "podman://dankfleet-rpc-head"]
CACHE = os.environ.get("DANKFLEET_CACHE", os.path.expanduser("~/.cache/dankfleet"))


def _name(host):
    return host.backend.get_hostname()


@functools.lru_cache(maxsize=None)
def _addr(name):
    """A container's address on the scenario's network (podman hands it out)."""
    import testinfra
    return testinfra.get_host("podman://" + name).check_output("hostname -I").split()[0]


def _endpoints(host):
    """The head's --rpc list as running, after checking it holds exactly the two hosts' devices (their order is
    the llm_rpc_workers group's, the same order the plan used)."""
    pid = host.check_output("systemctl show --property=MainPID --value llama-server.service")
    argv = host.check_output("tr '\\0' '\\n' < /proc/%s/cmdline" % pid).splitlines()
    eps = argv[argv.index("--rpc") + 1].split(",")
    assert sorted(eps) == sorted("%s:50052" % _addr(n) for n in ("dankfleet-rpc-worker", "dankfleet-rpc-head"))
    return eps


def test_rpc_server_binds_the_private_address_only(host):
    addr = _addr(_name(host))
    svc = host.service("llama-rpc-worker-50052")
    assert svc.is_running and svc.is_enabled
    listening = host.run("ss -Hltn 'sport = :50052'").stdout
    assert "%s:50052" % addr in listening and "0.0.0.0:50052" not in listening and "*:50052" not in listening
    unit = host.file("/etc/systemd/system/llama-rpc-worker-50052.service").content_string
    assert "DynamicUser=yes" in unit and "IPAddressDeny=any" in unit
    nft = host.file("/etc/nftables.d/dankfleet-llama-rpc.nft").content_string
    assert "tcp dport { 50052 } ip saddr { %s } accept" % _addr("dankfleet-rpc-head") in nft


def _log(host):
    inv = host.check_output("systemctl show --property=InvocationID --value llama-server.service")
    return host.check_output("journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID=%s" % inv).splitlines()


def test_head_serves_over_every_worker_device_in_rpc_order(host):
    if _name(host) != "dankfleet-rpc-head":
        pytest.skip("the head's check")
    pid = host.check_output("systemctl show --property=MainPID --value llama-server.service")
    cmd = host.check_output("tr '\\0' ' ' < /proc/%s/cmdline" % pid)
    eps = _endpoints(host)
    assert "--rpc %s " % ",".join(eps) in cmd and "--device RPC0,RPC1 " in cmd and "--tensor-split " in cmd
    from ansible_collections.dankfleet.llm.plugins.module_utils.serve import rpc_fleet
    assert rpc_fleet.missing_devices("\n".join(_log(host)), eps) == ""


def test_planner_per_device_buffers_within_the_rpc_bounds(host):
    """weights and KV within 1 MiB, compute within max(10 %, 32 MiB) per device (benchmarks/fit_accuracy.py)."""
    if _name(host) != "dankfleet-rpc-head":
        pytest.skip("the head's check")
    import fit_accuracy
    import measure_llamacpp_buffers as mlb
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts
    pid = host.check_output("systemctl show --property=MainPID --value llama-server.service")
    argv = host.check_output("tr '\\0' '\\n' < /proc/%s/cmdline" % pid).splitlines()

    def arg(flag, default=None):
        return argv[argv.index(flag) + 1] if flag in argv else default
    cfg = mlb.normalize({"model": "dense-llama", "ctx": int(arg("--ctx-size")), "parallel": int(arg("--parallel", 1)),
                         "batch": int(arg("--batch-size", 2048)), "ubatch": int(arg("--ubatch-size", 512)),
                         "flash_attn": arg("--flash-attn", "on"), "devices": "rpc", "n_devices": 2,
                         "tensor_split": [int(x) for x in arg("--tensor-split").split(",")]})
    fx = {"id": "rpc_split", "config": cfg, "model": "dense-llama",
          "measured": mlb.parse_log(_log(host), _endpoints(host))}
    assert set(fx["measured"]["devices"]) >= {"RPC0", "RPC1"}, fx["measured"]["devices"]
    facts = gguf_facts(os.path.join(CACHE, "models", "dense-llama.gguf"))
    rows = fit_accuracy.compare(fx, lambda name: facts)
    bad = [r for r in rows if not r["ok"]]
    assert rows and not bad, bad
    assert any(r["device"] == "RPC0" and r["component"] == "weights" and r["measured"] > 0 for r in rows)
