"""Adapters from each source system's record format to the one sample schema

    {"images": [path, ...], "videos": [path, ...], "problem": str, "solution": any, "reward_method": str | None,
     ...extra}

Extra fields travel to the rewards unchanged. The format is named in the config or detected from
the fields (``detect_format``). An adapter raises ``SampleError`` with the reason a record is unusable.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..models.coords import as_box, as_floats, is_number
from .samples import DataError
from .video import VideoSampling, part_options

ANSWER_TAGS = re.compile(r"^\s*<answer>(.*?)</answer>\s*$", re.DOTALL)
IMAGE_MARKER = "<image>"
VIDEO_MARKER = "<video>"
MEDIA_MARKERS = re.compile(r"(<image>|<video>)")
# markers: each image where its <image> marker stands in the problem (paddle_r1's default; all images first when
# the problem has none). before_text: VLM-R1's prompt, every image before the text and the markers removed.
IMAGE_PLACEMENTS = ("markers", "before_text")


class SampleError(ValueError):
    """Why one record cannot become a sample."""


@dataclass
class SourceContext:
    """What an adapter needs to know about the file a record came from."""

    path: str
    image_root: Optional[str] = None
    image_columns: Optional[list] = None  # products format: which columns hold images
    image_cache_dir: Optional[str] = None  # where images embedded in a datasets folder are written
    image_placement: str = "markers"  # see IMAGE_PLACEMENTS
    video: VideoSampling = VideoSampling()  # the job's clip sampling, which a clip's own keys override

    def image_path(self, name) -> str:
        """An image's (or clip's) path, made absolute: completions.jsonl and the evaluation's results record it, and
        ``paddle-r1 view`` reads it from another folder (a path relative to where training ran found nothing)."""
        if isinstance(name, str):
            if not name.strip():
                raise SampleError("empty image path")
            if name.startswith(("http://", "https://")):
                raise SampleError(f"{name} is a URL: download it and give its path")
            name = name[len("file://"):] if name.startswith("file://") else name  # Qwen's and verl's local form
            base = self.image_root if self.image_root is not None else os.path.dirname(self.path)
            return os.path.abspath(os.path.join(base, name))
        return self._cached_image(name)

    def _cached_image(self, image) -> str:
        """An image stored inside a datasets or parquet row (PIL image, {"bytes", "path"} or raw bytes): write it
        once, use the path. Stored bytes are written as they are (Pillow reads the format from the content)."""
        if isinstance(image, dict) and image.get("bytes") is None and image.get("path"):
            return self.image_path(image["path"])
        stored = image["bytes"] if isinstance(image, dict) else image if isinstance(image, bytes) else None
        data = stored if stored is not None else _png_bytes(image)
        if not data:
            raise SampleError(f"unusable image value of type {type(image).__name__}")
        digest = hashlib.sha1(data).hexdigest()[:20]
        folder = self.image_cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "paddle_r1", "images")
        os.makedirs(folder, exist_ok=True)
        target = os.path.join(folder, f"{digest}.img" if stored is not None else f"{digest}.png")
        if not os.path.exists(target):
            with open(target + ".part", "wb") as f:
                f.write(data)
            os.replace(target + ".part", target)
        return os.path.abspath(target)

    def image_paths(self, value) -> list:
        values = value if isinstance(value, list) else [value]
        if not values or any(v is None for v in values):
            raise SampleError("no image")
        return [self.image_path(v) for v in values]


@dataclass
class Media:
    """The images and clips of one record in the order it gives them, each read by ``add`` from the one form every
    format brings a medium in: a message part (``{"type": "image", "image": ...}``, ``{"type": "video", "video": path |
    [frame paths], "fps", "nframes", ...}``: Qwen's and verl's), or a column entry (a path, a list of frame paths,
    verl's ``{"video": ..., "fps": ...}``)."""

    ctx: SourceContext
    images: list = field(default_factory=list)
    videos: list = field(default_factory=list)
    options: list = field(default_factory=list)  # per clip: its own sampling keys (video.part_options)

    def add(self, kind: str, entry, where: str) -> str:
        """Read ``entry``, an ``kind`` ("image" or "video") found at ``where`` (named in its errors); returns the
        marker that stands for it in the text. A key whose value is null is not given (a parquet column of parts
        gives every part every key any of them has)."""
        if isinstance(entry, dict):
            entry = {key: value for key, value in entry.items() if value is not None}
        if kind == "image":
            value = entry.get("image", entry.get("image_url", entry)) if isinstance(entry, dict) else entry
            try:
                self.images.append(self.ctx.image_path(value))
            except SampleError as e:
                raise SampleError(f"{where}: {e}") from None
            return IMAGE_MARKER
        part = entry if isinstance(entry, dict) else {"video": entry}
        source = part.get("video")
        frames = isinstance(source, list)
        if not (isinstance(source, str) and source.strip()) and not (
                frames and source and all(isinstance(f, str) and f.strip() for f in source)):
            raise SampleError(f"{where}: a video is a path or a list of frame paths, got {source!r}")
        try:
            options = part_options(part)
            self.ctx.video.with_options(options)  # a minimum above its maximum, the job's keys filling the rest
            self.videos.append([self.ctx.image_path(f) for f in source] if frames else self.ctx.image_path(source))
        except (DataError, SampleError) as e:
            raise SampleError(f"{where}: {e}") from None
        self.options.append(options)
        return VIDEO_MARKER

    def fields(self) -> dict:
        """The schema's ``images``, and ``videos`` (with ``video_sampling`` when a clip has keys of its own) when
        there are clips."""
        videos = {"videos": self.videos, **({"video_sampling": self.options} if any(self.options) else {})}
        return {"images": self.images, **(videos if self.videos else {})}


def place_images(sample: dict, placement: str) -> dict:
    """VLM-R1's placement (before_text) drops the problem's <image> markers, so that the prompt has every image
    before the text, as VLM-R1 builds it; the markers placement keeps them for the prompt builder."""
    if placement == "before_text":
        sample["problem"] = sample["problem"].replace(IMAGE_MARKER, "").replace(VIDEO_MARKER, "")
    return sample


def _png_bytes(image) -> Optional[bytes]:
    if not hasattr(image, "save"):
        return None
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _required(record: dict, *keys: str):
    missing = [k for k in keys if record.get(k) is None or (isinstance(record.get(k), str) and not record[k].strip())]
    if missing:
        raise SampleError(f"missing or empty {', '.join(map(repr, missing))}")
    return [record[k] for k in keys]


def _box(value, what: str) -> list:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise SampleError(f"{what} is not a box: {value!r}") from None
    if as_box(value) is not None:
        return list(value)
    if not _looks_like_box(value):
        raise SampleError(f"{what} must be [x1, y1, x2, y2], got {value!r}")
    if as_floats(value) is None:
        raise SampleError(f"{what} has a coordinate that is not a finite number: {value!r}")
    raise SampleError(f"{what} has x1 > x2 or y1 > y2: {value!r}")


def _looks_like_box(value) -> bool:
    """Four numbers (finite or not: the adapter says which coordinate is bad; ``as_box`` decides)."""
    return isinstance(value, list) and len(value) == 4 and all(is_number(v) for v in value)


def _extras(record: dict, used: set) -> dict:
    return {k: v for k, v in record.items() if k not in used}


def strip_answer_tags(solution):
    """R1-V solutions come as "<answer> 3 </answer>"; the schema keeps the bare answer."""
    if isinstance(solution, str):
        match = ANSWER_TAGS.match(solution)
        if match:
            return match.group(1).strip()
    return solution


def adapt_rec(record: dict, ctx: SourceContext) -> dict:
    """PaddleMIX / VLM-R1 REC: {image, problem, solution: [x1, y1, x2, y2], normal_caption?, ...}."""
    image, problem, solution = _required(record, "image", "problem", "solution")
    return {**_extras(record, {"image"}), "images": ctx.image_paths(image), "problem": problem,
            "solution": _box(solution, "solution")}


def adapt_conversation(record: dict, ctx: SourceContext) -> dict:
    """VLM-R1 jsonl: {id, image: str | [str], conversations: [{from: human, value: "<image>..."},
    {from: gpt, value}], accu_reward_method?}. The problem keeps its <image> markers, one per image,
    so that multi-image prompts keep the images where the text puts them (unless ``image_placement`` is
    before_text, VLM-R1's way, which ignores them)."""
    turns = record.get("conversations")
    if not isinstance(turns, list):
        raise SampleError("'conversations' must be a list of {from, value}")
    question = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") in ("human", "user")), None)
    answer = next((t.get("value") for t in turns
                   if isinstance(t, dict) and t.get("from") in ("gpt", "assistant")), None)
    if not isinstance(question, str) or not question.strip():
        raise SampleError("no human turn with text in 'conversations'")
    if answer is None:
        raise SampleError("no gpt turn (the solution) in 'conversations'")
    image = record.get("image", record.get("images"))
    images = ctx.image_paths(image) if image not in (None, [], "") else []
    markers = question.count(IMAGE_MARKER)
    if markers and markers != len(images) and ctx.image_placement == "markers":
        raise SampleError(f"{markers} <image> markers for {len(images)} images")
    return {**_extras(record, {"image", "images", "conversations", "accu_reward_method"}), "images": images,
            "problem": question, "solution": strip_answer_tags(answer),
            "reward_method": record.get("accu_reward_method")}


def adapt_r1v(record: dict, ctx: SourceContext) -> dict:
    """R1-V datasets folders (clevr_cogen_a_train, GEOQA_R1V_Train_8K): {image, problem, solution}."""
    image, problem, solution = _required(record, "image", "problem", "solution")
    return {**_extras(record, {"image"}), "images": ctx.image_paths(image), "problem": problem,
            "solution": strip_answer_tags(solution)}


def adapt_r1v_eval(record: dict, ctx: SourceContext) -> dict:
    """R1-V eval jsonl (superclevr_test200_counting_problems, geoqa_test_prompts):
    {image_path, question, ground_truth}."""
    image, question, truth = _required(record, "image_path", "question", "ground_truth")
    return {**_extras(record, {"image_path", "question", "ground_truth"}), "images": ctx.image_paths(image),
            "problem": question, "solution": strip_answer_tags(truth)}


def adapt_grounding(record: dict, ctx: SourceContext) -> dict:
    """EasyDistill grounding (seed 000): {image_path, height, width, instruction, abs_box: {label: [[x1, y1,
    x2, y2], ...]}} or the single-box variant {..., bbox: [x1, y1, x2, y2]}."""
    image, instruction = _required(record, "image_path", "instruction")
    if "abs_box" in record:
        boxes = record["abs_box"]
        if not isinstance(boxes, dict):
            raise SampleError(f"'abs_box' must map labels to lists of boxes, got {type(boxes).__name__}")
        solution = {}
        for label, label_boxes in boxes.items():
            if not isinstance(label_boxes, list):
                raise SampleError(f"'abs_box' label {label!r}: expected a list of boxes")
            solution[str(label)] = [_box(b, f"'abs_box' label {label!r} box") for b in label_boxes]
        used = {"image_path", "instruction", "abs_box"}
    elif "bbox" in record:
        solution = _box(record["bbox"], "'bbox'")
        used = {"image_path", "instruction", "bbox"}
    else:
        raise SampleError("grounding record has neither 'abs_box' nor 'bbox'")
    return {**_extras(record, used), "images": ctx.image_paths(image), "problem": instruction, "solution": solution}


DEFAULT_IMAGE_COLUMNS = ("sku_img", "spu_img_1", "spu_img_2", "spu_img_3", "spu_img_4")


def adapt_products(record: dict, ctx: SourceContext) -> dict:
    """Product attributes (seed 002): {text, label: "12 8 15", sku_img, spu_img_1, ...}. Empty image cells
    are left out; a URL is looked up by its file name under image_root (download images beforehand)."""
    text, label = _required(record, "text", "label")
    columns = ctx.image_columns or [c for c in DEFAULT_IMAGE_COLUMNS if c in record]
    names = [str(record[c]).strip() for c in columns if record.get(c) not in (None, "") and str(record[c]).strip()]
    if not names:
        raise SampleError(f"no image in columns {', '.join(columns) or '(none found)'}")
    images = [ctx.image_path(n.rsplit("/", 1)[-1].split("?")[0] if "://" in n else n) for n in names]
    return {**_extras(record, {"text", "label", *columns}), "images": images, "problem": str(text),
            "solution": str(label).strip()}


def adapt_vl_sft(record: dict, ctx: SourceContext) -> dict:
    """ERNIEKit / PaddleFormers VL-SFT jsonl, PaddleOCR-VL's fine-tuning data: {image_info: [{image_url,
    matched_text_index}], text_info: [{text, tag: "mask"}, {text, tag: "no_mask"}]}. The ``mask`` text is the prompt
    (PaddleOCR-VL's task prompts "OCR:", "Table Recognition:", "Formula Recognition:", "Chart Recognition:"), the
    ``no_mask`` text the solution; the images come before the prompt. One question and its answer per record (a
    multi-turn record is refused). An http(s) ``image_url`` is looked up by its file name under image_root (download
    the images beforehand)."""
    turns = record.get("text_info")
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise SampleError("'text_info' must be a list of {text, tag}")
    tags = [t.get("tag") for t in turns]
    if tags != ["mask", "no_mask"]:
        raise SampleError(f"'text_info' tags {tags}: expected one question and its answer, ['mask', 'no_mask']")
    question, answer = (t.get("text") for t in turns)
    if not isinstance(question, str) or not isinstance(answer, str):
        raise SampleError("'text_info' texts must be strings")
    infos = record.get("image_info")
    if not isinstance(infos, list) or not infos or not all(isinstance(i, dict) and i.get("image_url") for i in infos):
        raise SampleError("'image_info' must be a non-empty list of {image_url, matched_text_index}")
    urls = [str(i["image_url"]) for i in infos]
    images = [ctx.image_path(u.rsplit("/", 1)[-1].split("?")[0] if "://" in u else u) for u in urls]
    return {**_extras(record, {"image_info", "text_info"}), "images": images, "problem": question,
            "solution": answer}


def _media(record: dict, ctx: SourceContext) -> dict:
    """A record's ``images`` and ``videos`` columns (each optional, at least one given) as the schema's lists: a
    ``videos`` entry is a path, a list of frame paths (EasyR1's) or verl's ``{"video": ..., "fps": ...}``
    (``Media.add``)."""
    media = Media(ctx)
    for kind in ("image", "video"):
        value = record.get(f"{kind}s")
        if value in (None, [], ""):
            continue
        for i, entry in enumerate(value if isinstance(value, list) else [value]):
            if entry is None:
                raise SampleError(f"{kind}s[{i}]: no {kind}")
            media.add(kind, entry, f"{kind}s[{i}]")
    if not media.images and not media.videos:
        raise SampleError("no image and no video")
    return media.fields()


def adapt_generic(record: dict, ctx: SourceContext) -> dict:
    """The plain schema itself: {images: [...], videos?: [...], problem, solution, reward_method?, ...}."""
    (problem,) = _required(record, "problem")
    if "solution" not in record:
        raise SampleError("missing 'solution'")
    return {**_extras(record, {"images", "videos", "video_sampling"}), **_media(record, ctx), "problem": problem}


def adapt_easyr1(record: dict, ctx: SourceContext) -> dict:
    """EasyR1 (its default ``prompt_key``, ``answer_key``, ``image_key``, ``video_key``): {problem, answer, images?,
    videos?}, the problem's ``<image>`` and ``<video>`` placeholders standing where each goes."""
    problem, answer = _required(record, "problem", "answer")
    return {**_extras(record, {"images", "videos", "video_sampling", "answer"}), **_media(record, ctx),
            "problem": problem,
            "solution": strip_answer_tags(answer)}


def adapt_verl(record: dict, ctx: SourceContext) -> dict:
    """verl's RLHFDataset rows: {prompt: [{role, content}], images?, videos?, reward_model: {ground_truth},
    data_source?, extra_info?}. A message's content is text whose ``<image>`` / ``<video>`` placeholders take the
    ``images`` / ``videos`` entries in order (verl's ``_build_messages``: an entry ``{"video": ..., "fps": ...}``
    becomes the part ``{"type": "video", ...}``), or a list of parts (text, image and video parts, Qwen's chat form):
    each image and clip stands where its part or placeholder does (``Media.add`` reads them all, a clip with its own
    sampling keys). One user turn, after at most one system turn of text (the sample's ``system_prompt``); the
    solution is ``reward_model.ground_truth``."""
    messages = record.get("prompt")
    if not isinstance(messages, list) or not messages:
        raise SampleError(f"'prompt' must be a list of {{role, content}} messages, got {messages!r}")
    truth = record.get("reward_model", {}).get("ground_truth") if isinstance(record.get("reward_model"), dict) \
        else None
    if truth is None:
        raise SampleError("no 'reward_model': {'ground_truth': ...} (the solution)")
    media, columns = Media(ctx), {kind: record.get(f"{kind}s") or [] for kind in ("image", "video")}
    used, turns = {"image": 0, "video": 0}, {}
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "user") or role in turns or (role == "system" and i):
            raise SampleError(f"prompt[{i}]: a prompt is read as one user turn, after at most one system turn; got "
                              f"role {role!r}")
        before = len(media.images) + len(media.videos)
        turns[role] = _message_text(message.get("content"), f"prompt[{i}].content", media, columns, used)
        if role == "system" and len(media.images) + len(media.videos) > before:
            raise SampleError(f"prompt[{i}]: the system turn is text only")
    for kind, entries in columns.items():
        if used[kind] != len(entries):
            raise SampleError(f"{len(entries)} '{kind}s' entries for {used[kind]} <{kind}> placeholders")
    if "user" not in turns:
        raise SampleError("'prompt' has no user turn")
    return {**_extras(record, {"prompt", "images", "videos", "reward_model"}), **media.fields(),
            "problem": turns["user"], "solution": truth,
            **({"system_prompt": turns["system"]} if "system" in turns else {})}


