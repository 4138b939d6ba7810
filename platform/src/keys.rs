//! Where this product's bytes live in the bucket and what their keys look like: the managed prefixes and the key
//! pattern. Only a key inside a managed prefix that matches the pattern can be one of ours; a key inside a managed
//! prefix that does not match it means another writer shares the location, and nothing there may be adopted (a
//! shared location is how other collectors have deleted another system's data).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use aho_corasick::AhoCorasick;
use regex::Regex;
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::{Anchored, Input, MatchKind};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick, is_nfd_quick};
use uuid::Uuid;

use crate::WorkspaceId;

/// The workspace of bytes whose key names none (a pattern without a `workspace` group): an adopted asset of it
/// belongs to no application workspace, and the brake counts it as one workspace of its own.
pub const UNOWNED: WorkspaceId = WorkspaceId(Uuid::nil());

/// What `RECONCILE_PREFIXES` and `RECONCILE_KEY_PATTERN` say about the bucket.
#[derive(Debug, Clone)]
pub struct KeyLayout {
    prefixes: Vec<String>,
    pattern: Regex,
    /// Where in a text a key of ours can start.
    starts: Starts,
    /// The pattern as a lazy DFA, walked from a start: every end at which a whole key matches, in one walk.
    walk: DFA,
    names_workspace: bool,
}

/// The places of a text a key of ours can start at.
#[derive(Debug, Clone)]
enum Starts {
    /// The whole bucket: every character.
    Everywhere,
    /// Each occurrence of a managed prefix, overlapping ones too, found in one pass. Only the prefixes no other
    /// starts with: `uploads/avatars/` occurs where `uploads/` does, so each place is found once.
    At(AhoCorasick),
}

/// The longest key S3 stores, in bytes.
const KEY_MAX: usize = 1024;

/// What one key is to reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyClass<'a> {
    /// Outside every managed prefix: never read, never touched.
    Outside,
    /// Inside `prefix` and matching the pattern: bytes this product writes, of `workspace`.
    Ours {
        /// The longest managed prefix the key starts with.
        prefix: &'a str,
        /// The workspace the key names, or [`UNOWNED`].
        workspace: WorkspaceId,
    },
    /// Inside `prefix` but off the pattern: another writer's, which makes the whole prefix untouchable.
    OffPattern {
        /// The longest managed prefix the key starts with.
        prefix: &'a str,
    },
}

/// Why a layout cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// No prefix, or an empty one.
    #[error("must list at least one key prefix, comma-separated (`*` for the whole bucket), got {0:?}")]
    Prefixes(String),
    /// The pattern is not a regular expression.
    #[error("is not a regular expression: {0}")]
    Pattern(String),
}

impl KeyLayout {
    /// `prefixes` is the comma-separated list (`*` alone: the whole bucket); `pattern` a regular expression that
    /// must match a whole key, with an optional named group `workspace` that captures the workspace's uuid.
    pub fn new(prefixes: &str, pattern: &str) -> Result<Self, LayoutError> {
        let listed: Vec<String> = if prefixes.trim() == "*" {
            vec![String::new()]
        } else {
            let listed: Vec<String> = prefixes.split(',').map(|p| p.trim().to_owned()).collect();
            if listed.iter().any(String::is_empty) {
                return Err(LayoutError::Prefixes(prefixes.to_owned()));
            }
            listed
        };
        let compile = |text: String| Regex::new(&text).map_err(|e| LayoutError::Pattern(e.to_string()));
        // The pattern matches whole keys; a key named in a text is found by asking, at each place, whether a key of
        // ours can start there (`from`), which an assertion about what follows the key would answer wrongly.
        let body = pattern.strip_suffix("\\z").or_else(|| pattern.strip_suffix('$')).unwrap_or(pattern);
        let body = if body.ends_with('\\') { pattern } else { body };
        if let Some(assertion) = lookaround(body) {
            return Err(LayoutError::Pattern(format!(
                "{assertion} asserts what surrounds a key: the pattern is matched against whole keys already, and \
                 keys named inside texts could not be found with it"
            )));
        }
        let walk = key_walk(body)?;
        let pattern = compile(format!("^(?:{pattern})$"))?;
        let names_workspace = pattern.capture_names().any(|n| n == Some("workspace"));
        let starts = starts(&listed).map_err(|_| LayoutError::Prefixes(prefixes.to_owned()))?;
        Ok(KeyLayout { prefixes: listed, pattern, starts, walk, names_workspace })
    }

