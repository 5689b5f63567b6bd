"""Ensemble weight policies and their history (TABED section 5, appendix B)."""

from __future__ import annotations

import math

import pytest
import torch
from component_parts import part

from mmspec.decoding import views, weights
from mmspec.decoding.sampler import seeded
from mmspec.decoding.weights import History, weight_grid
from mmspec.methods import registry


def test_the_catalog_holds_every_built_in_component_under_its_declared_name():
    from mmspec.decoding import catalog

    assert "".join(catalog.components("view")) == "MTCPUS"
    assert list(catalog.components("weights")) == [
        "static", "random", "kld", "tvd", "grid", "softmax", "adaboost",
    ]  # fmt: skip
    rules = catalog.components("acceptance")
    assert {n for n, r in rules.items() if r.lossless} == {"greedy", "sampling"}
    assert {n for n, r in rules.items() if r.loose} == {"lvspec", "fly", "fly_gate", "random_relax"}
    for kind in ("view", "weights", "tree", "acceptance", "drafter"):
        for name, component in catalog.components(kind).items():
            assert component.kind == kind and component.name == name
            for param in component.params:  # every default is a value of its own param
                assert param.problem(param.default) is None, (name, param.key)


def test_grid_holds_every_tenth_vector_summing_to_one():
    two, four = weight_grid(2), weight_grid(4)
    assert two.shape == (11, 2) and four.shape == (math.comb(13, 3), 4)
    for grid in (two, four):
        assert torch.allclose(grid.sum(1), torch.ones(len(grid)))
        assert (grid >= 0).all()
        assert len({tuple(row.tolist()) for row in grid}) == len(grid)


def _history(p, q, window=0, grid=None):
    h = History(window, grid)
    h.observe(torch.tensor(p), torch.tensor(q))
    return h


