//! Names relative to a root: most frameworks store a path below a storage root, not the key (Django and Laravel
//! store `original_images/cat.png` for the key `media/original_images/cat.png`). A text or JSON value names an
//! adopted key relatively when the value is the key with leading path segments removed, down to its file name, as
//! written or percent-encoded. Generous on purpose: a false hold costs a few cents, a false delete a broken page.
//!
//! One pass over each value, never a search per key: [`candidates`] reads a value once for the names it could be
//! (the value itself, the path of a URL, each JSON string in it), [`Filter`] drops those whose file name no adopted
//! key has (a hash each), and the database resolves what is left by an index on the adopted keys' file names.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use percent_encoding::percent_decode_str;
use sqlx::PgConnection;
use sqlx::postgres::types::Oid;

/// S3's longest key: a longer value cannot name a key, relatively or not.
const LONGEST_KEY: usize = 1024;

/// The names `value` could give a key relative to a root: the value trimmed, and, when it is a JSON document, each
/// string in it; each also as the path of a URL (the host and query dropped), without a leading `/`, and
/// percent-decoded. Each at most [`LONGEST_KEY`] bytes, none empty or ending in `/` (a folder names no file).
pub(crate) fn candidates(value: &str, json: bool) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = value.trim();
    if trimmed.len() <= LONGEST_KEY {
        readings(trimmed, &mut out);
    }
    if json || trimmed.starts_with(['{', '[']) {
        for string in json_strings(trimmed) {
            readings(string.trim(), &mut out);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// `name` as written, as a URL's path, without a leading `/`, and percent-decoded: each reading a root may have cut.
fn readings(name: &str, out: &mut Vec<String>) {
    if name.is_empty() || name.len() > LONGEST_KEY {
        return;
    }
    let path = url_path(name).unwrap_or(name);
    let path = path.split(['?', '#']).next().unwrap_or(path);
    for reading in [name, path] {
        let bare = reading.trim_start_matches('/');
        if bare.is_empty() || bare.ends_with('/') {
            continue;
        }
        out.push(bare.to_owned());
        if bare.contains('%')
            && let Ok(decoded) = percent_decode_str(bare).decode_utf8()
            && decoded != bare
        {
            out.push(decoded.into_owned());
        }
    }
}

/// The path of `text` when it is an absolute URL (`scheme://host/path`) or a protocol-relative one (`//host/path`).
fn url_path(text: &str) -> Option<&str> {
    let rest = match text.find("://") {
        Some(at) if at > 0 && text[..at].chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) => {
            &text[at + 3..]
        }
        _ => text.strip_prefix("//")?,
    };
    rest.find('/').map(|slash| &rest[slash..])
}

/// Each string literal of a JSON text no longer than a key, unescaped: one pass, no document built. A text that is
/// not JSON yields whatever its quoted stretches hold, which only makes the scan more generous.
fn json_strings(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(open) = bytes[i..].iter().position(|b| *b == b'"').map(|p| p + i) {
        let mut j = open + 1;
        let mut escaped = false;
        while j < bytes.len() && bytes[j] != b'"' {
            escaped |= bytes[j] == b'\\';
            j += if bytes[j] == b'\\' { 2 } else { 1 };
        }
        let Some(literal) = text.get(open..(j + 1).min(text.len())) else { break };
        if j < bytes.len() && literal.len() - 2 <= LONGEST_KEY {
            let inner = &literal[1..literal.len() - 1];
            if !escaped {
                out.push(inner.to_owned());
            } else if let Ok(unescaped) = serde_json::from_str::<String>(literal) {
                out.push(unescaped);
            }
        }
        i = j + 1;
        if i >= bytes.len() {
            break;
        }
    }
    out
}

/// What follows a name's last `/`.
fn file_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// A file name's 64-bit FNV-1a hash: short names, hashed once per candidate, where SipHash cost more than the
/// lookup (measured by the census benchmark).
fn hashed(name: &str) -> u64 {
    file_name(name).bytes().fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The hashes are already hashes: the set's own hashing passes them through.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The adopted keys' file names, hashed, in a hash set: a candidate whose file name no adopted key has is dropped
/// without a question to the database, in one probe (a binary search over a million sorted hashes stalled on
/// memory at each step).
#[derive(Default)]
pub(super) struct Filter {
    hashes: HashSet<u64, BuildHasherDefault<Identity>>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({} file names)", self.hashes.len())
    }
}

impl Filter {
    pub(super) fn new<'k>(keys: impl IntoIterator<Item = &'k String>) -> Self {
        Filter { hashes: keys.into_iter().map(|k| hashed(k)).collect() }
    }

    /// Whether some adopted key may end like `name` (a hash collision only asks the database for nothing).
    pub(super) fn may_name(&self, name: &str) -> bool {
        self.hashes.contains(&hashed(name))
    }

    /// No adopted key at all.
    pub(super) fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

/// Notes, for the table `relid`, each adopted key a candidate names relative to a root (or whole), with its column,
/// as seen now: one statement for a batch, by the index on the adopted keys' file names. Answers how many (key,
/// column) pairs it noted.
pub(super) async fn note(
    conn: &mut PgConnection,
    relid: Oid,
    named: HashSet<(String, i16)>,
) -> Result<u64, sqlx::Error> {
    if named.is_empty() {
        return Ok(0);
    }
    let (names, attnums): (Vec<String>, Vec<i16>) = named.into_iter().unzip();
    // A key a value names whole is the span scan's (its prefix starts it); here only the keys named less a root.
    // One row per key and column, however many names of it the batch holds (`ON CONFLICT` takes a row once).
    let noted = sqlx::query!(
        "INSERT INTO named_keys (storage_key, relid, attnum, seen_at, relative)
         SELECT d.storage_key, $1::oid, c.attnum, now(), true
           FROM unnest($2::text[], $3::int2[]) AS c(name, attnum)
           JOIN adopted_assets d ON d.file_name = substring(c.name FROM '[^/]*$')
          WHERE right(d.storage_key, length(c.name) + 1) = '/' || c.name
          GROUP BY d.storage_key, c.attnum
         ON CONFLICT (storage_key, relid, attnum)
         DO UPDATE SET seen_at = EXCLUDED.seen_at, relative = named_keys.relative AND EXCLUDED.relative",
        relid,
        &names,
        &attnums,
    )
    .execute(conn)
    .await?;
    Ok(noted.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(value: &str, json: bool, name: &str) -> bool {
        candidates(value, json).iter().any(|c| c == name)
    }

    #[test]
    fn a_value_names_what_it_says_as_written_as_a_url_path_and_percent_decoded() {
        assert!(has("original_images/cat.png", false, "original_images/cat.png"));
        assert!(has("  /original_images/cat.png\n", false, "original_images/cat.png"));
        assert!(has("https://cdn.example.com/original_images/cat.png?w=640#top", false, "original_images/cat.png"));
        assert!(has("//cdn.example.com/original_images/cat.png", false, "original_images/cat.png"));
        assert!(has("documents/2026/11/Board%20Pack.pdf", false, "documents/2026/11/Board Pack.pdf"));
        assert!(has("documents/2026/11/Board%20Pack.pdf", false, "documents/2026/11/Board%20Pack.pdf"));
        assert!(has("3bx8kq0sd9f2mz7w1c4v6n5p0a", false, "3bx8kq0sd9f2mz7w1c4v6n5p0a"), "a bare key");
        assert!(candidates("images/", false).is_empty(), "a folder names no file");
        assert!(candidates("", false).is_empty());
    }

    #[test]
    fn a_json_document_names_what_each_of_its_strings_says_however_long_it_is() {
        let long = "x".repeat(5_000);
        let doc = format!(r#"{{"intro":"{long}","image":{{"file":"original_images\/cat.png"}},"n":[1,"a\"b.png"]}}"#);
        assert!(has(&doc, true, "original_images/cat.png"), "{:?}", candidates(&doc, true));
        assert!(has(&doc, true, "a\"b.png"));
        assert!(!candidates(&doc, true).iter().any(|c| c.len() > LONGEST_KEY));
        // A long text that is not JSON names nothing as a whole.
        assert!(candidates(&format!("{long}/cat.png"), false).is_empty());
    }

    #[test]
    fn the_filter_passes_names_ending_like_an_adopted_key_and_little_else() {
        let keys = ["media/original_images/cat.png".to_owned(), "2q9xk1".to_owned()];
        let filter = Filter::new(&keys);
        for name in ["original_images/cat.png", "cat.png", "other/cat.png", "2q9xk1"] {
            assert!(filter.may_name(name), "{name}");
        }
        assert!(!filter.may_name("original_images/dog.png"));
        assert!(Filter::new(&[]).is_empty());
    }
}
