"""MethodSpec (methods/spec.py): what `registry.resolve` returns, made of its components' own
specs, each component built from its own part alone."""

from __future__ import annotations

from mmspec.decoding import catalog
from mmspec.decoding.component import Param
from mmspec.decoding.drafters import Drafter
from mmspec.decoding.weights import Policy
from mmspec.methods import components, registry, verify
from mmspec.methods.spec import MethodSpec


def test_every_methods_parts_hold_exactly_the_keys_its_components_read():
    for name in registry.METHODS:
        method = registry.resolve(name, {})
        spec = method.to_dict()
        assert [(p.kind, p.name) for p in method.parts] == [
            (c.kind, c.name) for c in components.parts(spec)
        ]
        held = {k for p in method.parts for k in p.values}
        read = components.read_keys(spec) - set(components.IDENTITY_KEYS) - {"tree", "acceptance"}
        assert held == read - {"temperature"}, name
        assert all(spec[k] == v for p in method.parts for k, v in p.values.items())
        assert MethodSpec.parse(spec) == method  # the dict form of a job's JSON, read back


def test_a_views_part_holds_its_own_parameters_only():
    method = registry.resolve("sd", {"views": "MU", "keep": 0.25})
    views = method.parts_of("view")
    assert [(v.name, v.values) for v in views] == [("M", {}), ("U", {"keep": 0.25})]
    assert method.part("tree").values == {"gamma": method.gamma}
    ar = registry.resolve("ar", {})
    assert ar.is_ar and ar.parts == () and ar.requirements == frozenset()


class _Recorder(Drafter):
    """Records what it is built from."""

    name = "recorder_of_tests"
    params = (Param("recorder_depth", int, 2, "a value of its own"),)

    @classmethod
    def from_spec(cls, spec, *, target, draft=None, head=None, temperature=0.0):
        drafter = cls(temperature)
        drafter.built_from = (spec, target, draft, head)
        return drafter


def test_a_drafter_is_built_from_its_own_values_and_what_it_is_given(monkeypatch):
    catalog.load()
    monkeypatch.setitem(catalog.CATALOG.entries, ("drafter", _Recorder.name), _Recorder)
    method = registry.resolve("sd_chain", {"drafter": _Recorder.name, "recorder_depth": 3})
    drafter = method.build_drafter(target="target", draft=None, head="head", temperature=0.5)
    assert drafter.built_from == ({"recorder_depth": 3}, "target", None, "head")
    assert drafter.temperature == 0.5


def test_an_ensemble_drafter_builds_its_weight_policy_from_the_policys_own_part():
    _, draft = verify.build_models(0, verify.build_tokenizer())
    method = registry.resolve("tabed_mt", {"weights": "kld", "window": 7})
    assert method.part("weights").values == {"window": 7}
    drafter = method.build_drafter(target=None, draft=draft, temperature=0.0)
    assert isinstance(drafter.policy, Policy) and drafter.policy.name == "kld"
    assert drafter.policy.window == 7
    single = registry.resolve("sd", {}).build_drafter(target=None, draft=draft, temperature=0.0)
    assert single.policy.name == "static"  # one view: its distribution is the mixture