def _message_text(content, where: str, media: Media, columns: dict, used: dict) -> str:
    """A message's text with a marker where each of its images and clips stands, those read into ``media``: from
    its parts, or from the ``columns`` entries its placeholders take in turn (``used`` counts them)."""
    if isinstance(content, str):
        text = ""
        for piece in MEDIA_MARKERS.split(content):
            kind = piece[1:-1] if MEDIA_MARKERS.fullmatch(piece) else None
            if kind is None:
                text += piece
                continue
            entries, k = columns[kind], used[kind]
            if not isinstance(entries, list) or k >= len(entries):
                raise SampleError(f"{where}: more <{kind}> placeholders than '{kind}s' entries")
            text += media.add(kind, entries[k], f"{kind}s[{k}]")
            used[kind] += 1
        return text
    if not isinstance(content, list):
        raise SampleError(f"{where} must be text or a list of parts, got {content!r}")
    text = ""
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            text += part["text"]
        elif kind in ("image", "video") and kind in part or (kind == "image" and "image_url" in part):
            text += media.add(kind, part, f"{where}[{j}]")
        else:
            raise SampleError(f"{where}[{j}]: expected {{'type': 'text', 'text': ...}}, {{'type': 'image', 'image': "
                              f"...}} or {{'type': 'video', 'video': ...}}, got {part!r}")
    return text


