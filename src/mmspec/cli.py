"""`mmspec <stage>`: one subcommand per workflow stage, so every stage also runs by hand, and
the tools around a sweep (plan, cells, claims, reference, verify-lossless, ...)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path

from mmspec import stages
from mmspec.stages.arguments import json_object

PACKAGE = Path(__file__).resolve().parent


def build_parser(filled: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The command line: one subcommand per stage (`mmspec.stages`, each declaring its own
    arguments) and per tool (`TOOLS`). `filled`: the stages whose arguments are added (each
    imports its module, and so torch for the model stages); default every stage."""
    parser = argparse.ArgumentParser(prog="mmspec", description=__doc__)
    sub = parser.add_subparsers(dest="stage", required=True)
    declared = stages.declared()
    filled = declared if filled is None else filled
    for name, stage in declared.items():
        p = sub.add_parser(name, help=stage.help)
        if name in filled:
            # by name: a stage's module is imported only when its command line is needed
            module = importlib.import_module(stage.module)
            module.add_arguments(p)
            p.set_defaults(main=module.main)
    for name, (help, add_arguments, run) in TOOLS.items():
        p = sub.add_parser(name, help=help)
        add_arguments(p)
        p.set_defaults(main=run)
    return parser


def main(argv: list[str] | None = None, warm: bool | None = None, as_command: bool = False) -> int:
    """`mmspec <argv>` (the command line when None; `as_command`: `argv` run as that command
    line would be, as a batch job runs each of its cells). `warm`: hand a generate job to a
    warm worker (`mmspec.worker`); by default only from the command line, not from Python. A GPU
    job started from the command line by a workflow that shares a workstation's GPUs first takes
    one of them (`mmspec.gpus`)."""
    from mmspec import gpus
    from mmspec.private_folder import NotPrivate

    from_command_line = argv is None or as_command
    argv = sys.argv[1:] if argv is None else argv
    if from_command_line and argv:
        try:
            gpus.hold(argv[0])
        except NotPrivate as error:
            if os.environ.get("MMSPEC_TRACEBACK"):
                raise
            print(f"mmspec {argv[0]}: error: {error}", file=sys.stderr)
            return 1
    try:
        return _main(argv, from_command_line if warm is None else warm)
    finally:
        gpus.release()


def _main(argv: list[str], warm: bool) -> int:
    stage = stages.declared().get(argv[0]) if argv else None
    if warm and stage is not None and stage.warm:
        from mmspec import worker

        if worker.enabled() and (code := worker.delegate(argv)) is not None:
            return code
    args = build_parser(filled=[stage.name] if stage else []).parse_args(argv)
    try:
        return args.main(args) or 0
    except Exception as error:
        # one line saying what and where, not a traceback burying the message
        # (MMSPEC_TRACEBACK=1 re-raises, for debugging mmspec itself)
        if os.environ.get("MMSPEC_TRACEBACK"):
            raise
        print(f"mmspec {args.stage}: error: {one_line(error)}", file=sys.stderr)
        return 1


def one_line(error: Exception) -> str:
    """An exception as one line. A bad-input error (ValueError, KeyError, FileNotFoundError) that
    mmspec or a library raises by its message (it names the file, key or sample); any other with
    its type; and one raised in a plugin's or your own code with its type and where it was
    raised, so that a bug in your own component is not mistaken for bad input."""
    from mmspec import import_closure

    message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    message = " ".join(str(message).split())
    frames = traceback.extract_tb(error.__traceback__)
    origin = frames[-1] if frames else None
    ours = origin is None or Path(origin.filename).resolve().is_relative_to(PACKAGE)
    if not ours and not import_closure.is_library_source(origin.filename):
        return (
            f"{type(error).__name__}: {message} (raised at {origin.filename}:{origin.lineno}; "
            "MMSPEC_TRACEBACK=1 prints the traceback)"
        )
    if isinstance(error, (ValueError, KeyError, FileNotFoundError)):
        return message
    return f"{type(error).__name__}: {message}"


# -- tools: commands that are not workflow stages ------------------------------------------------


def _families() -> list[str]:
    from mmspec.models.families import FAMILIES, IMAGE_GENERATORS

    return [*FAMILIES, *IMAGE_GENERATORS]


def _compact_judge_cache_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache", nargs="?", default="results/judge/cache", help="the cache directory")
    p.add_argument(
        "--stale-temp-hours",
        type=float,
        default=24.0,
        help="remove temp files of writers killed at least this long ago",
    )


