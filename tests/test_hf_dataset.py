"""prepare_hf on small local datasets (Parquet files, save_to_disk), with the network blocked."""

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap

import datasets
import PIL.Image
import pytest

from mmspec.data.hf import prepare_hf
from mmspec.storage.tables import PREPARED, read_table

RED, GREEN, BLUE, GREY = (255, 0, 0), (0, 255, 0), (0, 0, 255), (128, 128, 128)


def solid(colour, mode="RGB", size=(6, 4)):
    """A solid-colour image (`colour` given as RGB, converted to `mode`)."""
    return PIL.Image.new("RGB", size, colour).convert(mode)


def toy_dataset() -> datasets.Dataset:
    """Four rows; row 2 also holds two images in the list column `views` (one of them greyscale)."""
    return datasets.Dataset.from_dict(
        {
            "qid": [10, 11, 12, 13],
            "question": ["What colour?", "Is it green?", "Compare the views.", "Describe."],
            "gpt_answer": ["red", "yes", "green, blue, grey", "blue"],
            "category": ["colour", "yes/no", "compare", "detail"],
            "image": [solid(RED), solid(GREEN), solid(GREEN), solid(BLUE, "RGBA")],
            "views": [[], [], [solid(BLUE), solid(GREY, "L")], []],
        }
    )


# colours of the images of each row with image_columns [image, views]
EXPECTED_COLOURS = [[RED], [GREEN], [GREEN, BLUE, GREY], [BLUE]]

SPEC = {
    "source": "hf",
    "split": "train",
    "columns": {"question": "question", "answer": "gpt_answer", "id": "qid"},
    "prompt": "[{category}] {question}",
    "image_columns": ["image", "views"],
}


def save(dataset: datasets.Dataset, root, layout: str) -> str:
    """Write `dataset` under `root` in one of the layouts prepare_hf loads; return the id."""
    path = root / layout
    if layout == "parquet":
        path.mkdir()
        dataset.to_parquet(str(path / "train.parquet"))
    elif layout == "save_to_disk":
        dataset.save_to_disk(str(path))
    else:  # a DatasetDict saved to disk
        datasets.DatasetDict({"train": dataset, "test": dataset.select([0])}).save_to_disk(
            str(path)
        )
    return str(path)


@pytest.fixture(params=["parquet", "save_to_disk", "save_to_disk_dict"])
def source(request, tmp_path, offline):
    """The toy dataset on disk in each supported layout."""
    return save(toy_dataset(), tmp_path, request.param)


def prepare(dataset_id, tmp_path, **changes):
    """Run prepare_hf on `dataset_id` with SPEC updated by `changes`; return (n, rows)."""
    out = tmp_path / "prepared" / "toy.parquet"
    n = prepare_hf("toy", {**SPEC, "id": dataset_id, **changes}, out)
    return n, read_table(out, PREPARED).to_pylist()


def pixels(png: bytes) -> PIL.Image.Image:
    image = PIL.Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.mode == "RGB"
    return image


def test_rows_messages_and_images(source, tmp_path):
    n, rows = prepare(source, tmp_path)
    assert n == len(rows) == 4
    assert [r["sample_id"] for r in rows] == ["toy-10", "toy-11", "toy-12", "toy-13"]
    assert {r["turn"] for r in rows} == {0} and {r["scenario"] for r in rows} == {"toy"}
    assert [r["reference"] for r in rows] == ["red", "yes", "green, blue, grey", "blue"]
    assert json.loads(rows[2]["messages"]) == [
        {
            "role": "user",
            "content": [{"type": "image"}] * 3
            + [{"type": "text", "text": "[compare] Compare the views."}],
        }
    ]
    for row, colours in zip(rows, EXPECTED_COLOURS, strict=True):
        assert len(row["images"]) == len(colours) == len(row["image_ids"])
        assert json.loads(row["messages"])[0]["content"].count({"type": "image"}) == len(colours)
        for png, image_id, colour in zip(row["images"], row["image_ids"], colours, strict=True):
            assert image_id == hashlib.sha1(png).hexdigest()
            image = pixels(png)
            assert image.size == (6, 4)
            assert image.tobytes() == solid(colour).tobytes()