TEMPORAL_GROUNDING_PROMPT = ('<video>When does the event "{sentence}" happen in the video? Give its start and end '
                             'times in seconds as "start to end", e.g. "12.54 to 17.83".')


def adapt_temporal_grounding(record: dict, ctx: SourceContext) -> dict:
    """Charades-STA as Temporal-R1 reads it: {video, duration, timestamp: [start, end], sentence}. The solution is
    the span in seconds; ``duration`` travels to the ``temporal_iou`` reward, which normalises times by it."""
    if record.get("duration") in (None, ""):
        raise SampleError("no 'duration': a grounding row needs its clip's length in seconds (Charades-STA's "
                          "'duration'), by which temporal_iou normalises the spans")
    video, duration, span, sentence = _required(record, "video", "duration", "timestamp", "sentence")
    if not is_number(duration) or not 0 < float(duration) < float("inf"):
        raise SampleError(f"'duration' must be a positive number of seconds, got {duration!r}")
    floats = as_floats(span) if isinstance(span, list) and len(span) == 2 else None
    if floats is None or not 0 <= floats[0] < floats[1]:
        raise SampleError(f"'timestamp' must be [start, end] seconds with 0 <= start < end, got {span!r}")
    return {**_extras(record, {"video", "timestamp", "sentence"}), "images": [], "videos": ctx.image_paths(video),
            "problem": TEMPORAL_GROUNDING_PROMPT.format(sentence=str(sentence).strip()), "solution": floats,
            "duration": float(duration), "reward_method": record.get("reward_method") or "temporal_iou"}


