"""prepare_hf's `video` key on small local datasets: frames sampled uniformly become images.

No network. Frame lists need no PyAV; video files go through a stand-in for the `av` module that
decodes small JSON "videos" ({"frames": n}) into distinguishable frames (headers that lie, garbage,
a missing PyAV), and through PyAV itself on real MP4s the test writes (the dev install has it).
"""

import hashlib
import io
import json
import sys
import types

import datasets
import numpy as np
import PIL.Image
import pytest

from mmspec.data import media
from mmspec.data.hf import prepare_hf
from mmspec.data.video import sample_indices
from mmspec.storage.tables import PREPARED, read_table
from mmspec.sweep import config as mmconfig

SIZE = (6, 4)
POSTER = (200, 100, 50)


def colour(index: int) -> tuple[int, int, int]:
    """A colour that tells frame `index` apart from every other frame (index < 52)."""
    return (5 * index, 255 - 5 * index, (37 * index) % 256)


def frame(index: int, kind: str = "pil"):
    if kind == "numpy":
        return np.full((SIZE[1], SIZE[0], 3), colour(index), dtype=np.uint8)
    return PIL.Image.new("RGB", SIZE, colour(index))


def colour_of(png: bytes) -> tuple[int, int, int]:
    image = PIL.Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.mode == "RGB" and image.size == SIZE
    colours = image.getcolors()
    assert colours is not None and len(colours) == 1
    return colours[0][1]


def save(columns: dict, tmp_path) -> str:
    path = tmp_path / "clips"
    datasets.Dataset.from_dict(columns).save_to_disk(str(path))
    return str(path)


def prepare(dataset_id, tmp_path, **spec):
    out = tmp_path / "prepared" / "clips.parquet"
    spec = {
        "source": "hf",
        "id": dataset_id,
        "split": "train",
        "columns": {"question": "question", "answer": "answer"},
        **spec,
    }
    n = prepare_hf("clips", spec, out)
    rows = read_table(out, PREPARED).to_pylist()
    assert n == len(rows)
    return rows


def check_images(row: dict, colours: list, images: int = 0) -> None:
    """The row holds exactly these pictures, in order: `images` from the image columns, each
    with an image item, then the video's frames under one video item."""
    assert [colour_of(png) for png in row["images"]] == colours
    assert row["image_ids"] == [hashlib.sha1(png).hexdigest() for png in row["images"]]
    content = json.loads(row["messages"])[0]["content"]
    assert content[:-1] == [{"type": "image"}] * images + [media.video_item(len(colours) - images)]
    assert content[-1]["type"] == "text"


@pytest.mark.parametrize("kind", ["pil", "numpy"])
def test_frame_lists_are_sampled_uniformly(tmp_path, offline, kind):
    lengths = [10, 3, 16]
    source = save(
        {
            "question": ["Describe the clip."] * 3,
            "answer": ["a", "b", "c"],
            "poster": [PIL.Image.new("RGB", SIZE, POSTER)] * 3,
            "clip": [[frame(i, kind) for i in range(n)] for n in lengths],
        },
        tmp_path,
    )
    rows = prepare(
        source, tmp_path, image_columns=["poster"], video={"column": "clip", "frames": 4}
    )
    # np.linspace over the frame indices, first and last included; short clips keep every frame
    picked = [[0, 3, 6, 9], [0, 1, 2], [0, 5, 10, 15]]
    for row, indices in zip(rows, picked, strict=True):
        check_images(row, [POSTER] + [colour(i) for i in indices], images=1)
        assert json.loads(row["messages"])[0]["content"][-1]["text"] == "Describe the clip."


def test_sixteen_frames_by_default(tmp_path, offline):
    source = save(
        {"question": ["q"], "answer": ["a"], "clip": [[frame(i) for i in range(24)]]}, tmp_path
    )
    (row,) = prepare(source, tmp_path, video={"column": "clip"})
    check_images(row, [colour(i) for i in np.linspace(0, 23, 16).astype(int)])


def test_sample_indices():
    assert sample_indices(10, 4) == [0, 3, 6, 9]
    assert sample_indices(3, 16) == [0, 1, 2]
    assert sample_indices(100, 1) == [0]
    for total in range(1, 60):
        for frames in range(1, 20):
            indices = sample_indices(total, frames)
            assert len(indices) == min(total, frames)
            assert indices == sorted(set(indices)) and 0 <= indices[0] and indices[-1] < total


