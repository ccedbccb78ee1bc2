"""Whole multi-turn conversations as one teacher-forced batch: SFT on scripted episodes.

A sample with an ``episode`` (``paddle_r1.data.episodes``) is the prompt's messages, then each assistant turn and
each tool result (a message of the template's own tool role: the tool's images and clips, then its text; see
``data/episodes.py``; a tool clip is read by the ``frames`` tool from the sample's clip, as in a rollout), rendered
by the processor's chat template as one conversation. The text is cut where the template
writes each assistant turn: the turn's text and its end-of-turn token are targets (what the model generates); everything
else (the prompt, the tool results with their image and clip tokens, the template's role headers) is context. Context
pieces go through the processor with their own images and clips (their tokens expanded; Qwen3-VL's clip times
written), targets through the tokenizer alone, and the
pieces' tokens are concatenated: the context before a turn is tokenized as the generation prompt a rollout feeds the
model, and the turn as the model writes it (a template whose assistant header ends with a space, as PaddleOCR-VL's does,
would merge that space into the turn's first token if the conversation were tokenized whole).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import paddle

from ..data.clip_spans import SpanReader
from ..data.episodes import episode_images, episode_messages, episode_spans, tool_role
from ..data.images import load_image
from ..data.video import VideoSampling
from ..tools.builtins import ToolContext, ToolError, frames
from .encoding import encode_prompts
from .generator import build_messages, family_sampling, load_sample_images, load_sample_videos
from .rollout import MEDIA, PromptBatch, join_media, pad_rows


@dataclass
class ConversationBatch:
    """Conversations, left padded, with every image and clip in the order its tokens appear, and which tokens are
    targets."""

    input_ids: paddle.Tensor  # [B, L]
    attention_mask: paddle.Tensor  # [B, L]
    pixel_values: Optional[paddle.Tensor]
    image_grid_thw: Optional[paddle.Tensor]
    loss_mask: paddle.Tensor  # [B, L - 1] int32: 1 where token i + 1 is a target (aligned with conversation_logprobs)
    pixel_values_videos: Optional[paddle.Tensor] = None
    video_grid_thw: Optional[paddle.Tensor] = None
    second_per_grid_ts: Optional[paddle.Tensor] = None

    @property
    def prompt_batch(self) -> PromptBatch:
        """The conversations as a PromptBatch (their embeddings and M-RoPE positions)."""
        return PromptBatch(self.input_ids, self.attention_mask, **{name: getattr(self, name) for name in MEDIA})


class TemplateError(ValueError):
    """The chat template does not write a conversation as its turns one after another."""


def conversation_pieces(processor, messages: list[dict]) -> list[tuple[str, bool]]:
    """The chat-formatted conversation as (text, is_target) pieces: each assistant turn's text and end-of-turn
    token as the template writes it is a target; the text between is context."""
    def render(upto: int, generation_prompt: bool) -> str:
        return processor.apply_chat_template(messages[:upto], tokenize=False,
                                             add_generation_prompt=generation_prompt)

    full = render(len(messages), False)
    pieces, done = [], 0
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = len(render(k, True))  # the conversation so far, then the template's assistant header
        end = len(render(k + 1, False).rstrip())  # ... then the turn's text and its end-of-turn token
        if not full.startswith(render(k + 1, False).rstrip()) or not start < end:
            raise TemplateError(f"the chat template does not write message {k} (assistant) after the ones before it; "
                                "SFT on episodes needs a template that renders a conversation turn by turn")
        pieces += [(full[done:start], False), (full[start:end], True)]
        done = end
    pieces.append((full[done:], False))
    return [(text, target) for text, target in pieces if text]


def encode_conversation(processor, messages: list[dict], images: list, clips: list = ()
                        ) -> tuple[list[int], list[int], list[PromptBatch]]:
    """(token ids, 1 on target tokens, the context pieces' encodings with their images and clips) of one
    conversation; ``images`` and ``clips`` (``video.Clip``): the opened images and read clips in the order the
    messages show them."""
    image_token, video_token = processor.image_token, getattr(processor, "video_token", None)
    ids, targets, media = [], [], []
    clips = list(clips)
    for text, is_target in conversation_pieces(processor, messages):
        if is_target:
            piece = processor.tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            n, m = text.count(image_token), text.count(video_token) if video_token else 0
            (mine, images), (my_clips, clips) = (images[:n], images[n:]), (clips[:m], clips[m:])
            encoded, _ = encode_prompts([text], [mine], processor, [my_clips])
            piece = encoded.input_ids[0].tolist()
            media.append(encoded)
        ids += piece
        targets += [int(is_target)] * len(piece)
    if images or clips:
        raise TemplateError(f"{len(images)} image(s) and {len(clips)} clip(s) left over: the chat template wrote "
                            "fewer of their tokens than the conversation has")
    return ids, targets, media


def sample_episode(sample: dict, answer: str) -> list[dict]:
    """The sample's scripted episode, or for a sample without one, its answer as the one assistant turn."""
    return sample.get("episode") or [{"role": "assistant", "text": answer}]


def episode_clips(sample: dict, episode: list[dict], processor, video: VideoSampling,
                  clips: Optional[list] = None) -> list:
    """The sample's clips as its prompt shows them (``clips``: already read, else read here), then its episode's
    tool clips, each span read by the ``frames`` tool as a rollout's call reads it (a ``ValueError`` naming the span
    when the tool refuses it)."""
    clips = clips if clips is not None else load_sample_videos(sample, video, processor)
    spans = episode_spans(episode)
    if not spans:
        return clips
    context = ToolContext([], [], [], "", sample["videos"], clips, SpanReader(*family_sampling(processor, video)))
    read = []
    for span in spans:
        try:
            read += frames(span, context)[1]
        except ToolError as e:
            raise ValueError(f"the episode's tool clip {span} of {sample['videos'][span.get('video', 0)]}: {e}") \
                from None
    return clips + read


def build_conversation_batch(samples: list[dict], answers: list[str], processor, question_template: str,
                             system_prompt: Optional[str] = None, images: Optional[list] = None,
                             video: VideoSampling = VideoSampling(), clips: Optional[list] = None) -> ConversationBatch:
    """Each sample's prompt and episode (``answers``: the one-turn episode of samples without one) as one row;
    ``images``, ``clips``: per sample, its prompt's opened images and read clips (else opened here, the clips read
    with ``video``)."""
    images = images if images is not None else [load_sample_images(s) for s in samples]
    clips = clips if clips is not None else [None] * len(samples)
    rows, masks, media = [], [], []
    role = tool_role(processor)
    for sample, answer, opened, read in zip(samples, answers, images, clips):
        episode = sample_episode(sample, answer)
        messages = episode_messages(build_messages(sample, question_template, system_prompt), episode, role)
        ids, targets, pieces = encode_conversation(
            processor, messages, list(opened) + [load_image(path) for path in episode_images(episode)],
            episode_clips(sample, episode, processor, video, read))
        rows.append(ids)
        masks.append(targets)
        media += pieces
    # left padded, as prompts are
    return ConversationBatch(input_ids=pad_rows(rows, processor.tokenizer.pad_token_id, left=True),
                             attention_mask=pad_rows([[1] * len(row) for row in rows], 0, left=True),
                             loss_mask=pad_rows(masks, 0, left=True, dtype="int32")[:, 1:], **join_media(media))
