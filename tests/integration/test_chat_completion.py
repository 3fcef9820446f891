"""dankfleet.llm.chat_completion (the deploy report's completion) against a real llama-server b11434: the
answer's text and token count, an API key the server wants (and the 401 without it, named in the failure),
nothing listening, and check mode sending nothing - the module run through Ansible itself."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def ask(check=False, **args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_LOAD_CALLBACK_PLUGINS="true",
               ANSIBLE_STDOUT_CALLBACK="json")
    cmd = [str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m", "dankfleet.llm.chat_completion",
           "-a", json.dumps(args)] + (["--check"] if check else [])
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    result = json.loads(run.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return run.returncode, result


def test_one_real_completion_with_and_without_the_key(lab_models, llama_server, free_port):
    with llama_server(lab_models["dense-llama"]["path"], "-np", "1", "--alias", "frank-lab",
                      "--api-key", "sekrit") as srv:
        rc, result = ask(url=srv.base_url, api_key="sekrit", model="frank-lab", max_tokens=4)
        assert rc == 0 and result["changed"] is False, result
        assert result["completion_tokens"] == 4 and result["json"]["usage"]["completion_tokens"] == 4
        assert result["content"] == result["json"]["choices"][0]["message"]["content"]
        assert "sekrit" not in json.dumps(result)

        rc, result = ask(url=srv.base_url, model="frank-lab", max_tokens=4)
        assert rc != 0 and "answered HTTP 401" in result["msg"], result

        rc, result = ask(check=True, url=srv.base_url, model="frank-lab")
        assert rc == 0 and result["msg"].startswith("would POST " + srv.base_url + "/v1/chat/completions")

    rc, result = ask(url="http://127.0.0.1:%d" % free_port(), model="frank-lab")
    assert rc != 0 and "answered nothing" in result["msg"], result
