"""Configuration: schema errors name the key path; cells expand as grids with stable slugs."""

from __future__ import annotations

import copy

import pytest
import yaml
from base_config import base_config

from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep import config_checks

BASE = base_config(methods={"ar": {}, "sd": {"views": ["M", "T"], "gamma": [1, 3]}})


def with_change(path: list, value):
    cfg = copy.deepcopy(BASE)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return cfg


TREES = {"ar", "sd_chain", "sd_tree", "specvlm", "sage", "sage_tree", "eagle2_tree"}
# toy_specvlm_sage.yaml also runs a chain as deep as SAGE's deepest tree (gamma 8) and SAGE's
# unpruned view (Table 5's SAGE_0)
TOY_TREES = TREES | {"sd_chain_deep", "sage_unpruned"}


def _by(cells, pair):
    """{dataset: set of methods} of a pair's cells."""
    found = {}
    for c in cells:
        if c.pair == pair:
            found.setdefault(c.dataset, set()).add(c.method)
    return found


def test_default_config_is_a_tour_of_every_paper():
    cells = mmcells.cells(mmconfig.load("config/config.yaml"))
    assert len({c.path for c in cells}) == len(cells) <= 37
    # TABED: M vs T on captions and on five-image stories, with the adaptive ensemble; DREAM's
    # baselines: EAGLE's trained head against a draft model, over a chain and EAGLE-2 trees
    tabed = {"ar", "m", "t", "mt", "tabed_mt"}
    heads = {"eagle_chain", "dream_chain", "eagle2", "dream"}
    assert not _by(cells, "toy")  # the tour trains one draft: TABED runs on toy_vdraft
    drafters = {c.spec.drafter for c in cells if c.method.startswith(("eagle", "dream"))}
    assert drafters == {"eagle", "dream", "model"}
    # SAGE / SpecVLM / EAGLE-2: every tree method, and a chain as deep as SAGE's deepest tree, on
    # a caption and the video (on the caption the chain over view M is TABED's `m`); LVSpec and
    # random relaxation against exact SD over K = 10 on the video, whose answers the judge scores
    loose = {"sd10", "lvspec", "random_relax"}
    assert _by(cells, "toy_vdraft") == {
        "toy_caption": TREES - {"sd_chain"} | {"sd_chain_deep"} | heads | tabed,
        "toy_story": tabed,
        "toy_video": TREES | {"sd_chain_deep"} | loose,
    }
    # LANTERN over the paper's drafter (exact and relaxed verification of one EAGLE head's chain)
    # and over the draft model's EAGLE-2 trees at a small and a large delta (Table 3's cells);
    # sampling is toy_lantern.yaml's
    image = {"ar", "eagle_image", "lantern_eagle", "eagle2_tree", "lantern_tree"}
    assert _by(cells, "toy_image") == {"toy_imagegen": image}
    deltas = {c.spec.params["lantern_delta"] for c in cells if c.method == "lantern_tree"}
    assert deltas == {0.05, 0.2}
    image_heads = {mmcells.drafter_dir(c) for c in cells if c.pair == "toy_image"} - {None}
    assert len(image_heads) == 1
    cfg = mmconfig.load("config/config.yaml")
    assert config_checks.judged_datasets(cfg) == ["toy_video"]
    assert {c.spec.weights for c in cells if c.method == "tabed_mt"} == {"grid"}


