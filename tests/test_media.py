"""A sample's images and videos: prompt order, frames as images, and bad rows."""

from __future__ import annotations

import pytest

from mmspec.data import media

MESSAGES = [
    {"role": "user", "content": [{"type": "image"}, media.video_item(3)]},
    {"role": "assistant", "content": [{"type": "text", "text": "ok ."}]},
    {"role": "user", "content": [{"type": "text", "text": "and this ?"}, {"type": "image"}]},
]
IDS = ["a", "f1", "f2", "f3", "b"]


def test_items_keep_prompt_order_and_read_videos_as_videos_or_frames():
    as_videos = media.items(MESSAGES, IDS, True, "row 0")
    assert [(i.kind, i.ids) for i in as_videos] == [
        ("image", ("a",)),
        ("video", ("f1", "f2", "f3")),
        ("image", ("b",)),
    ]
    assert as_videos[1].key == media.video_id(["f1", "f2", "f3"]) != media.video_id(["f1", "f2"])
    as_frames = media.items(MESSAGES, IDS, False, "row 0")
    assert [i.key for i in as_frames] == IDS


def test_frames_as_images_expands_each_video_item_in_place():
    expanded = media.frames_as_images(MESSAGES)
    assert [i["type"] for i in expanded[0]["content"]] == ["image"] * 4
    assert expanded[2] == MESSAGES[2]
    assert MESSAGES[0]["content"][1]["type"] == "video"  # the input is left as it was
    assert not media.has_video(expanded) and media.has_video(MESSAGES)


def test_rows_whose_messages_and_images_disagree_are_named():
    with pytest.raises(ValueError, match="row 7: the messages place 5 pictures but the row has 4"):
        media.items(MESSAGES, IDS[:4], True, "row 7")
    bad = [{"role": "user", "content": [{"type": "video", "frames": 0}]}]
    with pytest.raises(ValueError, match="row 8: a video item needs a positive `frames` count"):
        media.items(bad, [], True, "row 8")


def test_an_image_decodes_alike_from_bytes_a_path_and_a_dict(tmp_path):
    """`to_png` takes each form a dataset source may hand it."""
    import numpy as np

    png = media.png_bytes(np.full((4, 6, 3), (200, 30, 90), np.uint8))
    path = tmp_path / "a.png"
    path.write_bytes(png)
    forms = [png, str(path), path, {"bytes": None, "path": str(path)}, {"bytes": png, "path": None}]
    decoded = [media.to_png(form) for form in forms]
    assert all(d == decoded[0] for d in decoded)
    with pytest.raises(TypeError, match="not an image value: int"):
        media.to_png(3)
