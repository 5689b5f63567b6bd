"""A round's points: a pure function of the search, the round and the finished points before it.

No optimizer state is kept between rounds: each round builds a fresh Optuna study, tells it every
finished point of the earlier rounds (with the round it came from), and asks for the round's
points with a sampler seeded by the search's seed and the round. So a rerun, a resumed run and a
run with a larger budget propose the same points for every round they share.

Round 1 is a scrambled Sobol design (Optuna's QMCSampler); later rounds ask the search's sampler:
multivariate TPE with the constant liar (the round's points are asked together), NSGA-II (one
generation per round), Optuna's GP sampler (logEHVI; the round's earlier points pending),
BoTorch's qNEHVI (Optuna's integration; the round's pending points are fantasized), or random.
A point asked twice (a finished one, or one already in the round) is refused and asked again: a
round always proposes points not decoded before, while its space has them.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import warnings
from dataclasses import dataclass

from mmspec.sweep.search_space import Domain, Search

# Asks per point before a round falls back to the finite space's unseen points
ASKS_PER_POINT = 50


@dataclass(frozen=True)
class Finished:
    """A point of an earlier round and what its cells measured (None: its cells failed)."""

    point: dict
    round: int
    row: dict | None


def point_key(point: dict) -> str:
    return json.dumps(point, sort_keys=True)


def propose(search: Search, round_: int, history: list[Finished]) -> list[dict]:
    """The points of round `round_` (1-based), none of them in `history`."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    wanted = search.round_size(round_)
    if wanted == 0:
        return []
    distributions = {d.key: _distribution(d) for d in search.domains}
    study = optuna.create_study(
        directions=["maximize" if o.maximize else "minimize" for o in search.objectives],
        sampler=_sampler(search, round_),
    )
    for done in history:
        study.add_trial(_trial(search, done, distributions))
    seen = {point_key(done.point) for done in history}
    points: list[dict] = []
    for _ in range(wanted * ASKS_PER_POINT):
        if len(points) == wanted:
            break
        trial = study.ask(distributions)
        point = normalized(search, trial.params)
        if point_key(point) in seen:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:  # left running: the samplers treat it as pending while the round is asked
            seen.add(point_key(point))
            points.append(point)
    if len(points) < wanted:  # a finite space nearly spent: its unseen points, in seeded order
        points += _unseen(search, round_, seen)[: wanted - len(points)]
    return points


def normalized(search: Search, params: dict) -> dict:
    """A point as its cell's hyperparameters hold it: integers as int, stepped floats rounded,
    in the domains' order."""
    out = {}
    for d in search.domains:
        value = params[d.key]
        if d.choices is None:
            value = int(round(value)) if d.integer else float(value)
            if d.step is not None:
                value = round(d.low + round((value - d.low) / d.step) * d.step, 12)
        out[d.key] = value
    return out


def round_seed(search: Search, round_: int) -> int:
    digest = hashlib.sha256(f"{search.seed}:{round_}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _sampler(search: Search, round_: int):
    import optuna

    seed = round_seed(search, round_)
    if round_ == 1:
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.QMCSampler(
            qmc_type="sobol",
            scramble=True,
            seed=seed,
            independent_sampler=optuna.samplers.RandomSampler(seed=seed),
            warn_independent_sampling=False,
            warn_asynchronous_seeding=False,
        )
    # TPE, NSGA-II and the GP sampler read the constraints the finished trials carry
    # (create_trial's); BoTorch's sampler asks for them through a function
    constraints = _constraints_func if search.constraints else None
    if search.sampler == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, constant_liar=True, n_startup_trials=0
        )
    if search.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=search.per_round, seed=seed)
    if search.sampler == "gp":
        # logEHVI over a GP per objective (Optuna's own, on torch); a round's points greedily,
        # each with the earlier ones pending (qLogEHVI)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=0)
    if search.sampler == "qnehvi":
        from optuna_integration import BoTorchSampler

        return BoTorchSampler(
            candidates_func=_qnehvi_candidates,
            constraints_func=constraints,
            n_startup_trials=1,
            consider_running_trials=True,
            seed=seed,
        )
    return optuna.samplers.RandomSampler(seed=seed)


def _constraints_func(trial) -> list[float]:
    # the values create_trial stored; a trial of this round has none (it is never completed)
    return [trial.constraints[k] for k in sorted(trial.constraints)] or [math.inf]