    /// Names this layout for the key scan: a scan made with another layout proves nothing about this one.
    pub fn signature(&self) -> String {
        format!("{}\u{1f}{}", self.prefixes.join(","), self.pattern.as_str())
    }

    /// The keys of ours that `text` names: as a key, a path or inside a URL, in JSON or HTML, percent-encoded or
    /// not, in either Unicode normal form. Generous on purpose (a key named here is kept): from every place a key of
    /// ours could start — each occurrence of a managed prefix, overlapping ones too, or for the whole bucket every
    /// character — every end up to S3's 1024 bytes at which a whole key of ours stops counts. The text is read as
    /// written and with each of these undone, in this order and in every combination: JSON's escapes, HTML's
    /// character references (`&amp;`, `&#47;`, `&#x2F;`, `&sol;`: those ending in `;`), `+` as a space,
    /// percent-encoding; each of those readings also in NFC and in NFD. A key is reported as the reading spells it:
    /// one written in NFD is found in NFD and in NFC, so a key stored in either form is found; one stored in
    /// neither form (mixed) only when written as stored.
    ///
    /// Linear in the text: the prefixes are found in one pass, and from each start the pattern is walked as a DFA
    /// once, reporting every end as it goes and stopping where the pattern can go no further (at the first
    /// character a `[0-9a-f-]{36}` cannot take) or at 1024 bytes. So a byte is walked at most 1024 times per
    /// reading, by the starts within 1024 bytes before it: a pattern that takes every character (`.+`) does that
    /// from every character with the whole bucket, which bounds the work at about 1024 steps a byte (1 GB of walk
    /// for 1 MB of text); with a prefix, only from each of its occurrences. On top come the keys found: each is
    /// hashed and classified once, at most 1024 of them per start.
    pub fn named_in(&self, text: &str) -> Vec<String> {
        let mut cache = self.walk.create_cache();
        let mut scan = Scan { layout: self, cache: &mut cache, found: HashSet::new(), spans: false };
        scan.read(text, 0);
        scan.found.into_iter().collect()
    }

    /// What the census keeps of [`Self::named_in`]: for each place a key of ours starts, in each reading, the text
    /// from there to the end of the longest whole match of the pattern (a **span**). A key of ours is named exactly
    /// when some span starts with it: the key matches the pattern, so the walk from that start met its end, which
    /// the span reaches. One span per place instead of one key per end: a pattern like `[^/]+` stops at about fifty
    /// ends in an ordinary URL, and a text full of keys would otherwise note fifty times its keys.
    pub fn spans_in(&self, text: &str) -> Vec<String> {
        self.span_reader().spans_in(text)
    }

    /// A reader of spans for many texts in turn ([`SpanReader::spans_in`]): the walk's lazy DFA keeps the states it
    /// built for one text for the next, where a fresh one per text built them again each time (a fifth of a census
    /// batch's time in the census benchmark).
    pub fn span_reader(&self) -> SpanReader<'_> {
        SpanReader { layout: self, cache: self.walk.create_cache() }
    }

    /// The managed prefixes, longest first; `""` is the whole bucket.
    pub fn prefixes(&self) -> Vec<&str> {
        let mut sorted: Vec<&str> = self.prefixes.iter().map(String::as_str).collect();
        sorted.sort_by_key(|p| std::cmp::Reverse(p.len()));
        sorted
    }

    /// What `key` is: outside, ours (and whose), or another writer's.
    pub fn classify(&self, key: &str) -> KeyClass<'_> {
        let Some(prefix) = self.prefixes.iter().filter(|p| key.starts_with(p.as_str())).max_by_key(|p| p.len()) else {
            return KeyClass::Outside;
        };
        let Some(captures) = self.pattern.captures(key) else { return KeyClass::OffPattern { prefix } };
        if !self.names_workspace {
            return KeyClass::Ours { prefix, workspace: UNOWNED };
        }
        // A uuid in any letter case names the same workspace; anything else there (or a `workspace` group the
        // match skipped) is not one of our keys.
        match captures.name("workspace").map(|m| Uuid::parse_str(m.as_str())) {
            Some(Ok(id)) if !id.is_nil() => KeyClass::Ours { prefix, workspace: WorkspaceId(id) },
            _ => KeyClass::OffPattern { prefix },
        }
    }
}