def test_toy_presets_hold_each_papers_full_toy_study():
    tabed = mmcells.cells(mmconfig.load_as_snakemake("config/presets/toy_tabed.yaml"))
    rows = {
        "ar",
        "m",
        "t",
        "c",
        "p",
        "mt",
        "mtcp",
        "random_mt",
        "tabed_mt",
        "tabed_mtcp",
        "tabed_adaboost",
        "tabed_tree",
        # Table 2: M, T and TABED^MT verifying trees of width 2 and 3
        "m_tree",
        "t_tree",
        "tabed_tree3",
        "m_tree3",
        "t_tree3",
    }
    by_dataset = _by(tabed, "toy")
    for dataset in ["toy_caption", "toy_vqa", "toy_diff", "toy_multiturn", "toy_story"]:
        assert rows <= by_dataset[dataset], dataset
    sd = {(c.spec.views, c.spec.gamma) for c in tabed if c.method == "sd"}
    assert sd == {("M", g) for g in (1, 3, 7)}
    assert _by(tabed, "toy_weak") == {"toy_caption": {"ar", "sd_weak"}}
    assert {c.spec.weights for c in tabed if c.method.startswith("tabed")} == {
        "grid",
        "softmax",
        "adaboost",
    }
    trees = mmcells.cells(mmconfig.load_as_snakemake("config/presets/toy_specvlm_sage.yaml"))
    found = _by(trees, "toy_vdraft")
    assert set(found) == {
        "toy_caption",
        "toy_vqa",
        "toy_diff",
        "toy_multiturn",
        "toy_story",
        "toy_video",
    }
    # Table 1's image rows prune 80%; Table 5's pruning sweep runs on the video
    images = {"specvlm_image", "sage_image"}
    for dataset, methods in found.items():
        extra = {"sage_drop"} if dataset == "toy_video" else images
        assert methods == TOY_TREES | extra, dataset
    drops = {c.spec.params["drop"] for c in trees if c.spec.method == "sage"}
    assert drops == {0.0, 0.3, 0.6, 0.8, 0.9, 0.95}
    assert {c.spec.params["sage_n_max"] for c in trees if c.spec.method == "sage"} == {16}
    assert {c.pair for c in trees} == {"toy_vdraft"}
    lantern = mmcells.cells(mmconfig.load_as_snakemake("config/presets/toy_lantern.yaml"))
    assert {(c.dataset, c.pair) for c in lantern} == {("toy_imagegen", "toy_image")}
    grid = {
        (c.spec.temperature, c.spec.params["lantern_k"], c.spec.params["lantern_delta"])
        for c in lantern
        if c.spec.method == "lantern"
    }
    assert {(k, d) for t, k, d in grid if t == 0} == {
        (k, d) for k in (4, 16, 64) for d in (0.0, 0.05, 0.1, 0.2, 0.4)
    }
    assert {(k, d) for t, k, d in grid if t == 1} == {
        (k, d) for k in (4, 16, 64) for d in (0.05, 0.1, 0.2, 0.4)
    }
    ablations = {c.spec.method for c in lantern} & {
        "lantern_cosine",
        "lantern_random",
        "lantern_jsd",
        "lantern_tree",
        "sd_chain",
    }
    assert len(ablations) == 5
    # the same study over the paper's drafter: every cell of EAGLE's head shares one head
    relaxed = {
        (c.spec.temperature, c.spec.params["lantern_k"], c.spec.params["lantern_delta"])
        for c in lantern
        if c.spec.method == "lantern_eagle"
    }
    deltas = (0.05, 0.1, 0.2, 0.4, 0.8)
    assert relaxed == {(t, k, d) for t in (0.0, 1.0) for k in (16, 64) for d in deltas} | {
        (0.0, k, 0.0) for k in (16, 64)
    }
    heads = {mmcells.drafter_dir(c) for c in lantern if c.spec.drafter == "eagle"}
    assert len(heads) == 1
    assert {"eagle", "eagle2", "lantern_eagle2"} <= {c.spec.method for c in lantern}
    loose = mmcells.cells(mmconfig.load_as_snakemake("config/presets/toy_lvspec.yaml"))
    assert {(c.dataset, c.pair) for c in loose} == {
        ("toy_vdesc", "toy_vdesc_pair"),
        ("toy_vdesc", "toy_vdraft_alone"),
    }
    assert {c.method for c in loose if c.pair == "toy_vdraft_alone"} == {"ar"}
    lambdas = {c.spec.params["lvspec_lambda"] for c in loose if c.method == "lvspec_nopst"}
    assert lambdas == {0.0, 0.2, 0.5, 0.7, 0.9}
    with_pst = {c.spec.params["lvspec_lambda"] for c in loose if c.method == "lvspec"}
    assert with_pst == {0.5, 0.7, 0.9}
    assert all(c.spec.params["pst"] for c in loose if c.method == "lvspec")
    ahead = {c.spec.params["lvspec_lambda"] for c in loose if c.spec.params.get("pst_ahead")}
    assert ahead == {0.5, 0.7, 0.9}
    fly = {
        (c.spec.params["fly_window"], c.spec.params["fly_entropy"])
        for c in loose
        if c.spec.acceptance == "fly"
    }
    assert fly == {(4, 0.1), (2, 0.1), (1, 0.1), (1, 0.05)}  # LVSpec's Figure 7 grid
    rhos = {c.spec.params["relax_rho"] for c in loose if c.method == "random_relax"}
    assert rhos == {0.25, 0.5, 0.75}
    assert {c.spec.gamma for c in loose if c.method not in ("ar", "specvlm")} == {10}
    # SpecVLM's lossless tree over the pruned view: LVSpec's Table 1 baseline
    assert {c.spec.tree for c in loose if c.method == "specvlm"} == {"static"}