def _compact_judge_cache(args: argparse.Namespace) -> None:
    from mmspec.scoring.judge import compact

    done = compact(args.cache, stale_temp_s=args.stale_temp_hours * 3600)
    into = done.path or f"{args.cache} (nothing to merge)"
    print(
        f"merged {done.merged_files} files ({done.rows_read} rows) into {into}: "
        f"{done.rows_kept} judgements; removed {done.temp_files_removed} stale temp files",
        file=sys.stderr,
    )


def _tiny_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("family", help="one of: " + ", ".join(_families()))
    p.add_argument("out", help="the folder to save it in (model, processor, tokenizer)")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--vq-from", default=None, help="janus: take the VQ model of this saved one (a draft's)"
    )


def _tiny_model(args: argparse.Namespace) -> None:
    from mmspec.toy import tiny

    if args.family == "janus":
        out = tiny.save_janus(args.out, args.hidden, args.layers, args.seed, args.vq_from)
    else:
        out = tiny.save(args.family, args.out, args.hidden, args.layers, args.seed)
    print(f"saved a tiny random {args.family} model -> {out}", file=sys.stderr)


def _stand_in_datasets_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="a config file, e.g. config/presets/sage.yaml")
    p.add_argument("out", help="the folder to save them in (one subfolder per dataset)")
    p.add_argument("--rows", type=int, default=4)


def _stand_in_datasets(args: argparse.Namespace) -> None:
    from mmspec import config
    from mmspec.toy import stand_in

    override = stand_in.write_all(config.load(args.config), Path(args.out), args.rows)
    print(stand_in.as_cli(override))


def _cells_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Validate config files and list their cells, reading them as `snakemake --configfile A "
        "B ...` does: merged in order (mappings recursively: `sweep_extra` rows add up); files "
        "that declare `datasets`, `pairs` and `methods` are a whole sweep; others (e.g. only "
        "`generation: {max_new_tokens: 16}`, or a dataset and the rows that run it) are merged "
        "over the default sweep, config/config.yaml of the working directory (--default)."
    )
    p.add_argument(
        "config",
        nargs="+",
        help="a whole sweep, or a partial override of the default sweep (several: merged in order)",
    )
    p.add_argument(
        "--default",
        default="config/config.yaml",
        help="the sweep a file that is not a whole sweep overrides (default: config/config.yaml)",
    )
    p.add_argument(
        "--commands",
        choices=["generate", "judge", "score"],
        help="print each cell's command of this stage instead of its path (what its batch job "
        "runs for it: mmspec.batches)",
    )


def _cells(args: argparse.Namespace) -> None:
    from mmspec import batches, cell_keys, config
    from mmspec.cells import expand
    from mmspec.plan import merged_line

    cfg = config.load_as_snakemake(args.config, args.default)
    expansion = expand(cfg)
    if args.commands:
        planned = batches.of_sweep(cfg, expansion.cells)[args.commands]
        for batch in planned.values():
            for job in batch.jobs:
                print(cell_keys.command_line(job))
    for cell in expansion.cells if not args.commands else ():
        print(cell.path)
    sys.stdout.flush()  # the paths before the count, where both streams share a terminal
    print(f"{len(expansion.cells)} cells from {expansion.grid_points} grid points", file=sys.stderr)
    if expansion.merged:
        print(merged_line(expansion.merged), file=sys.stderr)


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    """The config files of a tool that reads a sweep as `mmspec cells` does."""
    p.add_argument("config", nargs="+", help="as for `mmspec cells`")
    p.add_argument("--default", default="config/config.yaml", help="as for `mmspec cells`")


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Read a config as `mmspec cells` does and print its cells (done and to run under "
        "--results), the Slurm jobs the slurm profile packs the cells to run into, and per pair "
        "an estimate of the device hours they need from the pair's earlier cells."
    )
    _sweep_arguments(p)
    p.add_argument("--results", default="results", help="the workflow's results folder")
    p.add_argument(
        "--pilot",
        help="estimate from the finished jobs of this results folder (a pilot run's, "
        "`mmspec pilot`) instead of --results",
    )
    p.add_argument(
        "--profile",
        default="slurm/config.yaml",
        help="the Slurm profile: its folder or its config.yaml (default slurm/config.yaml)",
    )


