"""The tools around a sweep: one module each, declared as a stage is (`HELP`, `add_arguments`,
`main`; `mmspec.stages`), its command its name with dashes (`compare_outputs.py`: `mmspec
compare-outputs`)."""
