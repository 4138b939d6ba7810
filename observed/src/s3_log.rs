//! S3 server access logs: one request a line, fields separated by spaces, the time in brackets (it holds a space),
//! the request's URI, referrer and user agent in double quotes, any field `-` when it has no value, and fields AWS
//! adds at the end of a line over time (a parser must ignore what it does not know). The AWS documentation's
//! "Amazon S3 server access log format" lists them:
//!
//! ```text
//! owner bucket [time] ip requester request-id operation key "request-uri" status error bytes-sent object-size
//! total-time turn-around "referer" "user-agent" version-id host-id signature cipher auth host tls arn acl …
//! ```
//!
//! Everything up to the key is AWS's own and holds no space but the time's. The request's URI, referrer and user
//! agent are the requester's and may hold anything, a `"` included; the fields after them are AWS's again, and
//! none holds a quote.

use chrono::{DateTime, NaiveDate, TimeZone, Utc};

use crate::{Access, LineError};

/// The access `line` records (without its line break).
pub fn parse(line: &str) -> Result<Access<'_>, LineError> {
    let line = line.trim_end_matches(['\r', '\n']);
    // The first nine fields (the time is two words): each ends at a space, found in one pass over the line.
    const FIRST: [&str; 9] =
        ["bucket owner", "bucket", "time", "time", "remote IP", "requester", "request ID", "operation", "key"];
    let mut fields: [&str; 9] = [""; 9];
    let mut start = 0;
    let mut spaces = memchr::memchr_iter(b' ', line.as_bytes());
    for (at, name) in FIRST.iter().enumerate() {
        if start >= line.len() {
            return Err(LineError::Truncated(name));
        }
        let end = spaces.next().unwrap_or(line.len());
        fields[at] = &line[start..end];
        start = end + 1;
    }
    let rest = line.get(start..).unwrap_or("");
    let [_, bucket, day, zone, _, requester, _, operation, key] = fields;
    let at = time(day, zone)?;
    let (status, rest) = after_request_uri(rest)?;
    let status = match status {
        "-" => 0,
        s => s.parse().map_err(|_| LineError::malformed("HTTP status", s, "a status code"))?,
    };
    // Error code, bytes sent, object size, total time, turn-around time; then the referrer and the user agent, which
    // a line cut short may lack.
    let quoted = memchr::memchr_iter(b' ', rest.as_bytes()).nth(4).map_or("", |at| &rest[at + 1..]);
    let (referrer, user_agent) = referrer_and_user_agent(quoted);
    Ok(Access {
        at,
        key,
        origin_path: None,
        bucket: Some(bucket),
        operation,
        status,
        requester: (requester != "-").then_some(requester),
        referrer,
        user_agent: user_agent.filter(|u| *u != "-"),
    })
}

/// The status and what follows it, past the request's URI: `-`, or a quoted field that ends at the first `" `
/// followed by what AWS writes after it (a status, an error code, four counts, then a quoted or empty referrer) —
/// a `"` inside the URI is the requester's, and text after it that mimics all of that is the requester's forgery
/// of their own request's status.
fn after_request_uri(rest: &str) -> Result<(&str, &str), LineError> {
    if rest.is_empty() {
        return Err(LineError::Truncated("request URI"));
    }
    let after = if let Some(after) = rest.strip_prefix("- ") {
        after
    } else if rest.starts_with('"') {
        let bytes = rest.as_bytes();
        let ends =
            memchr::memchr_iter(b'"', &bytes[1..]).map(|at| at + 1).filter(|at| bytes.get(at + 1) == Some(&b' '));
        let mut after = None;
        for at in ends {
            if follows_request_uri(&rest[at + 2..]) {
                after = Some(&rest[at + 2..]);
                break;
            }
        }
        match after {
            Some(after) => after,
            None => return Err(LineError::Truncated("HTTP status")),
        }
    } else {
        return Err(LineError::malformed("request URI", rest, "a quoted request line or -"));
    };
    Ok(after.split_once(' ').unwrap_or((after, "")))
}

/// Whether `after` reads as what follows a request's URI: the status (`-` or three digits), the error code, the
/// bytes sent, the object's size, the total and the turn-around time (`-` or digits), then a referrer; a line may
/// end anywhere in between.
fn follows_request_uri(after: &str) -> bool {
    let count = |t: &str| t == "-" || (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()));
    let mut tokens = after.splitn(7, ' ');
    for at in 0..6 {
        let Some(token) = tokens.next() else { return true };
        let fits = match at {
            0 => token == "-" || (token.len() == 3 && token.bytes().all(|b| b.is_ascii_digit())),
            1 => !token.is_empty() && !token.contains('"'),
            _ => count(token),
        };
        if !fits {
            return false;
        }
    }
    tokens.next().is_none_or(|referrer| referrer.starts_with(['"', '-']))
}