def test_limit_takes_the_first_rows(source, tmp_path):
    n, rows = prepare(source, tmp_path, limit=2)
    assert n == 2
    assert [r["sample_id"] for r in rows] == ["toy-10", "toy-11"]


def test_where_keeps_a_subset(source, tmp_path):
    n, rows = prepare(source, tmp_path, where={"qid": 11})
    assert n == 1 and [r["sample_id"] for r in rows] == ["toy-11"]
    with pytest.raises(ValueError, match="no row matches"):
        prepare(source, tmp_path, where={"qid": 99})
    with pytest.raises(ValueError, match="`where` names column 'nope'"):
        prepare(source, tmp_path, where={"nope": 1})


def test_deterministic_and_row_index_ids(source, tmp_path):
    spec = {"columns": {"question": "question", "answer": "gpt_answer"}, "prompt": "{question}"}
    _, first = prepare(source, tmp_path, **spec)
    _, second = prepare(source, tmp_path, **spec)
    assert first == second
    assert [r["sample_id"] for r in first] == ["toy-0", "toy-1", "toy-2", "toy-3"]
    assert json.loads(first[0]["messages"])[0]["content"][-1]["text"] == "What colour?"


def test_prompt_can_use_field_aliases(source, tmp_path):
    columns = {"question": "category", "answer": "gpt_answer", "id": "qid"}
    _, rows = prepare(source, tmp_path, columns=columns, prompt="{question}? #{id}")
    # `question` is a dataset column, so it wins over the alias; `id` is the alias of `qid`
    assert json.loads(rows[1]["messages"])[0]["content"][-1]["text"] == "Is it green?? #11"


def test_defaults_give_text_only_prompts(tmp_path, offline):
    source = save(toy_dataset(), tmp_path, "parquet")
    spec = {"source": "hf", "id": source, "split": "train", "metric": "exact_match"}
    spec["columns"] = {"question": "question", "answer": "gpt_answer"}
    n = prepare_hf("toy", spec, tmp_path / "out.parquet")  # `metric` is accepted and ignored
    rows = read_table(tmp_path / "out.parquet", PREPARED).to_pylist()
    assert n == 4 and all(r["images"] == [] and r["image_ids"] == [] for r in rows)
    assert json.loads(rows[0]["messages"])[0]["content"] == [
        {"type": "text", "text": "What colour?"}
    ]


@pytest.mark.parametrize(
    ("changes", "key", "column"),
    [
        ({"columns": {"question": "question", "answer": "answer"}}, "columns.answer", "answer"),
        ({"columns": {**SPEC["columns"], "id": "question_id"}}, "columns.id", "question_id"),
        ({"image_columns": ["image", "picture"]}, "image_columns", "picture"),
        ({"prompt": "{question} ({caption.text})"}, "prompt", "caption"),
    ],
)
def test_missing_column_is_a_clear_error(source, tmp_path, changes, key, column):
    with pytest.raises(ValueError) as info:
        prepare(source, tmp_path, **changes)
    message = str(info.value)
    assert source in message and f"`{key}`" in message and repr(column) in message
    assert "available columns" in message and "'gpt_answer'" in message and "'views'" in message


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"splitt": "test"}, "splitt"),
        ({"columns": {"question": "question"}}, "columns.answer"),
        ({"columns": {**SPEC["columns"], "reference": "gpt_answer"}}, "reference"),
        ({"limit": 0}, "limit"),
        ({"source": "toyworld"}, "source"),
        ({"prompt": "{} and {question}"}, "positional"),
    ],
)
def test_bad_spec_is_a_clear_error(tmp_path, offline, changes, needle):
    source = save(toy_dataset(), tmp_path, "parquet")
    with pytest.raises(ValueError, match=needle):
        prepare(source, tmp_path, **changes)


