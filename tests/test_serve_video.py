"""``paddle-r1 serve`` with videos: a real server on 127.0.0.1 with the tiny Qwen3-VL, sent clips written here by
PyAV as vLLM's clients send them (``video_url``: a clip as a data URL, a list of frames, a path under --image_root);
each reply is the greedy completion training's generator gives the same clip, and bad videos get 4xx naming their
part."""
import base64
import http.client
import io
import json
import os
import threading

import numpy as np
import pytest
from PIL import Image

from paddle_r1.data.video import VideoSampling
from paddle_r1.generation.generator import Generator
from paddle_r1.generation.rollout import SamplingParams
from paddle_r1.serve.chat import MediaReaders, RequestError, parse_chat_request
from paddle_r1.serve.limits import ServeLimits
from paddle_r1.serve.server import build_server
from test_video import frame, write_clip

LIMITS = ServeLimits(max_tokens=8, max_request_bytes=1 << 20, max_prompt_tokens=2048, max_videos=1)
QUESTION = "When does the screen turn red?"


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    folder = tmp_path_factory.mktemp("media")
    clip = write_clip(folder / "clip.mp4", count=10, fps=4, size=(64, 64))
    frames = folder / "frames"
    frames.mkdir()
    noise = folder / "noise"
    noise.mkdir()
    rng = np.random.default_rng(0)
    for i in range(5):
        Image.fromarray(frame(2 * i, (64, 64))).save(frames / f"{i:03d}.png")
        Image.fromarray((rng.random((64, 64, 3)) * 255).astype("uint8")).save(noise / f"{i:03d}.png")
    return {"root": str(folder), "clip": clip, "frames": str(frames), "noise": str(noise)}


@pytest.fixture(scope="module")
def server(tmp_path_factory, media):
    from paddle_r1.testing.tiny import make_tiny_model

    folder = make_tiny_model(str(tmp_path_factory.mktemp("tiny") / "qwen3_vl"), family="qwen3_vl")
    srv = build_server(folder, port=0, model_name="tiny", limits=LIMITS, image_root=media["root"])
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def post(server, messages: list) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=120)
    body = {"model": "tiny", "messages": messages, "temperature": 0, "max_tokens": 6}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    status, reply = response.status, json.loads(response.read())
    conn.close()
    return status, reply


def video_message(url: str) -> list:
    return [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": url}},
                                         {"type": "text", "text": QUESTION}]}]


def clip_url(path: str) -> str:
    with open(path, "rb") as f:
        return "data:video/mp4;base64," + base64.b64encode(f.read()).decode()


def frames_url(folder: str) -> str:
    """vLLM's list of frames: base64 JPEGs joined by commas (JPEG at quality 100: the frames are flat colours)."""
    parts = []
    for name in sorted(os.listdir(folder)):
        buffer = io.BytesIO()
        Image.open(os.path.join(folder, name)).save(buffer, format="JPEG", quality=100)
        parts.append(base64.b64encode(buffer.getvalue()).decode())
    return "data:video/jpeg;base64," + ",".join(parts)


def greedy(server, video: str, sampling: VideoSampling = VideoSampling()) -> str:
    """The generator's greedy completion of the same question on ``video``, as training would prompt it."""
    generator = server.engine.generator
    local = Generator(generator.model, generator.processor, generator.coord_system, sampling)
    sample = {"images": [], "videos": [video], "problem": f"<video>{QUESTION}"}
    return local.generate([sample], 1, SamplingParams(max_new_tokens=6, temperature=0.0), "{Question}").texts[0]


def test_a_clip_as_a_data_url_a_path_and_a_list_of_frames(server, media):
    status, reply = post(server, video_message(clip_url(media["clip"])))
    assert status == 200, reply
    want = greedy(server, media["clip"])
    assert reply["choices"][0]["message"]["content"] == want
    assert reply["usage"]["prompt_tokens"] > 3 * 4  # three frame pairs of 4 tokens, and their times
    status, reply = post(server, video_message("clip.mp4"))  # under --image_root
    assert status == 200 and reply["choices"][0]["message"]["content"] == want
    status, reply = post(server, video_message(frames_url(media["frames"])))
    assert status == 200, reply
    assert reply["choices"][0]["message"]["content"] == greedy(server, media["frames"])
    # the reply follows the video: a folder of noise frames (a path under --image_root) gets another one
    status, reply = post(server, video_message("noise"))
    assert status == 200 and reply["choices"][0]["message"]["content"] == greedy(server, media["noise"]) != want


@pytest.mark.parametrize("url, status, words", [
    ("data:video/mp4;base64," + base64.b64encode(os.urandom(3000)).decode(), 400, "content[0]: cannot read video"),
    ("data:video/mp4;base64,@@@", 400, "does not decode"),
    ("data:text/plain;base64,aGk=", 400, "must be video/"),
    ("https://example.com/a.mp4", 400, "not fetched"),
    ("../outside.mp4", 403, "outside the allowed image root"),
    ("data:video/jpeg;base64,aGk=,aGk=", 400, "frame 0: not a readable image"),
])
def test_bad_videos_are_refused_naming_their_part(server, url, status, words):
    got, reply = post(server, video_message(url))
    assert got == status and words in reply["error"]["message"], reply
    assert "paddle_r1_video_" not in reply["error"]["message"]  # the server's temporary file is not shown


def test_too_many_videos_and_a_model_without_video(server, media):
    url = {"type": "video_url", "video_url": {"url": "clip.mp4"}}
    status, reply = post(server, [{"role": "user", "content": [url, url, {"type": "text", "text": "?"}]}])
    assert status == 413 and "more than 1 videos" in reply["error"]["message"]
    body = json.dumps({"model": "tiny", "messages": video_message("clip.mp4")}).encode()
    with pytest.raises(RequestError, match="reads images only"):
        parse_chat_request(body, "tiny", LIMITS, MediaReaders(media["root"], None, "PaddleOCR-VL reads images only"))
