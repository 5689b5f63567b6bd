"""`mmspec compare-outputs`: two runs' cells, token for token."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq

from mmspec.cli import main


def test_identical_runs_agree_and_a_changed_token_or_a_missing_cell_is_named(
    tiny_run, tmp_path, capsys
):
    first = tiny_run / "results"
    second = tmp_path / "results"
    shutil.copytree(first / "generate", second / "generate")
    n = len(list((first / "generate").rglob("samples.parquet")))
    assert n == 6  # the tiny config's cells
    assert main(["compare-outputs", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{n} cells decode the same tokens, 0 differ")

    # one token of one sample of one cell changed: that cell is named, with where
    cell = next((second / "generate").rglob("method=sd/*/*/samples.parquet"))
    table = pq.read_table(cell)
    ids = table.column("output_ids").to_pylist()
    ids[1] = [ids[1][0] + 1, *ids[1][1:]]
    table = table.set_column(table.schema.get_field_index("output_ids"), "output_ids", [ids])
    pq.write_table(table, cell)
    removed = next((second / "generate").rglob("method=sage/*/*/samples.parquet"))
    removed.unlink()
    assert main(["compare-outputs", str(first), str(second)]) == 1
    out = capsys.readouterr().out
    assert f"{n - 2} cells decode the same tokens, 1 differ; 1 only in the first folder" in out
    assert "differs: dataset=toy_caption/pair=toy/method=sd/" in out and ": output_ids" in out
    assert "only in the first: dataset=toy_caption/pair=toy/method=sage/" in out


def test_a_damaged_samples_file_is_named_and_set_aside(tiny_run, tmp_path, capsys):
    first = tiny_run / "results"
    second = tmp_path / "results"
    shutil.copytree(first / "generate", second / "generate")
    cell = next((second / "generate").rglob("method=sd/*/*/samples.parquet"))
    cell.write_bytes(cell.read_bytes()[: cell.stat().st_size // 2])
    assert main(["compare-outputs", str(first), str(second)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mmspec compare-outputs: error: {cell}: corrupt or truncated Parquet")
    assert "moved aside to samples.parquet.damaged: the snakemake line" in err
    assert "\n" not in err and cell.with_name("samples.parquet.damaged").exists()
