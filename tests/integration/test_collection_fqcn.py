"""dankfleet.llm.* resolves by FQCN from a plain clone and from the built tarball.

From the repo root, ansible.cfg's collections_path finds the committed link
collections/ansible_collections/dankfleet/llm -> repo root. From the tarball,
`ansible-galaxy collection build` + `install` into a temp dir, run from a cwd
outside the repo so nothing of the clone can help.
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"}
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    env["ANSIBLE_NOCOLOR"] = "1"
    env.update(extra)
    return env


def _gguf_info(model, cwd, env):
    out = subprocess.run(
        [str(BIN / "ansible"), "localhost", "-m", "dankfleet.llm.gguf_info",
         "-a", f"path={model}", "-o"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    payload = out.stdout.split("=>", 1)[1]
    return json.loads(payload)


def _fit_plan_doc(cwd, env):
    out = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "filter", "dankfleet.llm.fit_plan"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def model(lab_models):
    return lab_models["qwen35-mtp"]["path"]


def test_fqcn_from_the_repo_root(model):
    facts = _gguf_info(model, REPO, _env(ANSIBLE_CONFIG=str(REPO / "ansible.cfg")))
    assert facts["architecture"] == "qwen35"
    assert facts["nextn_predict_layers"] == 1
    assert "fit_plan" in _fit_plan_doc(REPO, _env(ANSIBLE_CONFIG=str(REPO / "ansible.cfg")))


def test_fqcn_from_the_installed_tarball(model, tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(dist), str(REPO)],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = dist.glob("dankfleet-llm-*.tar.gz")
    with tarfile.open(tarball) as tf:
        names = tf.getnames()
    # What ships: plugins and roles; what must not: the venv, lab state, the repo link.
    assert "plugins/modules/gguf_info.py" in names
    assert "plugins/filter/fit_plan.py" in names
    assert not [n for n in names if n.startswith((".venv", ".lab", "collections/", ".git/"))]

    install = tmp_path / "install"
    inst = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--no-deps", "--force", "-p", str(install), str(tarball)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stdout + inst.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env(ANSIBLE_COLLECTIONS_PATH=str(install), ANSIBLE_CONFIG=str(elsewhere / "none.cfg"))
    facts = _gguf_info(model, elsewhere, env)
    assert facts["architecture"] == "qwen35"
    assert "fit_plan" in _fit_plan_doc(elsewhere, env)
    # And the module that answered is the installed copy, not the clone.
    assert (install / "ansible_collections/dankfleet/llm/plugins/modules/gguf_info.py").is_file()
    shutil.rmtree(install)