def test_grid_expands_to_cartesian_product():
    cells = mmcells.cells(mmconfig.validate(BASE))
    assert sorted(c.hp for c in cells) == [
        "default",
        "gamma-1_views-M",
        "gamma-1_views-T",
        "gamma-3_views-M",
        "gamma-3_views-T",
    ]
    one = next(c for c in cells if c.hp == "gamma-3_views-T")
    assert one.path == "dataset=toy_caption/pair=toy/method=sd/hp=gamma-3_views-T/seed=0"
    assert one.spec.acceptance == "greedy" and one.spec.tree == "chain"


@pytest.mark.parametrize(
    "path, value, expected",
    [
        (["generation"], {"max_new_tokns": 3}, "generation.max_new_tokns"),
        # a misspelt key: its close match, and whose keys they are (a dataset entry's source's)
        (
            ["datasets", "toy_caption"],
            {"source": "toy", "sampels": 3},
            "toy_caption.sampels: unknown key (did you mean 'samples'?); allowed keys (the keys "
            "dataset source 'toy' declares)",
        ),
        (["generaton"], {}, "generaton: unknown key (did you mean 'generation'?)"),
        (["methods", "sd"], {"gama": 3}, "methods.sd"),
        (["methods", "beam"], {}, "methods.beam"),
        (["pairs", "toy", "draft"], "toy:missing", "pairs.toy.draft"),
        (["generation"], {"max_new_tokens": "ten"}, "generation.max_new_tokens"),
        (["methods", "sd"], {"views": ["M", "X"]}, "methods.sd"),
        (["methods", "sd"], {"weights": "best"}, "methods.sd"),
        (["methods", "sd"], {"views": "MC"}, "captioner"),
        # a dataset entry's form is picked by its source: a misspelt key of an hf entry names
        # that key, not the toy form's source; a source nothing declares is named as such
        (
            ["datasets", "toy_caption"],
            {"source": "hf", "idd": "a", "split": "s", "columns": {"question": "q"}},
            "datasets.toy_caption.idd: unknown key",
        ),
        (
            ["datasets", "toy_caption"],
            {"source": "hff", "id": "a"},
            "unknown dataset source 'hff' (did you mean 'hf'?)",
        ),
        (["methods", "sd"], {"method": "sd_chian"}, "did you mean 'sd_chain'?"),
        (["methods", "sd"], {"acceptance": "samplng"}, "did you mean 'sampling'?"),
    ],
)
def test_bad_config_names_the_key(path, value, expected):
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(with_change(path, value))
    assert expected in str(error.value)


