//! Names relative to a root: most frameworks store a path below a storage root, not the key (Django and Laravel
//! store `original_images/cat.png` for the key `media/original_images/cat.png`). A text or JSON value names an
//! adopted key relatively when the value is the key with leading path segments removed, down to its file name, as
//! written or percent-encoded. Generous on purpose: a false hold costs a few cents, a false delete a broken page.
//!
//! One pass over each value, never a search per key: [`candidates`] reads a value once for the names it could be
//! (the value itself, the path of a URL, each JSON string in it), [`Names`] drops those whose file name no adopted
//! key has (a hash each) and, when the pass holds the adopted keys, finds the keys a name ends in right there, so
//! the database is sent only what is named; without them, it resolves the names by an index on the keys' file names.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use percent_encoding::percent_decode_str;

/// S3's longest key: a longer value cannot name a key, relatively or not.
const LONGEST_KEY: usize = 1024;

/// The names `value` could give a key relative to a root, each once: see [`each_candidate`].
pub(crate) fn candidates(value: &str, json: bool) -> Vec<String> {
    let mut out = Vec::new();
    each_candidate(value, json, |_| true, |name| out.push(name.to_owned()));
    out.sort_unstable();
    out.dedup();
    out
}

/// Calls `found` with each name `value` could give a key relative to a root: the value trimmed (unless it is a JSON
/// column's, whose text is JSON syntax: a name there is a string), and, when it is or looks like a JSON document,
/// each string in it; each also as the path of a URL (the host and query dropped), without a leading `/`, and
/// percent-decoded. Each at most [`LONGEST_KEY`] bytes, none empty or ending in `/` (a folder names no file); the
/// same name may come more than once. Borrowed where it can be: a census reads every short value of the schema
/// this way, and most of what it reads names nothing. `may_end` says whether a name ending like the one given
/// (after its last `/`) could name anything: where it says no, a name with no `?`, `#` or `%` (which a URL's query
/// or a percent-encoding could change the end of) is not read further.
pub(crate) fn each_candidate(value: &str, json: bool, may_end: impl Fn(&str) -> bool, mut found: impl FnMut(&str)) {
    let trimmed = value.trim();
    if !json && trimmed.len() <= LONGEST_KEY {
        readings(trimmed, &may_end, &mut found);
    }
    if json || trimmed.starts_with(['{', '[']) {
        json_strings(trimmed, |string| readings(string.trim(), &may_end, &mut found));
    }
}

