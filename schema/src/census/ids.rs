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
const fn hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Which bytes are hex digits, by table: asked of most bytes of every text the census reads.
const IS_HEX: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte: u8 = 0;
    loop {
        table[byte as usize] = hex(byte).is_some();
        if byte == u8::MAX {
            break table;
        }
        byte += 1;
    }
};

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
    let mut found = HashSet::new();
    each_id_in(text, |id| {
        found.insert(id);
    });
    found
}

/// Calls `found` with every uuid written in `text`, in order, an id written twice twice: a batch's search keeps
/// nothing per value.
///
/// Every spelling begins with four hex digits and takes at least 32 bytes, so a place is tried only where four
/// hex digits begin: where the fourth byte from here is none, neither this place nor the three after it can
/// begin an id, and prose, whose letters a to f are hex digits, is crossed four bytes at a step. And every spelling
/// is 32 hex digits and hyphens alone, so it ends within the run of hex digits and hyphens it begins in: a run is
/// measured once, where its first four digits are met, and a place with fewer than 32 digits left before the run's
/// end is passed over with the rest of the run (an id, hyphenated or not, was tried at each of the 36 places of its
/// run, and its later groups' starts read up to 28 digits each before failing: a third of the census's own time).
pub(crate) fn each_id_in(text: &str, mut found: impl FnMut(Uuid)) {
    let bytes = text.as_bytes();
    let mut at = 0;
    // The end of the run `at` stands in, and the hex digits from `at` to it: measured where the run is met.
    let mut run: Option<(usize, usize)> = None;
    while at + 32 <= bytes.len() {
        if let Some(gap) = (0..4).rev().find(|&i| !IS_HEX[usize::from(bytes[at + i])]) {
            at += gap + 1;
            run = None;
            continue;
        }
        let (end, digits) = *run.get_or_insert_with(|| measured(bytes, at));
        if digits < 32 {
            at = end;
            run = None;
            continue;
        }
        let rest = &bytes[at..];
        if let Some(id) = hyphenated(rest) {
            found(id);
        }
        let continues_a_run = at > 0 && IS_HEX[usize::from(bytes[at - 1])];
        if !continues_a_run && let Some(id) = spelled(rest) {
            found(id);
        }
        run = Some((end, digits - usize::from(IS_HEX[usize::from(bytes[at])])));
        at += 1;
    }
}

/// Where the run of hex digits and hyphens that `bytes[at]` stands in ends, and how many hex digits it holds from
/// `at` on.
fn measured(bytes: &[u8], at: usize) -> (usize, usize) {
    let mut digits = 0;
    let mut end = at;
    while let Some(&byte) = bytes.get(end) {
        match (IS_HEX[usize::from(byte)], byte) {
            (true, _) => digits += 1,
            (false, b'-') => {}
            _ => break,
        }
        end += 1;
    }
    (end, digits)
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

    /// The search as first written: both spellings tried at every hex digit.
    fn tried_everywhere(text: &str) -> HashSet<Uuid> {
        let bytes = text.as_bytes();
        let mut found = HashSet::new();
        let mut previous_hex = false;
        for at in 0..bytes.len() {
            let is_hex = hex(bytes[at]).is_some();
            if is_hex {
                found.extend(hyphenated(&bytes[at..]));
                if !previous_hex {
                    found.extend(spelled(&bytes[at..]));
                }
            }
            previous_hex = is_hex;
        }
        found
    }

    #[test]
    fn skipping_what_cannot_begin_an_id_finds_what_trying_every_place_finds() {
        // Texts of hex digits, hyphens, braces and prose, with ids in every spelling at every offset, from a fixed
        // seed: whatever the skip passes over, trying every place would have found nothing there either.
        let plain = ID.replace('-', "");
        let fours: Vec<&str> = (0..8).map(|g| &plain[g * 4..g * 4 + 4]).collect();
        let pieces = [
            ID.to_owned(),
            ID.to_uppercase(),
            plain.clone(),
            fours.join("-"),
            format!("{{{plain}}}"),
            ID[..20].to_owned(),
            plain[..31].to_owned(),
        ];
        let alphabet = b"0123456789abcdefABCDEF-{} xyz/.";
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed % n as u64).expect("small")
        };
        let mut found_some = 0;
        for _ in 0..20_000 {
            let mut text = String::new();
            for _ in 0..next(12) {
                match next(3) {
                    0 => text.push_str(&pieces[next(pieces.len())]),
                    _ => (0..next(40)).for_each(|_| text.push(char::from(alphabet[next(alphabet.len())]))),
                }
            }
            let expected = tried_everywhere(&text);
            found_some += usize::from(!expected.is_empty());
            assert_eq!(ids_in(&text), expected, "{text}");
        }
        assert!(found_some > 5_000, "the texts hold ids: {found_some}");
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