def test_missing_split_of_saved_dataset_dict(tmp_path, offline):
    source = save(toy_dataset(), tmp_path, "save_to_disk_dict")
    with pytest.raises(ValueError, match=r"no split 'validation'.*\['test', 'train'\]"):
        prepare(source, tmp_path, split="validation")


def test_undecodable_image_names_the_row(tmp_path, offline):
    good = io.BytesIO()
    solid(RED).save(good, format="PNG")
    broken = datasets.Dataset.from_dict(
        {
            "qid": ["a", "b"],
            "question": ["q", "q"],
            "gpt_answer": ["x", "y"],
            "category": ["c", "c"],
            "image": [
                {"bytes": good.getvalue(), "path": None},
                {"bytes": b"not a png", "path": None},
            ],
            "views": [[], []],
        },
        features=datasets.Features(
            {
                **{
                    c: datasets.Value("string")
                    for c in ("qid", "question", "gpt_answer", "category")
                },
                "image": datasets.Image(),
                "views": datasets.List(datasets.Image()),
            }
        ),
    )
    source = save(broken, tmp_path, "parquet")
    with pytest.raises(ValueError, match=r"row 1 \(id 'b'\), column 'image': cannot decode image"):
        prepare(source, tmp_path)


OFFLINE_SCRIPT = textwrap.dedent(
    """
    import os, socket, sys
    def no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")
    socket.socket.connect = no_network
    socket.create_connection = no_network
    from mmspec.data.hf import prepare_hf
    import datasets
    assert datasets.config.HF_HUB_OFFLINE
    source, out, spec = sys.argv[1], sys.argv[2], eval(sys.argv[3])
    print("rows", prepare_hf("toy", {**spec, "id": source}, out))
    try:
        prepare_hf("hub", {**spec, "id": "lmms-lab/llava-bench-in-the-wild"}, out + ".hub")
    except FileNotFoundError as err:
        print("hub", type(err).__name__, err, "|".join(getattr(err, "__notes__", [])))
    """
)


def test_offline_from_the_environment_in_a_fresh_process(tmp_path):
    """With the variables set before `datasets` is imported, nothing touches the network."""
    source = save(toy_dataset(), tmp_path, "parquet")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    env.pop("HF_DATASETS_CACHE", None)
    out = str(tmp_path / "out.parquet")
    args = [sys.executable, "-c", OFFLINE_SCRIPT, source, out, repr(SPEC)]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "rows 4" in result.stdout
    # an uncached hub id fails at once, saying that offline mode needs the local cache, and how
    assert "hub FileNotFoundError hub dataset lmms-lab/llava-bench-in-the-wild" in result.stdout
    assert "HF_HUB_OFFLINE=1" in result.stdout and "mmspec fetch CONFIG" in result.stdout
    assert read_table(out, PREPARED).num_rows == 4


def conversation_dataset() -> datasets.Dataset:
    """Two LLaVA-style multi-turn rows: one marks its two images, one marks none."""
    return datasets.Dataset.from_dict(
        {
            "id": ["a", "b"],
            "images": [[solid(RED), solid(BLUE)], [solid(GREEN)]],
            "conversations": [
                [
                    {"from": "human", "value": "<image>\nWhat colour?"},
                    {"from": "gpt", "value": "red"},
                    {"from": "human", "value": "And this one? <image>"},
                    {"from": "gpt", "value": "blue"},
                ],
                [
                    {"from": "human", "value": "Describe."},
                    {"from": "gpt", "value": "green"},
                    {"from": "human", "value": "Brighter?"},
                    {"from": "gpt", "value": "no"},
                ],
            ],
        }
    )


CONVERSATION_SPEC = {
    "source": "hf",
    "split": "train",
    "columns": {"id": "id"},
    "image_columns": ["images"],
    "conversation": {"column": "conversations"},
}