def _trial(search: Search, done: Finished, distributions: dict):
    import optuna
    from optuna.samplers import NSGAIISampler

    params = {d.key: done.point[d.key] for d in search.domains}
    attrs = {NSGAIISampler._get_generation_key(): done.round - 1}
    values = None if done.row is None else [o.told(done.row) for o in search.objectives]
    if values is None or any(math.isnan(v) for v in values):
        return optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL,
            params=params,
            distributions=distributions,
            system_attrs=attrs,
        )
    constraints = None
    if search.constraints:
        constraints = {f"c{i}": c.slack(done.row) for i, c in enumerate(search.constraints)}
    return optuna.trial.create_trial(
        values=values,
        params=params,
        distributions=distributions,
        system_attrs=attrs,
        constraints=constraints,
    )


def _distribution(d: Domain):
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if d.choices is not None:
        return CategoricalDistribution(list(d.choices))
    if d.integer:
        return IntDistribution(int(d.low), int(d.high), log=d.log)
    return FloatDistribution(d.low, d.high, log=d.log, step=d.step)


def _unseen(search: Search, round_: int, seen: set) -> list[dict]:
    """The finite space's points not in `seen`, shuffled by the round's seed ([] if infinite)."""
    values = [d.values() for d in search.domains]
    if any(v is None for v in values):
        return []
    import itertools

    keys = [d.key for d in search.domains]
    points = [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]
    points = [p for p in points if point_key(p) not in seen]
    random.Random(round_seed(search, round_)).shuffle(points)
    return points


# qNEHVI's acquisition, optimized lighter than Optuna's integration (20 restarts over 1024 raw
# samples, 200 iterations, 256 MC samples: over a minute per point on 2 CPU cores): a round
# asks a few points, each from a GP fitted to tens of cells, where coarser optimization of the
# acquisition costs little (benchmarks/bench_search.py measures both time and hypervolume).
QNEHVI_RESTARTS, QNEHVI_RAW_SAMPLES, QNEHVI_MAXITER, QNEHVI_MC_SAMPLES = 4, 256, 100, 128


def _qnehvi_candidates(train_x, train_obj, train_con, bounds, pending_x):
    """Optuna's BoTorchSampler candidates function: the next point by qLogNEHVI (maximized
    objectives; constraints feasible at <= 0)."""
    import torch
    from botorch.acquisition.multi_objective.logei import (
        qLogNoisyExpectedHypervolumeImprovement,
    )
    from botorch.acquisition.multi_objective.objective import IdentityMCMultiOutputObjective
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize
    from botorch.optim import optimize_acqf
    from botorch.sampling import SobolQMCNormalSampler
    from botorch.utils.transforms import normalize, unnormalize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    n_objectives = train_obj.size(-1)
    extra = {}
    train_y = train_obj
    if train_con is not None:
        train_y = torch.cat([train_obj, train_con], dim=-1)
        extra = {
            "objective": IdentityMCMultiOutputObjective(outcomes=list(range(n_objectives))),
            "constraints": [
                (lambda z, i=i: z[..., n_objectives + i]) for i in range(train_con.size(-1))
            ],
        }
    train_x = normalize(train_x, bounds=bounds)
    if pending_x is not None:
        pending_x = normalize(pending_x, bounds=bounds)
    model = SingleTaskGP(train_x, train_y, outcome_transform=Standardize(m=train_y.size(-1)))
    # bounded: an unbounded fit ran for minutes on 6 points here
    fit_gpytorch_mll(
        ExactMarginalLogLikelihood(model.likelihood, model),
        optimizer_kwargs={"options": {"maxiter": QNEHVI_MAXITER}},
    )
    acqf = qLogNoisyExpectedHypervolumeImprovement(
        model=model,
        ref_point=(train_obj.min(dim=0).values - 1e-8).tolist(),
        X_baseline=train_x,
        prune_baseline=True,
        sampler=SobolQMCNormalSampler(sample_shape=torch.Size([QNEHVI_MC_SAMPLES])),
        X_pending=pending_x,
        **extra,
    )
    unit = torch.zeros_like(bounds)
    unit[1] = 1
    candidates, _ = optimize_acqf(
        acq_function=acqf,
        bounds=unit,
        q=1,
        num_restarts=QNEHVI_RESTARTS,
        raw_samples=QNEHVI_RAW_SAMPLES,
        options={"batch_limit": 4, "maxiter": QNEHVI_MAXITER},
    )
    return unnormalize(candidates.detach(), bounds=bounds)
