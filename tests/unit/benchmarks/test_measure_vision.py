"""issue 34: the measuring harness's vision set - what it asks of llama-server and how it sizes its images, so the
run a device session makes records the projector at the peak the planner books."""
import measure_llamacpp_buffers as measure
import gen_models


def _args(c):
    cfg = measure.normalize({k: v for k, v in c.items() if k not in ("id", "kind", "drafter_kind", "mmproj_kind")})
    cfg["model"], cfg["mmproj"] = "/m/target.gguf", "/m/mmproj.gguf"
    endpoints = ["127.0.0.1:1"] * measure.rpc_needed(cfg)
    return measure.common_args(cfg, endpoints)


def test_the_vision_set_covers_each_limit_and_placement_once():
    cfgs = measure.SETS["cuda-h200-vision"]()
    ids = [c["id"] for c in cfgs]
    assert len(ids) == len(set(ids)) == 7
    assert all(c["kind"] == "qwen35_27b" and c["mmproj_kind"] == "mmproj-qwen35" and c["request"] for c in cfgs)
    assert sorted(set(c["image_max_tokens"] or 0 for c in cfgs)) == [0, 1024, 8192]


def test_each_configuration_passes_its_image_options():
    by = dict((c["id"], _args(c)) for c in measure.SETS["cuda-h200-vision"]())
    default = by["qwen35_27b-vision-maxdefault-cuda"]
    assert "--mmproj" in default and "--image-max-tokens" not in default and "--mmproj-device" not in default
    rpc = by["qwen35_27b-vision-max8192-rpc0"]
    assert rpc[rpc.index("--image-max-tokens") + 1] == "8192" and rpc[rpc.index("--mmproj-device") + 1] == "RPC0"
    assert rpc[rpc.index("-ts") + 1] == "1,1"
    cpu = by["qwen35_27b-vision-max1024-cpu"]
    assert "--no-mmproj-offload" in cpu and "--mmproj-device" not in cpu


def test_the_real_projector_projects_into_the_real_target():
    p = gen_models.resolve_projector_params("mmproj-qwen35", "real")
    assert (p["n_embd"], p["n_layer"], p["n_ff"], p["patch_size"], p["spatial_merge_size"]) == (1152, 27, 4304, 16, 2)
    assert p["projection_dim"] == gen_models.resolve_params("qwen35-mtp", "real")["n_embd"]