# Video-R1 (src/r1-v/src/open_r1/grpo.py): its problem types and, per type, the answer instruction its prompt ends
# with (TYPE_TEMPLATE); a sample's ``answer_instruction`` follows the templated question (generation.build_messages)
VIDEO_R1_ANSWER_INSTRUCTIONS = {
    "multiple choice": " Please provide only the single option letter (e.g., A, B, C, D, etc.) within the <answer> "
                       "</answer> tags.",
    "numerical": " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags.",
    "OCR": " Please transcribe text from the image/video clearly and provide your text answer within the <answer> "
           "</answer> tags.",
    "free-form": " Please provide your text answer within the <answer> </answer> tags.",
    "regression": " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags.",
}
# Video-R1's QUESTION_TEMPLATE (training; its eval_bench.py says "between the <think> and </think> tags")
VIDEO_R1_QUESTION_TEMPLATE = (
    "{Question}\n"
    "Please think about this question as if you were a human pondering deeply. "
    "Engage in an internal dialogue using expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', 'let's "
    "break it down', etc, or other natural language thought expressions "
    "It's encouraged to include self-reflection or verification in the reasoning process. "
    "Provide your detailed reasoning between the <think> </think> tags, and then give your final answer between the "
    "<answer> </answer> tags."
)
VIDEO_R1_DATA_TYPES = {"video": "videos", "image": "images"}
_PROBLEM_TYPE_KEYS = {re.sub(r"[\s_-]+", " ", name.lower()): name for name in VIDEO_R1_ANSWER_INSTRUCTIONS}