/// The pattern without its final anchor as a lazy DFA that reports every end of a match (`MatchKind::All`: a
/// leftmost-first DFA would stop at a preferred shorter match). Anchored at a start, it matches exactly the whole
/// keys the pattern matches, because nothing in `body` looks past a key's end.
fn key_walk(body: &str) -> Result<DFA, LayoutError> {
    DFA::builder()
        // A pattern too large for the default cache still runs, with the smallest cache that works.
        .configure(DFA::config().match_kind(MatchKind::All).skip_cache_capacity_check(true))
        .build(&format!("(?:{body})"))
        .map_err(|e| LayoutError::Pattern(e.to_string()))
}

/// Where keys can start for `prefixes`; an error only for prefixes too large to hold in memory.
fn starts(prefixes: &[String]) -> Result<Starts, aho_corasick::BuildError> {
    if prefixes.iter().any(String::is_empty) {
        return Ok(Starts::Everywhere);
    }
    let mut searched: Vec<&str> = Vec::new();
    for prefix in prefixes {
        if !prefixes.iter().any(|other| other != prefix && prefix.starts_with(other.as_str()))
            && !searched.contains(&prefix.as_str())
        {
            searched.push(prefix);
        }
    }
    AhoCorasick::new(searched).map(Starts::At)
}

/// [`KeyLayout::spans_in`] for many texts, with one cache for the walk.
pub struct SpanReader<'a> {
    layout: &'a KeyLayout,
    cache: Cache,
}

impl SpanReader<'_> {
    /// [`KeyLayout::spans_in`] of `text`.
    pub fn spans_in(&mut self, text: &str) -> Vec<String> {
        let mut scan = Scan { layout: self.layout, cache: &mut self.cache, found: HashSet::new(), spans: true };
        scan.read(text, 0);
        scan.found.into_iter().collect()
    }
}

/// One call of [`KeyLayout::named_in`] (or, with `spans`, [`KeyLayout::spans_in`]): the walk's cache, and the keys
/// (or spans) found so far.
struct Scan<'a> {
    layout: &'a KeyLayout,
    cache: &'a mut Cache,
    found: HashSet<String>,
    spans: bool,
}

/// The spellings `named_in` undoes, in order: each gives the readings of a text it changes (none when it would
/// change nothing, so a plain ASCII text is read once).
const READINGS: [fn(&str) -> Vec<String>; 5] =
    [json_reading, html_reading, plus_reading, percent_reading, normal_forms];