def _plan(args: argparse.Namespace) -> None:
    from mmspec import config, plan
    from mmspec.cells import expand

    cfg = config.load_as_snakemake(args.config, args.default)
    expansion = expand(cfg)
    profile = plan.profile_file(args.profile)
    planned = plan.plan(cfg, args.results, expansion.cells, args.pilot)
    packed = plan.group_size(profile)
    print(plan.render(planned, packed, expansion.merged, cfg["timing"], profile))


def _pilot_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Read a config as `mmspec cells` does and print a partial config that caps each dataset "
        "its cells read at --samples samples (its source's size key: an HF dataset's `limit`, "
        "a toy dataset's `samples`). Run the sweep with it in a folder of its own, then give "
        "that folder's results to `mmspec plan --pilot` for the full sweep's device-hours and "
        "disk (docs/running-at-scale.md, 'Planning a run')."
    )
    _sweep_arguments(p)
    p.add_argument("--samples", type=int, default=4, help="samples per dataset (default 4)")


def _pilot(args: argparse.Namespace) -> None:
    from mmspec import config, plan

    if args.samples < 1:
        raise ValueError("--samples must be >= 1")
    cfg = config.load_as_snakemake(args.config, args.default)
    override, whole = plan.pilot_override(cfg, args.samples)
    for name in whole:
        print(
            f"mmspec pilot: dataset {name}: its source declares no size key, it runs whole",
            file=sys.stderr,
        )
    print(plan.pilot_text(override, args.config, args.samples), end="")


def _fetch_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Read a config as `mmspec cells` does, list every Hugging Face Hub model and dataset its "
        "cells read (the files the jobs read and their sizes, and what the cache already holds) "
        "and the local paths they read, then download the hub ones into the Hugging Face cache "
        "(HF_HOME; HF_ENDPOINT names the Hub), so that jobs on compute nodes run offline "
        "(HF_HUB_OFFLINE=1). Exits 1 when a local path is missing."
    )
    _sweep_arguments(p)
    p.add_argument("--list", action="store_true", help="list only, download nothing")


def _fetch(args: argparse.Namespace) -> int:
    from mmspec import config, hub_cache, hub_needs

    cfg = config.load_as_snakemake(args.config, args.default)
    repos, local = hub_needs.needed(cfg)
    if hub_needs.jobs_offline(local_execution=True):
        print(hub_needs.render_offline(repos, local))
        if repos and not args.list:
            raise ValueError(
                "HF_HUB_OFFLINE is set in this environment, so the listing above is the cache's "
                "alone: fetch on a host that reaches the Hub, with `HF_HUB_OFFLINE=0 mmspec "
                "fetch ...`"
            )
    else:
        listings = [hub_cache.listing(repo) for repo in repos]
        print(hub_needs.render(listings, local))
        if not args.list:
            for found in listings:
                if found.to_fetch or len(found.cached) < len(found.files):
                    print(f"fetching {found.repo.describe()} ...", flush=True)
                    print(f"  -> {hub_cache.fetch(found)}")
            print(f"fetched: {len(listings)} hub repositories in {hub_cache.cache_dir()}")
    missing = [path.path for path in local if not path.exists()]
    if missing:
        print(
            f"{len(missing)} local path(s) the sweep reads are missing: {', '.join(missing)} "
            "(copy them there; exit 1)"
        )
    return 1 if missing else 0


def _verify_lossless_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "For every registry method with a lossless acceptance rule (or those named), build tiny "
        "random target and draft models from --seed (8-token vocabulary) and compute EXACTLY, by "
        "enumerating every draft draw and acceptance outcome, the distribution of the first "
        "tokens at temperature 1; compare it with the target's own (total variation) and the "
        "greedy output with AR's. Each method's line ends ok, FAIL, UNTESTED (it never drafted: "
        "nothing of it was checked) or LOSSY (its rule is lossy by declaration, e.g. lvspec, "
        "fly, random_relax: measured the same way, a distance expected, never a failure). Exits "
        "1 if a method declared lossless has a TVD above 1e-9, a greedy output that differs from "
        "AR's, or is UNTESTED; 0 otherwise (LOSSY lines included)."
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", action="append", help="a registry method (repeatable)")
    p.add_argument(
        "--spec",
        type=json_object,
        default={},
        help="values for the methods (JSON), as a sweep's method entry holds them: "
        "hyperparameters, or a component swapped in by its key (drafter, tree, acceptance, views)",
    )
    p.add_argument(
        "--tokens", type=int, default=2, help="tokens after the prefill's first (default 2)"
    )


