import io
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from mmspec.data import media
from mmspec.storage.tables import PREPARED
from mmspec.toy import world as tw
from mmspec.toy.quality import listed, motions, score_video

N = 60  # samples per dataset: enough to hit every branch, fast
N_IMAGES = {
    "toy_caption": 1,
    "toy_vqa": 1,
    "toy_diff": 2,
    "toy_multiturn": 1,
    "toy_story": 5,
    "toy_video": tw.VIDEO_FRAMES,
    "toy_vdesc": tw.VDESC_FRAMES,
}
N_IMAGES_MULTITURN_NEW = 2  # a toy_multiturn turn 1 of kind "image" brings a second one
MIXES = {"red blue": "purple", "red yellow": "orange", "blue yellow": "green"}
SIDES = {"triangle": "three", "square": "four"}
N_TURNS = {
    "toy_caption": 1,
    "toy_vqa": 1,
    "toy_diff": 1,
    "toy_multiturn": 2,
    "toy_story": 1,
    "toy_video": 1,
    "toy_vdesc": 1,
}


@pytest.fixture(scope="module")
def datasets():
    return {name: tw.generate_dataset(name, N, seed=0) for name in tw.DATASETS}


def texts(rows):
    """Every text of the rows: prompts, earlier answers and references."""
    for row in rows:
        yield row["reference"]
        for message in json.loads(row["messages"]):
            yield message["role"]
            yield from (c["text"] for c in message["content"] if c["type"] == "text")


def test_deterministic():
    for name in tw.DATASETS:
        assert tw.generate_dataset(name, 10, seed=3) == tw.generate_dataset(name, 10, seed=3)
        assert tw.generate_dataset(name, 10, seed=3) != tw.generate_dataset(name, 10, seed=4)
        fewer = tw.generate_dataset(name, 5, seed=3)
        assert fewer == tw.generate_dataset(name, 10, seed=3)[: len(fewer)]  # a prefix


def test_rows_fit_the_prepared_schema(datasets):
    for name, rows in datasets.items():
        assert len(rows) == N * N_TURNS[name]
        table = pa.Table.from_pylist(rows, schema=PREPARED)
        # every column but `references`, a list of answers, which a toy answer never is (null)
        assert table.column_names == PREPARED.names
        assert set(rows[0]) == set(PREPARED.names) - {"references"}
        assert table.column("references").null_count == len(rows)
        for row in rows:
            assert row["scenario"] == name and row["sample_id"].startswith(f"{name}-")
            messages = json.loads(row["messages"])
            assert [m["role"] for m in messages] == ["user", "assistant"] * row["turn"] + ["user"]
            n_images = len(media.items(messages, row["image_ids"], False, row["sample_id"]))
            assert n_images == len(row["images"]) == len(row["image_ids"])
            videos = [c for m in messages for c in m["content"] if c["type"] == "video"]
            # its frames are one video
            assert len(videos) == (name in ("toy_video", "toy_vdesc"))
            if name == "toy_multiturn" and row["turn"] == 1:
                assert n_images in (N_IMAGES[name], N_IMAGES_MULTITURN_NEW)
            else:
                assert n_images == N_IMAGES[name]
            assert row["image_ids"] == [media.image_id(png) for png in row["images"]]
            # fits max_new_tokens 64 and the end (descriptions: 96, as toy_lvspec.yaml sets)
            assert len(row["reference"].split()) <= (90 if name == "toy_vdesc" else 60)


def follow_up_kind(row: dict) -> str:
    """The kind of a toy_multiturn turn-1 row: "image", "text" (reasoning) or "prior"."""
    last = json.loads(row["messages"])[-1]["content"]
    if any(c["type"] == "image" for c in last):
        return "image"
    words = row["reference"].split()
    return "text" if "make" in words or "sides" in words else "prior"


def read_scene(png: bytes) -> tw.Scene:
    """The scene drawn in an image, read back by matching each quadrant against the tiles."""
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    objs = []
    for pos, (r, c) in tw.CORNERS.items():
        quadrant = img[r : r + tw.QUAD, c : c + tw.QUAD]
        if quadrant.any():
            kind = next(k for k, tile in tw.TILES.items() if np.array_equal(tile, quadrant))
            objs.append(tw.Obj(*kind, pos))
    return tuple(objs)


