"""plan_actual.run, the module dankfleet.llm.plan_actual's whole logic as plain Python: the process found by pid or
by its unit's MainPID, nvidia-smi from saved files or the live tool, the record appended and the textfile written
only outside check mode (check mode says changed as a real run would), and every refusal before anything is
written. systemctl and nvidia-smi are stand-ins that record what they were asked."""
import json
import os

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import plan_actual as pa
from ansible_collections.dankfleet.llm.plugins.modules.plan_actual import ARGUMENT_SPEC

MIB = 1024 * 1024
GIB = 1024 * MIB


def params(**given):
    """The module's parameters as AnsibleModule hands them over: every option, defaults filled in."""
    out = dict((k, v.get("default")) for k, v in ARGUMENT_SPEC.items())
    out.update(given)
    return out


class Host(object):
    """run_command and which over a fixed table of answers; every argv asked is kept in ``asked``."""

    def __init__(self, answers=None, tools=("systemctl",)):
        self.answers, self.tools, self.asked = answers or {}, tools, []

    def run_command(self, argv):
        self.asked.append(argv)
        for prefix, answer in self.answers.items():
            if " ".join(argv).startswith(prefix):
                return answer
        return 1, "", "unexpected command %s" % argv

    def which(self, name):
        return "/usr/bin/" + name if name in self.tools else None


