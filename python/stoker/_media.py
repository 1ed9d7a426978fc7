"""Media fields: encoded images and audio clips, stored as they came and
decoded by the loader's threads into the batch (include/stoker.h, "Media";
docs/MEDIA.md).

Writing: ``stoker.write(path, records, fields={"image": stoker.Image()})``
types a bytes field "image" (JPEG, PNG, WebP) or "audio" (FLAC, MP3, Ogg
Vorbis, Opus); every record's header is read as it is written, so a file
that is no such media is refused there, named.

Loading: ``stoker.Loader(path, decode={"image": stoker.DecodeImage(224)})``
delivers the field as uint8 [batch, 224, 224, 3]; ``DecodeAudio(samples)``
as float32 [batch, samples, channels].
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np

from . import _stoker
from ._errors import InvalidArgument

_CROPS = {"none": 0, "center": 1, "random_resized": 2}
_IMAGE, _AUDIO = 1, 2


class Image:
    """A field of encoded images (JPEG, PNG or WebP, one a record, stored as
    they came), for ``stoker.write(..., fields={"image": stoker.Image()})``."""

    type = "image"

    def __repr__(self) -> str:
        return "stoker.Image()"


class Audio:
    """A field of encoded audio clips (FLAC, MP3, Ogg Vorbis or Opus, one a
    record, stored as they came), for ``stoker.write(..., fields=...)``."""

    type = "audio"

    def __repr__(self) -> str:
        return "stoker.Audio()"


def _pair(name: str, v: Any) -> Tuple[float, float]:
    try:
        lo, hi = (float(x) for x in v)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name} must be a pair of numbers (low, high), not {v!r}") from None
    return lo, hi


class DecodeImage:
    """How the loader decodes an image field: into uint8 pixels of a fixed
    size, RGB.

    Args:
        size: The output's size: an int (square) or (height, width).
        crop: "random_resized" (default: a random share ``scale`` of the
            area with a random aspect ratio in ``ratio``, as torchvision's
            RandomResizedCrop), "center" (the largest box of the output's
            aspect ratio, scaled by ``center_fraction``) or "none" (the
            whole image).  The box is resized to ``size`` (bilinear,
            antialiased); a JPEG is decoded only as far as the box needs.
        scale: random_resized: the range of the box's share of the area.
        ratio: random_resized: the range of its width / height.
        center_fraction: center: 0.875 by default (224 of 256).
        flip: Flip left-right with probability 1/2.
        layout: "HWC" (default: [height, width, 3]) or "CHW" ([3, height,
            width], as torchvision models take).

    Every random choice is a function of (seed, epoch, record): the same
    pixels with any number of threads, and after a resume.
    """

    def __init__(self, size: Union[int, Tuple[int, int]], *,
                 crop: str = "random_resized",
                 scale: Tuple[float, float] = (0.08, 1.0),
                 ratio: Tuple[float, float] = (3 / 4, 4 / 3),
                 center_fraction: float = 0.875, flip: bool = False,
                 layout: str = "HWC") -> None:
        if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
            h = w = int(size)
        else:
            try:
                h, w = (int(x) for x in size)  # type: ignore[union-attr]
            except (TypeError, ValueError):
                raise InvalidArgument(f"size must be an int or (height, width), not {size!r}") \
                    from None
        if crop not in _CROPS:
            raise InvalidArgument(f"crop must be one of {sorted(_CROPS)}, not {crop!r}")
        if layout not in ("HWC", "CHW"):
            raise InvalidArgument(f"layout must be 'HWC' or 'CHW', not {layout!r}")
        self.size = (h, w)
        self.crop = crop
        self.scale = _pair("scale", scale)
        self.ratio = _pair("ratio", ratio)
        self.center_fraction = float(center_fraction)
        self.flip = bool(flip)
        self.layout = layout
        self._spec(None)  # checked now, not at the first batch

    def __repr__(self) -> str:
        return (f"stoker.DecodeImage({self.size}, crop={self.crop!r}, scale={self.scale}, "
                f"ratio={self.ratio}, flip={self.flip}, layout={self.layout!r})")

    @property
    def shape(self) -> Tuple[int, int, int]:
        h, w = self.size
        return (3, h, w) if self.layout == "CHW" else (h, w, 3)

    def _spec(self, field: Optional[str]) -> tuple:
        h, w = self.size
        spec = (field, _IMAGE, h, w, _CROPS[self.crop], *self.scale, *self.ratio,
                self.center_fraction, int(self.flip), int(self.layout == "CHW"), 0, 0, 1, 0)
        _stoker.decode_box(spec, 1, 1, 0)  # the C checks, with their messages
        return spec

    def decode(self, data: bytes, *, seed: int = 0, epoch: int = 0,
               record: int = 0) -> np.ndarray:
        """Decodes one encoded image as the loader would for `record` of
        `epoch` under `seed`: uint8 of ``self.shape``."""
        raw, _, _ = _stoker.decode_one(self._spec(None), data, decode_key(seed, epoch, record))
        return np.frombuffer(raw, np.uint8).reshape(self.shape)

    def box(self, width: int, height: int, *, seed: int = 0, epoch: int = 0,
            record: int = 0) -> Tuple[Tuple[int, int, int, int], bool]:
        """The crop box (x, y, width, height, in the image's pixels) and the
        flip that `record` of `epoch` gets for an image of width x height."""
        box, flipped = _stoker.decode_box(self._spec(None), width, height,
                                          decode_key(seed, epoch, record))
        return tuple(box), bool(flipped)


class DecodeAudio:
    """How the loader decodes an audio field: float32 [samples, channels].

    Args:
        samples: Frames a sample holds (a window of the clip; shorter clips
            are padded with zeros).
        sample_rate: Resample every clip to this rate (libsoxr); None: as
            stored.
        channels: 1 (default): the mean of the clip's channels; N: clips
            must have N channels.
        random_offset: A random window of each clip (a function of seed,
            epoch and record); False: its first ``samples`` frames.
    """

    def __init__(self, samples: int, *, sample_rate: Optional[int] = None, channels: int = 1,
                 random_offset: bool = False) -> None:
        if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)):
            raise InvalidArgument(f"samples must be an int, not {samples!r}")
        self.samples = int(samples)
        self.sample_rate = None if sample_rate is None else int(sample_rate)
        self.channels = int(channels)
        self.random_offset = bool(random_offset)
        self._spec(None)

    def __repr__(self) -> str:
        return (f"stoker.DecodeAudio({self.samples}, sample_rate={self.sample_rate}, "
                f"channels={self.channels}, random_offset={self.random_offset})")

    @property
    def shape(self) -> Tuple[int, int]:
        return (self.samples, self.channels)

    def _spec(self, field: Optional[str]) -> tuple:
        if self.samples < 1 or self.channels < 1 or (self.sample_rate or 0) < 0:
            raise InvalidArgument(f"{self!r}: samples and channels must be >= 1, sample_rate > 0")
        return (field, _AUDIO, 0, 0, 0, 0.08, 1.0, 0.75, 4 / 3, 0.875, 0, 0, self.samples,
                self.sample_rate or 0, self.channels, int(self.random_offset))

    def decode(self, data: bytes, *, seed: int = 0, epoch: int = 0,
               record: int = 0) -> np.ndarray:
        """Decodes one encoded clip as the loader would for `record` of
        `epoch` under `seed`: float32 [samples, channels]."""
        raw, _, _ = _stoker.decode_one(self._spec(None), data, decode_key(seed, epoch, record))
        return np.frombuffer(raw, np.float32).reshape(self.shape)


Decode = Union[DecodeImage, DecodeAudio]


def decode_specs(decode: Optional[Mapping[str, Decode]]) -> Optional[list]:
    """Loader(decode=...) as the C options: None, or a list of spec tuples."""
    if decode is None:
        return None
    if not isinstance(decode, Mapping):
        raise TypeError("decode must map field names to stoker.DecodeImage / DecodeAudio, "
                        f"not {type(decode).__name__}")
    out = []
    for name, spec in decode.items():
        if not isinstance(name, str):
            raise TypeError(f"decode: field names must be str, not {type(name).__name__}")
        if not isinstance(spec, (DecodeImage, DecodeAudio)):
            raise TypeError(f"decode['{name}'] must be a stoker.DecodeImage or DecodeAudio, "
                            f"not {type(spec).__name__}")
        out.append(spec._spec(name))
    return out


def decode_key(seed: int, epoch: int, record: int) -> int:
    """The key of a sample's random choices (crop, flip, window start)."""
    return _stoker.decode_key(int(seed), int(epoch), int(record))


def media_probe(data: bytes) -> Dict[str, Any]:
    """What an encoded image or clip is, from its header: {"media",
    "format", "width", "height"} or {"media", "format", "sample_rate",
    "channels", "frames"}.  Raises MediaError for anything else."""
    return _stoker.media_probe(data)


def media_formats() -> Tuple[str, ...]:
    """The formats this build of stoker decodes."""
    s = _stoker.media_formats()
    return tuple(s.split(",")) if s else ()


def media_types(fields: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    """write(fields=...)'s media entries: {name: "image" | "audio"}."""
    if not fields:
        return {}
    return {k: v.type for k, v in fields.items() if isinstance(v, (Image, Audio))}


def check_record(name: str, kind: str, data: Any, i: int) -> None:
    """A media field's value of record i: bytes of the right kind of file."""
    if not isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
        raise TypeError(f"record {i}: field '{name}' is a {kind} field and takes the file's "
                        f"bytes, not {type(data).__name__}")
    try:
        info = _stoker.media_probe(bytes(data))
    except Exception as e:
        raise type(e)(getattr(e, "code", -1022),
                      f"record {i}: field '{name}': {e.args[-1] if e.args else e}") from None
    if info["media"] != kind:
        raise InvalidArgument(f"record {i}: field '{name}' is a {kind} field; this record "
                              f"holds {info['format']} ({info['media']})")
