"""The task metrics and their catalog: each built-in metric on answers whose scores are worked out
by hand here (VQA v2's official accuracy, DocVQA's ANLS, exact match, ROUGE-L through
torchmetrics, the toy rubric), what each takes as a reference, and the catalog's errors."""

from __future__ import annotations

import importlib.metadata

import pytest

from mmspec.plugins import entry_points as plugins
from mmspec.scoring import metric_catalog
from mmspec.scoring.metrics import anls, vqa_accuracy
from mmspec.scoring.task_metric import ANSWERS, TEXT, Sample, TaskMetric
from mmspec.toy import world as toyworld
from mmspec.toy.quality import score_toy

SAMPLE = Sample("ds-0", 0, "ds")


def score(name: str, output: str, reference, sample: Sample = SAMPLE):
    return metric_catalog.get(name)().score(output, reference, sample)


# -- VQA accuracy --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "normalised"),
    [
        ("Nokia.", "nokia"),  # lower case; a period goes unless a digit follows
        ("The Nokia 3.5", "nokia 3.5"),  # an article goes; 3.5 keeps its period
        ("Two dogs", "2 dogs"),  # number words become digits
        ("none", "0"),
        ("dont know", "don't know"),  # a contraction gets its apostrophe back
        ("it's", "it's"),  # the apostrophe is no punctuation mark of the script's
        ("yes!", "yes"),  # "!" touches no space: a space, then stripped by the split
        ("red, blue", "red blue"),  # a comma touching a space is deleted
        ("red,blue", "red blue"),  # ... one between letters becomes a space
        ("1,000 (approx)", "1000 approx"),  # a digit-comma-digit group: every mark is deleted
        ("  x/y \n", "x y"),
    ],
)
def test_vqa_normalisation_follows_the_official_script(answer, normalised):
    assert vqa_accuracy.normalise(answer) == normalised


# Ten human answers of which k give "nokia" in some spelling. Leaving out each human in turn:
# k = 10: 9 of the other 9 agree -> 1 every time.
# k = 4: 4 or 3 others agree -> min(4/3, 1) = min(3/3, 1) = 1 -> 1.0.
# k = 3: leaving out one of the 7 others, 3 agree -> 1; one of the 3, 2 agree -> 2/3:
#        (7 * 1 + 3 * 2/3) / 10 = 0.9.
# k = 2: (8 * 2/3 + 2 * 1/3) / 10 = 0.6.   k = 1: (9 * 1/3 + 1 * 0) / 10 = 0.3.   k = 0: 0.
OTHERS = ["nokia phone", "samsung", "unanswerable", "nokai", "phone", "nokia 6", "n", "no", "x"]
OTHERS += ["mobile"]
AGREEING = ["nokia", "Nokia", "NOKIA.", "the nokia", "Nokia ", "nokia", "a Nokia", "nokia"]
AGREEING += ["Nokia", "nokia"]


@pytest.mark.parametrize(
    ("k", "expected"), [(10, 1.0), (4, 1.0), (3, 0.9), (2, 0.6), (1, 0.3), (0, 0.0)]
)
def test_vqa_accuracy_of_k_agreeing_humans(k, expected):
    humans = AGREEING[:k] + OTHERS[: 10 - k]
    assert len(humans) == 10
    assert score("vqa_accuracy", "Nokia", humans) == pytest.approx(expected)
    assert score("vqa_accuracy", "the NOKIA.", humans) == pytest.approx(expected)


def test_vqa_accuracy_takes_a_list_of_at_least_four_answers():
    metric = metric_catalog.get("vqa_accuracy")
    assert metric.takes == {ANSWERS}
    assert "takes a list of answers, got one reference text 'nokia'" in metric.problem("nokia")
    assert "at least 4 human answers" in metric.problem(["nokia", "nokia", "nokia"])
    assert "empty list" in metric.problem([])
    assert metric.problem(["nokia"] * 4) is None


def test_vqa_accuracy_follows_vqa_v2_where_evalai_cleaner_differs():
    # EvalAI's cleaner (lmms-eval's TextVQA task) splits "'s" off and reads 1.0 here; VQA v2's
    # script keeps "it's" a word of its own, which no human wrote
    assert score("vqa_accuracy", "it's", ["its"] * 5 + ["it 's"] * 5) == 0.0
    assert score("vqa_accuracy", "its", ["its"] * 5 + ["it 's"] * 5) == 1.0


