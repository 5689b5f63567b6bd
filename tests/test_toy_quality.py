import numpy as np
import pytest

from mmspec.toy import world as tw
from mmspec.toy.quality import SCENARIOS, score_rows, score_toy

GARBAGE = ["", "   ", "the the the", "a red", "?? ,, .", "<unk> <pad>", "circle " * 50, "é 🙂 \n"]


@pytest.fixture(scope="module")
def rows():
    return [r for name in tw.DATASETS for r in tw.generate_dataset(name, 40, seed=1)]


def test_scenarios_match_the_datasets():
    assert set(SCENARIOS) == set(tw.DATASETS)


def test_references_score_one(rows):
    for r in rows:
        assert score_toy(r["scenario"], r["turn"], r["reference"], r["reference"]) == 1.0, r


def test_score_rows(rows):
    outputs = [dict(r, output_text=r["reference"]) for r in rows]
    assert score_rows(outputs) == [1.0] * len(rows)


def test_garbage_scores_zero(rows):
    for r in rows:
        for output in GARBAGE:
            assert score_toy(r["scenario"], r["turn"], output, r["reference"]) == 0.0


def test_unknown_scenario_raises():
    with pytest.raises(ValueError):
        score_toy("nope", 0, "a", "a")


def wrong_colour(text: str) -> str:
    """The text with its first colour replaced by another."""
    words = text.split()
    i = next(i for i, w in enumerate(words) if w in tw.COLOURS)
    words[i] = "green" if words[i] != "green" else "red"
    return " ".join(words)


def test_one_wrong_colour_scores_less(rows):
    for r in rows:
        if any(c in r["reference"].split() for c in tw.COLOURS):
            bad = wrong_colour(r["reference"])
            assert score_toy(r["scenario"], r["turn"], bad, r["reference"]) < 1.0, bad


def test_caption_partial_credit():
    ref = "a red circle at the top left , a blue square at the bottom right ."
    half = "a red circle at the top left , a green square at the bottom right ."
    assert score_toy("toy_caption", 0, half, ref) == pytest.approx(1 / 3)
    assert score_toy("toy_caption", 0, "a red circle at the top left , a blue", ref) == 0.5
    assert score_toy("toy_multiturn", 0, "A red circle at the top left.", ref) == 0.5
    assert score_toy("toy_caption", 0, ".", ".") == 1.0  # nothing to find in either


def test_vqa_checks_the_attribute_asked():
    assert score_toy("toy_vqa", 0, "the circle is red .", "the circle is red .") == 1.0
    assert score_toy("toy_vqa", 0, "the circle is blue .", "the circle is red .") == 0.0
    ref = "a circle is at the top left ."
    assert score_toy("toy_vqa", 0, "a square is at the top left .", ref) == 0.0
    ref = "the blue square is at the bottom right ."
    assert score_toy("toy_vqa", 0, "the blue square is at the bottom right", ref) == 1.0
    assert score_toy("toy_vqa", 0, "the blue square is at the top right .", ref) == 0.0


def test_diff_partial_credit():
    ref = "the red circle at the top left became green ."
    assert score_toy("toy_diff", 0, "the red circle at the top left became blue .", ref) == 0.5
    assert score_toy("toy_diff", 0, "the red circle at the top left became", ref) == 0.5
    assert score_toy("toy_diff", 0, "the red circle at the top left disappeared .", ref) == 0.0
    ref = "an orange square appeared at the bottom left ."
    assert score_toy("toy_diff", 0, "an orange square appeared at the bottom left .", ref) == 1.0
    assert score_toy("toy_diff", 0, "the orange square at the bottom left disappeared", ref) == 0


def test_multiturn_follow_up_is_exact():
    ref = "there are two shapes ."
    assert score_toy("toy_multiturn", 1, "There are two shapes.", ref) == 1.0
    assert score_toy("toy_multiturn", 1, "there are three shapes .", ref) == 0.0


def test_story_counts_facts():
    ref = (
        "first a red circle is at the top left . then it moves to the top right . then it "
        "moves to the bottom right . then it moves to the bottom left . finally it moves to "
        "the top left ."
    )
    assert score_toy("toy_story", 0, ref.replace("red", "blue"), ref) == pytest.approx(5 / 6)
    truncated = ref[: ref.index("then it moves to the bottom right")]
    assert score_toy("toy_story", 0, truncated, ref) == pytest.approx(3 / 6)
    assert score_toy("toy_story", 0, ref.replace("first a red circle", "a"), ref) == 4 / 6


