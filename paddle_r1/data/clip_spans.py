"""Re-reading chosen frames of a clip the sample's prompt showed: the sub-clips of the ``frames`` tool
(``tools/builtins.py``).

The prompt's clip (``video.read_clip``) keeps a few frames spread over the whole clip; a sub-clip is frames of the
clip's own, by their index in it (the tool picks them over a span of seconds), decoded again from the file (found by
a seek: ``video_seek.py``), folder of frames or animation and sized by the job's pixel budgets for that many frames
(``VideoSampling.frame_size``, the family's way). It is a ``Clip`` like the prompt's: its ``indices`` and
``source_fps`` are the clip's own, so the time Qwen3-VL writes before each frame pair is the pair's real time in the
clip, and its ``fps`` (frames kept per second of the span) gives Qwen2.5-VL's ``second_per_grid_ts`` the real spacing
of its frames.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from .samples import DataError
from .video import ANIMATION_SUFFIXES, TEMPORAL_PATCH, Clip, VideoSampling, check_video_file, folder_frames
from .video_seek import read_frames


@dataclass
class SpanReader:
    """Sub-clips for one model: its family's clip sampling (``generator.family_sampling``: the pixel budgets) and its
    processor's patch x merge size. A sub-clip asked for again (another completion of the same prompt calling the
    same span) is read once."""

    sampling: VideoSampling
    factor: int
    _read: dict = field(default_factory=dict, repr=False)

    def read(self, path: str, clip: Clip, indices: list[int]) -> Clip:
        """The frames ``indices`` (increasing, a multiple of 2 of them) of the clip at ``path`` (``clip``: as the
        prompt read it), resized for their count."""
        key = (path, tuple(indices))
        if key not in self._read:
            self._read[key] = _sub_clip(path, clip, indices, self.sampling, self.factor)
        return self._read[key]


def _sub_clip(path: str, clip: Clip, indices: list[int], sampling: VideoSampling, factor: int) -> Clip:
    if len(indices) % TEMPORAL_PATCH or not indices:
        raise ValueError(f"a sub-clip takes whole frame pairs, got {len(indices)} frames")
    rate = clip.frame_rate
    target = sampling.frame_size(clip.size[0], clip.size[1], len(indices), factor)

    def resized(image: Image.Image) -> np.ndarray:
        return np.asarray(image.convert("RGB").resize(target, Image.BICUBIC))

    frames = _read(path, indices, clip.source_frames, resized)
    if len(frames) < len(indices):
        raise DataError(f"cannot read video {path}: frame {indices[len(frames)]} does not decode")
    held = indices[-1] - indices[0] + 1  # the span's frames in the clip
    return Clip(frames=np.stack(frames), fps=len(indices) / held * rate, size=clip.size, duration=held / rate,
                indices=list(indices), source_fps=rate)


def _read(path: str, indices: list[int], total: int, convert) -> list:
    """The frames ``indices`` of the clip at ``path`` (``total`` frames), each through ``convert``, in order (fewer
    when it ends before them). A video file's are found by a seek (``video_seek.py``)."""
    if os.path.isdir(path):
        files = folder_frames(path)
        from .images import load_image

        return [convert(load_image(files[i])) for i in indices if i < len(files)]
    check_video_file(path)
    if path.lower().endswith(ANIMATION_SUFFIXES):
        kept = []
        try:
            with Image.open(path) as img:
                for i in indices:
                    img.seek(i)
                    kept.append(convert(img))
        except EOFError:
            pass
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read video {path}: {e}") from None
        return kept
    return read_frames(path, indices, total, convert).frames
