"""MethodSpec (methods/spec.py): a resolved spec parsed into its components' own specs."""

from __future__ import annotations

from mmspec.methods import components, registry
from mmspec.methods.spec import MethodSpec


def test_every_methods_parts_hold_exactly_the_keys_its_components_read():
    for name in registry.METHODS:
        spec = registry.resolve(name, {})
        method = MethodSpec.parse(spec)
        assert [(p.kind, p.name) for p in method.parts] == [
            (c.kind, c.name) for c in components.parts(spec)
        ]
        held = {k for p in method.parts for k in p.values}
        read = components.read_keys(spec) - set(components.IDENTITY_KEYS) - {"tree", "acceptance"}
        assert held == read - {"temperature"}, name
        assert all(spec[k] == v for p in method.parts for k, v in p.values.items())


def test_a_views_part_holds_its_own_parameters_only():
    method = MethodSpec.parse(registry.resolve("sd", {"views": "MU", "keep": 0.25}))
    views = method.parts_of("view")
    assert [(v.name, v.values) for v in views] == [("M", {}), ("U", {"keep": 0.25})]
    assert method.part("tree").values == {"gamma": method.gamma}
    assert MethodSpec.parse(registry.resolve("ar", {})).parts == ()
