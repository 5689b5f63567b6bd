"""Tables that page, sort and filter in the browser, drawn a page at a time from embedded JSON.

A table of a big sweep has thousands of rows; drawn at once they make the page slow to open and
impossible to read. The page renders a table's header; its rows travel as JSON in a
<script type='application/json'> (with <, > and & escaped, so no data string can end the script
or become markup), and TABLE_JS, inlined once in the page head, draws PAGE_ROWS of them at a
time: sorted by the header clicked (again: reversed), filtered by the text typed (over all the
rows, not the page's), paged with prev / next. A row may carry sub-rows (a pooled row's seeds),
drawn under it while its ▸ button is open.

Cells are text, set with textContent, never HTML: a cell is its text, or [text, class, title].
In the `labels` columns a "^MT" suffix is drawn as a superscript, as `label_html` does.
"""

from __future__ import annotations

import json

from mmspec.report.formatting import esc

PAGE_ROWS = 25

# Each div.data-table: its JSON rows drawn into its tbody, a page at a time. Numbers sort as
# numbers and a missing value ("–") sorts last either way; the filter keeps the rows whose text
# contains what is typed (case-insensitive). Writes text only (textContent), never HTML.
TABLE_JS = """
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("div.data-table").forEach(function (box) {
    var data = JSON.parse(box.querySelector("script.table-data").textContent);
    var table = box.querySelector("table"), body = table.tBodies[0];
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    var filter = box.querySelector("input.filter"), info = box.querySelector(".page-info");
    var prev = box.querySelector("button.prev"), next = box.querySelector("button.next");
    function text(cell) { return typeof cell === "string" ? cell : cell[0]; }
    var rows = data.rows.map(function (r, i) {
      return {r: r, i: i, text: r.c.map(text).join(" ").toLowerCase()};
    });
    var shown = rows, page = 0, open = {};
    function key(row, j) {
      var t = text(row.r.c[j]);
      if (!data.numeric[j]) return t;
      var x = parseFloat(t);
      return isNaN(x) ? null : x;
    }
    function label(td, t) {
      t.split(/\\^(\\w+)/).forEach(function (part, k) {
        if (k % 2) {
          var sup = document.createElement("sup");
          sup.textContent = part;
          td.appendChild(sup);
        } else if (part) {
          td.appendChild(document.createTextNode(part));
        }
      });
    }
    function tr(r) {
      var el = document.createElement("tr");
      if (r.k) el.className = r.k;
      r.c.forEach(function (cell, j) {
        var td = document.createElement("td");
        if (data.labels[j]) label(td, text(cell)); else td.textContent = text(cell);
        if (data.numeric[j]) td.classList.add("num");
        if (typeof cell !== "string") {
          if (cell[1]) td.className += " " + cell[1];
          if (cell[2]) td.title = cell[2];
        }
        el.appendChild(td);
      });
      return el;
    }
    function draw() {
      var pages = Math.max(1, Math.ceil(shown.length / data.page));
      page = Math.max(0, Math.min(page, pages - 1));
      body.textContent = "";
      shown.slice(page * data.page, (page + 1) * data.page).forEach(function (row) {
        var el = tr(row.r), subs = row.r.s || [];
        if (subs.length) {
          var button = document.createElement("button");
          button.type = "button";
          button.className = "expand";
          button.textContent = open[row.i] ? "▾" : "▸";
          button.title = (open[row.i] ? "hide" : "show") + " the " + subs.length + " seeds";
          button.setAttribute("aria-expanded", open[row.i] ? "true" : "false");
          button.addEventListener("click", function () { open[row.i] = !open[row.i]; draw(); });
          el.cells[0].insertBefore(button, el.cells[0].firstChild);
        }
        body.appendChild(el);
        if (open[row.i]) subs.forEach(function (s) {
          var sub = tr(s);
          sub.classList.add("sub-row");
          body.appendChild(sub);
        });
      });
      var first = shown.length ? page * data.page + 1 : 0;
      var last = Math.min(shown.length, (page + 1) * data.page);
      info.textContent = "rows " + first + "–" + last + " of " + shown.length +
        (shown.length < rows.length ? " (filtered from " + rows.length + ")" : "") +
        " · page " + (page + 1) + " of " + pages;
      prev.disabled = page === 0;
      next.disabled = page >= pages - 1;
    }
    function refilter() {
      var q = filter.value.trim().toLowerCase();
      shown = q === "" ? rows : rows.filter(function (row) { return row.text.indexOf(q) >= 0; });
    }
    heads.forEach(function (th, j) {
      th.title = "click to sort";
      th.addEventListener("click", function () {
        var up = th.getAttribute("aria-sort") !== "ascending";
        heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", up ? "ascending" : "descending");
        rows.sort(function (a, b) {
          var x = key(a, j), y = key(b, j);
          if (x === null || y === null) return (x === null) - (y === null) || a.i - b.i;
          var c = typeof x === "number" ? x - y : x.localeCompare(y, undefined, {numeric: true});
          return (up ? c : -c) || a.i - b.i;
        });
        refilter();
        page = 0;
        draw();
      });
    });
    filter.addEventListener("input", function () { refilter(); page = 0; draw(); });
    prev.addEventListener("click", function () { page -= 1; draw(); });
    next.addEventListener("click", function () { page += 1; draw(); });
    draw();
  });
});
"""


def cell(text: str, cls: str = "", title: str = "") -> str | list[str]:
    """A table cell: its text, or [text, class, title] when it has a class or a title."""
    if not cls and not title:
        return text
    return [text, cls, title] if title else [text, cls]


def row(cells: list, cls: str = "", subs: list[dict] | None = None) -> dict:
    """A table row: its cells, its class, and the sub-rows shown under it on a click."""
    found: dict = {"c": cells}
    if cls:
        found["k"] = cls
    if subs:
        found["s"] = subs
    return found


def script_json(value: object) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' (they are \\u-escaped),
    so no string can close the element or start a comment."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(
    columns: list[str],
    rows: list[dict],
    numeric: set[str],
    labels: set[str] = frozenset(),
    table_class: str = "cells",
    page_rows: int = PAGE_ROWS,
) -> str:
    """A data table: the filter, the header (`columns`, escaped), the pager and the rows as JSON
    (each `row(...)`: one cell per column)."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    data = {
        "page": page_rows,
        "numeric": [c in numeric for c in columns],
        "labels": [c in labels for c in columns],
        "rows": rows,
    }
    return (
        "<div class='data-table'>"
        "<input type='search' class='filter' placeholder='filter rows' "
        "aria-label='filter the rows of this table'>"
        f"<div class='scroll'><table class='{table_class}'><thead><tr>{head}</tr></thead>"
        "<tbody></tbody></table></div>"
        "<div class='pager'><button type='button' class='prev'>‹ prev</button> "
        "<span class='page-info'></span> <button type='button' class='next'>next ›</button>"
        "<noscript> (the rows are drawn by JavaScript)</noscript></div>"
        f"<script type='application/json' class='table-data'>{script_json(data)}</script>"
        "</div>"
    )
