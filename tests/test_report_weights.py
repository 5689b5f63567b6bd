"""The ensemble weights section (TABED's weight policies)."""

from __future__ import annotations

from report_pages import block_rows, grid_cell, sections, weight_cells, weights_page

import mmspec.report.weights as report_weights


def test_no_weights_section_without_blocks(report):
    assert "Block efficiency by dataset" in report
    assert "Ensemble weights over decoding" not in report and "id='weights'" not in report


def test_weights_section(tmp_path):
    cell_rows = weight_cells()
    samples = ["s0", "s1", "s2", "s3"]
    blocks = [r for c in cell_rows if c["method"] != "ar" for r in block_rows(c, samples)]
    page = weights_page(tmp_path, cell_rows, blocks)
    section = sections(page)["Ensemble weights over decoding"]
    assert "href='#weights'" in page
    # one figure per dataset of the TABED cell
    assert section.count("Plotly.newPlot") == 2
    assert "d1 · TABED<sup>MT</sup> · g4 · seed 0" in section
    assert "seed 1" not in section and "Static" not in section
    # the first three sample-turns, as small multiples
    assert "sample s2 · turn 0" in section and "sample s3" not in section
    # the M share as a step line that holds the last step's value until its block ends
    assert section.count('"x":[0,3,5,10],"y":[0.7,0.5,0.2,0.2]') == 2 * 3
    # shading: blocks [0, 3) and [5, 10) all accepted (green), [3, 5) with a rejection (red)
    assert section.count('"width":[3,5],"x":[0,5]') == 2 * 3
    assert section.count('"width":[2],"x":[3]') == 2 * 3
    assert "[position, position + accepted + 1)" in section
    assert "M only" in section and "T only" in section and "static MT" in section


def test_weights_share_ignores_other_views_and_figure_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(report_weights, "MAX_WEIGHT_FIGURES", 1)
    cell_rows = [grid_cell("TABED^MTC", "MTC", d, 2.5) for d in ("d1", "d2")]
    steps = [(0, 2, 1, [0.6, 0.2, 0.2]), (2, 2, 2, [0.1, 0.3, 0.6])]
    blocks = [r for c in cell_rows for r in block_rows(c, ["s0"], steps)]
    section = sections(weights_page(tmp_path, cell_rows, blocks))["Ensemble weights over decoding"]
    assert section.count("Plotly.newPlot") == 1
    assert '"y":[0.75,0.25,0.25]' in section
    assert "1 more cell(s) not plotted" in section


def test_weights_section_without_eligible_cells(tmp_path):
    page = weights_page(tmp_path, [grid_cell("M", "M", "d1", 2.2)], [])
    section = sections(page)["Ensemble weights over decoding"]
    assert "Plotly.newPlot" not in section and "No cell has an ensemble" in section
