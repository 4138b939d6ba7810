//! Finding our keys in an application's text, for the census and the naming probe: each place a key of ours can
//! start, walked with the layout's compiled pattern, in every reading of the text (JSON, HTML, `+`, percent-encoding,
//! both normal forms). A child of the layout's module, so that the walk reads the compiled pattern the layout keeps
//! private.

use std::borrow::Cow;
use std::collections::HashSet;

use regex_automata::hybrid::dfa::Cache;
use regex_automata::{Anchored, Input};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick, is_nfd_quick};

use super::{KEY_MAX, KeyClass, KeyLayout, Starts};

impl KeyLayout {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::tests::layout;

    const WS: &str = "0b6f9a7e-3c1d-4f5e-9a2b-7c8d9e0f1a2b";

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
}
