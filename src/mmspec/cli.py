"""`mmspec <stage>`: one subcommand per workflow stage, so every stage also runs by hand."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

# run by warm workers (mmspec.worker): the stages run many times per sweep, whose jobs would
# otherwise spend seconds importing torch and transformers before any work
WARM_STAGES = ("generate", "cache_visual", "score", "toy_model", "train_drafter")
PACKAGE = Path(__file__).resolve().parent


def _json(text: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None


def _settings(kind: str):
    """An argparse type: JSON of a config section parsed into its typed settings
    (stages.settings.<kind>), its errors named on the command line."""

    def parse(text: str):
        from mmspec.stages import settings

        try:
            return getattr(settings, kind).parse(_json(text))
        except (ValueError, TypeError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = kind
    return parse


def _families() -> list[str]:
    from mmspec.models.families import FAMILIES, IMAGE_GENERATORS

    return [*FAMILIES, *IMAGE_GENERATORS]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmspec", description=__doc__)
    sub = parser.add_subparsers(dest="stage", required=True)

    p = sub.add_parser("prepare", help="write results/prepared/<dataset>.parquet")
    p.add_argument("--name", required=True)
    p.add_argument("--spec", type=_json, required=True, help="the dataset's config entry (JSON)")
    p.add_argument("--toy-seed", type=int, default=0)
    p.add_argument("--out", required=True)

    p = sub.add_parser("toy_model", help="train one toy-world model")
    p.add_argument("--name", required=True)
    p.add_argument("--spec", type=_json, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)

    p = sub.add_parser("cache_visual", help="vision features of every image of a dataset")
    p.add_argument("--model", required=True, help="HF id, local dir or toy:<name>")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--prepared", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)

    p = sub.add_parser("caption", help="a caption of every image of a dataset (view C)")
    p.add_argument(
        "--spec", type=_settings("Captioner"), required=True, help="the config's captioner (JSON)"
    )
    p.add_argument("--prepared", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)

    p = sub.add_parser("train_drafter", help="train a drafter head on the target's features")
    p.add_argument("--params", type=_json, required=True, help="pair, kind, training, generation")
    p.add_argument("--prepared", required=True, help="the training dataset")
    p.add_argument(
        "--target-visual", default=None, help="the target's visual cache of it (image prompts)"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)

    p = sub.add_parser("generate", help="decode one cell")
    p.add_argument("--params", type=_json, required=True, help="cell, pair, generation, timing")
    p.add_argument("--prepared", required=True)
    p.add_argument(
        "--target-visual", default=None, help="the target's visual cache (not for image generation)"
    )
    p.add_argument("--draft-visual", default=None)
    p.add_argument("--captions", default=None, help="the caption cache (views with C)")
    p.add_argument("--drafter", default=None, help="the trained head (head drafters)")
    p.add_argument(
        "--ar-samples",
        default=None,
        help="the AR cell's samples (a method cell's; none for the AR cell itself): the greedy "
        "lossless check's reference; the speedup's AR timing is that cell's decode, scaled by "
        "the AR probe run here (timing.ar_reference, timing.ar_probe_tokens)",
    )
    p.add_argument("--out", required=True)
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=int(os.environ.get("MMSPEC_CHECKPOINT_EVERY", "0")) or None,
        help="samples per checkpoint; a killed job resumes after the last one "
        "(default $MMSPEC_CHECKPOINT_EVERY, else generate.CHUNK = 8)",
    )

    p = sub.add_parser("score", help="lossless check and quality of one cell")
    p.add_argument("--samples", required=True)
    p.add_argument("--ar-samples", required=True)
    p.add_argument("--prepared", required=True)
    p.add_argument(
        "--metric",
        required=True,
        help="the dataset's task metric, by its name in the metric catalog "
        "(docs/reference/metrics.md), or image: FID and CLIP score of generated images",
    )
    p.add_argument(
        "--image-models",
        type=_settings("ImageModels"),
        default=None,
        help="metric image: JSON {fid_features, clip} model references",
    )
    p.add_argument("--judgements", default=None, help="the judge stage's table of the cell")
    p.add_argument("--ar-judgements", default=None, help="... and of its AR cell")
    p.add_argument("--out", required=True)

    p = sub.add_parser("judge", help="an LLM judge scores one cell's answers")
    p.add_argument("--samples", required=True)
    p.add_argument("--prepared", required=True)
    p.add_argument("--template", required=True, help="the dataset's judge template (vdd, vdc)")
    p.add_argument(
        "--settings",
        type=_settings("JudgeSettings"),
        required=True,
        help="the config's judge block (JSON, no key)",
    )
    p.add_argument(
        "--cache", required=True, help="the shared judgement cache directory (results/judge/cache)"
    )
    p.add_argument("--out", required=True)

    p = sub.add_parser(
        "compact-judge-cache",
        help="merge the judgement cache's shards into one (safe while judge jobs run)",
    )
    p.add_argument("cache", nargs="?", default="results/judge/cache", help="the cache directory")
    p.add_argument(
        "--stale-temp-hours",
        type=float,
        default=24.0,
        help="remove temp files of writers killed at least this long ago",
    )

    p = sub.add_parser(
        "aggregate",
        help="one row per cell from the score files of a sweep (or of a list)",
        description="Aggregate score files into the cells table (one row per cell) and the "
        "per-step blocks table. The files are the cells' of --sweep (what the workflow passes: "
        "the command line stays the same size however many cells the sweep has), or those "
        "named by --scores or listed in --scores-from.",
    )
    p.add_argument("--out", required=True)
    p.add_argument("--blocks", required=True, help="where the per-step table goes")
    files = p.add_mutually_exclusive_group(required=True)
    files.add_argument(
        "--sweep",
        type=_json,
        help="a validated sweep config (JSON): its cells' score files under --results, and its "
        "datasets' groups",
    )
    files.add_argument("--scores", nargs="+", help="score files")
    files.add_argument("--scores-from", help="a file listing score files, one per line")
    p.add_argument("--results", default="results", help="the results folder of --sweep")
    p.add_argument(
        "--groups", type=_json, default=None, help="dataset -> group (JSON; not with --sweep)"
    )

    p = sub.add_parser(
        "report",
        help="the HTML report",
        description="Render the cells table (and the blocks table, and the trained heads of "
        "--heads or of the cells of --sweep) as one self-contained HTML page.",
    )
    p.add_argument("--cells", required=True)
    p.add_argument("--blocks", default=None)
    p.add_argument(
        "--claims", default=None, help="the claims table (mmspec claims): the scorecard, first"
    )
    heads = p.add_mutually_exclusive_group()
    heads.add_argument("--heads", nargs="*", default=[], help="trained drafter head folders")
    heads.add_argument(
        "--sweep", type=_json, default=None, help="a validated sweep config (JSON): its heads"
    )
    p.add_argument("--out", required=True)

    p = sub.add_parser(
        "tiny-model",
        help="save a tiny random-init model of a VLM family (offline stand-in for rehearsals)",
    )
    p.add_argument("family", help="one of: " + ", ".join(_families()))
    p.add_argument("out", help="the folder to save it in (model, processor, tokenizer)")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--vq-from", default=None, help="janus: take the VQ model of this saved one (a draft's)"
    )

    p = sub.add_parser(
        "stand-in-datasets",
        help="save small local stand-ins of a config's HF datasets (offline, for rehearsals); "
        "prints the --config argument that points the config at them",
    )
    p.add_argument("config", help="a config file, e.g. config/presets/sage.yaml")
    p.add_argument("out", help="the folder to save them in (one subfolder per dataset)")
    p.add_argument("--rows", type=int, default=4)

    p = sub.add_parser(
        "cells",
        help="validate a config and list its cells",
        description="Validate config files and list their cells, reading them as "
        "`snakemake --configfile A B ...` does: merged in order (mappings recursively: "
        "`sweep_extra` rows add up); files that declare `datasets`, `pairs` and `methods` are "
        "a whole sweep; others (e.g. only `generation: {max_new_tokens: 16}`, or a dataset and "
        "the rows that run it) are merged over the default sweep, config/config.yaml of the "
        "working directory (--default).",
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

    p = sub.add_parser(
        "plan",
        help="cells, packed Slurm jobs and device hours of a sweep, before running it",
        description="Read a config as `mmspec cells` does and print its cells (done and to run "
        "under --results), the Slurm jobs the slurm profile packs the cells to run into, and per "
        "pair an estimate of the device hours they need from the pair's earlier cells.",
    )
    p.add_argument("config", nargs="+", help="as for `mmspec cells`")
    p.add_argument("--default", default="config/config.yaml", help="as for `mmspec cells`")
    p.add_argument("--results", default="results", help="the workflow's results folder")
    p.add_argument("--profile", default="slurm/config.yaml", help="the Slurm profile")

    p = sub.add_parser(
        "verify-lossless",
        help="prove methods lossless on tiny random models by exact enumeration",
        description="For every registry method with a lossless acceptance rule (or those named), "
        "build tiny random target and draft models from --seed (8-token vocabulary) and compute "
        "EXACTLY, by enumerating every draft draw and acceptance outcome, the distribution of "
        "the first tokens at temperature 1; compare it with the target's own (total variation) "
        "and the greedy output with AR's. Exits 1 if any TVD exceeds 1e-9 or any greedy output "
        "differs.",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", action="append", help="a registry method (repeatable)")
    p.add_argument("--spec", type=_json, default={}, help="hyperparameters for the methods (JSON)")
    p.add_argument(
        "--tokens", type=int, default=2, help="tokens after the prefill's first (default 2)"
    )

    p = sub.add_parser(
        "compare-outputs",
        help="whether two results folders' cells decode the same tokens (exit 1 if not)",
        description="Compare every cell two results folders both have, sample-turn by "
        "sample-turn: output token ids and each step's drafted and accepted counts (no "
        "timings). Exits 1 when a cell differs or only one folder has it.",
    )
    p.add_argument("first", help="a results folder (with generate/)")
    p.add_argument("second", help="another results folder")

    p = sub.add_parser(
        "claims",
        help="check each paper's claims (config/claims/) on finished sweeps: holds / fails / "
        "inconclusive / not applicable, with the numbers",
        description="Check every claim of config/claims/*.yaml on the cells of the given "
        "results folders (or cells.parquet files), each folder's sets apart, and print the "
        "scorecard: per claim its verdict over all sets (holds where every set holds, fails "
        "where every set fails, not applicable where no set has its cells, else inconclusive; "
        "an undecided set also gives the points' reading) and each set's numbers; harness "
        "checks apart. The claims files' format: docs/reference/claims.md.",
    )
    p.add_argument("results", nargs="+", help="results folders (or cells.parquet files)")
    p.add_argument("--out", default=None, help="also write the rows here (Parquet)")
    p.add_argument(
        "--claims", default=None, help="a folder of claims files (default: config/claims)"
    )
    p.add_argument("--brief", action="store_true", help="verdicts only, not each set's numbers")
    p.add_argument(
        "--markdown",
        action="store_true",
        help="the verdicts as a Markdown table (one row per claim, the sets' tally beside it)",
    )

    p = sub.add_parser(
        "reference",
        help="write the docs' reference pages (docs/reference/) from the schema, the report's "
        "definitions, the registry and this command line, and the paper pages' claim tables",
        description="Generate docs/reference/config.md, metrics.md, methods.md and cli.md from "
        "the declarations they describe, and each paper page's claim table (docs/papers/) from "
        "config/claims/. --check writes nothing and exits 1 listing the pages "
        "that differ from what the code generates now.",
    )
    p.add_argument("--check", action="store_true", help="list stale pages, write nothing")

    p = sub.add_parser(
        "gpu-check",
        help="check a GPU machine end to end: the tour and a sampled cell of every method "
        "family, the engine benchmark, bf16/fp16 greedy SD against AR; one table, exit 1 on "
        "any failure (docs/gpu-check.md)",
    )
    from mmspec import gpu_check

    gpu_check.add_arguments(p)
    return parser


def main(argv: list[str] | None = None, warm: bool | None = None) -> int:
    """`mmspec <argv>` (the command line when None). `warm`: hand a generate job to a warm
    worker (`mmspec.worker`); by default only from the command line, not from Python. A GPU job
    started from the command line by a workflow that shares a workstation's GPUs first takes
    one of them (`mmspec.gpus`)."""
    from mmspec import gpus
    from mmspec.private_folder import NotPrivate

    from_command_line = argv is None
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
    if warm and argv and argv[0] in WARM_STAGES:
        from mmspec import worker

        if worker.enabled() and (code := worker.delegate(argv)) is not None:
            return code
    args = build_parser().parse_args(argv)
    try:
        if args.stage == "verify-lossless":
            from mmspec.methods import verify

            if args.tokens < 1:
                raise ValueError("--tokens must be >= 1")
            import torch

            torch.set_num_threads(1)  # tiny models: threads only add overhead
            return 0 if verify.run(args.seed, args.method, args.spec, args.tokens) else 1
        if args.stage == "compare-outputs":
            from mmspec import compare

            result = compare.compare(args.first, args.second)
            print(compare.render(result))
            return 0 if result.identical else 1
        if args.stage == "claims":
            from mmspec.stages import claims

            table = claims.run(args.results, args.out, args.claims)
            if args.out is not None:  # on stderr: stdout may be a table piped elsewhere
                print(f"mmspec claims: {len(table)} rows written to {args.out}", file=sys.stderr)
            if args.markdown:
                from mmspec.claims import pages

                print(pages.verdicts({"verdict": table}))
            else:
                print(claims.text(table, verbose=not args.brief))
            return 0
        if args.stage == "reference":
            from mmspec import reference

            if args.check:
                stale = reference.stale()
                for path in stale:
                    print(f"stale: {path.relative_to(reference.ROOT)} (run `mmspec reference`)")
                return 1 if stale else 0
            for path in reference.write():
                print(path.relative_to(reference.ROOT))
            return 0
        if args.stage == "gpu-check":
            from mmspec import gpu_check

            return gpu_check.from_args(args)
        run(args)
    except Exception as error:
        # one line saying what and where, not a traceback burying the message
        # (MMSPEC_TRACEBACK=1 re-raises, for debugging mmspec itself)
        if os.environ.get("MMSPEC_TRACEBACK"):
            raise
        print(f"mmspec {args.stage}: error: {one_line(error)}", file=sys.stderr)
        return 1
    return 0


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


def sweep_score_files(sweep: dict, results: str = "results") -> list[str]:
    """The score file of every cell of a validated sweep config (`config.validate`'s output), in
    cell order: exactly the sweep's cells, never whatever else lies under `results`."""
    from mmspec import config

    cells = sorted(config.cells(sweep), key=lambda c: (c.dataset, c.pair, c.method, c.hp, c.seed))
    return [f"{Path(results).as_posix()}/score/{c.path}/scores.parquet" for c in cells]


def sweep_head_folders(sweep: dict) -> list[str]:
    """The trained-head folders of a validated sweep config's cells (results/drafters/...)."""
    from mmspec import config

    return sorted({d for d in map(config.drafter_dir, config.cells(sweep)) if d})


def read_list(path: str) -> list[str]:
    """The non-blank lines of a list file (score files of `mmspec aggregate --scores-from`)."""
    names = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    if not names:
        raise ValueError(f"{path}: lists no files")
    return names


def run(args: argparse.Namespace) -> None:
    """Dispatch to the stage's module (imported lazily: torch loads only where needed)."""
    if args.stage == "prepare":
        from mmspec.stages import prepare

        n = prepare.run(args.name, args.spec, args.out, args.toy_seed)
        print(f"prepared {args.name}: {n} rows -> {args.out}", file=sys.stderr)
    elif args.stage == "toy_model":
        from mmspec.stages import toy_model

        log = toy_model.run(args.name, args.spec, args.out, args.seed, args.threads)
        print(
            f"trained {args.name} in {log['seconds']:.0f} s, loss {log['final_loss']:.3f}",
            file=sys.stderr,
        )
    elif args.stage == "cache_visual":
        from mmspec.stages import cache_visual

        n = cache_visual.run(args.model, args.prepared, args.out, args.dtype, args.threads)
        print(f"cached {n} images -> {args.out}", file=sys.stderr)
    elif args.stage == "caption":
        from mmspec.stages import caption

        n = caption.run(args.spec, args.prepared, args.out, args.threads)
        print(f"captioned {n} images -> {args.out}", file=sys.stderr)
    elif args.stage == "generate":
        from mmspec.stages import generate

        generate.run(
            args.params,
            args.prepared,
            args.target_visual,
            args.draft_visual,
            args.out,
            args.captions,
            args.checkpoint_every,
            args.drafter,
            args.ar_samples,
        )
    elif args.stage == "train_drafter":
        from mmspec.stages import train_drafter

        record = train_drafter.run(
            args.params, args.prepared, args.target_visual, args.out, args.threads
        )
        final = record["final"]
        print(
            f"trained a {record['kind']} head on {record['sequences']} sequences in "
            f"{record['seconds']:.0f} s, held-out top-1 {final.get('heldout_top1', 0):.3f}",
            file=sys.stderr,
        )
    elif args.stage == "score":
        from mmspec.stages import score

        if (args.judgements is None) != (args.ar_judgements is None):
            raise ValueError("--judgements and --ar-judgements go together")
        judged = (args.judgements, args.ar_judgements) if args.judgements else None
        score.run(
            args.samples,
            args.ar_samples,
            args.prepared,
            args.metric,
            args.out,
            args.image_models,
            judged,
        )
    elif args.stage == "judge":
        from mmspec.stages import judge

        calls, failures, n = judge.run(
            args.samples, args.prepared, args.template, args.settings, args.cache, args.out
        )
        print(
            f"judged {n} answers ({calls} judge calls, {failures} failed) -> {args.out}",
            file=sys.stderr,
        )
    elif args.stage == "aggregate":
        from mmspec.stages import aggregate

        if args.sweep is not None:
            if args.groups is not None:
                raise ValueError("--groups comes from --sweep's datasets; give one or the other")
            files = sweep_score_files(args.sweep, args.results)
            groups = {
                name: ds.get("group", "benchmark") for name, ds in args.sweep["datasets"].items()
            }
        else:
            files = args.scores or read_list(args.scores_from)
            groups = args.groups or {}
        n = aggregate.run(files, args.out, args.blocks, groups)
        print(f"aggregated {n} cells -> {args.out}", file=sys.stderr)
    elif args.stage == "report":
        from mmspec.stages import report

        heads = sweep_head_folders(args.sweep) if args.sweep is not None else args.heads
        report.run(args.cells, args.out, args.blocks, heads, args.claims)
    elif args.stage == "tiny-model":
        from mmspec.models import tiny

        if args.family == "janus":
            out = tiny.save_janus(args.out, args.hidden, args.layers, args.seed, args.vq_from)
        else:
            out = tiny.save(args.family, args.out, args.hidden, args.layers, args.seed)
        print(f"saved a tiny random {args.family} model -> {out}", file=sys.stderr)
    elif args.stage == "stand-in-datasets":
        from mmspec import config
        from mmspec.data import stand_in

        override = stand_in.write_all(config.load(args.config), Path(args.out), args.rows)
        print(stand_in.as_cli(override))
    elif args.stage == "compact-judge-cache":
        from mmspec.scoring.judge import compact

        done = compact(args.cache, stale_temp_s=args.stale_temp_hours * 3600)
        into = done.path or f"{args.cache} (nothing to merge)"
        print(
            f"merged {done.merged_files} files ({done.rows_read} rows) into {into}: "
            f"{done.rows_kept} judgements; removed {done.temp_files_removed} stale temp files",
            file=sys.stderr,
        )
    elif args.stage == "cells":
        from mmspec import config
        from mmspec.plan import merged_line

        expansion = config.expand(config.load_as_snakemake(args.config, args.default))
        for cell in expansion.cells:
            print(cell.path)
        sys.stdout.flush()  # the paths before the count, where both streams share a terminal
        print(
            f"{len(expansion.cells)} cells from {expansion.grid_points} grid points",
            file=sys.stderr,
        )
        if expansion.merged:
            print(merged_line(expansion.merged), file=sys.stderr)
    elif args.stage == "plan":
        from mmspec import config, plan

        cfg = config.load_as_snakemake(args.config, args.default)
        expansion = config.expand(cfg)
        pairs = plan.plan(cfg, args.results, expansion.cells)
        packed = plan.group_size(args.profile)
        print(plan.render(pairs, packed, expansion.merged, cfg["timing"]))


if __name__ == "__main__":
    sys.exit(main())