@pytest.mark.parametrize(
    "entry, expected",
    [
        ({"tree": "none"}, r"methods.sd: unknown tree: tree='none' is not one of \['chain', 'dyn"),
        ({"acceptance": "none"}, r"methods.sd: unknown acceptance: acceptance='none' is not one"),
        ({"drafter": "none"}, r"methods.sd: drafter='none' is not one of \['dream', 'eagle'"),
        ({"tree": "static"}, "methods.sd: tree 'static' needs `paths`"),
        ({"tree": "static", "paths": [[0], [0, 0, 1]]}, r"methods.sd: paths: \[0, 0, 1\] lacks"),
        ({"tree": "dynamic", "gamma": 3}, "methods.sd: gamma is read only by tree 'chain'"),
        ({"depth": 3}, "methods.sd: depth is read only by tree 'dynamic'"),
        ({"temperature": -1.0}, "methods.sd: temperature must be >= 0"),
        ({"temperature": 0.7}, "methods.sd: acceptance 'greedy' with temperature 0.7"),
        ({"total_tokens": 1, "tree": "dynamic"}, "methods.sd: total_tokens counts the root"),
    ],
)
def test_components_that_cannot_run_are_rejected_before_any_job(entry, expected):
    with pytest.raises(mmconfig.ConfigError, match=expected):
        mmconfig.validate(with_change(["methods", "sd"], entry))


def test_a_component_no_installed_package_provides_is_named_before_its_parameters():
    """A plugin's drafter with its own parameter, the plugin not installed: the drafter is what
    is unknown (and the entry point group that provides components), not its parameter."""
    entry = {"method": "sd", "drafter": "prompt_lookup", "max_ngram": 2}
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(_grid_config({"lookup": entry}))
    message = str(error.value)
    assert "methods.lookup: unknown drafter: drafter='prompt_lookup' is not one of" in message
    assert "entry point group mmspec.components" in message
    assert "max_ngram" not in message


def test_an_unknown_key_lists_what_each_component_of_the_method_reads():
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(_grid_config({"ens": {"method": "tabed_mt", "epsilon": 0.1}}))
    message = str(error.value)
    assert "method 'tabed_mt' has no hyperparameter 'epsilon'" in message
    for part in ("drafter 'model' (views, weights)", "weights 'grid' (window)",
                 "tree 'chain' (gamma)", "acceptance 'greedy' (no hyperparameters)"):  # fmt: skip
        assert part in message, message
    with pytest.raises(mmconfig.ConfigError, match="did you mean 'gamma'"):
        mmconfig.validate(_grid_config({"sd": {"gama": 3}}))


def test_an_unknown_method_names_the_entry_point_group_of_method_rows():
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(_grid_config({"mine": {"method": "early_exit"}}))
    assert "unknown method 'early_exit'" in str(error.value)
    assert "entry point group mmspec.methods" in str(error.value)


def test_a_drafter_without_views_or_head_is_described_by_what_it_is():
    """Not "drafts with a trained ... head": a drafter that needs no head (a plugin's prompt
    lookup, registered here as a plugin's would be) is named with its own parameters."""
    from mmspec.decoding import catalog, component
    from mmspec.decoding.drafters import Drafter

    class Lookup(Drafter):
        name = "lookup_of_tests"
        params = (component.Param("max_ngram", int, 3, "longest n-gram matched", low=1),)

    catalog.register(Lookup)
    try:
        entry = {"method": "sd_chain", "drafter": "lookup_of_tests", "keep": 0.5}
        with pytest.raises(mmconfig.ConfigError) as error:
            mmconfig.validate(_grid_config({"lookup": entry}))
    finally:
        del catalog.CATALOG.entries[("drafter", "lookup_of_tests")]
    message = str(error.value)
    assert "composes drafter 'lookup_of_tests' (max_ngram), tree 'chain' (gamma)" in message
    assert "trained" not in message