/// `name` as written, as a URL's path, without a leading `/`, and percent-decoded: each reading a root may have cut.
/// Without `?`, `#` and `%`, each reading ends as `name` does (a URL's path is its end), so one question of `may_end`
/// settles them all.
fn readings(name: &str, may_end: &impl Fn(&str) -> bool, found: &mut impl FnMut(&str)) {
    if name.is_empty() || name.len() > LONGEST_KEY {
        return;
    }
    if memchr::memchr3(b'?', b'#', b'%', name.as_bytes()).is_none() && !may_end(name) {
        return;
    }
    let path = url_path(name).unwrap_or(name);
    // Bytes, not chars: both are ASCII, and a body of HTML is read this way for every value.
    let path = memchr::memchr2(b'?', b'#', path.as_bytes()).map_or(path, |end| &path[..end]);
    for (i, reading) in [name, path].into_iter().enumerate() {
        let bare = reading.trim_start_matches('/');
        if bare.is_empty() || bare.ends_with('/') || (i == 1 && reading == name) {
            continue;
        }
        found(bare);
        if bare.contains('%')
            && let Ok(decoded) = percent_decode_str(bare).decode_utf8()
            && decoded != bare
        {
            found(&decoded);
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

/// Calls `found` with each string literal of a JSON text no longer than a key, unescaped: one pass, no document
/// built. A text that is not JSON yields whatever its quoted stretches hold, which only makes the scan more generous.
fn json_strings(text: &str, mut found: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let mut i = 0;
    // memchr, not a loop over bytes: a document is mostly the inside of its strings, and every value of a JSON
    // column is read this way.
    while let Some(open) = memchr::memchr(b'"', &bytes[i..]).map(|p| p + i) {
        let mut j = open + 1;
        let mut escaped = false;
        while let Some(at) = bytes.get(j..).and_then(|rest| memchr::memchr2(b'"', b'\\', rest)) {
            j += at;
            if bytes[j] == b'"' {
                break;
            }
            escaped = true;
            j += 2;
        }
        j = j.min(bytes.len());
        if bytes.get(j) != Some(&b'"') {
            j = bytes.len();
        }
        let Some(literal) = text.get(open..(j + 1).min(text.len())) else { break };
        if j < bytes.len() && literal.len() - 2 <= LONGEST_KEY {
            if !escaped {
                found(&literal[1..literal.len() - 1]);
            } else if let Ok(unescaped) = serde_json::from_str::<String>(literal) {
                found(&unescaped);
            }
        }
        i = j + 1;
        if i >= bytes.len() {
            break;
        }
    }
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

/// The adopted keys' file names, hashed, in a hash map: a candidate whose file name no adopted key has is dropped
/// without a question to the database, in one probe (a binary search over a million sorted hashes stalled on
/// memory at each step). When the pass holds the keys, each hash leads to the keys with that file name (a run of
/// [`Names::runs`]), and a name is resolved to the keys it ends in here.
#[derive(Default)]
pub(super) struct Names {
    /// A file name's hash, and where its run of keys starts in `runs` ([`UNRESOLVED`] without the keys).
    hashes: HashMap<u64, u32, BuildHasherDefault<Identity>>,
    /// Indexes into the pass's sorted keys, those of one file name hash together.
    runs: Vec<(u64, u32)>,
    /// One bit per file name hash, sixteen bits a name, asked before `hashes`: two megabytes for a million names
    /// stay in the processor's cache where the map's probes missed it for nearly every name read (which named
    /// nothing), and slowed the span scan's search of the sorted keys beside them.
    bits: Bits,
}

/// A set of hashes that may answer yes for one it does not hold (about one in twenty at sixteen bits a hash), never
/// no for one it holds.
#[derive(Default)]
struct Bits {
    words: Vec<u64>,
}

impl Bits {
    fn of(hashes: impl ExactSizeIterator<Item = u64> + Clone) -> Self {
        let size = (hashes.len().max(1) * 16).next_power_of_two() / 64;
        let mut bits = Bits { words: vec![0; size.max(1)] };
        for hash in hashes {
            let (word, bit) = bits.at(hash);
            bits.words[word] |= bit;
        }
        bits
    }

    /// The word and the bit of `hash`: from its upper half, where the map's index comes from its lower bits.
    fn at(&self, hash: u64) -> (usize, u64) {
        let index = (hash >> 32) as usize & (self.words.len() * 64 - 1);
        (index / 64, 1 << (index % 64))
    }

    fn may_hold(&self, hash: u64) -> bool {
        let (word, bit) = self.at(hash);
        self.words.get(word).is_some_and(|w| w & bit != 0)
    }
}

/// A hash whose keys the pass does not hold: the database resolves names of that file name.
const UNRESOLVED: u32 = u32::MAX;

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Names({} file names, {} keys held)", self.hashes.len(), self.runs.len())
    }
}

/// What one batch found named relative to a root, per column.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// Adopted keys (indexes into the pass's keys) a name resolved to here.
    pub(super) keys: HashSet<(u32, i16)>,
    /// Names the database resolves: the pass does not hold the keys.
    pub(super) names: HashSet<(String, i16)>,
}

/// Keys or names, each with its column's attribute number: as a statement binds them, two arrays.
pub(super) type Pairs<K> = (Vec<K>, Vec<i16>);

impl Found {
    /// Nothing found.
    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.names.is_empty()
    }

    /// The keys resolved here by their text (`keys`: the pass's, which the indexes point into), with their columns;
    /// and the names left to the database, with theirs.
    pub(super) fn split(self, keys: Option<&[String]>) -> (Pairs<&str>, Pairs<String>) {
        let resolved = match keys {
            Some(keys) => self.keys.into_iter().map(|(index, attnum)| (keys[index as usize].as_str(), attnum)).unzip(),
            None => (Vec::new(), Vec::new()),
        };
        (resolved, self.names.into_iter().unzip())
    }
}