def test_multi_turn_conversations_give_a_row_per_turn(tmp_path, offline):
    dataset_id = save(conversation_dataset(), tmp_path, "save_to_disk")
    out = tmp_path / "conv.parquet"
    assert prepare_hf("conv", {**CONVERSATION_SPEC, "id": dataset_id}, out) == 4
    rows = read_table(out, PREPARED).to_pylist()
    assert [(r["sample_id"], r["turn"], r["reference"]) for r in rows] == [
        ("conv-a", 0, "red"),
        ("conv-a", 1, "blue"),
        ("conv-b", 0, "green"),
        ("conv-b", 1, "no"),
    ]
    # turn 1 of row a: turn 0 answered by the dataset, then the question with the second image
    assert json.loads(rows[1]["messages"]) == [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "red"}]},
        {"role": "user", "content": [{"type": "text", "text": "And this one?"}, {"type": "image"}]},
    ]
    assert [pixels(p).getpixel((0, 0)) for p in rows[1]["images"]] == [RED, BLUE]
    assert [pixels(p).getpixel((0, 0)) for p in rows[0]["images"]] == [RED]
    # no marker: the image opens the first question and stays in the history
    first = json.loads(rows[3]["messages"])[0]
    assert first["content"][0] == {"type": "image"} and len(rows[3]["images"]) == 1


def test_conversation_errors_name_the_row(tmp_path, offline):
    bad = conversation_dataset().map(
        lambda row: {"conversations": row["conversations"][:1] + row["conversations"][:1]}
    )
    dataset_id = save(bad, tmp_path, "save_to_disk")
    with pytest.raises(ValueError, match=r"\(id 'a'\), column 'conversations'\[1\]: two user"):
        prepare_hf("conv", {**CONVERSATION_SPEC, "id": dataset_id}, tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="`conversation.column` names column 'turns'"):
        prepare_hf(
            "conv",
            {**CONVERSATION_SPEC, "id": dataset_id, "conversation": {"column": "turns"}},
            tmp_path / "x.parquet",
        )


def test_image_generation_rows_are_captions_with_a_reference_image(tmp_path, offline):
    source = save(toy_dataset(), tmp_path, "parquet")
    spec = {"columns": {"question": "question", "id": "qid"}, "prompt": "{question}"}
    n, rows = prepare(source, tmp_path, task="image_generation", image_columns=["image"], **spec)
    assert n == 4
    expected = zip([RED, GREEN, GREEN, BLUE], toy_dataset()["question"], strict=True)
    for row, (colour, question) in zip(rows, expected, strict=True):
        messages = json.loads(row["messages"])
        assert messages == [{"role": "user", "content": [{"type": "text", "text": question}]}]
        assert row["reference"] == question and len(row["images"]) == 1
        assert pixels(row["images"][0]).getpixel((0, 0)) == colour


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"image_columns": ["image", "views"]}, "exactly one of `image_columns`"),
        ({"image_columns": []}, "exactly one of `image_columns`"),
        ({"task": "painting"}, r"`task`: 'painting' is not one of \["),
        ({"conversation": {"column": "question"}}, "no `conversation` or `video`"),
    ],
)
def test_bad_image_generation_specs_are_named(tmp_path, offline, changes, needle):
    source = save(toy_dataset(), tmp_path, "parquet")
    spec = {"task": "image_generation", "image_columns": ["image"], **changes}
    with pytest.raises(ValueError, match=needle):
        prepare(source, tmp_path, **spec)


def test_qa_column_becomes_question_answer_pairs():
    from mmspec.data.hf import qa_pairs

    value = [
        {"question": "what moves ?", "answer": "the red square"},
        {"question": "q", "answer": 3},
    ]
    assert json.loads(qa_pairs("ds: row 0", value)) == [
        ["what moves ?", "the red square"],
        ["q", "3"],
    ]
    assert qa_pairs("ds: row 0", json.dumps(value)) == qa_pairs("ds: row 0", value)
    for bad in ([], "{oops", [{"answer": "x"}], "plain text"):
        with pytest.raises(ValueError, match="ds: row 7"):
            qa_pairs("ds: row 7", bad)