def test_static_tree_paths_are_one_value_and_a_list_of_trees_a_grid():
    one = with_change(["methods", "sd"], {"tree": "static", "paths": [[0], [1], [0, 0]]})
    assert [
        c.spec.params["paths"] for c in mmcells.cells(mmconfig.validate(one)) if c.method == "sd"
    ] == [[[0], [1], [0, 0]]]
    two = with_change(["methods", "sd"], {"tree": "static", "paths": [[[0]], [[0], [0, 0]]]})
    assert len([c for c in mmcells.cells(mmconfig.validate(two)) if c.method == "sd"]) == 2


def test_sampling_at_temperature_and_a_pair_without_draft():
    hot = with_change(["methods", "sd"], {"acceptance": "sampling", "temperature": 0.7})
    # a cell is scored against the AR cell at its own temperature: none here
    with pytest.raises(mmconfig.ConfigError, match=r"sweep: cell .*method=sd.* needs an `ar` cell"):
        mmconfig.validate(hot)
    hot["methods"]["ar_hot"] = {"method": "ar", "temperature": 0.7}
    ok = mmconfig.validate(hot)
    assert {c.spec.temperature for c in mmcells.cells(ok) if c.method == "sd"} == {0.7}
    cfg = with_change(["pairs", "toy"], {"target": "toy:target"})
    with pytest.raises(mmconfig.ConfigError, match="pairs.toy.draft: method 'sd' drafts with"):
        mmconfig.validate(cfg)
    only_ar = dict(cfg, methods={"ar": {}})
    assert mmcells.cells(mmconfig.validate(only_ar))  # AR needs no draft


def test_misspelled_top_level_key_is_named():
    cfg = dict(BASE, generaton={"max_new_tokens": 3})
    with pytest.raises(mmconfig.ConfigError, match="generaton"):
        mmconfig.validate(cfg)


def test_unknown_sweep_name_is_named():
    cfg = dict(BASE, sweep=[{"datasets": ["toy_nope"], "pairs": "all"}])
    with pytest.raises(mmconfig.ConfigError, match="sweep.0.datasets.*toy_nope"):
        mmconfig.validate(cfg)


def test_slugs_are_safe_and_stable():
    assert mmcells.model_slug("llava-hf/llava-1.5-7b-hf") == mmcells.model_slug(
        "llava-hf/llava-1.5-7b-hf"
    )
    slug = mmcells.model_slug("llava-hf/llava-1.5-7b-hf")
    assert "/" not in slug and slug.startswith("llava-hf--llava-1.5-7b-hf")
    assert mmcells.model_slug("toy:target") == "toy-target"
    assert mmcells.model_slug("a/b c") != mmcells.model_slug("a/b-c")
    assert mmcells.hp_slug({"views": "M", "gamma": 5}) == "gamma-5_views-M"


def test_presets_and_tiny_config_validate():
    for path in ["tests/configs/tiny.yaml", "config/presets/tabed.yaml"]:
        with open(path) as f:
            mmconfig.validate(yaml.safe_load(f))


def _judged(block=None, **dataset):
    cfg = copy.deepcopy(BASE)
    cfg["datasets"]["toy_caption"].update(dataset)
    if block is not None:
        cfg["judge"] = block
    return cfg


def test_judge_block_defaults_and_judged_datasets():
    cfg = mmconfig.validate(_judged({"endpoint": "embedded", "model": "m"}, judge="vdd"))
    assert config_checks.judged_datasets(cfg) == ["toy_caption"]
    assert cfg["judge"]["api_key_env"] is None and cfg["judge"]["max_retries"] >= 1
    # no judge template: nothing is judged, and no judge block is needed
    assert config_checks.judged_datasets(mmconfig.validate(BASE)) == []


