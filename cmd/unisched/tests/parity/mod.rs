//! `docs/upstream-parity.md`, read as data: its tables, their rows, and the names in them.
//!
//! Two tests use it. `upstream_parity_page.rs` (ordinary) checks that every row says one of the
//! three states and that the rows agree with unisched's code; the real-control-plane tier
//! (`upstream_tier.rs`) checks that the page mentions every plugin, configuration field and
//! scheduler gate upstream's Go sources have ([`upstream`]). Both read the page through this
//! module so that they agree on what a row is.
//!
//! The page is plain Markdown: a `## ` heading, some prose, then one pipe table. A table row with
//! the wrong number of cells fails the reading loudly rather than being skipped, so a malformed
//! row cannot hide a name from either test.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod upstream;

use std::path::{Path, PathBuf};

/// The page, from the repository root.
pub const PAGE: &str = "docs/upstream-parity.md";
/// The tables, by their section heading.
pub const PLUGINS: &str = "Plugins";
pub const CONFIGURATION: &str = "KubeSchedulerConfiguration";
pub const PLUGIN_ARGS: &str = "Plugin args";
pub const GATES: &str = "Feature gates";
/// The column every table has for unisched's state, and the one for the reason.
pub const STATE_COLUMN: &str = "unisched";
pub const REASON_COLUMN: &str = "Why / notes";
/// The words the state column may hold.
pub const STATES: [&str; 3] = ["done", "different", "missing"];

/// One pipe table of the page.
#[derive(Debug)]
pub struct Table {
    pub heading: String,
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
}

/// One row: its cells, trimmed, and its line in the page (1-based) for messages.
#[derive(Debug)]
pub struct Row {
    pub line: usize,
    pub cells: Vec<String>,
}

impl Table {
    /// The index of a column by its header; panics naming the table when there is none.
    pub fn column(&self, header: &str) -> usize {
        self.columns
            .iter()
            .position(|c| c == header)
            .unwrap_or_else(|| panic!("{PAGE}: table {:?} has no column {header:?}", self.heading))
    }

    /// Each row's cell in a column.
    pub fn cells<'a>(&'a self, header: &str) -> impl Iterator<Item = (&'a Row, &'a str)> + 'a {
        let i = self.column(header);
        self.rows.iter().map(move |r| (r, r.cells[i].as_str()))
    }

    /// The first code span of each row's cell in a column (rows without one are left out).
    pub fn names(&self, header: &str) -> Vec<&str> {
        self.cells(header)
            .filter_map(|(_, cell)| code_spans(cell).first().copied())
            .collect()
    }
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Reads the page and its tables.
pub fn read_page() -> Vec<Table> {
    let path = repo().join(PAGE);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    tables(&text)
}

/// The table under a heading; panics when the page has none.
pub fn table<'a>(tables: &'a [Table], heading: &str) -> &'a Table {
    tables
        .iter()
        .find(|t| t.heading == heading)
        .unwrap_or_else(|| panic!("{PAGE} has no table under \"## {heading}\""))
}

/// The first pipe table after each `## ` heading.
pub fn tables(text: &str) -> Vec<Table> {
    let mut out: Vec<Table> = Vec::new();
    let mut heading: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        if let Some(h) = line.strip_prefix("## ") {
            heading = Some(h.trim().to_string());
            continue;
        }
        let Some(current) = heading.as_deref() else {
            continue;
        };
        let trimmed = line.trim();
        if !trimmed.starts_with('|') {
            continue;
        }
        let cells = split_row(trimmed);
        match out.last_mut().filter(|t| t.heading == current) {
            None => out.push(Table {
                heading: current.to_string(),
                columns: cells,
                rows: Vec::new(),
            }),
            Some(t)
                if cells
                    .iter()
                    .all(|c| !c.is_empty() && c.chars().all(|ch| ch == '-' || ch == ':')) =>
            {
                // The separator under the header.
                assert!(
                    t.rows.is_empty(),
                    "{PAGE}:{line_no}: a separator row inside a table"
                );
            }
            Some(t) => {
                assert_eq!(
                    cells.len(),
                    t.columns.len(),
                    "{PAGE}:{line_no}: {} cells where table {:?} has {} columns: {trimmed}",
                    cells.len(),
                    t.heading,
                    t.columns.len()
                );
                t.rows.push(Row { line: line_no, cells });
            }
        }
    }
    out
}

/// `| a | b |` → `["a", "b"]`.
fn split_row(line: &str) -> Vec<String> {
    let inner = line.strip_prefix('|').unwrap_or(line);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// The text of every `` `code span` `` in a cell, in order.
pub fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// Whether a dotted path from upstream's types (`profiles[].plugins.filter.enabled[].name`) is
/// the one a page row names (`profiles[].plugins.*.enabled[].name`): `*` stands for any one
/// segment, and list markers (`[]`) do not count, since Go's types say a field is a list where the
/// page may not.
pub fn path_matches(pattern: &str, path: &str) -> bool {
    let pattern = pattern.replace("[]", "");
    let path = path.replace("[]", "");
    let pattern: Vec<&str> = pattern.split('.').collect();
    let path: Vec<&str> = path.split('.').collect();
    pattern.len() == path.len() && pattern.iter().zip(&path).all(|(p, s)| *p == "*" || p == s)
}
