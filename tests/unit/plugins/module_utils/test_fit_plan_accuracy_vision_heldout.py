"""fit_plan against real b11434 loads of a vision projector after the largest image its limit admits (issue 34's
done-when).

tests/fixtures/llamacpp/b11434-cuda-h100-vision/: the sparse real-scale 27B qwen35 target beside a generated
real-size qwen3vl_merger projector (the runbook's 888 MiB BF16 tower) on one NVIDIA H100 80GB, at the runbook's slot
shape (ctx 65536 x 2 slots, ub 512 / b 6144): the projector on the target's only device, on the second device of a
1,1 split (CUDA0 + a ggml-rpc-server on the same GPU, --mmproj-device RPC0) and on the CPU (--no-mmproj-offload),
each at the default image limit, --image-max-tokens 1024 and 8192 (the CPU at 1024 only). After a text request:
a 64x32 image, then the largest square image the limit admits (sized as the verify stage sizes it); nvidia-smi per
process after each. The planner's projector terms were written from the issue's H200 figures
(../b11434-cuda-h200-vision/issue34_figures.json); none of these loads was seen. No GPU here.
"""
import pytest

import fit_accuracy
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan

MIB = 1024 * 1024
SET = "cuda-h100-vision"
FIXTURES, MODELS = fit_accuracy.load_fixtures(fit_accuracy.SETS[SET])
BY_ID = dict((fx["id"], fx) for fx in FIXTURES)
ON_GPU = sorted(i for i in BY_ID if not i.endswith("-cpu"))


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    return fit_accuracy.Facts(MODELS, tmp_path_factory.mktemp("sparse-gguf-vision"))


def _projector_device(fx):
    c = fx["config"]
    return None if not c["mmproj_offload"] else (c["mmproj_device"] or "CUDA0")


def test_the_set_is_the_projector_on_each_device_and_the_cpu_after_the_largest_image():
    assert len(BY_ID) == 7 and set(MODELS) == {"qwen35_27b", "mmproj-qwen35"}
    places = set()
    for fx in FIXTURES:
        assert fx["ok"] and fx["build"] == "b11434" and fx["config"]["backend"] == "cuda", fx["id"]
        assert fx["nvidia_smi"]["baseline"]["gpus"][0]["total_mib"] == 81559      # an H100 80GB
        v = fx["request"]["vision"]
        images = dict((i["label"], i) for i in v["images"])
        assert images["small"]["ok"] and images["large"]["ok"], fx["id"]
        # the large image is the largest square one the limit admits, as the verify stage sizes it
        assert images["large"]["px"][0] == v["plan"]["px"] and v["plan"]["tokens"] <= v["plan"]["image_max_tokens"]
        places.add(_projector_device(fx))
    assert places == {"CUDA0", "RPC0", None}
    assert sorted(BY_ID[i]["request"]["vision"]["plan"]["image_max_tokens"] for i in ON_GPU) == [
        1024, 1024, 4096, 4096, 8192, 8192]


@pytest.mark.parametrize("fid", sorted(BY_ID))
def test_never_under_and_within_bounds_term_by_term_after_the_largest_image(fid, facts):
    fx = BY_ID[fid]
    assert all(r["sample"] == "after_large_image" for r in fit_accuracy.smi_rows(fx, facts))
    rows = fit_accuracy.bounded_terms(fx, facts)
    devices = set(d for d, t, e, b in rows if t == "smi")
    assert devices == ({"CUDA0", "RPC0"} if "-rpc0" in fid else {"CUDA0"})
    for dev, term, err, bound in rows:
        assert err >= -64 * MIB, (dev, term, err / MIB)
        assert abs(err) <= bound, (dev, term, err / MIB, bound / MIB)


@pytest.mark.parametrize("fid", [i for i in ON_GPU if "max1024" not in i])
def test_booking_only_the_load_fails_after_the_largest_image(fid, facts, monkeypatch):
    """The test can fail: without the growth to the limit (the first image's context only), the projector's device
    ends more than 64 MiB under what nvidia-smi shows after the largest image."""
    monkeypatch.setattr(fit_plan, "_mmproj_request", lambda prof, g, tokens, first_use: int(first_use))
    fx = BY_ID[fid]
    (err,) = [r["error"] for r in fit_accuracy.smi_rows(fx, facts) if r["device"] == _projector_device(fx)]
    assert err < -64 * MIB, err / MIB