impl Scan<'_> {
    /// Reads `text` as it is and as each spelling from `stage` on undone, depth first: at most one reading per
    /// stage is held at a time.
    fn read(&mut self, text: &str, stage: usize) {
        let Some(undo) = READINGS.get(stage) else { return self.keys_in(text) };
        self.read(text, stage + 1);
        for reading in undo(text) {
            self.read(&reading, stage + 1);
        }
    }

    fn keys_in(&mut self, text: &str) {
        match &self.layout.starts {
            Starts::Everywhere => {
                for (start, _) in text.char_indices() {
                    self.walk(text, start);
                }
            }
            Starts::At(prefixes) => {
                for found in prefixes.find_overlapping_iter(text) {
                    self.walk(text, found.start());
                }
            }
        }
    }

    /// Walks the pattern from `start`, noting each key of ours that ends on the way.
    fn walk(&mut self, text: &str, start: usize) {
        let mut limit = text.len().min(start.saturating_add(KEY_MAX));
        while !text.is_char_boundary(limit) {
            limit -= 1;
        }
        let Some(window) = text.get(start..limit) else { return };
        if self.spans {
            if let Some(end) = self.last_end(window) {
                self.span(window.get(..end));
            }
            return;
        }
        let dfa = &self.layout.walk;
        let Ok(mut state) = dfa.start_state_forward(self.cache, &Input::new(window).anchored(Anchored::Yes)) else {
            return self.every_end(window, 0);
        };
        for (at, byte) in window.bytes().enumerate() {
            state = match dfa.next_state(self.cache, state, byte) {
                Ok(next) if !next.is_quit() => next,
                _ => return self.every_end(window, at),
            };
            // A DFA's match shows one byte late: a match state here means a key ends before this byte.
            if state.is_match() {
                self.note(window.get(..at));
            }
            if state.is_dead() {
                return;
            }
        }
        match dfa.next_eoi_state(self.cache, state) {
            Ok(end) if end.is_match() => self.note(Some(window)),
            Ok(_) => {}
            Err(_) => self.every_end(window, window.len()),
        }
    }

    /// The end of the longest whole match of the pattern at the start of `window`; the whole window where the walk
    /// gave up (it cannot with this configuration), so a span then reaches every end there could be.
    fn last_end(&mut self, window: &str) -> Option<usize> {
        let dfa = &self.layout.walk;
        let Ok(mut state) = dfa.start_state_forward(self.cache, &Input::new(window).anchored(Anchored::Yes)) else {
            return Some(window.len());
        };
        let mut last = None;
        for (at, byte) in window.bytes().enumerate() {
            state = match dfa.next_state(self.cache, state, byte) {
                Ok(next) if !next.is_quit() => next,
                _ => return Some(window.len()),
            };
            if state.is_match() && at > 0 {
                last = Some(at);
            }
            if state.is_dead() {
                return last;
            }
        }
        match dfa.next_eoi_state(self.cache, state) {
            Ok(end) if end.is_match() => Some(window.len()),
            Ok(_) => last,
            Err(_) => Some(window.len()),
        }
    }

    fn span(&mut self, span: Option<&str>) {
        let Some(span) = span.filter(|s| !s.is_empty()) else { return };
        if !self.found.contains(span) {
            self.found.insert(span.to_owned());
        }
    }

    /// Where the walk gave up (it cannot with this configuration: the cache is never abandoned and no byte makes
    /// it quit), every end from `from` on is classified instead.
    fn every_end(&mut self, window: &str, from: usize) {
        for end in (from.max(1)..=window.len()).filter(|end| window.is_char_boundary(*end)) {
            self.note(window.get(..end));
        }
    }

    fn note(&mut self, key: Option<&str>) {
        let Some(key) = key.filter(|k| !k.is_empty()) else { return };
        if !self.found.contains(key) && matches!(self.layout.classify(key), KeyClass::Ours { .. }) {
            self.found.insert(key.to_owned());
        }
    }
}

fn json_reading(text: &str) -> Vec<String> {
    if !text.contains('\\') {
        return Vec::new();
    }
    changed(text, json_unescaped(text))
}

fn html_reading(text: &str) -> Vec<String> {
    match html_escape::decode_html_entities(text) {
        Cow::Owned(decoded) => changed(text, decoded),
        Cow::Borrowed(_) => Vec::new(),
    }
}

/// A space in a form-encoded query string.
fn plus_reading(text: &str) -> Vec<String> {
    if !text.contains('+') {
        return Vec::new();
    }
    vec![text.replace('+', " ")]
}

fn percent_reading(text: &str) -> Vec<String> {
    if !text.contains('%') {
        return Vec::new();
    }
    changed(text, percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned())
}

/// `text` in NFC and in NFD, those that differ from it.
fn normal_forms(text: &str) -> Vec<String> {
    let mut forms = Vec::new();
    if is_nfc_quick(text.chars()) != IsNormalized::Yes {
        forms.extend(changed(text, text.nfc().collect()));
    }
    if is_nfd_quick(text.chars()) != IsNormalized::Yes {
        forms.extend(changed(text, text.nfd().collect()));
    }
    forms
}

fn changed(text: &str, reading: String) -> Vec<String> {
    if reading == text { Vec::new() } else { vec![reading] }
}

/// `text` with JSON's string escapes undone (`\/`, `\uXXXX` with surrogate pairs, `\n` and the rest); an escape
/// that is not one is kept as written.
fn json_unescaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut units: Vec<u16> = Vec::new();
    let flush = |units: &mut Vec<u16>, out: &mut String| {
        out.extend(char::decode_utf16(units.drain(..)).map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER)));
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            flush(&mut units, &mut out);
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u16::from_str_radix(&hex, 16) {
                    Ok(unit) if hex.len() == 4 => units.push(unit),
                    _ => {
                        flush(&mut units, &mut out);
                        out.push_str("\\u");
                        out.push_str(&hex);
                    }
                }
            }
            Some(e) => {
                flush(&mut units, &mut out);
                out.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    other => other,
                });
            }
            None => {
                flush(&mut units, &mut out);
                out.push('\\');
            }
        }
    }
    flush(&mut units, &mut out);
    out
}