def vqa_answer(scene: tw.Scene, question: str) -> str:
    """The answer to a caption or toy_vqa question about `scene`, worked out independently."""
    if question == tw.CAPTION_PROMPT:
        return tw.caption(scene)
    words = question.split()
    if question.startswith("what colour is the "):
        (o,) = [o for o in scene if o.shape == words[4]]
        return f"the {o.shape} is {o.colour} ."
    if question.startswith("what shape is at the "):
        pos = " ".join(words[5:7])
        (o,) = [o for o in scene if o.pos == pos]
        return f"a {o.shape} is at the {pos} ."
    assert question.startswith("where is the "), question
    (o,) = [o for o in scene if (o.colour, o.shape) == (words[3], words[4])]
    return f"the {o.colour} {o.shape} is at the {o.pos} ."


def test_multiturn_carries_the_earlier_answer(datasets):
    rows = datasets["toy_multiturn"]
    for first, second in zip(rows[::2], rows[1::2], strict=True):
        assert first["sample_id"] == second["sample_id"]
        assert (first["turn"], second["turn"]) == (0, 1)
        messages = json.loads(second["messages"])
        assert messages[1]["content"][0]["text"] == first["reference"]
        assert second["images"][:1] == first["images"]  # the first image stays in context
        types = [c["type"] for c in messages[2]["content"]]
        if follow_up_kind(second) == "image":
            assert types == ["image", "text"] and len(second["images"]) == 2
        else:
            assert types == ["text"] and len(second["images"]) == 1  # no image added


def test_multiturn_follow_up_kinds_are_uniform(datasets):
    kinds = Counter(follow_up_kind(r) for r in datasets["toy_multiturn"] if r["turn"] == 1)
    assert set(kinds) == {"prior", "image", "text"}
    assert all(N / 6 <= n <= N / 2 for n in kinds.values()), kinds  # about N / 3 each


def test_multiturn_new_image_is_the_one_answered(datasets):
    questions = set()
    for row in datasets["toy_multiturn"]:
        if row["turn"] == 1 and follow_up_kind(row) == "image":
            question = json.loads(row["messages"])[-1]["content"][-1]["text"]
            questions.add(" ".join(question.split()[:3]))
            scene = read_scene(row["images"][1])
            assert scene and vqa_answer(scene, question) == row["reference"], row["reference"]
    assert questions == {"describe the image", "what colour is", "what shape is", "where is the"}


def test_multiturn_prior_follow_up_is_about_the_caption(datasets):
    rows = datasets["toy_multiturn"]
    for first, second in zip(rows[::2], rows[1::2], strict=True):
        if follow_up_kind(second) == "prior":
            scene = read_scene(first["images"][0])
            assert tw.caption(scene) == first["reference"]
            words = set(second["reference"].split())
            stated = words & set(tw.COLOURS + tw.SHAPES)
            assert stated <= {o.colour for o in scene} | {o.shape for o in scene}


def test_multiturn_reasoning_answers():
    seen = set()
    for seed in range(200):
        turns = tw.make_toy_multiturn(np.random.default_rng(seed))
        turn = turns[1]
        words = turn.question.split()
        if turn.question.startswith("what colour do "):
            a, b = words[3], words[5]
            assert (
                turn.answer == f"{a} and {b} make {MIXES.get(f'{a} {b}', MIXES.get(f'{b} {a}'))} ."
            )
            seen.add((a, b))
        elif turn.question.startswith("how many sides does a "):
            shape = words[5]
            assert turn.answer == f"a {shape} has {SIDES[shape]} sides ." and turn.scenes == []
            seen.add(shape)
    pairs = {tuple(k.split()) for k in MIXES}
    assert seen == pairs | {(b, a) for a, b in pairs} | set(SIDES)  # both orders; never circle