class FakeContainer:
    """What prepare_hf uses of a PyAV container, over a JSON "video" {"frames", "declared"}."""

    def __init__(self, video: dict):
        self.count = video["frames"]
        declared = video.get("declared", self.count)
        self.streams = types.SimpleNamespace(
            video=[types.SimpleNamespace(frames=declared, thread_type=None)]
        )

    def decode(self, *streams, **kwargs):
        for index in range(self.count):
            yield types.SimpleNamespace(to_image=lambda index=index: frame(index))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def fake_av(monkeypatch):
    """A stand-in `av` module; returns the list of what was opened (paths, or "<bytes>")."""
    opened = []

    def open_(file):
        if hasattr(file, "read"):
            opened.append("<bytes>")
            raw = file.read()
        else:
            opened.append(file)
            with open(file, "rb") as f:
                raw = f.read()
        return FakeContainer(json.loads(raw))  # garbage raises, as PyAV does

    monkeypatch.setitem(sys.modules, "av", types.SimpleNamespace(open=open_))
    return opened


@pytest.fixture
def no_av(monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError


def video_file(path, frames, declared=None) -> bytes:
    data = json.dumps({"frames": frames, "declared": frames if declared is None else declared})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode())
    return data.encode()


def test_video_files_in_a_directory(tmp_path, offline, fake_av):
    videos = tmp_path / "videos"
    video_file(videos / "a.mp4", 30)
    video_file(videos / "sub" / "b.mp4", 3)
    source = save({"question": ["q", "q"], "answer": ["a", "b"], "name": ["a", "sub/b"]}, tmp_path)
    spec = {"column": "name", "frames": 4, "dir": str(videos), "suffix": ".mp4"}
    rows = prepare(source, tmp_path, video=spec)
    check_images(rows[0], [colour(i) for i in [0, 9, 19, 29]])
    check_images(rows[1], [colour(i) for i in range(3)])  # all of a short clip
    assert set(fake_av) == {str(videos / "a.mp4"), str(videos / "sub" / "b.mp4")}


def test_video_bytes_and_hf_video_values(tmp_path, offline, fake_av):
    elsewhere = tmp_path / "elsewhere" / "clip.mp4"
    video_file(elsewhere, 8)
    source = save(
        {
            "question": ["q", "q", "q"],
            "answer": ["a", "b", "c"],
            "video": [
                {"bytes": video_file(tmp_path / "x", 12, declared=0), "path": None},  # no count
                {"bytes": video_file(tmp_path / "y", 20, declared=50), "path": None},  # overstated
                {"bytes": None, "path": str(elsewhere)},
            ],
        },
        tmp_path,
    )
    rows = prepare(source, tmp_path, video={"column": "video", "frames": 4})
    check_images(rows[0], [colour(i) for i in [0, 3, 7, 11]])
    check_images(rows[1], [colour(i) for i in [0, 6, 12, 19]])  # resampled over the 20 decoded
    check_images(rows[2], [colour(i) for i in [0, 2, 4, 7]])
    raw = save(
        {"question": ["q"], "answer": ["a"], "video": [video_file(tmp_path / "z", 3)]},
        tmp_path / "raw",
    )
    (row,) = prepare(raw, tmp_path, video={"column": "video", "frames": 4})
    check_images(row, [colour(i) for i in range(3)])


def test_missing_video_file_names_the_row(tmp_path, offline, no_av):
    videos = tmp_path / "videos"
    source = save({"question": ["q"], "answer": ["a"], "name": ["gone"]}, tmp_path)
    spec = {"column": "name", "dir": str(videos), "suffix": ".mp4"}
    with pytest.raises(ValueError) as info:
        prepare(source, tmp_path, video=spec)
    message = str(info.value)
    assert "row 0" in message and "column 'name'" in message and source in message
    assert repr(str(videos / "gone.mp4")) in message and "does not exist" in message


def test_missing_video_file_after_good_rows(tmp_path, offline, fake_av):
    videos = tmp_path / "videos"
    video_file(videos / "a.mp4", 10)
    source = save(
        {"qid": ["x", "y"], "question": ["q", "q"], "answer": ["a", "b"], "name": ["a", "b"]},
        tmp_path,
    )
    columns = {"question": "question", "answer": "answer", "id": "qid"}
    spec = {"column": "name", "dir": str(videos), "suffix": ".mp4"}
    with pytest.raises(ValueError, match=r"row 1 \(id 'y'\), column 'name': video file .*b\.mp4"):
        prepare(source, tmp_path, columns=columns, video=spec)


def test_unreadable_video_names_the_row(tmp_path, offline, fake_av):
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "bad.mp4").write_bytes(b"not a video")
    source = save({"question": ["q"], "answer": ["a"], "name": ["bad.mp4"]}, tmp_path)
    with pytest.raises(ValueError, match=r"row 0 .*column 'name': cannot read video file"):
        prepare(source, tmp_path, video={"column": "name", "dir": str(videos)})


def test_without_pyav_the_error_says_how_to_install_it(tmp_path, offline, no_av):
    video_file(tmp_path / "videos" / "a.mp4", 10)
    source = save({"question": ["q"], "answer": ["a"], "name": ["a.mp4"]}, tmp_path)
    with pytest.raises(ImportError) as info:
        prepare(source, tmp_path, video={"column": "name", "dir": str(tmp_path / "videos")})
    assert source in str(info.value) and "pip install av" in str(info.value)


