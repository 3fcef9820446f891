"""The lab's projector (tests/lab/gen_models.py write_projector) in the real llama-server b11434.

What the lab and the production rehearsal serve with vision on: the generated qwen35+MTP target with
the generated qwen3vl_merger mmproj, as `--mmproj` (this build has no autoload), two slots and the
lab's speculative chain. An image sent as an OpenAI image_url data URI must be answered 200 with
content, and the prompt must carry more tokens than the same request without the image (the
projector encoded it). Without a projector the same request is refused - the runbook's first
327680 deploy, healthy and text-only - so the image check can fail. Each deliberately broken
projector (write_broken_projector) keeps llama-server from ever answering /health.
"""
from __future__ import annotations

import base64
import struct
import zlib

import gguf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gen_models

TARGET = "qwen35-mtp"
PROJECTOR = "mmproj-qwen35"
# the lab profile's serving shape (inventory/lab/group_vars/llm_endpoints/lab.yml)
LAB_ARGS = ["-np", "2", "-b", "512", "-ub", "256", "--spec-type", "draft-mtp,ngram-mod", "--spec-draft-n-max", "3"]
LAB_CTX = 8192


def png(width: int, height: int, pattern: str = "gradient", seed: int = 0) -> bytes:
    """An 8-bit RGB PNG, written with the stdlib (zlib + crc32)."""
    def pixel(x, y):
        if pattern == "gradient":
            return ((x * 255) // max(1, width - 1), (y * 255) // max(1, height - 1), (seed * 37) % 256)
        if pattern == "checker":
            v = 255 if ((x // 4) + (y // 4) + seed) % 2 else 0
            return (v, v, 255 - v)
        return ((seed * 53) % 256, (seed * 97) % 256, (seed * 151) % 256)  # solid

    rows = b"".join(b"\x00" + b"".join(bytes(pixel(x, y)) for x in range(width)) for y in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def chat(image: bytes | None, text: str = "Describe the image.") -> dict:
    content = [{"type": "text", "text": text}]
    if image is not None:
        uri = "data:image/png;base64," + base64.b64encode(image).decode()
        content.insert(0, {"type": "image_url", "image_url": {"url": uri}})
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 8, "temperature": 0}


# What the projector's header must say, written out by hand (a drift in the generator fails here).
EXPECTED_KV = {
    "general.architecture": "clip",
    "clip.projector_type": "qwen3vl_merger",   # the deployed projector's type (tests/fixtures/mmproj_bf16.json)
    "clip.has_vision_encoder": True,
    "clip.has_audio_encoder": False,
    "clip.vision.projection_dim": 64,          # the lab target's n_embd
    "clip.vision.embedding_length": 32,
    "clip.vision.block_count": 2,
    "clip.vision.attention.head_count": 2,
    "clip.vision.patch_size": 16,
    "clip.vision.image_size": 128,
    "clip.vision.spatial_merge_size": 2,
}


def _kv(reader, key):
    field = reader.get_field(key)
    return None if field is None else field.contents()


@pytest.fixture(scope="module")
def models(lab_models):
    assert PROJECTOR in lab_models, "gen_models.generate() no longer writes the lab projector"
    return lab_models


@pytest.fixture
def vision_server(llama_server, models):
    """One server per test (hypothesis runs every example of a test against the same one)."""
    with llama_server(models[TARGET]["path"], "--mmproj", models[PROJECTOR]["path"], "--metrics", *LAB_ARGS,
                      ctx_size=LAB_CTX) as srv:
        yield srv


def test_header_is_a_qwen3vl_projector_for_the_lab_target(models):
    entry = models[PROJECTOR]
    reader = gguf.GGUFReader(entry["path"])
    assert {k: _kv(reader, k) for k in EXPECTED_KV} == EXPECTED_KV
    assert _kv(reader, "clip.vision.projection_dim") == models[TARGET]["n_embd"]
    shapes = {t.name: [int(n) for n in t.shape] for t in reader.tensors}
    # the merger's output width is what mtmd compares with the text model's n_embd
    assert shapes["mm.2.bias"] == [64] and shapes["mm.2.weight"] == [128, 64] and shapes["mm.0.weight"] == [128, 128]
    assert shapes["v.patch_embd.weight"] == shapes["v.patch_embd.weight.1"] == [16, 16, 3, 32]
    assert shapes["v.position_embd.weight"] == [32, 64]   # an 8x8 grid of 16 px patches (image_size 128)
    assert {f"v.blk.{i}.attn_qkv.weight" for i in range(2)} <= set(shapes)
    assert not any(n.startswith("v.deepstack.") for n in shapes), "deepstack would widen the output past n_embd"
    assert entry["size"] < 1 << 20 and entry["role"] == "mmproj" and entry["projects_for"] == TARGET


def test_projector_is_deterministic_and_reused(tmp_path, models):
    a = gen_models.write_projector(PROJECTOR, tmp_path / "a.gguf")
    b = gen_models.write_projector(PROJECTOR, tmp_path / "b.gguf")
    assert a["sha256"] == b["sha256"] == models[PROJECTOR]["sha256"]
    assert gen_models.write_projector(PROJECTOR, tmp_path / "s.gguf", seed=1)["sha256"] != a["sha256"]
    first = gen_models.generate(tmp_path / "out", [PROJECTOR])
    mtime = (tmp_path / "out" / f"{PROJECTOR}.gguf").stat().st_mtime_ns
    again = gen_models.generate(tmp_path / "out", [PROJECTOR])
    assert again == first and (tmp_path / "out" / f"{PROJECTOR}.gguf").stat().st_mtime_ns == mtime
    broken = {d: gen_models.write_broken_projector(tmp_path / f"{d}.gguf", d)["sha256"]
              for d in gen_models.PROJECTOR_DEFECTS}
    assert len(set(broken.values()) | {a["sha256"]}) == len(broken) + 1


def test_bad_projector_parameters_are_refused_before_writing(tmp_path):
    with pytest.raises(ValueError, match="multiple of 8"):
        gen_models.write_projector(PROJECTOR, tmp_path / "x.gguf", n_embd=24, n_head=2)
    with pytest.raises(ValueError, match="unknown override"):
        gen_models.write_projector(PROJECTOR, tmp_path / "x.gguf", n_vocab=3)
    with pytest.raises(ValueError, match="unknown projector defect"):
        gen_models.write_broken_projector(tmp_path / "x.gguf", "nope")
    assert list(tmp_path.iterdir()) == []


def test_props_report_vision(vision_server):
    props = vision_server.get_json("/props")
    assert props["modalities"]["vision"] is True, props.get("modalities")
    assert "loaded multimodal model" in vision_server.log_text()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(width=st.integers(1, 160), height=st.integers(1, 160),
       pattern=st.sampled_from(["gradient", "checker", "solid"]), seed=st.integers(0, 255))
def test_an_image_is_encoded_and_answered(vision_server, width, height, pattern, seed):
    """Any image size: 200, non-empty content, and more prompt tokens than without the image."""
    with_image = vision_server.post_json("/v1/chat/completions", chat(png(width, height, pattern, seed)))
    text_only = vision_server.post_json("/v1/chat/completions", chat(None))
    assert with_image["choices"][0]["message"]["content"], with_image
    # qwen3vl: at least 8 merged 32x32-pixel tokens per image (b11434 set_limit_image_tokens(8, ...))
    assert with_image["usage"]["prompt_tokens"] >= text_only["usage"]["prompt_tokens"] + 8, (with_image, text_only)


def test_the_image_check_fails_without_a_projector(llama_server, models):
    """The runbook's text-only deploy: healthy, /props without vision, image requests refused."""
    with llama_server(models[TARGET]["path"], "--no-mmproj", *LAB_ARGS, ctx_size=LAB_CTX) as srv:
        assert srv.get_json("/props")["modalities"]["vision"] is False
        with pytest.raises(AssertionError, match=r"HTTP 500.*(multimodal|image)"):
            srv.post_json("/v1/chat/completions", chat(png(64, 32)))
        assert srv.post_json("/v1/chat/completions", chat(None))["choices"][0]["message"]["role"] == "assistant"


# defect -> what b11434 says before it gives up (the line an operator finds in the journal)
BROKEN = {
    "tensor_shape": r"GGML_ASSERT\(ggml_can_mul_mat\(a, b\)\) failed",
    "projection_dim": r"mismatch between text model \(n_embd = 64\) and mmproj \(n_embd = 32\)",
    "missing_tensor": r"unable to find tensor mm\.2\.bias",
}


def test_the_cached_broken_projector_is_write_broken_projectors_default(models, tmp_path):
    """generate() puts one broken projector beside the good one (the lab's model mirror serves it):
    the bytes of write_broken_projector's default defect, a tensor of the wrong shape."""
    cached = models["mmproj-qwen35-broken"]
    fresh = gen_models.write_broken_projector(tmp_path / "b.gguf")
    assert (cached["defect"], cached["sha256"], cached["size"]) == ("tensor_shape", fresh["sha256"], fresh["size"])
    shapes = {t.name: [int(n) for n in t.shape] for t in gguf.GGUFReader(cached["path"]).tensors}
    assert shapes["mm.0.weight"] == [64, 128]   # the merger's 4 x 32 inputs cut to 2 x 32


@pytest.mark.parametrize("defect", sorted(gen_models.PROJECTOR_DEFECTS))
def test_a_broken_projector_never_serves(llama_server, models, tmp_path, defect):
    broken = gen_models.write_broken_projector(tmp_path / f"broken-{defect}.gguf", defect)
    assert broken["defect"] == defect
    with pytest.raises(AssertionError, match=r"(?s)exited with -?\d+ before /health answered.*" + BROKEN[defect]):
        with llama_server(models[TARGET]["path"], "--mmproj", broken["path"], *LAB_ARGS, ctx_size=LAB_CTX,
                          timeout=60):
            pass