def test_text_uses_only_the_vocabulary(datasets):
    vocabulary = set(tw.VOCABULARY)
    assert len(vocabulary) == len(tw.VOCABULARY)
    used = set()
    for rows in datasets.values():
        for text in texts(rows):
            words = text.split(" ")
            assert text == text.lower() and "" not in words, text
            used.update(words)
    assert used <= vocabulary, used - vocabulary
    assert vocabulary - used == {":"}  # no dead words; ":" is for the chat template


def test_scenario_kinds_all_occur(datasets):
    refs = [r["reference"] for r in datasets["toy_vqa"]]
    assert any(" is at the " in r and r.startswith("a") for r in refs)
    assert any(" is at the " in r and r.startswith("the") for r in refs)
    assert any(" is at the " not in r for r in refs)
    diffs = " ".join(r["reference"] for r in datasets["toy_diff"]).split()
    assert {"became", "moved", "appeared", "disappeared"} <= set(diffs)


def test_story_walks_between_corners():
    for turn in (tw.make_toy_story(np.random.default_rng(s))[0] for s in range(20)):
        objs = [scene[0] for scene in turn.scenes]
        assert len({(o.colour, o.shape) for o in objs}) == 1
        assert all(a.pos != b.pos for a, b in zip(objs, objs[1:], strict=False))


def test_video_objects_move_between_free_corners_and_the_answer_says_so():
    stays = moves = 0
    for turn in (tw.make_toy_video(np.random.default_rng(s))[0] for s in range(200)):
        assert len(turn.scenes) == tw.VIDEO_FRAMES and turn.question == tw.VIDEO_PROMPT
        assert all(len({o.pos for o in scene}) == len(scene) for scene in turn.scenes)
        kinds = {(o.colour, o.shape) for scene in turn.scenes for o in scene}
        assert len(kinds) == len(turn.scenes[0])  # the same objects in every frame
        for colour, shape in kinds:
            path = [
                o.pos
                for scene in turn.scenes
                for o in scene
                if (o.colour, o.shape) == (colour, shape)
            ]
            sentence = tw.motion(colour, shape, path)
            assert sentence in turn.answer
            stops = [p for k, p in enumerate(path) if k == 0 or p != path[k - 1]]
            assert 1 <= len(stops) <= 4
            stays += len(stops) == 1
            moves += len(stops) > 1
    assert stays and moves


def test_render_colours_the_right_quadrants():
    scene = (tw.Obj("red", "circle", "top left"), tw.Obj("blue", "triangle", "bottom right"))
    img = tw.render(scene)
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    assert tuple(img[8, 8]) == tw.RGB["red"] and tuple(img[24, 24]) == tw.RGB["blue"]
    assert not img[:16, 16:].any() and not img[16:, :16].any()  # empty corners are black
    assert not img[0, 0].any()  # background around the shape
    for shape in tw.SHAPES:  # shapes differ and each fills a fair part of its quadrant
        area = (tw.render((tw.Obj("green", shape, "top right"),)).sum(axis=2) > 0).sum()
        assert 50 < area < 16 * 16
    masks = {s: tw.render((tw.Obj("green", s, "top right"),)).any(axis=2) for s in tw.SHAPES}
    assert len({m.tobytes() for m in masks.values()}) == 3


def test_png_round_trips():
    img = tw.render(tw.random_scene(np.random.default_rng(0)))
    png = media.png_bytes(img)
    assert png == media.png_bytes(img.copy())
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(png)).convert("RGB")), img)
    assert len(media.image_id(png)) == 40


def test_training_examples():
    examples = list(tw.training_examples(["toy_caption", "toy_multiturn"], 6, seed=0))
    assert len(examples) == 6
    for i, (messages, images) in enumerate(examples):
        assert messages[-1]["role"] == "assistant"
        assert len(messages) == (2 if i % 2 == 0 else 4)
        n_images = sum(c["type"] == "image" for m in messages for c in m["content"])
        assert len(images) == n_images >= 1 and images[0].shape == (32, 32, 3)
    again = list(tw.training_examples(["toy_caption", "toy_multiturn"], 6, seed=0))
    assert [m for m, _ in again] == [m for m, _ in examples]
    # a stream apart from the evaluation rows of the same seed
    evaluation = tw.generate_dataset("toy_caption", 3, seed=0)
    assert examples[0][0][-1]["content"][0]["text"] != evaluation[0]["reference"]


