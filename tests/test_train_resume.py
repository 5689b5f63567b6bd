"""A drafter head's training job keeps its collected sequences and training state in
`<out>.partial/`: interrupted, it resumes from them; a damaged one (torn by a crash, garbled,
not a state of this head) is named, dropped and made again, and the head is the one an
uninterrupted run trains."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from mmspec.methods.registry import resolve
from mmspec.stages import train_drafter

STEPS = 20  # a state is saved every 2 steps


@pytest.fixture(scope="module")
def job(tiny_cell):
    """(params, prepared, target visual cache) of a job training an EAGLE head on a tiny target."""
    root, target, _ = tiny_cell
    training = {**resolve("eagle", {"head_data": "x"}).head_training(), "head_steps": STEPS}
    params = {
        "pair": {"target": str(target), "dtype": "float32"},
        "kind": "eagle",
        "training": training,
        "generation": {"max_new_tokens": 8},
        "seed": 0,
    }
    return params, str(root / "prepared.parquet"), str(root / "target.parquet")


def _train(job, out) -> dict[str, torch.Tensor]:
    train_drafter.run(*job, str(out))
    return load_file(out / "model.safetensors")


@pytest.fixture(scope="module")
def whole(job, tmp_path_factory):
    """The weights of the head trained in one uninterrupted run."""
    return _train(job, tmp_path_factory.mktemp("whole") / "head")


def _interrupt(job, out, monkeypatch, after_saves: int = 3) -> None:
    """Run the job until it has saved its training state `after_saves` times, then stop it as a
    preemption would."""
    train_head = train_drafter.train_head

    def stopping(*args, save, **kwargs):
        saves = []

        def save_then_stop(state):
            save(state)
            saves.append(1)
            if len(saves) == after_saves:
                raise RuntimeError("preempted")

        return train_head(*args, save=save_then_stop, **kwargs)

    monkeypatch.setattr(train_drafter, "train_head", stopping)
    with pytest.raises(RuntimeError, match="preempted"):
        train_drafter.run(*job, str(out))
    monkeypatch.setattr(train_drafter, "train_head", train_head)


def _tear(path) -> str:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return "unreadable ("


def _without_optimiser(path) -> str:
    state = torch.load(path, weights_only=False)
    del state["optimiser"]
    torch.save(state, path)
    return "not a whole training state (no optimiser)"


def _head_of_another_shape(path) -> str:
    state = torch.load(path, weights_only=False)
    name = next(iter(state["head"]))
    state["head"][name] = torch.zeros(3)
    torch.save(state, path)
    return f"its head's weight {name} has another shape than this head's"


DAMAGES = {
    "a torn state": ("state.pt", _tear, "training starts again from step 0"),
    "a state without its optimiser": ("state.pt", _without_optimiser, "training starts again"),
    "a state of another head": ("state.pt", _head_of_another_shape, "training starts again"),
    "torn sequences": ("sequences.pt", _tear, "the target's answers are collected again"),
}


def test_an_interrupted_training_resumes_from_its_state(job, whole, tmp_path, monkeypatch, capsys):
    out = tmp_path / "head"
    _interrupt(job, out, monkeypatch)
    state = torch.load(tmp_path / "head.partial" / "state.pt", weights_only=False)
    assert state["step"] == 6
    capsys.readouterr()
    resumed = _train(job, out)
    assert "dropped" not in capsys.readouterr().err
    assert resumed.keys() == whole.keys()
    assert all(torch.equal(resumed[k], whole[k]) for k in whole)
    assert not (tmp_path / "head.partial").exists()


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_a_damaged_checkpoint_is_named_dropped_and_made_again(
    job, whole, tmp_path, monkeypatch, capsys, damage
):
    name, spoil, instead = DAMAGES[damage]
    out = tmp_path / "head"
    _interrupt(job, out, monkeypatch)
    path = tmp_path / "head.partial" / name
    what = spoil(path)
    capsys.readouterr()
    trained = _train(job, out)  # never a traceback
    err = capsys.readouterr().err
    assert f"{path}: {what}" in err and f"; dropped: {instead}" in err
    assert all(torch.equal(trained[k], whole[k]) for k in whole)
    assert not (tmp_path / "head.partial").exists()
