// mqlab site: sorting and filtering of tables, and choosing the runs to compare.
// Plain JavaScript, no library, no network: the pages work from file:// as from a host.
(function () {
  "use strict";

  // -- sorting: click (or Enter on) a column heading; again to reverse -----------------
  // A cell sorts by its data-sort value when it has one, else by its text; numbers as
  // numbers; an empty data-sort (an unknown figure) sorts last in either direction.
  function sortKey(row, col) {
    var cell = row.cells[col];
    if (!cell) return "";
    return cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
  }

  function compareKeys(a, b) {
    var na = Number(a), nb = Number(b);
    if (a !== "" && b !== "" && !isNaN(na) && !isNaN(nb)) return na - nb;
    return a.localeCompare(b, undefined, { numeric: true });
  }

  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      h.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (ra, rb) {
      var a = sortKey(ra, col), b = sortKey(rb, col);
      if (a === "" || b === "") return (a === "") - (b === ""); // unknown last
      var c = compareKeys(a, b);
      return ascending ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      if (th.classList.contains("nosort")) return;
      th.tabIndex = 0;
      th.title = "sort by " + th.textContent;
      th.addEventListener("click", function () { sortBy(table, col, th); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(table, col, th); }
      });
    });
  });

  // -- filtering: a row stays when its text has every word typed -----------------------
  function count(table) {
    var out = document.querySelector('[data-count-for="' + table.id + '"]');
    if (!out) return;
    var rows = table.tBodies[0].rows, shown = 0;
    for (var i = 0; i < rows.length; i++) {
      if (!rows[i].classList.contains("filtered-out") && !rows[i].classList.contains("deselected")) shown++;
    }
    out.textContent = shown + " of " + rows.length + " shown";
  }

  function applyFilter(table, text) {
    var words = text.toLowerCase().split(/\s+/).filter(Boolean);
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var hay = row.textContent.toLowerCase();
      var keep = words.every(function (w) { return hay.indexOf(w) !== -1; });
      row.classList.toggle("filtered-out", !keep);
    });
    count(table);
  }

  document.querySelectorAll("input[data-filter]").forEach(function (input) {
    var table = document.getElementById(input.getAttribute("data-filter"));
    if (!table || !table.tBodies.length) return;
    input.addEventListener("input", function () { applyFilter(table, input.value); });
    applyFilter(table, input.value);
  });

  // -- the index: tick runs, then open the comparison page with them -------------------
  var compareButton = document.getElementById("compare-picked");
  if (compareButton) {
    var picks = document.querySelectorAll("input.pick");
    var update = function () {
      var n = document.querySelectorAll("input.pick:checked").length;
      compareButton.disabled = n === 0;
      compareButton.textContent = n ? "Compare the " + n + " run(s) ticked" : "Compare the runs ticked";
    };
    picks.forEach(function (p) { p.addEventListener("change", update); });
    compareButton.addEventListener("click", function () {
      var ids = Array.prototype.map.call(
        document.querySelectorAll("input.pick:checked"),
        function (p) { return encodeURIComponent(p.value); });
      window.location.href = "compare.html#runs=" + ids.join(",");
    });
    update();
  }

  // -- the comparison page: show the runs ticked ------------------------------------
  var side = document.getElementById("side");
  if (side) {
    var boxes = document.querySelectorAll("input.show-run");
    var reference = document.getElementById("reference");
    var apply = function () {
      var brokers = {}, runs = {};
      boxes.forEach(function (b) {
        side.querySelectorAll('[data-col="' + b.getAttribute("data-col") + '"]').forEach(function (el) {
          el.classList.toggle("deselected", !b.checked);
        });
        if (b.checked) runs[b.value] = true;
      });
      if (reference) {
        Array.prototype.forEach.call(reference.tBodies[0].rows, function (row) {
          var run = row.getAttribute("data-run");
          if (run !== null) {
            if (runs[run]) brokers[row.getAttribute("data-broker")] = true;
          }
        });
        Array.prototype.forEach.call(reference.tBodies[0].rows, function (row) {
          var run = row.getAttribute("data-run");
          var keep = run !== null ? !!runs[run] : !!brokers[row.getAttribute("data-broker")];
          row.classList.toggle("deselected", !keep);
        });
        count(reference);
      }
    };
    var hash = window.location.hash;
    if (hash.indexOf("#runs=") === 0) {
      var wanted = {};
      hash.slice(6).split(",").forEach(function (id) {
        if (id) wanted[decodeURIComponent(id)] = true;
      });
      boxes.forEach(function (b) { b.checked = !!wanted[b.value]; });
    }
    boxes.forEach(function (b) { b.addEventListener("change", apply); });
    var all = document.getElementById("show-all"), none = document.getElementById("show-none");
    if (all) all.addEventListener("click", function () { boxes.forEach(function (b) { b.checked = true; }); apply(); });
    if (none) none.addEventListener("click", function () { boxes.forEach(function (b) { b.checked = false; }); apply(); });
    apply();
  }
})();