def test_tokenizer_splits_punctuation(processor):
    """The caption view's "image: ..." prefix tokenizes to known words; specials stay whole."""
    tokenizer = processor.tokenizer
    ids = tokenizer("image: a red circle", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["image", ":", "a", "red", "circle"]
    text = "<bos> user : <image>\n<image> describe the image . assistant : a red circle . <eos>"
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert tokens == ["<bos>", "user", ":", "<image>", "\n", "<image>", "describe", "the"] + [
        "image",
        ".",
        "assistant",
        ":",
        "a",
        "red",
        "circle",
        ".",
        "<eos>",
    ]


def test_chat_template_tokenizes_to_the_vocabulary(processor, datasets):
    tokenizer = processor.tokenizer
    for rows in datasets.values():
        for row in rows[:6]:
            messages = media.frames_as_images(json.loads(row["messages"]))  # LLaVA-1.5 style
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            tokens = tokenizer.convert_ids_to_tokens(
                tokenizer(text, add_special_tokens=False)["input_ids"]
            )
            assert tokens == text.split(" ")  # one token per word: no splits, no unknowns


def synonym_slots(text: str) -> list[tuple[str, str]]:
    """(slot, word) of every synonym a description's filler sentences chose, in order."""
    words = text.split()
    out = []
    for slot, choices in tw.SYNONYMS.items():
        out += [(slot, w) for w in words if w in choices]
    return out


def other_synonym(word: str) -> str:
    """The next synonym of a filler word; any other word as it is."""
    for choices in tw.SYNONYMS.values():
        if word in choices:
            return choices[(choices.index(word) + 1) % len(choices)]
    return word


def test_video_descriptions_wrap_the_motion_in_fillers_that_score_nothing():
    rng = np.random.default_rng(5)
    seen = set()
    for _ in range(60):
        (turn,) = tw.make_toy_vdesc(rng)
        assert turn.video and len(turn.scenes) == tw.VDESC_FRAMES
        text = turn.answer
        chosen = synonym_slots(text)
        seen.update(word for _, word in chosen)
        # the motion sentences are toy_video's, so they score as toy_video's answers do
        stated = motions(text)
        assert 1 <= len(stated) <= 2
        assert set(listed(text)) == set(stated)  # the list names them
        swapped = " ".join(other_synonym(w) for w in text.split())
        assert swapped != text
        assert score_video(swapped, text) == 1.0
        assert 0.1 < tw.visual_share(text) < 0.4  # LVSpec: at most about 20% on average
    assert seen == {w for words in tw.SYNONYMS.values() for w in words}  # every synonym occurs
    assert tw.visual_share("the red circle") == 2 / 3


def test_a_house_style_prefers_its_own_synonyms_and_keeps_the_content():
    for style, index in tw.HOUSE_STYLES.items():
        turns = [t for (t,) in tw.training_turns(["toy_vdesc"], 300, seed=3, style=style)]
        chosen = [choice for t in turns for choice in synonym_slots(t.answer)]
        own = sum(word == tw.SYNONYMS[slot][index] for slot, word in chosen) / len(chosen)
        assert 0.97 < own < 1  # the others still occur, rarely
        for turn in turns[:40]:  # the motion sentences are toy_video's
            assert score_video(turn.answer, turn.answer) == 1.0
    assert len(set(tw.HOUSE_STYLES.values())) == len(tw.HOUSE_STYLES)  # styles differ everywhere
    assert all(len(words) == len(set(words)) for words in tw.SYNONYMS.values())
    every = [w for words in tw.SYNONYMS.values() for w in words]
    assert len(every) == len(set(every)) and not set(every) & tw.VISUAL_WORDS


def test_a_house_style_has_its_habit_with_the_optional_words():
    """Style b adds the optional words (LVSpec's positional shifts), style a leaves them out;
    either way the words around them are the same, one position apart."""
    optional = [w[1:-1] for t in tw.FILLERS.values() for w in t.split() if w.startswith("[")]
    assert optional == ["then", "also"]
    rates = {}
    for style in tw.HOUSE_STYLES:
        turns = [t for (t,) in tw.training_turns(["toy_vdesc"], 300, seed=4, style=style)]
        rates[style] = np.mean([" and also the " in t.answer for t in turns])
        for turn in turns[:40]:
            assert score_video(turn.answer, turn.answer) == 1.0
    assert rates["b"] > 0.97 and rates["a"] < 0.03
    rng = np.random.default_rng(6)
    uniform = [tw.make_toy_vdesc(rng)[0].answer for _ in range(200)]
    assert 0.35 < np.mean([" and also the " in a for a in uniform]) < 0.65


def test_a_house_style_lists_two_shapes_in_its_order():
    """Style b lists two shapes against the order its motion sentences take them 90% of the time
    (LVSpec's positional shifts, case 2); style a, like the dataset's descriptions, either way."""

    def reversed_share(turns):
        pairs = [t.answer for t in turns if len(motions(t.answer)) == 2]
        flips = [listed(a) != list(motions(a)) for a in pairs]
        return np.mean(flips), len(pairs)

    for style, habit in tw.HOUSE_LISTS_REVERSED.items():
        turns = [t for (t,) in tw.training_turns(["toy_vdesc"], 400, seed=8, style=style)]
        share, pairs = reversed_share(turns)
        assert pairs > 100
        if habit is None:  # either order
            assert 0.4 < share < 0.6
        else:
            assert (0.85 < share < 0.95) if habit else (0.05 < share < 0.15)  # LIST_PREFERENCE
    rng = np.random.default_rng(9)
    share, _ = reversed_share([tw.make_toy_vdesc(rng)[0] for _ in range(400)])
    assert 0.35 < share < 0.65


def test_colour_noise_renames_training_colours_only():
    """vdesc_colour_noise: that share of training descriptions' motion sentences name the near
    colour, unless another object of the video has it; the dataset's descriptions (what is
    scored) always name the true one."""
    noisy = [t for (t,) in tw.training_turns(["toy_vdesc"], 400, seed=5, colour_noise=0.2)]
    clean = [t for (t,) in tw.training_turns(["toy_vdesc"], 400, seed=5)]
    renamed = total = 0
    for turn in noisy:
        truth = {(o.colour, o.shape) for o in turn.scenes[0]}
        shown = {c for c, _ in truth}
        for colour, shape in motions(turn.answer):
            if (colour, shape) in truth:  # as shown; eligible if the near colour is not shown
                total += tw.NEAR_COLOURS[colour] not in shown
                continue
            # renamed: to the near colour, and never to a colour another object of the video has
            total += 1
            renamed += 1
            assert colour not in shown
            assert any((c, shape) in truth and tw.NEAR_COLOURS[c] == colour for c in tw.COLOURS)
        assert set(listed(turn.answer)) == set(motions(turn.answer))
    assert 0.15 < renamed / total < 0.25
    rng = np.random.default_rng(5)
    for turn in clean + [tw.DATASETS["toy_vdesc"](rng)[0] for _ in range(100)]:
        truth = {(o.colour, o.shape) for o in turn.scenes[0]}
        assert set(motions(turn.answer)) <= truth


def test_patch_words_name_what_each_patch_shows():
    scene = (tw.Obj("red", "circle", "top left"), tw.Obj("blue", "square", "bottom right"))
    words = tw.patch_words(scene, 8)  # 4 x 4 patches, a quadrant is 2 x 2 of them
    red = {"red", "circle", "top", "left"}
    blue = {"blue", "square", "bottom", "right"}
    assert [i for i, w in enumerate(words) if w == red] == [0, 1, 4, 5]
    assert [i for i, w in enumerate(words) if w == blue] == [10, 11, 14, 15]
    assert all(not words[i] for i in (2, 3, 6, 7, 8, 9, 12, 13))
    moved = [scene, (tw.Obj("red", "circle", "top right"), scene[1])]
    video = tw.video_patch_words(moved, 8)
    assert len(video) == 32
    assert "moves" in video[0] and "moves" in video[16 + 2] and "stays" in video[15]
    assert "right" in video[16 + 2] and "left" not in video[16 + 2]
