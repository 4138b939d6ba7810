//! Keys as AWS writes them into logs: URL-encoded, by S3 twice for most operations (a `%` in a key is `%2525`),
//! once for a batch delete and a lifecycle expiry, and by CloudFront once more than the viewer's own encoding. Which
//! applies to a line is not documented, so a key is every distinct way of decoding it, most likely first: a read
//! can only add a keep, never remove one, and a decoding that names no file of ours costs nothing.

use percent_encoding::percent_decode_str;

/// `raw` decoded twice, decoded once, and (when it holds a `+`) decoded once with `+` read as a space, as an HTML
/// form writes one; distinct, valid UTF-8 only.
pub(crate) fn candidates(raw: &str) -> Vec<String> {
    let mut keys: Vec<String> = Vec::with_capacity(2);
    let once = decoded(raw);
    if let Some(once) = &once
        && once.contains('%')
        && let Some(twice) = decoded(once)
    {
        keys.push(twice);
    }
    if let Some(once) = once {
        push_new(&mut keys, once);
    }
    if raw.contains('+')
        && let Some(spaced) = decoded(&raw.replace('+', " "))
    {
        push_new(&mut keys, spaced);
    }
    keys
}

fn decoded(raw: &str) -> Option<String> {
    if !raw.contains('%') {
        return Some(raw.to_owned());
    }
    percent_decode_str(raw).decode_utf8().ok().map(|k| k.into_owned())
}

fn push_new(keys: &mut Vec<String>, key: String) {
    if !keys.contains(&key) {
        keys.push(key);
    }
}

#[cfg(test)]
mod tests {
    use super::candidates;

    #[test]
    fn a_key_is_every_way_aws_may_have_encoded_it() {
        assert_eq!(candidates("photos/puppy.jpg"), ["photos/puppy.jpg"]);
        // S3's GET: `a b%.jpg` written `a%2520b%2525.jpg`.
        assert_eq!(candidates("a%2520b%2525.jpg"), ["a b%.jpg", "a%20b%25.jpg"]);
        assert_eq!(candidates("caf%C3%A9/%E6%97%A5.png"), ["café/日.png"]);
        assert_eq!(candidates("caf%25C3%25A9.png"), ["café.png", "caf%C3%A9.png"]);
        assert_eq!(candidates("a+b.jpg"), ["a+b.jpg", "a b.jpg"]);
        // Not UTF-8 once decoded: only what is.
        assert_eq!(candidates("bad%FF.jpg"), Vec::<String>::new());
        assert_eq!(candidates("%25FF"), ["%FF"]);
    }
}
