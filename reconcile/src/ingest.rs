//! Keys into `reconcile_keys` in bulk with `COPY`, never a round trip per key. The rows are encoded where the keys
//! are read (for a report, on the thread that decompresses and parses it), so Postgres takes in one batch while
//! the next is being encoded: a `COPY` per file, fed as the file streams.

use std::fmt::Write as _;

use sqlx::PgConnection;
use sqlx::postgres::PgCopyIn;

use super::{BucketKey, ReconcileError};
use platform::keys::{KeyClass, KeyLayout};

/// What was written, or passed over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ingested {
    /// Keys inside the managed prefixes, written.
    pub keys: u64,
    /// Keys outside them, passed over.
    pub outside: u64,
}

impl std::ops::AddAssign for Ingested {
    fn add_assign(&mut self, other: Ingested) {
        self.keys += other.keys;
        self.outside += other.outside;
    }
}

/// Rows of `reconcile_keys` in COPY's text format: each key inside the managed prefixes with its prefix and the
/// workspace its key names (none for a key off the pattern).
pub struct Encoder<'a> {
    listing: i64,
    layout: &'a KeyLayout,
    data: String,
    ingested: Ingested,
}

impl<'a> Encoder<'a> {
    /// An encoder of rows for listing `listing`.
    pub fn new(listing: i64, layout: &'a KeyLayout) -> Self {
        Encoder { listing, layout, data: String::new(), ingested: Ingested::default() }
    }

    /// Adds `key`'s row, or counts it outside; a key no text column can hold is refused with the reason.
    pub fn push(&mut self, key: &BucketKey) -> Result<(), String> {
        let (prefix, workspace) = match self.layout.classify(&key.key) {
            KeyClass::Outside => {
                self.ingested.outside += 1;
                return Ok(());
            }
            KeyClass::Ours { prefix, workspace } => (prefix, Some(workspace)),
            KeyClass::OffPattern { prefix } => (prefix, None),
        };
        if key.key.contains('\0') {
            return Err(format!("key {:?} holds a NUL character, which no text column can", key.key));
        }
        let _ = write!(self.data, "{}\t", self.listing);
        escape(&mut self.data, &key.key);
        let _ = write!(self.data, "\t{}\t{}\t", key.byte_size, key.last_modified.format("%Y-%m-%d %H:%M:%S%.6f+00"));
        escape(&mut self.data, prefix);
        match workspace {
            Some(ws) => {
                let _ = writeln!(self.data, "\t{ws}");
            }
            None => self.data.push_str("\t\\N\n"),
        }
        self.ingested.keys += 1;
        Ok(())
    }

    /// The rows encoded since the last call, and what they count.
    pub fn take(&mut self) -> (String, Ingested) {
        (std::mem::take(&mut self.data), std::mem::take(&mut self.ingested))
    }
}

/// Starts a `COPY` into `reconcile_keys`; send it what [`Encoder::take`] gives.
pub async fn begin(conn: &mut PgConnection) -> Result<PgCopyIn<&mut PgConnection>, sqlx::Error> {
    conn.copy_in_raw(
        "COPY reconcile_keys (listing_id, storage_key, byte_size, last_modified, prefix, workspace_id) FROM STDIN",
    )
    .await
}

/// Writes the keys of `batch` inside `layout`'s prefixes into listing `listing`: one `COPY`.
pub async fn copy(
    conn: &mut PgConnection,
    listing: i64,
    layout: &KeyLayout,
    batch: &[BucketKey],
) -> Result<Ingested, ReconcileError> {
    let mut encoder = Encoder::new(listing, layout);
    for key in batch {
        encoder.push(key).map_err(ReconcileError::Key)?;
    }
    let (data, ingested) = encoder.take();
    if ingested.keys > 0 {
        let mut copy = begin(conn).await?;
        copy.send(data.as_bytes()).await?;
        copy.finish().await?;
    }
    Ok(ingested)
}

/// `text` in COPY's text format: a backslash, tab, newline or carriage return in a key must not end its field.
fn escape(out: &mut String, text: &str) {
    if !text.bytes().any(|b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r')) {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_with_copys_delimiters_stays_one_field() {
        let mut out = String::new();
        escape(&mut out, "ws/a\tb\\c\nd\re.png");
        assert_eq!(out, "ws/a\\tb\\\\c\\nd\\re.png");
    }

    #[test]
    fn rows_carry_the_prefix_and_workspace_and_keys_outside_are_only_counted() {
        let layout = KeyLayout::new("u/", "u/(?P<workspace>[0-9a-f-]{36})/[^/]+").expect("a layout");
        let ws = "0b6f9a7e-3c1d-4f5e-9a2b-7c8d9e0f1a2b";
        let at = chrono::DateTime::from_timestamp(1_764_547_200, 5_000).expect("a time");
        let key = |k: &str| BucketKey { key: k.to_owned(), byte_size: 7, last_modified: at };
        let mut encoder = Encoder::new(3, &layout);
        for k in [format!("u/{ws}/a.png"), "u/notes.txt".to_owned(), "other/x".to_owned()] {
            encoder.push(&key(&k)).expect("a key");
        }
        assert!(encoder.push(&key("u/\0")).is_err());
        let (data, ingested) = encoder.take();
        assert_eq!(ingested, Ingested { keys: 2, outside: 1 });
        assert_eq!(
            data,
            format!(
                "3\tu/{ws}/a.png\t7\t2025-12-01 00:00:00.000005+00\tu/\t{ws}\n\
                 3\tu/notes.txt\t7\t2025-12-01 00:00:00.000005+00\tu/\t\\N\n"
            )
        );
        assert_eq!(encoder.take().0, "", "taken once");
    }
}