# two positions, vocabulary of 3; view 0 close to the target, view 1 far from it
P = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1]]
Q = [[[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], [[0.2, 0.7, 0.1], [0.1, 0.1, 0.8]]]


def _policy(spec: dict, vocab_size: int = 3):
    """The weight policy `spec` names (`weights`), at its defaults but the rest of `spec`."""
    values = {k: v for k, v in spec.items() if k != "weights"}
    return part("weights", spec["weights"], **values).build(vocab_size=vocab_size)


# AdaBoost at TABED's release defaults gives these two views +1e5 and -1e5 (see below)
SMOOTH = {"adaboost_smoothing": 0.5, "adaboost_clip": True}


@pytest.mark.parametrize("spec", [*({"weights": n} for n in ["kld", "tvd", "softmax", "grid"]),
                                  {"weights": "adaboost", **SMOOTH}])  # fmt: skip
def test_history_policies_favour_the_view_closer_to_the_target(spec):
    policy = _policy(spec, vocab_size=3)
    h = _history(P, Q, grid=weight_grid(2) if policy.uses_grid else None)
    w = policy.choose(h, 2, None)
    assert w[0] > w[1] and abs(float(w.sum()) - 1) < 1e-6 and (w >= 0).all()


def test_inverse_distance_weights_are_exact():
    h = _history(P, Q)
    kl = h.sum("kl")
    expected = (1 / (kl + weights.EPS)) / (1 / (kl + weights.EPS)).sum()
    assert torch.allclose(_policy({"weights": "kld"}, 3).choose(h, 2, None), expected)
    tv = torch.tensor([0.1 + 0.1, 0.7 + 0.7])  # 0.5 * L1 summed over both positions
    assert torch.allclose(h.sum("tv"), tv, atol=1e-6)


def test_grid_breaks_ties_by_lowest_kl():
    # both views always pick the target's argmax, so every mixture matches: KL decides
    p = [[0.6, 0.3, 0.1]]
    q = [[[0.6, 0.3, 0.1], [0.9, 0.05, 0.05]]]
    h = _history(p, q, grid=weight_grid(2))
    w = _policy({"weights": "grid"}, 3).choose(h, 2, None)
    assert torch.allclose(w, torch.tensor([1.0, 0.0]))


def test_softmax_temperature_sharpens():
    h = _history(P, Q)
    soft = _policy({"weights": "softmax", "softmax_temperature": 10.0}, 3).choose(h, 2, None)
    sharp = _policy({"weights": "softmax", "softmax_temperature": 0.1}, 3).choose(h, 2, None)
    assert sharp[0] > soft[0] > 0.5


def test_softmax_is_tabed_releases_inverse_error_form():
    """softmax(log(1 / e) / tau): proportional to 1 / e at tau 1 (TABED's release), to
    (1 / e)^2 at tau 0.5; not softmax(1 / e), which stays near uniform for large errors."""
    h = _history(P, Q)
    e = h.sum("kl") + weights.EPS
    for tau in (1.0, 0.5):
        w = _policy({"weights": "softmax", "softmax_temperature": tau}, 3).choose(h, 2, None)
        expected = (1 / e) ** (1 / tau)
        torch.testing.assert_close(w, expected / expected.sum())


def _errors(*blocks, window=0):
    """A history of verified blocks, each a list of (view 0 right, view 1 right) per position:
    the target's argmax is token 0, a view that errs puts its argmax on token 1."""
    h = History(window)
    right, wrong = [0.7, 0.2, 0.1], [0.2, 0.7, 0.1]
    for block in blocks:
        p = [[0.8, 0.1, 0.1]] * len(block)
        q = [[right if ok else wrong for ok in position] for position in block]
        h.observe(torch.tensor(p), torch.tensor(q))
    return h


def _adaboost(h, vocab_size=3, **spec):
    return _policy({"weights": "adaboost", **spec}, vocab_size).choose(h, 2, None)


def test_adaboost_error_rate_counts_the_whole_history_and_a_negative_weight_stays():
    """TABED's release: eps = 1 - matches / every verified position so far; weight
    ln(1/eps - 1) + C ln(K - 1), normalised by the sum, negative ones not clipped."""
    # two blocks: view 0 errs at 1 of 4 positions, view 1 at 3 of 4
    h = _errors([(True, False), (True, True)], [(False, False), (True, False)])
    eps = torch.tensor([1 / 4, 3 / 4], dtype=torch.float64)
    raw = (1 / eps - 1).log() + 1.0 * math.log(3 - 1)  # K = 3
    assert raw[1] < 0
    w = _adaboost(h)
    torch.testing.assert_close(w, (raw / raw.sum()).float())
    assert w[1] < 0 and abs(float(w.sum()) - 1) < 1e-6
    c2 = _adaboost(h, adaboost_constant=2.0)  # C scales the prior ln(K - 1)
    raw2 = (1 / eps - 1).log() + 2.0 * math.log(2)
    torch.testing.assert_close(c2, (raw2 / raw2.sum()).float())


def test_adaboost_gives_plus_minus_1e5_at_error_rates_0_and_1():
    perfect = _errors([(True, False), (True, True)])  # view 0: no error; view 1: 1 of 2
    policy = _policy({"weights": "adaboost"}, 3)
    assert policy.raw(perfect).tolist() == [weights.LIMIT, math.log(1) + math.log(2)]
    useless = _errors([(True, False), (False, False)])  # view 1: every position wrong
    assert policy.raw(useless).tolist() == [math.log(1) + math.log(2), -weights.LIMIT]
    w = policy.choose(useless, 2, None)
    # as in the release, w / sum(w): the view that never matched takes (nearly) all the weight
    expected = torch.tensor([math.log(2), -weights.LIMIT], dtype=torch.float64)
    torch.testing.assert_close(w, (expected / expected.sum()).float())
    assert w[0] < 0 < w[1]


def test_adaboost_guards_the_zero_sum_the_release_divides_by():
    h = _errors([(True, False), (True, False)])  # view 0 always right, view 1 always wrong
    policy = _policy({"weights": "adaboost"}, 3)
    raw = policy.raw(h)
    assert raw.tolist() == [weights.LIMIT, -weights.LIMIT]
    assert not torch.isfinite(raw / raw.sum()).all()  # the release's normalisation
    assert torch.equal(policy.choose(h, 2, None), torch.full((2,), 0.5))
    # a sum that is 0 up to rounding: error rates 0.4 and 0.6, C = 0 (+-ln 1.5)
    rounding = _errors([(True, True), (True, False), (True, True), (False, False), (False, False)])
    even = _policy({"weights": "adaboost", "adaboost_constant": 0.0}, 3)
    raw = even.raw(rounding)
    assert raw.sum() != 0 and abs(float(raw.sum())) < 1e-15
    assert raw.abs().max() / abs(raw.sum()) > 1e15  # the release's weights: +-3.7e15
    assert torch.equal(even.choose(rounding, 2, None), torch.full((2,), 0.5))
    # a small sum that is not rounding keeps the release's normalisation
    near = _errors([(True, True), (True, False), (True, True), (False, False), (True, False)])
    w = even.choose(near, 2, None)
    assert not torch.equal(w, torch.full((2,), 0.5)) and abs(float(w.sum()) - 1) < 1e-6


def test_adaboost_options_smoothing_clip_and_window():
    h = _errors([(True, False), (True, True)], [(False, False), (True, False)])
    eps = torch.tensor([(1 + 0.5) / (4 + 1), (3 + 0.5) / (4 + 1)], dtype=torch.float64)
    raw = (1 / eps - 1).log() + math.log(2)
    w = _adaboost(h, adaboost_smoothing=0.5)
    torch.testing.assert_close(w, (raw / raw.sum()).float())
    assert torch.equal(_adaboost(h, adaboost_clip=True), torch.tensor([1.0, 0.0]))
    # window 2: the last two positions only (view 0: 1 error of 2, view 1: 2 of 2)
    blocks = [(True, False), (True, True)], [(False, False), (True, False)]
    last = _adaboost(_errors(*blocks, window=2), window=2)
    expected = torch.tensor([math.log(2), -weights.LIMIT], dtype=torch.float64)
    torch.testing.assert_close(last, (expected / expected.sum()).float())
    perfect = _errors([(True, True)])
    with pytest.raises(ValueError, match="adaboost_smoothing"):
        registry.resolve("tabed_adaboost", {"adaboost_smoothing": -1})
    assert torch.equal(_adaboost(perfect), torch.full((2,), 0.5))  # +1e5 twice


def test_mix_of_a_negative_weight_is_a_distribution_with_the_same_argmax():
    probs = torch.tensor([[[0.6, 0.2, 0.2]], [[0.0, 0.8, 0.2]]])  # [m, n, V]
    w = torch.tensor([1.5, -0.5])
    raw = 1.5 * probs[0, 0] - 0.5 * probs[1, 0]  # [0.9, -0.1, 0.2]
    mixed = weights.mix(w, probs)[0]
    assert (mixed >= 0).all() and abs(float(mixed.sum()) - 1) < 1e-6
    torch.testing.assert_close(mixed, raw.clamp_min(0) / raw.clamp_min(0).sum())
    assert int(mixed.argmax()) == int(raw.argmax())
    non_negative = torch.tensor([0.25, 0.75])  # unchanged: the plain weighted sum
    torch.testing.assert_close(
        weights.mix(non_negative, probs)[0], 0.25 * probs[0, 0] + 0.75 * probs[1, 0]
    )


def test_kl_of_shared_zeros_is_finite_where_the_release_gets_nan():
    p = torch.tensor([0.6, 0.4, 0.0])
    q = torch.tensor([0.9, 0.1, 0.0])
    expected = 0.6 * math.log(0.6 / 0.9) + 0.4 * math.log(0.4 / 0.1)
    assert abs(float(weights.kl(p, q)) - expected) < 1e-6
    assert torch.isnan(torch.nn.functional.kl_div(q.log(), p, reduction="none")).any()
    # so the grid's KL tie-break still finds the exact view (the release's argmin: candidate 0)
    h = _history([p.tolist()], [[p.tolist(), q.tolist()]], grid=weight_grid(2))
    w = _policy({"weights": "grid"}, 3).choose(h, 2, None)
    assert torch.allclose(w, torch.tensor([1.0, 0.0]))
    assert weight_grid(2)[0].tolist() == [0.0, 1.0]


def test_window_counts_only_the_last_positions():
    h = History(window=1)
    h.observe(torch.tensor(P[:1]), torch.tensor(Q[:1]))
    h.observe(torch.tensor([[0.1, 0.1, 0.8]]), torch.tensor([[[0.1, 0.1, 0.8], [0.8, 0.1, 0.1]]]))
    w = _policy({"weights": "kld"}, 3).choose(h, 2, None)
    assert h.count() == 1 and w[0] > 0.99  # only the last position, where view 0 is exact


def test_no_history_means_uniform_and_random_is_a_distribution():
    for name in ["static", "kld", "tvd", "grid", "softmax", "adaboost"]:
        policy = _policy({"weights": name}, 3)
        w = policy.choose(History(0, weight_grid(3)), 3, None)
        assert torch.allclose(w, torch.full((3,), 1 / 3))
    g = seeded(0)
    draws = [_policy({"weights": "random"}, 3).choose(History(0), 3, g) for _ in range(50)]
    assert all((w >= 0).all() and abs(float(w.sum()) - 1) < 1e-6 for w in draws)
    assert len({tuple(w.tolist()) for w in draws}) == 50


def test_pooling_and_uniform_pruning():
    feats = torch.arange(16.0).view(16, 1)  # a 4x4 grid, row-major
    pooled = views.pool_2x2(feats)
    assert pooled.view(-1).tolist() == [2.5, 4.5, 10.5, 12.5]
    with pytest.raises(ValueError, match="square"):
        views.pool_2x2(torch.zeros(15, 2))
    assert views.uniform_keep(16, 0.25).tolist() == [0, 5, 10, 15]
    assert len(views.uniform_keep(576, 0.1)) == 58
    with pytest.raises(ValueError, match="keep"):
        part("view", "U", keep=0.0).build()


def test_caption_view_replaces_each_image(processor):
    tok = processor.tokenizer
    embed = torch.nn.Embedding(len(tok), 4)
    ctx = views.ViewContext(tok, embed, "<image>")
    image = views.ImageInput(torch.zeros(16, 4), None, "a red circle at the top left .")
    prompt = views.CaptionView().build("<bos> user : <image> describe the image .", [image], ctx)
    words = "<bos> user : image : a red circle at the top left . describe the image ."
    assert prompt.n_visual == 0
    assert prompt.embeds.shape[0] == len(words.split())
    with pytest.raises(ValueError, match="captions"):
        views.CaptionView().build("<image>", [views.ImageInput(torch.zeros(16, 4))], ctx)


def test_registry_rejects_bad_views_and_policies():
    with pytest.raises(ValueError, match="views"):
        registry.resolve("sd", {"views": "MX"})
    with pytest.raises(ValueError, match="views"):
        registry.resolve("sd", {"views": "MM"})
    with pytest.raises(ValueError, match="weights"):
        registry.resolve("sd", {"weights": "best"})
    spec = registry.resolve("tabed_mtcp", {})
    assert spec.views == "MTCP" and spec.weights == "softmax"
    assert registry.label("tabed_mt", "tabed_mt") == "TABED^MT"
    assert registry.label("my_entry", "tabed_mt") == "my_entry"