impl Names {
    /// The file names of `keys` (the pass's keys, sorted, indexed by their position), each leading to its keys.
    pub(super) fn resolving(keys: &[String]) -> Self {
        let mut runs: Vec<(u64, u32)> =
            keys.iter().enumerate().map(|(i, k)| (hashed(k), u32::try_from(i).unwrap_or(UNRESOLVED))).collect();
        runs.sort_unstable();
        let mut hashes = HashMap::with_capacity_and_hasher(runs.len(), BuildHasherDefault::default());
        for (at, (hash, _)) in runs.iter().enumerate() {
            hashes.entry(*hash).or_insert(u32::try_from(at).unwrap_or(UNRESOLVED));
        }
        let bits = Bits::of(runs.iter().map(|(hash, _)| *hash));
        Names { hashes, runs, bits }
    }

    /// The file names of keys the pass does not hold: a filter only.
    pub(super) fn filtering<'k>(file_names: impl IntoIterator<Item = &'k String>) -> Self {
        let hashes: HashMap<u64, u32, BuildHasherDefault<Identity>> =
            file_names.into_iter().map(|k| (hashed(k), UNRESOLVED)).collect();
        let bits = Bits::of(hashes.keys().copied());
        Names { hashes, runs: Vec::new(), bits }
    }

    /// No adopted key at all.
    pub(super) fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Whether some adopted key may have the file name `name` ends with (the bits alone: a few say yes in vain).
    pub(super) fn may_end(&self, name: &str) -> bool {
        self.bits.may_hold(hashed(name))
    }

    /// Notes in `found` what `name` (read in the column `attnum`) names relative to a root: each of `keys` it is the
    /// end of, after a `/` (a key named whole is the span scan's), or the name itself, for the database, when the
    /// pass does not hold the keys. Nothing when no adopted key has its file name.
    pub(super) fn resolve(&self, keys: Option<&[String]>, name: &str, attnum: i16, found: &mut Found) {
        let hash = hashed(name);
        if !self.bits.may_hold(hash) {
            return;
        }
        let Some(&start) = self.hashes.get(&hash) else { return };
        let Some(keys) = keys.filter(|_| start != UNRESOLVED) else {
            found.names.insert((name.to_owned(), attnum));
            return;
        };
        for &(_, index) in self.runs[start as usize..].iter().take_while(|(h, _)| *h == hash) {
            let key = keys[index as usize].as_bytes();
            if key.len() > name.len() && key.ends_with(name.as_bytes()) && key[key.len() - name.len() - 1] == b'/' {
                found.keys.insert((index, attnum));
            }
        }
    }
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
    fn a_name_no_key_could_end_like_is_read_no_further_unless_a_query_or_an_escape_could_change_its_end() {
        let cat = |name: &str| file_name(name) == "cat.png";
        let read = |value: &str| {
            let mut out = Vec::new();
            each_candidate(value, false, cat, |name| out.push(name.to_owned()));
            out
        };
        assert!(read("original_images/dog.png").is_empty());
        assert!(read("https://cdn.example.com/original_images/dog.png").is_empty());
        assert!(
            read("https://cdn.example.com/original_images/cat.png?w=640")
                .contains(&"original_images/cat.png".to_owned())
        );
        assert!(read("original_images/c%61t.png").contains(&"original_images/cat.png".to_owned()));
        assert!(read("original_images/cat.png#top").contains(&"original_images/cat.png".to_owned()));
        assert_eq!(read("/original_images/cat.png"), ["original_images/cat.png"]);
    }

    #[test]
    fn a_json_document_names_what_each_of_its_strings_says_however_long_it_is() {
        let long = "x".repeat(5_000);
        let doc = format!(r#"{{"intro":"{long}","image":{{"file":"original_images\/cat.png"}},"n":[1,"a\"b.png"]}}"#);
        assert!(has(&doc, true, "original_images/cat.png"), "{:?}", candidates(&doc, true));
        assert!(has(&doc, true, "a\"b.png"));
        // A JSON column's text is JSON syntax: a name there is a string, never the text as a whole.
        assert_eq!(candidates(r#""original_images/cat.png""#, true), ["original_images/cat.png"]);
        assert!(!candidates(&doc, true).iter().any(|c| c.len() > LONGEST_KEY));
        // A long text that is not JSON names nothing as a whole.
        assert!(candidates(&format!("{long}/cat.png"), false).is_empty());
    }

    #[test]
    fn a_json_string_ends_at_its_first_unescaped_quote_and_an_unterminated_one_is_no_name() {
        let strings = |text: &str| {
            let mut out = Vec::new();
            json_strings(text, |s| out.push(s.to_owned()));
            out
        };
        assert_eq!(strings(r#"{"a\\":"b\"c.png","d":"e"#), [r"a\", r#"b"c.png"#, "d"]);
        assert_eq!(strings(r#"["x.png","y\"#), ["x.png"]);
        assert_eq!(strings(r#""""#), [""]);
        assert!(strings("no quotes").is_empty());
    }

    #[test]
    fn a_name_resolves_to_the_held_keys_it_ends_in_after_a_slash_and_to_nothing_else() {
        let mut keys: Vec<String> =
            ["media/original_images/cat.png", "media/cat.png", "media/xcat.png", "2q9xk1", "media/thumbs/cat.png"]
                .map(str::to_owned)
                .to_vec();
        keys.sort_unstable();
        let names = Names::resolving(&keys);
        let resolved = |name: &str| {
            let mut found = Found::default();
            names.resolve(Some(&keys), name, 3, &mut found);
            assert!(found.names.is_empty());
            let mut out: Vec<&str> = found.keys.iter().map(|(i, _)| keys[*i as usize].as_str()).collect();
            out.sort_unstable();
            out
        };
        assert_eq!(resolved("original_images/cat.png"), ["media/original_images/cat.png"]);
        assert_eq!(resolved("cat.png"), ["media/cat.png", "media/original_images/cat.png", "media/thumbs/cat.png"]);
        assert!(resolved("other/cat.png").is_empty(), "the same file name under another folder");
        assert!(resolved("media/cat.png").is_empty(), "a key named whole is the span scan's");
        assert!(resolved("2q9xk1").is_empty(), "a bare key is named whole");
        assert!(resolved("original_images/dog.png").is_empty());
        assert!(Names::resolving(&[]).is_empty());
    }

    #[test]
    fn the_bits_hold_every_file_name_they_were_given_and_pass_few_others() {
        let held: Vec<String> = (0..10_000).map(|n| format!("media/original_images/img-{n}.png")).collect();
        let names = Names::resolving(&held);
        assert!(held.iter().all(|k| names.bits.may_hold(hashed(k))));
        let passed = (0..10_000).filter(|n| names.bits.may_hold(hashed(&format!("report-{n}.pdf")))).count();
        assert!(passed < 1_000, "{passed} of 10000 names no key has passed the bits");
    }

    #[test]
    fn without_the_keys_a_name_whose_file_name_an_adopted_key_has_is_left_to_the_database() {
        let file_names = ["cat.png".to_owned(), "2q9xk1".to_owned()];
        let names = Names::filtering(&file_names);
        let mut found = Found::default();
        for name in ["original_images/cat.png", "cat.png", "2q9xk1", "original_images/dog.png"] {
            names.resolve(None, name, 1, &mut found);
        }
        let mut left: Vec<&str> = found.names.iter().map(|(n, _)| n.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["2q9xk1", "cat.png", "original_images/cat.png"]);
        assert!(found.keys.is_empty());
    }
}
