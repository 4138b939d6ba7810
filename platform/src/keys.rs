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
    /// The pattern from a given position on: whether a key of ours can start there.
    from: Regex,
    names_workspace: bool,
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
        let from = compile(format!("^(?:{body})"))?;
        let pattern = compile(format!("^(?:{pattern})$"))?;
        let names_workspace = pattern.capture_names().any(|n| n == Some("workspace"));
        Ok(KeyLayout { prefixes: listed, pattern, from, names_workspace })
    }

    /// Names this layout for the key scan: a scan made with another layout proves nothing about this one.
    pub fn signature(&self) -> String {
        format!("{}\u{1f}{}", self.prefixes.join(","), self.pattern.as_str())
    }

    /// The keys of ours that `text` names: as a key, a path or inside a URL, in JSON or HTML, percent-encoded or
    /// not. Generous on purpose (a key named here is kept): from every place a key of ours could start — each
    /// occurrence of a managed prefix, overlapping ones too, or for the whole bucket every character — every end up
    /// to S3's 1024 bytes is tried, and each that is a whole key of ours counts. The text is read as written, with
    /// JSON's escapes undone, with `+` as a space, and percent-decoded.
    pub fn named_in(&self, text: &str) -> Vec<String> {
        let mut readings: Vec<std::borrow::Cow<'_, str>> = vec![text.into()];
        if text.contains('\\') {
            readings.push(json_unescaped(text).into());
        }
        if text.contains('+') {
            // A space in a form-encoded query string.
            let spaced: Vec<String> = readings.iter().map(|r| r.replace('+', " ")).collect();
            readings.extend(spaced.into_iter().map(Into::into));
        }
        let decoded: Vec<std::borrow::Cow<'_, str>> = readings
            .iter()
            .filter(|r| r.contains('%'))
            .map(|r| percent_encoding::percent_decode_str(r).decode_utf8_lossy().into_owned().into())
            .collect();
        readings.extend(decoded);
        let mut found = Vec::new();
        for reading in &readings {
            self.keys_in(reading, &mut found);
        }
        found
    }

    fn keys_in(&self, text: &str, found: &mut Vec<String>) {
        let mut starts: Vec<usize> = Vec::new();
        for prefix in &self.prefixes {
            if prefix.is_empty() {
                starts.extend(text.char_indices().map(|(i, _)| i));
            } else {
                // Overlapping occurrences too: `x/x/` occurs twice in `x/x/x/`.
                let mut from = 0;
                while let Some(at) = text.get(from..).and_then(|rest| rest.find(prefix.as_str())) {
                    starts.push(from + at);
                    from += at + text[from + at..].chars().next().map_or(1, char::len_utf8);
                }
            }
        }
        starts.sort_unstable();
        starts.dedup();
        for start in starts {
            let rest = &text[start..];
            // No key of ours starts here at all: most places, rejected in one anchored search.
            if !self.from.is_match(rest) {
                continue;
            }
            let mut limit = rest.len().min(KEY_MAX);
            while !rest.is_char_boundary(limit) {
                limit -= 1;
            }
            let window = &rest[..limit];
            // Every end: a key may stop before any character, a letter of a language written without spaces too.
            let ends = window.char_indices().map(|(i, _)| i).chain([window.len()]);
            for end in ends.filter(|e| *e > 0) {
                let key = &window[..end];
                // The match alone first: most ends are no key, and a search without captures is the fast one.
                if self.pattern.is_match(key)
                    && matches!(self.classify(key), KeyClass::Ours { .. })
                    && !found.iter().any(|f| f == key)
                {
                    found.push(key.to_owned());
                }
            }
        }
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
    fn a_layout_that_cannot_be_meant_is_refused() {
        assert!(matches!(KeyLayout::new("", "x"), Err(LayoutError::Prefixes(_))));
        assert!(matches!(KeyLayout::new("a/,,b/", "x"), Err(LayoutError::Prefixes(_))));
        assert!(matches!(KeyLayout::new("a/", "("), Err(LayoutError::Pattern(_))));
        let optional = KeyLayout::new("a/", "a/(?P<workspace>[0-9a-f-]{36}/)?x").expect("a layout");
        assert_eq!(optional.classify("a/x"), KeyClass::OffPattern { prefix: "a/" });
    }
}