def _verify_lossless(args: argparse.Namespace) -> int:
    import torch

    from mmspec.methods import verify

    if args.tokens < 1:
        raise ValueError("--tokens must be >= 1")
    torch.set_num_threads(1)  # tiny models: threads only add overhead
    return 0 if verify.run(args.seed, args.method, args.spec, args.tokens) else 1


def _compare_outputs_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Compare every cell two results folders both have, sample-turn by sample-turn: output "
        "token ids and each step's drafted and accepted counts (no timings). Exits 1 when a "
        "cell differs or only one folder has it."
    )
    p.add_argument("first", help="a results folder (with generate/)")
    p.add_argument("second", help="another results folder")


def _compare_outputs(args: argparse.Namespace) -> int:
    from mmspec import compare

    result = compare.compare(args.first, args.second)
    print(compare.render(result))
    return 0 if result.identical else 1


def _reference_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Generate docs/reference/config.md, metrics.md, methods.md, cli.md, claims.md and "
        "api.md (the plugin API, from mmspec.api) from the declarations they describe, and "
        "each paper page's claim table (docs/papers/) from config/claims/. --check writes "
        "nothing and exits 1 listing the pages that differ from what the code generates now."
    )
    p.add_argument("--check", action="store_true", help="list stale pages, write nothing")


def _reference(args: argparse.Namespace) -> int:
    from mmspec import reference

    if args.check:
        stale = reference.stale()
        for path in stale:
            print(f"stale: {path.relative_to(reference.ROOT)} (run `mmspec reference`)")
        return 1 if stale else 0
    for path in reference.write():
        print(path.relative_to(reference.ROOT))
    return 0


def _gpu_check_arguments(p: argparse.ArgumentParser) -> None:
    from mmspec import gpu_check

    gpu_check.add_arguments(p)


def _gpu_check(args: argparse.Namespace) -> int:
    from mmspec import gpu_check

    return gpu_check.from_args(args)


# name -> (help, add_arguments, run); run returns the exit code (None: 0)
TOOLS = {
    "compact-judge-cache": (
        "merge the judgement cache's shards into one (safe while judge jobs run)",
        _compact_judge_cache_arguments,
        _compact_judge_cache,
    ),
    "tiny-model": (
        "save a tiny random-init model of a VLM family (offline stand-in for rehearsals)",
        _tiny_model_arguments,
        _tiny_model,
    ),
    "stand-in-datasets": (
        "save small local stand-ins of a config's HF datasets (offline, for rehearsals); prints "
        "the --config argument that points the config at them",
        _stand_in_datasets_arguments,
        _stand_in_datasets,
    ),
    "cells": ("validate a config and list its cells", _cells_arguments, _cells),
    "plan": (
        "cells, packed Slurm jobs and device hours of a sweep, before running it",
        _plan_arguments,
        _plan,
    ),
    "fetch": (
        "list the Hub models and datasets a sweep reads, with sizes, and download them into the "
        "Hugging Face cache, for compute nodes that run offline",
        _fetch_arguments,
        _fetch,
    ),
    "pilot": (
        "a partial config capping a sweep's datasets at a few samples: a pilot run whose "
        "finished jobs give `mmspec plan --pilot` its estimates",
        _pilot_arguments,
        _pilot,
    ),
    "verify-lossless": (
        "prove methods lossless on tiny random models by exact enumeration",
        _verify_lossless_arguments,
        _verify_lossless,
    ),
    "compare-outputs": (
        "whether two results folders' cells decode the same tokens (exit 1 if not)",
        _compare_outputs_arguments,
        _compare_outputs,
    ),
    "reference": (
        "write the docs' reference pages (docs/reference/) from the schema, the report's "
        "definitions, the registry and this command line, and the paper pages' claim tables",
        _reference_arguments,
        _reference,
    ),
    "gpu-check": (
        "check a GPU machine end to end: the tour and a sampled cell of every method family, the "
        "engine benchmark, bf16/fp16 greedy SD against AR; one table, exit 1 on any failure "
        "(docs/gpu-check.md)",
        _gpu_check_arguments,
        _gpu_check,
    ),
}


if __name__ == "__main__":
    sys.exit(main())
