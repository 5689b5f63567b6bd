"""Ensemble weight policies and their history (TABED section 5, appendix B)."""

from __future__ import annotations

import math

import pytest
import torch

from mmspec.decoding import views, weights
from mmspec.decoding.sampler import seeded
from mmspec.decoding.weights import History, make_policy, weight_grid
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


@pytest.mark.parametrize("name", ["kld", "tvd", "softmax", "adaboost", "grid"])
def test_history_policies_favour_the_view_closer_to_the_target(name):
    policy = make_policy({"weights": name}, vocab_size=3)
    h = _history(P, Q, grid=weight_grid(2) if policy.uses_grid else None)
    w = policy.choose(h, 2, None)
    assert w[0] > w[1] and abs(float(w.sum()) - 1) < 1e-6 and (w >= 0).all()


def test_inverse_distance_weights_are_exact():
    h = _history(P, Q)
    kl = h.sum("kl")
    expected = (1 / (kl + weights.EPS)) / (1 / (kl + weights.EPS)).sum()
    assert torch.allclose(make_policy({"weights": "kld"}, 3).choose(h, 2, None), expected)
    tv = torch.tensor([0.1 + 0.1, 0.7 + 0.7])  # 0.5 * L1 summed over both positions
    assert torch.allclose(h.sum("tv"), tv, atol=1e-6)


def test_grid_breaks_ties_by_lowest_kl():
    # both views always pick the target's argmax, so every mixture matches: KL decides
    p = [[0.6, 0.3, 0.1]]
    q = [[[0.6, 0.3, 0.1], [0.9, 0.05, 0.05]]]
    h = _history(p, q, grid=weight_grid(2))
    w = make_policy({"weights": "grid"}, 3).choose(h, 2, None)
    assert torch.allclose(w, torch.tensor([1.0, 0.0]))


def test_softmax_temperature_sharpens():
    h = _history(P, Q)
    soft = make_policy({"weights": "softmax", "softmax_temperature": 10.0}, 3).choose(h, 2, None)
    sharp = make_policy({"weights": "softmax", "softmax_temperature": 0.1}, 3).choose(h, 2, None)
    assert sharp[0] > soft[0] > 0.5


def test_softmax_is_tabed_releases_inverse_error_form():
    """softmax(log(1 / e) / tau): proportional to 1 / e at tau 1 (TABED's release), to
    (1 / e)^2 at tau 0.5; not softmax(1 / e), which stays near uniform for large errors."""
    h = _history(P, Q)
    e = h.sum("kl") + weights.EPS
    for tau in (1.0, 0.5):
        w = make_policy({"weights": "softmax", "softmax_temperature": tau}, 3).choose(h, 2, None)
        expected = (1 / e) ** (1 / tau)
        torch.testing.assert_close(w, expected / expected.sum())


def test_adaboost_follows_the_formula():
    h = _history(P, Q)  # view 0: 0 errors of 2, view 1: 2 errors of 2
    w = make_policy({"weights": "adaboost", "adaboost_constant": 1.0}, 3).choose(h, 2, None)
    err = torch.tensor([0.5 / 3, 2.5 / 3])  # half-count smoothing
    raw = (1 / err - 1).log() + math.log(2)
    raw = raw.clamp_min(0)
    assert torch.allclose(w, raw / raw.sum())


def test_window_counts_only_the_last_positions():
    h = History(window=1)
    h.observe(torch.tensor(P[:1]), torch.tensor(Q[:1]))
    h.observe(torch.tensor([[0.1, 0.1, 0.8]]), torch.tensor([[[0.1, 0.1, 0.8], [0.8, 0.1, 0.1]]]))
    w = make_policy({"weights": "kld"}, 3).choose(h, 2, None)
    assert h.count() == 1 and w[0] > 0.99  # only the last position, where view 0 is exact


def test_no_history_means_uniform_and_random_is_a_distribution():
    for name in ["static", "kld", "tvd", "grid", "softmax", "adaboost"]:
        policy = make_policy({"weights": name}, 3)
        w = policy.choose(History(0, weight_grid(3)), 3, None)
        assert torch.allclose(w, torch.full((3,), 1 / 3))
    g = seeded(0)
    draws = [make_policy({"weights": "random"}, 3).choose(History(0), 3, g) for _ in range(50)]
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
        views.make_view("U", {"keep": 0.0})


def test_caption_view_replaces_each_image(processor):
    tok = processor.tokenizer
    embed = torch.nn.Embedding(len(tok), 4)
    ctx = views.ViewContext(tok, embed, "<image>")
    image = views.ImageInput(torch.zeros(16, 4), None, "a red circle at the top left .")
    prompt = views.make_view("C").build("<bos> user : <image> describe the image .", [image], ctx)
    words = "<bos> user : image : a red circle at the top left . describe the image ."
    assert prompt.n_visual == 0
    assert prompt.embeds.shape[0] == len(words.split())
    with pytest.raises(ValueError, match="captions"):
        views.make_view("C").build("<image>", [views.ImageInput(torch.zeros(16, 4))], ctx)


def test_registry_rejects_bad_views_and_policies():
    with pytest.raises(ValueError, match="views"):
        registry.resolve("sd", {"views": "MX"})
    with pytest.raises(ValueError, match="views"):
        registry.resolve("sd", {"views": "MM"})
    with pytest.raises(ValueError, match="weights"):
        registry.resolve("sd", {"weights": "best"})
    spec = registry.resolve("tabed_mtcp", {})
    assert spec["views"] == "MTCP" and spec["weights"] == "softmax"
    assert registry.label("tabed_mt", "tabed_mt") == "TABED^MT"
    assert registry.label("my_entry", "tabed_mt") == "my_entry"
