//! Asset ids written in text, found in one pass over its bytes, in every spelling Postgres's `uuid` input accepts:
//! the hyphenated 8-4-4-4-12 wherever it stands, and 32 hex digits with a hyphen allowed after any group of four
//! (no hyphens at all, other groupings, inside braces) where they do not continue a run of hex digits — a reading
//! from the left could not tell where an id glued to other hex digits begins, and Postgres would not read such a
//! run as one either. Any letter case. The census and the schema check's sample read values with it: a regular
//! expression in the database costs a hundred times more per byte on text dense with digits, and this costs at
//! most a few dozen byte comparisons at each byte, however the text is made.

use std::collections::HashSet;

use uuid::Uuid;

/// A hex digit's value.
fn hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// The hyphenated spelling, 8-4-4-4-12, at the start of `text`.
fn hyphenated(text: &[u8]) -> Option<Uuid> {
    let text = text.get(..36)?;
    // Most places are no id: the hyphens' places first.
    if [8, 13, 18, 23].iter().any(|&i| text[i] != b'-') {
        return None;
    }
    let mut value: u128 = 0;
    for (i, &byte) in text.iter().enumerate() {
        if !matches!(i, 8 | 13 | 18 | 23) {
            value = (value << 4) | u128::from(hex(byte)?);
        }
    }
    Some(Uuid::from_u128(value))
}

/// Postgres's spellings at the start of `text`: eight groups of four hex digits, each but the first optionally
/// after one hyphen.
fn spelled(text: &[u8]) -> Option<Uuid> {
    let mut value: u128 = 0;
    let mut at = 0;
    for group in 0..8 {
        if group > 0 && text.get(at) == Some(&b'-') {
            at += 1;
        }
        for _ in 0..4 {
            value = (value << 4) | u128::from(hex(*text.get(at)?)?);
            at += 1;
        }
    }
    Some(Uuid::from_u128(value))
}

/// Every uuid written in `text`, each once.
pub(crate) fn ids_in(text: &str) -> HashSet<Uuid> {
    let bytes = text.as_bytes();
    let mut found = HashSet::new();
    let mut previous_hex = false;
    for at in 0..bytes.len() {
        let is_hex = hex(bytes[at]).is_some();
        if is_hex {
            let rest = &bytes[at..];
            if let Some(id) = hyphenated(rest) {
                found.insert(id);
            }
            if !previous_hex && let Some(id) = spelled(rest) {
                found.insert(id);
            }
        }
        previous_hex = is_hex;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";

    fn id() -> Uuid {
        Uuid::parse_str(ID).expect("an id")
    }

    #[test]
    fn every_spelling_postgres_accepts_is_found() {
        let plain = ID.replace('-', "");
        let fours: Vec<String> = plain.as_bytes().chunks(4).map(|c| String::from_utf8_lossy(c).into_owned()).collect();
        for text in [
            ID.to_owned(),
            ID.to_uppercase(),
            format!("https://cdn.example.com/i/{plain}.png"),
            plain.to_uppercase(),
            format!("{{{}}}", ID.to_uppercase()),
            format!("{{{plain}}}"),
            fours.join("-"),
            format!("a0eebc999c0b4ef8-{}", &plain[16..]),
            format!("x-{}", fours.join("-")),
            format!("\\x{plain}"),
        ] {
            assert!(ids_in(&text).contains(&id()), "{text}");
        }
    }

    #[test]
    fn the_hyphenated_spelling_is_found_glued_to_hex_digits_and_the_others_only_standing_apart() {
        // As the census's regular expressions always did: the usual spelling wherever it stands.
        assert!(ids_in(&format!("cafe-{ID}")).contains(&id()));
        assert!(ids_in(&format!("cafe{ID}")).contains(&id()));
        // A 64-digit hash is no id where it is cut in two (its first 32 digits are read, as Postgres would).
        let plain = ID.replace('-', "");
        assert!(!ids_in(&format!("beef{plain}")).contains(&id()));
        assert_eq!(ids_in(&format!("{plain}{plain}")).len(), 1);
    }

    #[test]
    fn what_is_not_a_whole_id_is_not_one() {
        for text in [
            "",
            "a0eebc99-9c0b-4ef8-bb6d",
            "2026-11-30, /blog/12-first-steps",
            "a0ee--bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
        ] {
            assert!(ids_in(text).is_empty(), "{text}");
        }
    }

    #[test]
    fn a_megabyte_dense_with_ids_yields_every_one() {
        let ids: Vec<Uuid> = (0..25_000u128).map(|n| Uuid::from_u128(n * 7_919 + 1)).collect();
        let text: String = ids.iter().map(|id| format!("see /i/{}.png, ", id.simple())).collect();
        assert!(text.len() > 1_000_000);
        let found = ids_in(&text);
        assert!(ids.iter().all(|id| found.contains(id)));
    }
}