def test_frame_lists_need_no_pyav(tmp_path, offline, no_av):
    source = save({"question": ["q"], "answer": ["a"], "clip": [[frame(0), frame(1)]]}, tmp_path)
    (row,) = prepare(source, tmp_path, video={"column": "clip", "frames": 2})
    check_images(row, [colour(0), colour(1)])


@pytest.mark.parametrize(
    ("video", "needle"),
    [
        ("clip", "`video`: 'clip' is not of type 'object'"),
        ({"column": "clip", "fps": 2}, r"`video`: Additional properties .* \('fps' was unexpected"),
        ({"column": "clip", "frames": 0}, "`video.frames`: 0 is less than the minimum of 1"),
        ({"column": "clip", "frames": True}, "`video.frames`: True is not of type 'integer'"),
        ({"frames": 4}, "`video`: 'column' is a required property"),
        ({"column": "clip", "dir": 3}, "`video.dir`"),
        ({"column": "nope"}, r"`video.column` names column 'nope'.*available columns"),
        ({"column": "clip", "frames": 2}, r"row 0 \(id 0\), column 'clip', frame 1: cannot decode"),
    ],
)
def test_bad_video_spec_is_a_clear_error(tmp_path, offline, video, needle):
    source = save({"question": ["q"], "answer": ["a"], "clip": [[[[1, 2]], [[300, 0]]]]}, tmp_path)
    with pytest.raises(ValueError, match=needle) as info:
        prepare(source, tmp_path, video=video)
    assert source in str(info.value)


def test_schema_takes_the_video_key():
    config = {
        "datasets": {
            "clips": {
                "source": "hf",
                "id": "org/clips",
                "split": "test",
                "columns": {"question": "question", "answer": "answer"},
                "video": {"column": "video_name", "frames": 8, "dir": "videos", "suffix": ".mp4"},
            }
        },
        "pairs": {"p": {"target": "org/big", "draft": "org/small"}},
        "methods": {"ar": {}},
    }
    assert mmconfig.validate(config)["datasets"]["clips"]["video"]["frames"] == 8
    for bad in ({"column": "video_name", "fps": 2}, {"frames": 8}, {"column": "v", "frames": 0}):
        config["datasets"]["clips"]["video"] = bad
        with pytest.raises(mmconfig.ConfigError):
            mmconfig.validate(config)


def distinct(index: int) -> np.ndarray:
    """A colour far from every other frame's, after a lossy codec (index < 30)."""
    return np.array([8 * index, 255 - 8 * index, (97 * index) % 256], dtype=float)


def write_mp4(path, count: int) -> None:
    """A real MPEG-4 video of `count` solid frames, frame i of colour `distinct(i)`, written
    with PyAV (its header declares the count)."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        stream.options = {"qscale": "1"}
        for index in range(count):
            rgb = np.broadcast_to(distinct(index).astype(np.uint8), (32, 32, 3)).copy()
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def frame_indices(row: dict, count: int) -> list[int]:
    """Which of the video's frames each picture of the row is: the nearest colour."""
    found = []
    for png in row["images"]:
        mean = np.asarray(PIL.Image.open(io.BytesIO(png)).convert("RGB"), float).mean((0, 1))
        found.append(int(np.argmin([np.abs(mean - distinct(i)).sum() for i in range(count)])))
    return found


def test_real_video_files_and_bytes_decode_through_pyav(tmp_path, offline):
    """PyAV itself (no stand-in) decodes a real MP4, from a file and from bytes: the frames
    sampled are the ones asked for, in order, under one video item."""
    videos = tmp_path / "videos"
    write_mp4(videos / "long.mp4", 30)
    write_mp4(videos / "short.mp4", 3)
    source = save(
        {
            "question": ["q", "q", "q"],
            "answer": ["a", "b", "c"],
            "name": ["long", "short", "long"],
            "clip": [
                {"bytes": None, "path": str(videos / "long.mp4")},
                {"bytes": (videos / "short.mp4").read_bytes(), "path": None},
                {"bytes": (videos / "long.mp4").read_bytes(), "path": None},
            ],
        },
        tmp_path,
    )
    by_name = prepare(
        source,
        tmp_path,
        video={"column": "name", "frames": 4, "dir": str(videos), "suffix": ".mp4"},
    )
    by_value = prepare(source, tmp_path, video={"column": "clip", "frames": 4})
    expected = [[0, 9, 19, 29], [0, 1, 2], [0, 9, 19, 29]]
    for rows in (by_name, by_value):
        counts = [30, 3, 30]
        assert [frame_indices(r, n) for r, n in zip(rows, counts, strict=True)] == expected
        for row, picked in zip(rows, expected, strict=True):
            content = json.loads(row["messages"])[0]["content"]
            assert content[0] == media.video_item(len(picked))
            assert PIL.Image.open(io.BytesIO(row["images"][0])).size == (32, 32)
