//! What a census batch reads: the columns of one table that stand at the same block ([`Group`]), each with what
//! its reading was chosen for ([`Column`]), and a range of the table's rows by their addresses ([`Rows`]). Shared by
//! the batch's two statements ([`super::scan`] for ids, [`super::named`] for keys) and by what plans them.

/// Columns of one table at the same point of their scans: read together, by one statement per batch.
#[derive(Clone)]
pub(super) struct Group {
    pub(super) relid: sqlx::postgres::types::Oid,
    /// The table's file when the work was planned: a scan that starts now is of this file.
    pub(super) filenode: Option<sqlx::postgres::types::Oid>,
    pub(super) next_block: i64,
    /// `schema.table` of the table holding the rows, quoted.
    pub(super) heap: String,
    /// Its size in blocks now.
    pub(super) blocks: i64,
    /// The batch size a statement timeout halved for this table, remembered across passes; `None`: the configured.
    pub(super) batch_blocks: Option<i64>,
    pub(super) columns: Vec<Column>,
}

#[derive(Clone)]
pub(super) struct Column {
    pub(super) attnum: i16,
    pub(super) name: String,
    pub(super) family: String,
    pub(super) shape: String,
    pub(super) json_paths: Vec<String>,
    /// `ids`, `keys` or `both`: what its exclusion leaves to read.
    pub(super) reads: String,
    /// The type (its oid) its reading was chosen for; 0 when it was retyped as it was planned.
    pub(super) type_oid: u32,
}

impl Group {
    /// Its columns, each with the type its reading was chosen for, as [`crate::typed::hold`] confirms them.
    pub(super) fn planned(&self) -> crate::typed::Planned {
        let mut planned = crate::typed::Planned::default();
        for column in &self.columns {
            planned.add(&self.heap, &column.name, column.type_oid);
        }
        planned
    }
}

impl Column {
    /// Whether the key scan reads it: a text, JSON or other value a key could be written in (not a uuid, not bytes),
    /// not excluded for keys (`asset_sweeper_keys_unscanned` says the same).
    pub(super) fn key_scanned(&self) -> bool {
        matches!(self.family.as_str(), "text" | "json" | "value") && self.reads != "ids"
    }

    /// Whether the asset ids in it are looked for: not excluded for ids.
    pub(super) fn ids_read(&self) -> bool {
        self.reads != "keys"
    }

    /// Whether the id search already fetches the value as the key scan reads it (a scalar written out whole, not a
    /// declared document, whose ids are read in the database): its keys are read from that text, with no second
    /// read of the block.
    pub(super) fn keys_read_with_ids(&self) -> bool {
        self.key_scanned() && self.shape == "scalar" && self.json_paths.is_empty()
    }
}

/// Rows by their address: `[from, to)`, each a `(block, line)` pair, as a `ctid` range (which Postgres reads
/// without touching the rest of the table).
#[derive(Debug, Clone, Copy)]
pub(super) struct Rows {
    pub(super) from: (i64, i32),
    pub(super) to: (i64, i32),
}

impl Rows {
    /// Every row of blocks `[from, to)`.
    pub(super) fn blocks(from: i64, to: i64) -> Self {
        Rows { from: (from, 0), to: (to, 0) }
    }

    /// The one row at line `line` of block `block`.
    pub(super) fn row(block: i64, line: i32) -> Self {
        Rows { from: (block, line), to: (block, line.saturating_add(1)) }
    }

    /// The range's bounds as `tid` literals, `$1` and `$2` of a batch's statement.
    pub(super) fn bounds(&self) -> (String, String) {
        (format!("({},{})", self.from.0, self.from.1), format!("({},{})", self.to.0, self.to.1))
    }
}