def test_video_scores_each_object_path():
    ref = (
        "the red circle moves from the top left to the top right , then to the bottom right . "
        "the blue square stays at the bottom left ."
    )
    assert score_toy("toy_video", 0, ref, ref) == 1.0
    one_hop_short = ref.replace(" , then to the bottom right", "")
    assert score_toy("toy_video", 0, one_hop_short, ref) == pytest.approx((2 / 3 + 1) / 2)
    swapped = ref.replace("blue square", "blue circle")
    assert score_toy("toy_video", 0, swapped, ref) == pytest.approx(0.5)
    truncated = ref[: ref.index(" . the blue")]
    assert score_toy("toy_video", 0, truncated, ref) == pytest.approx(0.5)


def test_description_scores_the_list_beside_each_object_path():
    ref = (
        "the video shows the red circle and the blue square . the camera is still . "
        "the red circle moves from the top left to the top right . meanwhile , "
        "the blue square stays at the bottom left . nothing else happens ."
    )
    assert score_toy("toy_vdesc", 0, ref, ref) == 1.0
    reordered = ref.replace(
        "the red circle and the blue square", "the blue square and the red circle"
    )
    assert score_toy("toy_vdesc", 0, reordered, ref) == 1.0  # the list in any order
    unlisted = ref.replace(" and the blue square", "")
    assert score_toy("toy_vdesc", 0, unlisted, ref) == pytest.approx((1 + 1 / 2) / 2)
    wrong_end = ref.replace("to the top right", "to the bottom right")
    assert score_toy("toy_vdesc", 0, wrong_end, ref) == pytest.approx((2 / 3 + 1) / 2)
    assert score_toy("toy_video", 0, unlisted, ref) == 1.0  # toy_video has no list to score


def test_word_salad_never_raises(rows):
    rng = np.random.default_rng(0)
    for i in range(300):
        salad = " ".join(rng.choice(tw.VOCABULARY, size=rng.integers(0, 60)))
        r = rows[i % len(rows)]
        assert 0.0 <= score_toy(r["scenario"], r["turn"], salad, r["reference"]) <= 1.0


def test_multiturn_new_image_caption_is_scored_as_a_caption():
    ref = "a red circle at the top left , a blue square at the bottom right ."
    assert score_toy("toy_multiturn", 1, ref, ref) == 1.0
    half = "a red circle at the top left , a green square at the bottom right ."
    assert score_toy("toy_multiturn", 1, half, ref) == pytest.approx(1 / 3)


def test_multiturn_new_image_vqa_is_scored_as_vqa():
    for ref, bad in [
        ("the circle is red .", "the circle is blue ."),
        ("a circle is at the top left .", "a square is at the top left ."),
        ("the blue square is at the bottom right .", "the blue square is at the top right ."),
    ]:
        assert score_toy("toy_multiturn", 1, ref.rstrip(" ."), ref) == 1.0  # same fact
        assert score_toy("toy_multiturn", 1, bad, ref) == 0.0


def test_multiturn_reasoning_is_exact():
    ref = "red and blue make purple ."
    assert score_toy("toy_multiturn", 1, "Red and blue make purple.", ref) == 1.0
    assert score_toy("toy_multiturn", 1, "red and blue make green .", ref) == 0.0
    assert score_toy("toy_multiturn", 1, "red and blue make", ref) == 0.0
    ref = "a triangle has three sides ."
    assert score_toy("toy_multiturn", 1, "a triangle has three sides .", ref) == 1.0
    assert score_toy("toy_multiturn", 1, "a triangle has four sides .", ref) == 0.0


def test_multiturn_rows_of_every_kind_score(rows):
    """References of each turn-1 kind score 1; a wrong colour, shape or number scores less."""
    swaps = {"red": "blue", "blue": "red", "green": "red", "yellow": "red", "purple": "red"}
    swaps |= {"orange": "red", "circle": "square", "square": "circle", "triangle": "circle"}
    swaps |= {"one": "two", "two": "three", "three": "four", "four": "one"}
    second = [r for r in rows if r["scenario"] == "toy_multiturn" and r["turn"] == 1]
    kinds = {len(r["images"]) for r in second}
    kinds |= {"text" for r in second if {"make", "sides"} & set(r["reference"].split())}
    assert kinds == {1, 2, "text"}  # prior, new image, text-only reasoning
    for r in second:
        words = r["reference"].split()
        i = next(i for i, w in enumerate(words) if w in swaps)
        bad = " ".join(words[:i] + [swaps[words[i]]] + words[i + 1 :])
        assert score_toy("toy_multiturn", 1, r["reference"], r["reference"]) == 1.0
        assert score_toy("toy_multiturn", 1, bad, r["reference"]) < 1.0, bad