@pytest.mark.parametrize(
    "judge, dataset, expected",
    [
        (None, {"judge": "vdd"}, "config key judge: datasets ['toy_caption']"),
        ({"endpoint": "localhost:8000", "model": "m"}, {"judge": "vdd"}, "judge.endpoint"),
        # a key pasted where the variable's name goes is refused, and not echoed elsewhere
        ({"endpoint": "embedded", "model": "m", "api_key_env": "sk-abc/123"}, {}, "api_key_env"),
        ({"endpoint": "embedded", "model": "m", "concurrency": 0}, {}, "judge.concurrency"),
        ({"endpoint": "embedded"}, {}, "judge"),
        (None, {"judge": "gpt4"}, "toy_caption"),
        # vdc asks each sample's questions, which a toy caption dataset does not carry
        ({"endpoint": "embedded", "model": "m"}, {"judge": "vdc"}, "template vdc asks"),
    ],
)
def test_bad_judge_config_names_the_key(judge, dataset, expected):
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(_judged(judge, **dataset))
    assert expected in str(error.value) and "sk-abc" not in str(error.value)


def test_the_embedded_judge_grades_only_datasets_whose_source_has_a_rubric():
    hf = {"source": "hf", "id": "a/b", "split": "test", "columns": {"question": "q", "answer": "a"}}
    cfg = copy.deepcopy(BASE)
    cfg["datasets"]["toy_caption"] = {**hf, "judge": "vdd"}
    cfg["judge"] = {"endpoint": "embedded", "model": "m"}
    with pytest.raises(mmconfig.ConfigError, match="source 'hf' declares none"):
        mmconfig.validate(cfg)
    cfg["judge"] = {"endpoint": "http://localhost:8000/v1", "model": "m"}  # a real judge's
    assert config_checks.judged_datasets(mmconfig.validate(cfg)) == ["toy_caption"]


def test_self_sd_pair_drafts_with_its_target():
    cfg = copy.deepcopy(BASE)
    cfg["pairs"]["self"] = {"target": "toy:target", "draft": "self"}
    cfg = mmconfig.validate(cfg)
    pair = cfg["pairs"]["self"]
    assert pair["draft"] == pair["target"] == "toy:target"
    spec = next(c.spec for c in mmcells.cells(cfg) if c.pair == "self" and c.method == "sd")
    assert spec.loaded_models(pair) == [("toy:target", "float32")]  # loaded once
    assert mmconfig.validate(cfg)["pairs"]["self"] == pair  # validating again keeps it


def test_a_visual_rule_on_image_generation_is_rejected_before_any_job():
    """LVSpec compares drafted tokens with the prompt's visual tokens; a text-to-image cell's
    prompt has none, so the config names the method and the pair before anything runs."""
    with open("config/config.yaml") as f:
        cfg = yaml.safe_load(f)
    cfg["methods"]["lv"] = {"method": "lvspec", "views": "M"}
    cfg["sweep"].append({"datasets": ["toy_imagegen"], "pairs": ["toy_image"], "methods": ["lv"]})
    with pytest.raises(mmconfig.ConfigError, match="methods.lv: acceptance 'lvspec' compares"):
        mmcells.cells(mmconfig.validate(cfg))


def _grid_config(methods: dict, **extra) -> dict:
    return {**copy.deepcopy(BASE), "methods": {"ar": {}, **methods}, **extra}


def test_grid_points_whose_components_read_the_same_values_are_one_cell():
    """`keep` is read by view U only: under view M its two values decode the same thing."""
    cfg = mmconfig.validate(_grid_config({"sd": {"views": ["M", "U"], "keep": [0.25, 0.5]}}))
    expansion = mmcells.expand(cfg)
    assert sorted(c.hp for c in expansion.cells) == [
        "default",
        "keep-0.25_views-U",
        "keep-0.5_views-U",
        "views-M",
    ]
    assert expansion.grid_points == 5 and expansion.merged == 1
    m = next(c for c in expansion.cells if c.hp == "views-M")
    assert "keep" not in m.spec.params  # a cell holds only what its components read