def problem_type_name(value) -> Optional[str]:
    """Video-R1's name of a ``problem_type`` written in any case, with spaces, hyphens or underscores ("Multiple
    Choice", "multiple_choice", "free form", "ocr"); None when it is none of the five."""
    if not isinstance(value, str):
        return None
    return _PROBLEM_TYPE_KEYS.get(re.sub(r"[\s_-]+", " ", value.strip().lower()))


def video_r1_number(text: str) -> Optional[float]:
    """A number as Video-R1 reads one (its ``normalize_number``): Python's ``float`` of the text without its commas
    ("1,000" -> 1000.0, " 2.5 ", "1e3"); None when it is not one."""
    try:
        return float(text.replace(",", ""))
    except (ValueError, TypeError, AttributeError):
        return None


def adapt_video_r1(record: dict, ctx: SourceContext) -> dict:
    """Video-R1's json (Video-R1-260k, Video-R1-COT-165k, its eval files): {problem, data_type: video | image,
    problem_type, options, solution: "<answer>B</answer>", path, ...}, images and videos mixed in one file. The
    problem is asked as Video-R1 asks it: a multiple-choice question gets "Options:" and one option a line, and the
    type's answer instruction (``VIDEO_R1_ANSWER_INSTRUCTIONS``) travels as ``answer_instruction``; the solution is
    the bare answer, scored by ``video_r1_accuracy`` unless the row names another ``reward_method``. ``path`` is
    relative to ``image_root`` (Video-R1's "./LLaVA-Video-178K/..." under its Video-R1-data folder)."""
    problem, data_type, kind, solution, path = _required(record, "problem", "data_type", "problem_type", "solution",
                                                         "path")
    if not isinstance(problem, str):
        raise SampleError(f"'problem' must be text, got {problem!r}")
    if not isinstance(path, str):
        raise SampleError(f"'path' must be a file path, got {path!r}")
    if data_type not in VIDEO_R1_DATA_TYPES:
        raise SampleError(f"'data_type' must be 'video' or 'image', got {data_type!r}")
    problem_type = problem_type_name(kind)
    if problem_type is None:
        raise SampleError(f"'problem_type' {kind!r} is none of Video-R1's: {', '.join(VIDEO_R1_ANSWER_INSTRUCTIONS)}")
    answer = strip_answer_tags(solution)
    if problem_type in ("numerical", "regression") and video_r1_number(str(answer)) is None:
        raise SampleError(f"a {problem_type} row's solution must be a number, got {solution!r}")
    if problem_type == "multiple choice":
        options = record.get("options")
        if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
            raise SampleError(f"a multiple choice row needs 'options', a list of texts, got {options!r}")
        problem = problem + "Options:\n" + "".join(option + "\n" for option in options)  # Video-R1's own joining
    media = {"images": [], VIDEO_R1_DATA_TYPES[data_type]: ctx.image_paths(path)}
    return {**_extras(record, {"problem_type"}), **media, "problem": problem, "solution": answer,
            "problem_type": problem_type, "answer_instruction": VIDEO_R1_ANSWER_INSTRUCTIONS[problem_type],
            "reward_method": record.get("reward_method") or "video_r1_accuracy"}