/// The referrer and the user agent, each `-` (none) or quoted; the user agent ends at the line's last quote (no
/// field after it holds one), and the referrer at the first `" "` or `" -` before that.
fn referrer_and_user_agent(rest: &str) -> (Option<&str>, Option<&str>) {
    if rest.is_empty() {
        return (None, None);
    }
    let (referrer, rest) = if let Some(after) = rest.strip_prefix("- ") {
        (None, after)
    } else if let Some(quoted) = rest.strip_prefix('"') {
        let bytes = quoted.as_bytes();
        let end = memchr::memchr_iter(b'"', bytes)
            .find(|at| bytes.get(at + 1) == Some(&b' ') && matches!(bytes.get(at + 2), Some(b'"' | b'-')))
            .or_else(|| quoted.rfind('"'));
        match end {
            Some(end) => (Some(&quoted[..end]), quoted.get(end + 2..).unwrap_or("")),
            None => (Some(quoted), ""),
        }
    } else {
        (None, rest)
    };
    let user_agent = rest.strip_prefix('"').map(|quoted| quoted.rfind('"').map_or(quoted, |end| &quoted[..end]));
    (referrer.filter(|r| *r != "-"), user_agent)
}

/// `[06/Feb/2019:00:00:38` and `+0000]` as a time.
fn time(day: &str, zone: &str) -> Result<DateTime<Utc>, LineError> {
    let bad = || LineError::malformed("time", &format!("{day} {zone}"), "[dd/Mon/yyyy:HH:MM:SS +hhmm]");
    let day = day.strip_prefix('[').ok_or_else(bad)?;
    let zone = zone.strip_suffix(']').ok_or_else(bad)?;
    let b = day.as_bytes();
    if b.len() != 20 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[14] != b':' || b[17] != b':' {
        return Err(bad());
    }
    let number = |from: usize, to: usize| day.get(from..to).and_then(|s| s.parse::<u32>().ok());
    let month = match &day[3..6] {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return Err(bad()),
    };
    let (Some(d), Some(y), Some(h), Some(m), Some(s)) =
        (number(0, 2), number(7, 11), number(12, 14), number(15, 17), number(18, 20))
    else {
        return Err(bad());
    };
    let z = zone.as_bytes();
    if z.len() != 5 || !matches!(z[0], b'+' | b'-') || !z[1..].iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let offset_minutes =
        zone[1..3].parse::<i64>().map_err(|_| bad())? * 60 + zone[3..5].parse::<i64>().map_err(|_| bad())?;
    let offset = if z[0] == b'-' { -offset_minutes } else { offset_minutes };
    let local = NaiveDate::from_ymd_opt(i32::try_from(y).map_err(|_| bad())?, month, d)
        .and_then(|date| date.and_hms_opt(h, m, s))
        .ok_or_else(bad)?;
    Ok(Utc.from_utc_datetime(&local) - chrono::Duration::minutes(offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClientKind;

    /// AWS's own example lines (the documentation's "Log record examples"), bucket names and all.
    const VERSIONING: &str = "79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be amzn-s3-demo-bucket1 [06/Feb/2019:00:00:38 +0000] 192.0.2.3 79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be 3E57427F3EXAMPLE REST.GET.VERSIONING - \"GET /amzn-s3-demo-bucket1?versioning HTTP/1.1\" 200 - 113 - 7 - \"-\" \"S3Console/0.4\" - s9lzHYrFp76ZVxRcpX9+5cjAnEH2ROuNkd2BHfIa6UkFVdtjf5mKR3/eTPFvsiP/XV/VLi31234= SigV4 ECDHE-RSA-AES128-GCM-SHA256 AuthHeader amzn-s3-demo-bucket1.s3.us-west-1.amazonaws.com TLSV1.2 arn:aws:s3:us-west-1:123456789012:accesspoint/example-AP Yes us-east-1";

    fn get(key: &str, tail: &str) -> String {
        format!(
            "79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be amzn-s3-demo-bucket1 \
             [04/Dec/2026:10:15:00 +0000] 192.0.2.3 - 3E57427F3EXAMPLE REST.GET.OBJECT {key} \
             \"GET /amzn-s3-demo-bucket1/{key} HTTP/1.1\" 200 - 2662992 3462992 70 10 {tail}"
        )
    }

    #[test]
    fn awss_example_is_read_field_by_field() {
        let access = parse(VERSIONING).expect("AWS's example");
        assert_eq!(access.at, Utc.with_ymd_and_hms(2019, 2, 6, 0, 0, 38).single().expect("a time"));
        assert_eq!(access.operation, "REST.GET.VERSIONING");
        assert_eq!(access.bucket, Some("amzn-s3-demo-bucket1"), "whose log the line is");
        assert_eq!(access.keys(), Vec::<String>::new());
        assert_eq!(access.status, 200);
        assert_eq!(access.requester, Some("79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be"));
        assert_eq!(access.referrer_host(), None);
        assert_eq!(access.client(), ClientKind::AwsTool);
        assert!(!access.is_read(), "a bucket's versioning is no object's read");
    }

    #[test]
    fn an_anonymous_browsers_get_is_a_read_of_its_key_with_its_referrer() {
        let line = get(
            "uploads/2026/12/a%2520b%252Bc.jpg",
            "\"https://shop.example.com/p/1\" \"Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0\" - hostid= SigV4 \
             ECDHE-RSA-AES128-GCM-SHA256 - bucket.s3.amazonaws.com TLSv1.3 - - eu-west-1 some-field-of-2030",
        );
        let access = parse(&line).expect("a GET");
        assert!(access.is_read());
        assert_eq!(access.requester, None);
        assert_eq!(access.keys(), ["uploads/2026/12/a b+c.jpg", "uploads/2026/12/a%20b%2Bc.jpg"]);
        assert_eq!(access.referrer_host().as_deref(), Some("shop.example.com"));
        assert_eq!(access.client(), ClientKind::Browser);
        assert_eq!(access.at, Utc.with_ymd_and_hms(2026, 12, 4, 10, 15, 0).single().expect("a time"));
    }

    #[test]
    fn quotes_and_spaces_a_requester_wrote_move_no_field() {
        let line = "o b [04/Dec/2026:10:15:00 -0130] 192.0.2.3 arn:aws:iam::123456789012:user/thumbs R1 REST.HEAD.OBJECT \
             k.png \"HEAD /b/k.png?x=\\\" 200 \\\" HTTP/1.1\" 304 - - 5 1 - \"https://x.example/\\\" \\\"evil\" \
             \"curl/8 \\\" \\\"quoted\\\"\" - h SigV4";
        let access = parse(line).expect("a HEAD with quotes inside its quoted fields");
        assert_eq!(access.status, 304);
        assert_eq!(access.keys(), ["k.png"]);
        assert!(access.is_read(), "a 304 confirms a copy in use");
        assert_eq!(access.requester, Some("arn:aws:iam::123456789012:user/thumbs"));
        assert_eq!(access.referrer_host().as_deref(), Some("x.example"));
        assert_eq!(access.client(), ClientKind::Other);
        assert_eq!(access.at, Utc.with_ymd_and_hms(2026, 12, 4, 11, 45, 0).single().expect("a time"));
    }

    #[test]
    fn a_line_cut_after_its_status_still_names_its_read_and_one_cut_before_is_an_error() {
        let full = get("k.png", "\"-\" \"Mozilla/5.0\" - h");
        let cut = &full[..full.find(" 200 ").expect("the status") + 4];
        let access = parse(cut).expect("cut after the status");
        assert!(access.is_read());
        assert_eq!(access.client(), ClientKind::Unknown);
        let before = &full[..full.find("REST.GET").expect("the operation") - 1];
        assert_eq!(parse(before), Err(LineError::Truncated("operation")));
        assert_eq!(parse(""), Err(LineError::Truncated("bucket owner")));
    }

    #[test]
    fn a_malformed_time_or_status_is_named() {
        let bad_time = get("k.png", "\"-\" \"-\"").replace("04/Dec/2026", "04/Dez/2026");
        assert!(matches!(parse(&bad_time), Err(LineError::Malformed { field: "time", .. })), "{:?}", parse(&bad_time));
        let bad_status = get("k.png", "\"-\" \"-\"").replace("\" 200 ", "\" 2x0 ");
        assert!(matches!(parse(&bad_status), Err(LineError::Truncated("HTTP status"))), "{:?}", parse(&bad_status));
        let odd_zone = get("k.png", "\"-\" \"-\"").replace("+0000]", "+0é0]");
        assert!(matches!(parse(&odd_zone), Err(LineError::Malformed { field: "time", .. })), "{:?}", parse(&odd_zone));
        let failed = get("k.png", "\"-\" \"-\"").replace("\" 200 ", "\" 403 ");
        assert!(!parse(&failed).expect("a refused GET").is_read());
    }
}