# -- ANLS ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "answers", "expected"),
    [
        ("Denver Broncos", ["Denver Broncos", "Denver R. Broncos"], 1.0),
        ("12/15/89", ["12/15/88"], 1 - 1 / 8),  # one substitution in 8 characters
        ("dear dr. lobo", ["Dear Dr. Lobo", "Dr. Lobo"], 1.0),  # case does not count
        ("  new   york ", "New York", 1.0),  # nor spacing
        ("abcde", "abxye", 1 - 2 / 5),  # NL 0.4 < 0.5
        ("abcd", "abxy", 0.5),  # a score of exactly 0.5 stands (DocVQA's script)
        ("ab", ["ac"], 0.5),
        ("abcd", "axyd", 0.5),
        ("abcde", "axyze", 0.0),  # 0.4 is below the threshold
        # the length is the raw text's: the spaces the comparison drops still count
        ("  ab  ", ["ac"], 1 - 1 / 6),
        ("abc", ["  abd"], 1 - 1 / 5),
        # ... in upper case: "ß" is "SS", two characters
        ("a", ["ß"], 0.5),
        ("straße", ["strasse"], 1 - 2 / 7),
        # kitten -> sitting: 3 edits in 7; kitten -> kitchen: 2 edits in 7 (t->c, +h): the best
        ("kitten", ["sitting", "kitchen"], 1 - 2 / 7),
        ("", "", 1.0),
        ("", "abc", 0.0),
    ],
)
def test_anls_of_hand_worked_answers(output, answers, expected):
    assert score("anls", output, answers) == pytest.approx(expected)


def test_levenshtein_distance():
    assert anls.levenshtein("kitten", "sitting") == 3
    assert anls.levenshtein("", "abc") == anls.levenshtein("abc", "") == 3
    assert anls.levenshtein("flaw", "lawn") == 2


# -- exact match, ROUGE-L, none, toy -------------------------------------------------------------


def test_exact_match_of_one_text_and_of_a_list():
    # one reference: the normalisation the metric always had (case, punctuation spacing)
    assert score("exact_match", "The red circle .", "the red circle.") == 1.0
    assert score("exact_match", "the red circle", "the red circle .") == 0.0
    assert score("exact_match", "Nokia", ["samsung", "nokia"]) == 1.0
    assert score("exact_match", "Nokia", ["samsung", "nokia phone"]) == 0.0


def test_rouge_l_through_torchmetrics():
    # LCS "the cat sat" (3 words): precision 3/3, recall 3/6 -> F = 2 * 1 * 0.5 / 1.5 = 2/3
    assert score("rouge_l", "the cat sat", "the cat sat on the mat") == pytest.approx(2 / 3)
    # a list: the best-matching answer
    assert score("rouge_l", "The cat, sat!", ["a dog", "the cat sat"]) == pytest.approx(1.0)
    assert score("rouge_l", "zebra", "the cat sat") == 0.0


def test_none_scores_nothing_and_takes_anything():
    metric = metric_catalog.get("none")
    assert score("none", "anything", ["a", "b"]) is None
    assert metric.problem([]) is None and metric.problem("text") is None


def test_the_toy_rubric_is_the_toy_worlds_score():
    rows = toyworld.generate_dataset("toy_multiturn", 3, seed=5)
    rows += toyworld.generate_dataset("toy_diff", 3, seed=5)
    for row in rows:
        sample = Sample(row["sample_id"], row["turn"], row["scenario"])
        for output in (row["reference"], "the red circle at the top left ."):
            expected = score_toy(row["scenario"], row["turn"], output, row["reference"])
            assert score("toy", output, row["reference"], sample) == expected
    assert "takes one reference text, got a list" in metric_catalog.get("toy").problem(["a"])


# -- the catalog ---------------------------------------------------------------------------------


def test_every_built_in_declares_itself():
    found = metric_catalog.metrics()
    assert {"exact_match", "vqa_accuracy", "anls", "rouge_l", "none", "toy"} <= set(found)
    for name, metric in found.items():
        assert metric.name == name and metric.description and metric.source
        assert metric.takes and metric.takes <= {TEXT, ANSWERS}


def test_an_unknown_name_lists_the_known_ones_and_the_entry_point_group():
    with pytest.raises(metric_catalog.CatalogError) as info:
        metric_catalog.get("vqa_acc")
    message = str(info.value)
    assert "unknown metric 'vqa_acc'" in message and "'vqa_accuracy'" in message
    assert "mmspec.metrics" in message


def test_two_metrics_may_not_share_a_name():
    class Another(TaskMetric):
        name = "anls"

    with pytest.raises(metric_catalog.CatalogError, match="declared twice"):
        metric_catalog.register(Another)


def test_a_broken_plugin_is_named(monkeypatch):
    broken = importlib.metadata.EntryPoint(
        "mine", "no_such_package.metrics:Mine", metric_catalog.GROUP
    )
    monkeypatch.setattr(plugins, "entry_points", lambda group: [broken])
    monkeypatch.setattr(metric_catalog.CATALOG, "loaded", False)
    monkeypatch.setattr(metric_catalog.CATALOG, "entries", dict(metric_catalog.CATALOG.entries))
    with pytest.raises(metric_catalog.CatalogError) as info:
        metric_catalog.metrics()
    message = str(info.value)
    assert "metric plugin 'mine'" in message and "no_such_package.metrics:Mine" in message
    assert "mmspec.metrics" in message and "ModuleNotFoundError" in message


def test_an_emptied_catalog_finds_every_built_in_again(monkeypatch):
    """Built-ins register on their module's first import, once per process: a catalog emptied
    after that (a test's) must still find them all on its next load, in any test order."""
    everything = set(metric_catalog.metrics())
    monkeypatch.setattr(metric_catalog.CATALOG, "loaded", False)
    monkeypatch.setattr(metric_catalog.CATALOG, "entries", {})
    assert set(metric_catalog.metrics()) == everything