FORMATS: dict[str, Callable[[dict, SourceContext], dict]] = {
    "rec": adapt_rec,
    "conversation": adapt_conversation,
    "r1v": adapt_r1v,
    "r1v_eval": adapt_r1v_eval,
    "grounding": adapt_grounding,
    "products": adapt_products,
    "vl_sft": adapt_vl_sft,
    "generic": adapt_generic,
    "easyr1": adapt_easyr1,
    "verl": adapt_verl,
    "temporal_grounding": adapt_temporal_grounding,
    "video_r1": adapt_video_r1,
}


def detect_format(record: dict, rec_file: Optional[bool] = None) -> str:
    """The format a record's fields name. {image, problem, solution} is REC when the solution is a box, else
    R1-V; ``rec_file`` (see ``is_rec_file``) decides that for the whole file instead."""
    keys = set(record)
    if "conversations" in keys:
        return "conversation"
    if "text_info" in keys:
        return "vl_sft"
    if "abs_box" in keys or ("bbox" in keys and "instruction" in keys):
        return "grounding"
    if {"image_path", "question", "ground_truth"} <= keys:
        return "r1v_eval"
    if "prompt" in keys and isinstance(record["prompt"], list) and "reward_model" in keys:
        return "verl"
    if {"problem", "data_type", "problem_type", "path"} <= keys:
        return "video_r1"
    if {"video", "timestamp", "sentence"} <= keys:
        return "temporal_grounding"
    if {"problem", "answer"} <= keys and keys & {"images", "videos"} and "solution" not in keys:
        return "easyr1"
    if {"problem"} <= keys and keys & {"images", "videos"}:
        return "generic"
    if {"image", "problem"} <= keys:
        is_rec = _looks_like_box(record.get("solution")) if rec_file is None else rec_file
        return "rec" if is_rec else "r1v"
    if {"text", "label"} <= keys:
        return "products"
    raise SampleError(f"cannot tell the format from the fields {sorted(keys)}; name it with 'format:'")


def is_rec_file(records: list[dict]) -> bool:
    """Whether most {image, problem} records of a file have a box solution. Then all of them are REC, and a
    row whose solution is not a box ([1, 2, 3], "abc") is reported as bad rather than read as an R1-V row that
    no IoU reward scores."""
    rows = [r for r in records if {"image", "problem"} <= set(r)]
    return 2 * sum(_looks_like_box(r.get("solution")) for r in rows) > len(rows)
