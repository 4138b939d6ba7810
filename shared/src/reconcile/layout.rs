//! Where this product's bytes live in the bucket and what their keys look like: the managed prefixes and the key
//! pattern. Only a key inside a managed prefix that matches the pattern can be one of ours; a key inside a managed
//! prefix that does not match it means another writer shares the location, and nothing there may be adopted (a
//! shared location is how other collectors have deleted another system's data).

use std::fmt;

use regex::Regex;
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
    /// The pattern anywhere in a text: what finds keys a record names.
    within: Regex,
    /// The pattern from a given position on: a key starting where a managed prefix occurs in a text.
    from: Regex,
    names_workspace: bool,
}

/// Where a key named in a text may end: URL and markup punctuation a key rarely holds. A match the pattern made
/// longer than the key (`[^/]+` eats a query string) is tried cut at each of them.
const KEY_ENDS: &[char] = &['?', '#', '"', '\'', '<', '>', ' ', '\t', '\n', '\r', ')', '(', ',', ';', '&', '\\', '|'];

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
        let within = compile(format!("(?:{pattern})"))?;
        let from = compile(format!("^(?:{pattern})"))?;
        let pattern = compile(format!("^(?:{pattern})$"))?;
        let names_workspace = pattern.capture_names().any(|n| n == Some("workspace"));
        Ok(KeyLayout { prefixes: listed, pattern, within, from, names_workspace })
    }

    /// Names this layout for the key scan: a scan made with another layout proves nothing about this one.
    pub fn signature(&self) -> String {
        format!("{}\u{1f}{}", self.prefixes.join(","), self.pattern.as_str())
    }

    /// The keys of ours that `text` names: as a key, a path or inside a URL (percent-encoded or not). Generous
    /// on purpose: a key named here is kept, so a text is read every way a key could be cut out of it.
    pub fn named_in(&self, text: &str) -> Vec<String> {
        let mut found = Vec::new();
        let decoded = text.contains('%').then(|| percent_encoding::percent_decode_str(text).decode_utf8_lossy());
        for text in std::iter::once(text).chain(decoded.as_deref()) {
            let mut candidates: Vec<&str> = self.within.find_iter(text).map(|m| m.as_str()).collect();
            for prefix in self.prefixes.iter().filter(|p| !p.is_empty()) {
                for (at, _) in text.match_indices(prefix.as_str()) {
                    candidates.extend(self.from.find(&text[at..]).map(|m| m.as_str()));
                }
            }
            for candidate in candidates {
                let cuts = candidate.match_indices(KEY_ENDS).map(|(at, _)| &candidate[..at]);
                for key in std::iter::once(candidate).chain(cuts) {
                    if matches!(self.classify(key), KeyClass::Ours { .. }) && !found.iter().any(|f| f == key) {
                        found.push(key.to_owned());
                    }
                }
            }
        }
        found
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
        assert_eq!(l.named_in(&key), vec![key.clone()]);
        let json = format!(r#"{{"hero": {{"src": "/{key}"}}, "n": 2}}"#);
        assert!(l.named_in(&json).contains(&key), "{:?}", l.named_in(&json));
        let spaced = format!("uploads/{WS}/my photo.png");
        let encoded = format!("https://cdn.example.com/uploads/{WS}/my%20photo.png");
        assert!(l.named_in(&encoded).contains(&spaced), "{:?}", l.named_in(&encoded));
        assert!(l.named_in("uploads/not-a-workspace/photo.png and exports/x").is_empty());
        let two = format!("{key}, uploads/{WS}/other.png");
        let named = l.named_in(&two);
        assert!(named.contains(&key) && named.contains(&format!("uploads/{WS}/other.png")), "{named:?}");
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