/// The first assertion in `pattern` about the text around a match (`$`, `\z`, `\b`, `\B`, `\<`, `\>`), outside
/// character classes, if any.
fn lookaround(pattern: &str) -> Option<String> {
    let mut chars = pattern.chars();
    let mut class = 0usize;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('z' | 'b' | 'B' | '<' | '>')) if class == 0 => return Some(format!("\\{e}")),
                _ => {}
            },
            '[' => class += 1,
            ']' if class > 0 => class -= 1,
            '$' if class == 0 => return Some("$".to_owned()),
            _ => {}
        }
    }
    None
}

impl fmt::Display for KeyLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefixes: Vec<String> = self
            .prefixes
            .iter()
            .map(|p| if p.is_empty() { "the whole bucket".to_owned() } else { p.clone() })
            .collect();
        write!(f, "keys under {} matching {}", prefixes.join(", "), self.pattern.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WS: &str = "0b6f9a7e-3c1d-4f5e-9a2b-7c8d9e0f1a2b";

    fn layout() -> KeyLayout {
        KeyLayout::new("uploads/, uploads/avatars/", r"uploads/(avatars/)?(?P<workspace>[0-9a-fA-F-]{36})/[^/]+")
            .expect("a layout")
    }

    #[test]
    fn a_key_is_ours_outside_or_another_writers() {
        let l = layout();
        let ours = format!("uploads/{WS}/photo.png");
        assert_eq!(
            l.classify(&ours),
            KeyClass::Ours { prefix: "uploads/", workspace: WorkspaceId(WS.parse().expect("uuid")) }
        );
        assert_eq!(l.classify("exports/report.csv"), KeyClass::Outside);
        assert_eq!(l.classify("uploads/backup.tar"), KeyClass::OffPattern { prefix: "uploads/" });
        // The longest prefix is the one a key is counted under.
        assert_eq!(l.classify("uploads/avatars/x"), KeyClass::OffPattern { prefix: "uploads/avatars/" });
        // 36 characters that are not a uuid name no workspace: not a key of ours.
        let fake = "uploads/------------------------------------/a.png";
        assert_eq!(l.classify(fake), KeyClass::OffPattern { prefix: "uploads/" });
        // The pattern matches whole keys only.
        assert_eq!(l.classify(&format!("{ours}/thumb")), KeyClass::OffPattern { prefix: "uploads/" });
    }

    #[test]
    fn the_whole_bucket_and_an_unowned_pattern() {
        let l = KeyLayout::new("*", r"[0-9a-f]{2}/[0-9a-f]{64}").expect("a layout");
        assert_eq!(l.prefixes(), vec![""]);
        let key = format!("ab/{}", "0".repeat(64));
        assert_eq!(l.classify(&key), KeyClass::Ours { prefix: "", workspace: UNOWNED });
        assert_eq!(l.classify("README"), KeyClass::OffPattern { prefix: "" });
    }

    #[test]
    fn keys_are_found_in_urls_paths_and_documents_however_they_are_cut() {
        let l = layout();
        let key = format!("uploads/{WS}/photo.png");
        let url = format!("<img src=\"https://cdn.example.com/{key}?w=640&h=480\">");
        assert!(l.named_in(&url).contains(&key), "{:?}", l.named_in(&url));
        assert!(l.named_in(&key).contains(&key));
        let json = format!(r#"{{"hero": {{"src": "/{key}"}}, "n": 2}}"#);
        assert!(l.named_in(&json).contains(&key), "{:?}", l.named_in(&json));
        let spaced = format!("uploads/{WS}/my photo.png");
        let encoded = format!("https://cdn.example.com/uploads/{WS}/my%20photo.png");
        assert!(l.named_in(&encoded).contains(&spaced), "{:?}", l.named_in(&encoded));
        assert!(l.named_in("uploads/not-a-workspace/photo.png and exports/x").is_empty());
        let two = format!("{key}, uploads/{WS}/other.png");
        let named = l.named_in(&two);
        assert!(named.contains(&key) && named.contains(&format!("uploads/{WS}/other.png")), "{named:?}");
        // Ends no list of punctuation foresees, escaped slashes, and a key encoded whole in a query string.
        for text in [
            format!("see {key}."),
            format!("[{key}]"),
            format!("`{key}`"),
            format!(r#"{{"src":"uploads\/{WS}\/photo.png"}}"#),
            format!("/_next/image?url=%2Fuploads%2F{WS}%2Fphoto.png&w=640"),
        ] {
            assert!(l.named_in(&text).contains(&key), "{text}: {:?}", l.named_in(&text));
        }
    }

    #[test]
    fn keys_between_letters_behind_json_escapes_and_overlapping_prefixes_are_found() {
        let l = layout();
        let key = format!("uploads/{WS}/写真.png");
        for text in [
            format!("写真は{key}を参照"),
            format!(r#"{{"src": "uploads/{WS}/\u5199\u771f.png"}}"#),
            format!("/img?key=uploads%2F{WS}%2F%E5%86%99%E7%9C%9F.png"),
        ] {
            assert!(l.named_in(&text).contains(&key), "{text}: {:?}", l.named_in(&text));
        }
        let spaced = KeyLayout::new("uploads/", r"uploads/(?P<workspace>[0-9a-f-]{36})/.+").expect("a layout");
        let text = format!("/img?key=uploads%2F{WS}%2Fmy+photo.png");
        assert!(spaced.named_in(&text).contains(&format!("uploads/{WS}/my photo.png")), "{text}");
        let nested = KeyLayout::new("x/x/", r"x/x/.+").expect("a layout");
        assert!(nested.named_in("x/x/x/a").contains(&"x/x/a".to_owned()));
    }

    #[test]
    fn a_pattern_asserting_what_surrounds_a_key_is_refused_and_a_final_anchor_is_allowed() {
        for pattern in [r"a/\b.+", r"a/.+$x", r"a/(\z)", r"a/.+\>"] {
            assert!(matches!(KeyLayout::new("a/", pattern), Err(LayoutError::Pattern(_))), "{pattern}");
        }
        for pattern in [r"a/[$]+", r"^a/.+$", r"a/.+\z"] {
            assert!(KeyLayout::new("a/", pattern).is_ok(), "{pattern}");
        }
        let dollar = KeyLayout::new("a/", r"a/\$\d+").expect("an escaped dollar is a character");
        assert!(dollar.named_in("see a/$1 here").contains(&"a/$1".to_owned()));
        let anchored = KeyLayout::new("a/", r"^a/[a-z]+\.png$").expect("a layout");
        assert!(anchored.named_in("a/x.png and a/y.png").contains(&"a/x.png".to_owned()));
    }

    #[test]
    fn the_whole_bucket_finds_every_key_of_a_line() {
        let l = KeyLayout::new("*", r"(?P<workspace>[0-9a-f-]{36})/.+").expect("a layout");
        let other = "1c6f9a7e-3c1d-4f5e-9a2b-7c8d9e0f1a2b";
        let text = format!(r#"["{WS}/a.png","{other}/b.png"] and {WS}/c d.png."#);
        let named = l.named_in(&text);
        for key in [format!("{WS}/a.png"), format!("{other}/b.png"), format!("{WS}/c d.png")] {
            assert!(named.contains(&key), "{key}: {named:?}");
        }
    }

    #[test]
    fn keys_written_with_html_character_references_are_found() {
        let l = layout();
        let key = format!("uploads/{WS}/R&D plan.png");
        for text in [
            format!(r#"<img src="https://cdn.example.com/uploads/{WS}/R&amp;D plan.png?w=640&amp;h=480">"#),
            format!("uploads&#47;{WS}&#47;R&#38;D plan.png"),
            format!("uploads&#x2F;{WS}&#x2f;R&amp;D&#32;plan.png"),
            format!("uploads&sol;{WS}&sol;R&AMP;D plan.png"),
            // HTML in a JSON string, percent-encoded in a query string.
            format!(r#"{{"html": "<a href=\"/img?key=uploads%2F{WS}%2FR%26D+plan.png&amp;w=1\">"}}"#),
        ] {
            assert!(l.named_in(&text).contains(&key), "{text}: {:?}", l.named_in(&text));
        }
        // A reference that is not one stays as written.
        let odd = format!("uploads/{WS}/a&#xZZ;b.png");
        assert!(l.named_in(&odd).contains(&odd), "{:?}", l.named_in(&odd));
    }

    #[test]
    fn a_key_in_either_normal_form_is_found_in_both() {
        let l = layout();
        let nfc = format!("uploads/{WS}/caf\u{e9}.png");
        let nfd = format!("uploads/{WS}/cafe\u{301}.png");
        // Stored in NFC, named in NFD (as macOS writes file names) and the other way round: each text finds both
        // spellings, so whichever the bucket holds is named.
        for text in [format!("see {nfd}"), format!("see {nfc}"), format!("/img?key=uploads%2F{WS}%2Fcafe%CC%81.png")] {
            let named = l.named_in(&text);
            assert!(named.contains(&nfc) && named.contains(&nfd), "{text}: {named:?}");
        }
        // A prefix with an accent: found in a text of the other form as the prefix is configured.
        let accented = KeyLayout::new("caf\u{e9}/", "caf\u{e9}/[a-z]+\\.png").expect("a layout");
        let named = accented.named_in("see cafe\u{301}/menu.png");
        assert_eq!(named, vec!["caf\u{e9}/menu.png".to_owned()]);
        let decomposed = KeyLayout::new("cafe\u{301}/", "cafe\u{301}/[a-z]+\\.png").expect("a layout");
        assert_eq!(decomposed.named_in("see caf\u{e9}/menu.png"), vec!["cafe\u{301}/menu.png".to_owned()]);
    }

    #[test]
    fn a_megabyte_dense_with_keys_is_read_whole() {
        let l = layout();
        let mut text = String::new();
        let mut keys = Vec::new();
        while text.len() < 1 << 20 {
            let key = format!("uploads/{WS}/{}.png", keys.len());
            text.push_str(&format!("<img src=\"https://cdn.example.com/{key}?w=640&amp;h=480\"> "));
            keys.push(key);
        }
        let named: HashSet<String> = l.named_in(&text).into_iter().collect();
        assert!(keys.iter().all(|k| named.contains(k)), "{} keys, {} named", keys.len(), named.len());
        // A comment that is one long run of keys, no separator between them: each is still found.
        let run: String = keys.iter().take(20_000).map(String::as_str).collect();
        let named: HashSet<String> = l.named_in(&run).into_iter().collect();
        assert!(keys.iter().take(20_000).all(|k| named.contains(k)));
        // The whole bucket and a pattern that takes any character: every cut of the text up to 1024 bytes, from
        // every character.
        let any = KeyLayout::new("*", ".+").expect("a layout");
        let text = "ab".repeat(640);
        let mut named = any.named_in(&text);
        named.sort_by_key(String::len);
        assert_eq!(named.len(), 2 * 1024, "every cut starting with a and with b");
        assert_eq!(named.last().map(String::len), Some(1024));
    }

    #[test]
    fn adjacent_and_overlapping_keys_are_each_found() {
        let l = layout();
        let (a, b) = (format!("uploads/{WS}/a.png"), format!("uploads/{WS}/b.png"));
        let named = l.named_in(&format!("{a}{b}"));
        // The first key runs into the second up to its `/`: every cut of it that the pattern takes counts.
        assert!(named.contains(&a) && named.contains(&b) && named.contains(&format!("{a}uploads")), "{named:?}");
        let nested = KeyLayout::new("uploads/, uploads/avatars/", r"uploads/(avatars/)?[a-z]+\.png").expect("a layout");
        let named = nested.named_in("uploads/avatars/me.png");
        assert!(named.contains(&"uploads/avatars/me.png".to_owned()), "{named:?}");
        // Prefixes overlapping themselves: every occurrence is a start.
        let xs = KeyLayout::new("x/x/", r"x/x/[a-z/]+").expect("a layout");
        let named: HashSet<String> = xs.named_in("x/x/x/x/a").into_iter().collect();
        let expected: HashSet<String> =
            ["x/x/x/x/a", "x/x/x/a", "x/x/a", "x/x/x/x/", "x/x/x/", "x/x/x", "x/x/x/x"].map(str::to_owned).into();
        assert_eq!(named, expected);
    }

    #[test]
    fn keys_are_cut_at_1024_bytes() {
        let l = KeyLayout::new("a/", "a/[a-z写]+").expect("a layout");
        let long = format!("a/{}", "x".repeat(2_000));
        let longest = l.named_in(&long).into_iter().map(|k| k.len()).max();
        assert_eq!(longest, Some(1024));
        let exact = format!("a/{}", "x".repeat(1022));
        assert!(l.named_in(&format!("{exact}!")).contains(&exact));
        // A character that would cross the limit ends the key before it.
        let straddling = format!("a/{}写", "x".repeat(1020));
        let longest = l.named_in(&straddling).into_iter().map(|k| k.len()).max();
        assert_eq!(longest, Some(1022));
    }

    /// The keys of ours `text` names as written, found the slow way: every end from every start.
    fn every_cut(l: &KeyLayout, text: &str, prefix: &str) -> HashSet<String> {
        let mut found = HashSet::new();
        for start in (0..text.len()).filter(|i| text.get(*i..).is_some_and(|rest| rest.starts_with(prefix))) {
            for end in (start + 1..=text.len().min(start + KEY_MAX)).filter(|e| text.is_char_boundary(*e)) {
                if matches!(l.classify(&text[start..end]), KeyClass::Ours { .. }) {
                    found.insert(text[start..end].to_owned());
                }
            }
        }
        found
    }

    #[test]
    fn the_walk_finds_what_trying_every_end_finds() {
        let l = layout();
        let fragments = ["uploads/", WS, "/", "a", ".png", " ", "写", "uploads/avatars/", "-", "\"", "x"];
        let mut seed = 0x2545_f491_u64;
        for _ in 0..200 {
            let mut text = String::new();
            for _ in 0..24 {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                text.push_str(fragments[usize::try_from(seed >> 33).expect("small") % fragments.len()]);
            }
            let named: HashSet<String> = l.named_in(&text).into_iter().collect();
            assert_eq!(named, every_cut(&l, &text, "uploads/"), "{text}");
            // What the census keeps: each key named is the start of a span, and each span starts with one.
            let spans = l.spans_in(&text);
            assert!(named.iter().all(|k| spans.iter().any(|s| s.starts_with(k.as_str()))), "{text}: {spans:?}");
            assert!(spans.len() <= text.matches("uploads/").count() * 5, "one span a start and reading: {spans:?}");
            for span in &spans {
                assert!(l.pattern.is_match(span) || named.iter().any(|k| span.starts_with(k.as_str())), "{span}");
            }
        }
    }

    #[test]
    fn a_text_full_of_keys_keeps_one_span_where_it_names_fifty_cuts() {
        let l = layout();
        let text: String = (0..100).map(|i| format!("see https://cdn/uploads/{WS}/photo-{i}.png, then ")).collect();
        let named = l.named_in(&text);
        let spans = l.spans_in(&text);
        assert_eq!(spans.len(), 100);
        assert!(named.len() > 20 * spans.len(), "{}", named.len());
        for i in 0..100 {
            let key = format!("uploads/{WS}/photo-{i}.png");
            assert!(spans.iter().any(|s| s.starts_with(&key)), "{key}");
        }
    }

    #[test]
    fn one_reader_for_many_texts_finds_what_a_reader_for_each_finds() {
        let l = layout();
        let texts: Vec<String> = (0..50)
            .map(|i| match i % 3 {
                0 => format!("https://cdn/uploads/{WS}/photo-{i}.png?w=640"),
                1 => format!(r#"{{"src":"uploads\/{WS}\/doc-{i}.pdf"}}"#),
                _ => format!("no key here {i}"),
            })
            .collect();
        let mut reader = l.span_reader();
        for text in &texts {
            let mut once = l.spans_in(text);
            let mut reused = reader.spans_in(text);
            once.sort_unstable();
            reused.sort_unstable();
            assert_eq!(reused, once, "{text}");
        }
    }

    #[test]
    fn a_layout_that_cannot_be_meant_is_refused() {
        assert!(matches!(KeyLayout::new("", "x"), Err(LayoutError::Prefixes(_))));
        assert!(matches!(KeyLayout::new("a/,,b/", "x"), Err(LayoutError::Prefixes(_))));
        assert!(matches!(KeyLayout::new("a/", "("), Err(LayoutError::Pattern(_))));
        let optional = KeyLayout::new("a/", "a/(?P<workspace>[0-9a-f-]{36}/)?x").expect("a layout");
        assert_eq!(optional.classify("a/x"), KeyClass::OffPattern { prefix: "a/" });
    }
}
