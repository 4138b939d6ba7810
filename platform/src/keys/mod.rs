//! Where this product's bytes live in the bucket and what their keys look like: the managed prefixes and the key
//! pattern. Only a key inside a managed prefix that matches the pattern can be one of ours; a key inside a managed
//! prefix that does not match it means another writer shares the location, and nothing there may be adopted (a
//! shared location is how other collectors have deleted another system's data).

use std::fmt;

use aho_corasick::AhoCorasick;
use regex::Regex;
use regex_automata::MatchKind;
use regex_automata::hybrid::dfa::DFA;
use uuid::Uuid;

use crate::WorkspaceId;

mod text;

pub use text::SpanReader;

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

    pub(super) fn layout() -> KeyLayout {
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
    fn a_layout_that_cannot_be_meant_is_refused() {
        assert!(matches!(KeyLayout::new("", "x"), Err(LayoutError::Prefixes(_))));
        assert!(matches!(KeyLayout::new("a/,,b/", "x"), Err(LayoutError::Prefixes(_))));
        assert!(matches!(KeyLayout::new("a/", "("), Err(LayoutError::Pattern(_))));
        let optional = KeyLayout::new("a/", "a/(?P<workspace>[0-9a-f-]{36}/)?x").expect("a layout");
        assert_eq!(optional.classify("a/x"), KeyClass::OffPattern { prefix: "a/" });
    }
}