def test_a_big_grid_keeps_one_cell_per_distinct_decoding():
    """Views M, T, P, U x keep x gamma: only view U reads keep, so M, T and P keep one cell per
    gamma; and every cell decodes something no other cell decodes."""
    keeps, gammas = [0.1, 0.3, 0.5, 0.7, 0.9], [1, 3, 5]
    sd = {"views": ["M", "T", "P", "U"], "keep": keeps, "gamma": gammas}
    expansion = mmcells.expand(mmconfig.validate(_grid_config({"sd": sd})))
    assert expansion.grid_points == 1 + 4 * 5 * 3
    assert len(expansion.cells) == 1 + 3 * 3 + 5 * 3
    assert_distinct_decodings(expansion.cells)


@pytest.mark.parametrize(
    "methods, expected",
    [
        ({"m": {"keep": 0.3}}, r"methods.m: keep is read only by view 'U', and method 'm' here"),
        ({"sd": {"views": ["M", "T"], "keep": 0.3}}, "methods.sd: keep is read only by view 'U'"),
        ({"mt": {"sage_k": 3}}, "methods.mt: sage_k is read only by tree 'sage'"),
        ({"m": {"window": 3}}, r"window is read only by weights 'kld', .* two or more views"),
        ({"ar": {"gamma": 3}}, "methods.ar: gamma is read only by tree 'chain'.*autoregressively"),
        (
            {"eagle": {"head_data": "toy_caption", "keep": 0.5}},
            r"composes drafter 'eagle' \(head_data, head_steps, .*\), tree 'static' \(paths\)",
        ),
    ],
)
def test_a_key_that_no_component_of_the_method_reads_is_refused(methods, expected):
    with pytest.raises(mmconfig.ConfigError, match=expected):
        mmconfig.validate(_grid_config(methods))


def test_a_key_read_by_some_point_of_a_grid_is_accepted():
    """`sage_k` on a method whose grid has a SAGE tree point: read there, merged elsewhere."""
    grid = {"method": "sd_chain", "tree": ["chain", "sage"], "sage_k": [4, 8]}
    cells = mmcells.cells(mmconfig.validate(_grid_config({"trees": grid})))
    assert sorted(c.hp for c in cells if c.method == "trees") == [
        "sage_k-4_tree-sage",
        "sage_k-8_tree-sage",
        "tree-chain",
    ]
    sage = next(c for c in cells if c.hp == "sage_k-8_tree-sage")
    tree = sage.spec.part("tree").values
    assert tree["sage_k"] == 8 and tree["sage_d_max"] == 8  # SAGE's defaults join


def test_two_entries_that_decode_the_same_thing_are_refused():
    cfg = _grid_config({"m": {}, "chain": {"method": "sd_chain", "gamma": 5}})
    with pytest.raises(mmconfig.ConfigError, match=r"methods.chain: .* decodes exactly what "):
        mmconfig.validate(cfg)


def assert_distinct_decodings(cells) -> None:
    """No two cells of one dataset, pair and seed carry the same components and values."""
    seen = {}
    for c in cells:
        decoding = yaml.safe_dump({k: v for k, v in c.spec.params.items() if k != "method"})
        key = (c.dataset, c.pair, c.seed, decoding)
        assert key not in seen, f"{c.path} decodes what {seen[key]} decodes"
        seen[key] = c.path


@pytest.mark.parametrize(
    "path",
    ["config/config.yaml", *sorted(str(p) for p in mmconfig.Path("config/presets").glob("*.yaml"))],
)
def test_no_two_cells_of_the_tour_or_a_preset_decode_the_same_thing(path):
    assert_distinct_decodings(mmcells.cells(mmconfig.load_as_snakemake(path)))


def test_a_required_column_left_out_of_a_dataset_is_named_before_any_job():
    """Checked at validation, not when the dataset's prepare job runs."""
    config = _grid_config({"ar": {}})
    config["datasets"]["mine"] = {
        "source": "hf", "id": "some/dataset", "split": "test", "columns": {"question": "q"},
    }  # fmt: skip
    config["sweep"] = [{"datasets": ["mine"], "pairs": "all"}]
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(config)
    assert (
        str(error.value) == "config key datasets.mine: some/dataset: `columns.answer` is required"
    )