@pytest.fixture
def cpu(tmp_path):
    """A CPU endpoint of 3 GiB RSS (pid 77) planned at 1 GiB: a miss beyond the bound."""
    status = tmp_path / "root" / "proc" / "77" / "status"
    status.parent.mkdir(parents=True)
    status.write_text("Name:\tllama-server\nVmRSS:\t%d kB\nRssAnon:\t%d kB\nRssFile:\t0 kB\nRssShmem:\t0 kB\n"
                      % (3 * GIB // 1024, 3 * GIB // 1024))
    env = tmp_path / "e.env"
    env.write_text("LLAMA_RELEASE=b11434-cpu-test\nLLAMA_API_KEY=s3cret\n")
    state, textdir = tmp_path / "state", tmp_path / "text"
    state.mkdir()
    textdir.mkdir()
    plan = {"devices": [{"name": "CPU", "weights_bytes": GIB, "kv_bytes": 0, "recurrent_bytes": 0, "draft_bytes": 0,
                         "mmproj_bytes": 0, "compute_bytes": 0, "overhead_bytes": 0, "total_bytes": GIB}],
            "host": {"weights_bytes": 0, "total_bytes": 0}}
    return params(plan=plan, backend="cpu", pid=77, env_file=str(env), state_dir=str(state),
                  textfile_dir=str(textdir), sysfs_root=str(tmp_path / "root"))


def test_a_run_appends_the_record_writes_the_textfile_and_warns_on_the_miss(cpu):
    result, warnings = pa.run(cpu, Host().run_command, Host().which)
    assert result["changed"] is True and result["records"] == 1 and result["pid"] == 77
    assert result["underestimated"] == ["CPU"] and result["misses"] == ["CPU"]
    assert [r["device"] for r in result["devices"]] == ["CPU"] and result["devices"][0]["actual_bytes"] == 3 * GIB
    assert len(warnings) == 1 and warnings[0].startswith("plan vs actual: CPU underestimated by 2048.0 MiB")
    records = json.load(open(result["records_path"]))
    assert records == [result["record"]] and "s3cret" not in json.dumps(records)
    assert result["textfile"] == os.path.join(cpu["textfile_dir"], pa.TEXTFILE_NAME)
    assert open(result["textfile"]).read() == pa.render_textfile(result["record"])


def test_check_mode_reports_the_same_measurement_and_the_change_but_writes_nothing(cpu):
    dry, dry_warnings = pa.run(cpu, Host().run_command, Host().which, check_mode=True)
    assert dry["changed"] is True and dry["records"] is None
    assert os.listdir(cpu["state_dir"]) == [] and os.listdir(cpu["textfile_dir"]) == []
    real, warnings = pa.run(cpu, Host().run_command, Host().which)
    assert dry["devices"] == real["devices"] and dry["table"] == real["table"] and dry_warnings == warnings
    assert dry["textfile"] == real["textfile"]
    unrecorded, _ = pa.run(dict(cpu, record=False), Host().run_command, Host().which, check_mode=True)
    assert unrecorded["changed"] is False


def test_the_service_is_measured_by_its_main_pid_and_a_stopped_one_is_refused(cpu):
    host = Host({"systemctl show": (0, "77\n", "")})
    result, _ = pa.run(dict(cpu, pid=None, service="llama-server.service"), host.run_command, host.which,
                       check_mode=True)
    assert result["pid"] == 77
    assert host.asked == [["systemctl", "show", "--property=MainPID", "--value", "llama-server.service"]]
    stopped = Host({"systemctl show": (0, "0\n", "")})
    with pytest.raises(pa.PlanActualError, match="service llama-server.service has no MainPID") as exc:
        pa.run(dict(cpu, pid=None, service="llama-server.service"), stopped.run_command, stopped.which)
    assert exc.value.changed is False and os.listdir(cpu["state_dir"]) == []


def test_cuda_reads_saved_nvidia_smi_files_or_warns_without_the_tool(cpu, tmp_path):
    plan = {"devices": [{"name": "CUDA0", "weights_bytes": GIB, "kv_bytes": 0, "recurrent_bytes": 0,
                         "draft_bytes": 0, "mmproj_bytes": 0, "compute_bytes": 0, "overhead_bytes": 0,
                         "total_bytes": GIB}], "host": {"weights_bytes": 0, "total_bytes": 0}}
    apps = tmp_path / "apps.csv"
    apps.write_text("77, 1024\n")
    cuda = dict(cpu, plan=plan, backend="cuda", nvidia_smi_output_file=str(apps))
    host = Host()
    result, _ = pa.run(cuda, host.run_command, host.which)
    assert host.asked == [] and result["devices"][0]["actual_bytes"] == GIB
    result, warnings = pa.run(dict(cuda, nvidia_smi_output_file=None), host.run_command, host.which)
    assert warnings[:2] == ["nvidia-smi not found on PATH"] * 2 and host.asked == []
    with pytest.raises(pa.PlanActualError, match="nvidia_smi_output_file %s is not readable" % (tmp_path / "no")):
        pa.run(dict(cuda, nvidia_smi_output_file=str(tmp_path / "no")), host.run_command, host.which)


def test_refusals_come_before_anything_is_written(cpu, tmp_path):
    for bad, says in ((dict(textfile_name="../x.prom"), "textfile_name"),
                      (dict(textfile_dir=str(tmp_path / "nope")), "textfile_dir %s does not exist" % (tmp_path / "nope")),
                      (dict(state_dir=str(tmp_path / "gone")), "state_dir %s does not exist" % (tmp_path / "gone")),
                      (dict(plan={"devices": "x"}), "plan must be the dankfleet.llm.fit_plan result")):
        with pytest.raises(pa.PlanActualError, match=says) as exc:
            pa.run(dict(cpu, **bad), Host().run_command, Host().which)
        assert exc.value.changed is False
        assert os.listdir(cpu["state_dir"]) == [] and os.listdir(cpu["textfile_dir"]) == []
    result, warnings = pa.run(dict(cpu, textfile_dir=str(tmp_path / "nope"), textfile_dir_optional=True),
                              Host().run_command, Host().which)
    assert result["textfile"] is None and result["records"] == 1
    assert warnings[0].startswith("textfile_dir %s is not a directory" % (tmp_path / "nope"))


def test_a_textfile_that_fails_after_the_record_says_the_record_changed(cpu, monkeypatch):
    def refuse(*args, **kwargs):
        raise pa.PlanActualError("textfile_dir refused")
    monkeypatch.setattr(pa, "write_textfile", refuse)
    with pytest.raises(pa.PlanActualError, match="textfile_dir refused") as exc:
        pa.run(cpu, Host().run_command, Host().which)
    assert exc.value.changed is True and len(json.load(open(os.path.join(cpu["state_dir"], pa.RECORD_FILE)))) == 1
