//! CloudFront standard logs (the legacy format delivered to S3, and v2's `w3c` output): W3C extended format, one
//! request a line, fields separated by tabs, in the order a `#Fields:` header line names them (33 fields in AWS's
//! documented order, which is assumed until a header says otherwise), `-` for none. Values are URL-encoded once more
//! than the viewer sent them (a space is `%2520` in the path), and the path (`cs-uri-stem`) holds no query string.
//! A cache hit is logged here and never reaches S3: these logs see reads S3's own do not.
//!
//! A distribution's origin path maps a request to the key S3 was (or would have been) asked for: origin path
//! `/production` and a request for `/acme/index.html` name the key `production/acme/index.html`.

use chrono::{NaiveDate, TimeZone, Utc};

use crate::{Access, LineError};

/// AWS's documented field order, for a file whose header is missing.
const DOCUMENTED: &str = "date time x-edge-location sc-bytes c-ip cs-method cs(Host) cs-uri-stem sc-status cs(Referer) \
                          cs(User-Agent) cs-uri-query cs(Cookie) x-edge-result-type x-edge-request-id x-host-header \
                          cs-protocol cs-bytes time-taken x-forwarded-for ssl-protocol ssl-cipher \
                          x-edge-response-result-type cs-protocol-version fle-status fle-encrypted-fields c-port \
                          time-to-first-byte x-edge-detailed-result-type sc-content-type sc-content-len \
                          sc-range-start sc-range-end";

/// Where each field a read needs is, in a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Columns {
    date: usize,
    time: usize,
    method: usize,
    stem: usize,
    status: usize,
    referrer: Option<usize>,
    user_agent: Option<usize>,
}

impl Columns {
    fn of(names: &str) -> Result<Columns, LineError> {
        let names: Vec<&str> = names.split_whitespace().collect();
        let at = |name: &str| names.iter().position(|n| *n == name);
        let need = |name: &'static str| at(name).ok_or_else(|| LineError::malformed("#Fields", name, "named"));
        Ok(Columns {
            date: need("date")?,
            time: need("time")?,
            method: need("cs-method")?,
            stem: need("cs-uri-stem")?,
            status: need("sc-status")?,
            referrer: at("cs(Referer)"),
            user_agent: at("cs(User-Agent)"),
        })
    }

    fn last(&self) -> usize {
        [self.date, self.time, self.method, self.stem, self.status].into_iter().max().unwrap_or(0)
    }

    /// The last field a read is made of, the optional ones included: the fields after it are not split.
    fn last_read(&self) -> usize {
        self.last().max(self.referrer.unwrap_or(0)).max(self.user_agent.unwrap_or(0))
    }
}

/// The lines of one distribution's log files, read in order: a header line changes where the fields are for the
/// lines after it.
#[derive(Debug, Clone)]
pub struct Reader {
    columns: Result<Columns, LineError>,
    /// The distribution's origin path without its slashes (`production`), or empty.
    origin_path: String,
}

impl Reader {
    /// A reader for a distribution whose origin has `origin_path` (`/production`, or empty).
    pub fn new(origin_path: &str) -> Reader {
        Reader { columns: Columns::of(DOCUMENTED), origin_path: origin_path.trim_matches('/').to_owned() }
    }

    /// The access `line` records; `None` for a header line, which takes effect for the lines after it.
    pub fn parse<'a>(&'a mut self, line: &'a str) -> Result<Option<Access<'a>>, LineError> {
        let line = line.trim_end_matches(['\r', '\n']);
        if let Some(header) = line.strip_prefix('#') {
            if let Some(names) = header.strip_prefix("Fields:") {
                // Until a header names them, lines after one that does not are not read by an older order.
                self.columns = Columns::of(names);
                self.columns.clone()?;
            }
            return Ok(None);
        }
        let c = self.columns.clone()?;
        let mut fields: [&str; 40] = [""; 40];
        let mut count = 0;
        for (at, field) in line.split('\t').enumerate().take(fields.len().min(c.last_read() + 1)) {
            fields[at] = field;
            count = at + 1;
        }
        if count <= c.last() {
            // The first field the line lacks, in the line's order.
            let named = [
                (c.date, "date"),
                (c.time, "time"),
                (c.method, "cs-method"),
                (c.stem, "cs-uri-stem"),
                (c.status, "sc-status"),
            ];
            let missing =
                named.iter().filter(|(at, _)| *at >= count).min_by_key(|(at, _)| *at).map_or("date", |(_, n)| *n);
            return Err(LineError::Truncated(missing));
        }
        let bad_time = || LineError::malformed("date", &format!("{} {}", fields[c.date], fields[c.time]), "a UTC time");
        let (date, time) = (fields[c.date].as_bytes(), fields[c.time].as_bytes());
        if date.len() != 10
            || date[4] != b'-'
            || date[7] != b'-'
            || time.len() != 8
            || time[2] != b':'
            || time[5] != b':'
        {
            return Err(bad_time());
        }
        let number = |text: &[u8], from: usize, to: usize| {
            text[from..to].iter().try_fold(0u32, |n, b| b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0')))
        };
        let at = match (
            number(date, 0, 4),
            number(date, 5, 7),
            number(date, 8, 10),
            number(time, 0, 2),
            number(time, 3, 5),
            number(time, 6, 8),
        ) {
            (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(s)) => i32::try_from(y)
                .ok()
                .and_then(|y| NaiveDate::from_ymd_opt(y, mo, d))
                .and_then(|date| date.and_hms_opt(h, mi, s))
                .ok_or_else(bad_time)?,
            _ => return Err(bad_time()),
        };
        let status = fields[c.status]
            .parse()
            .map_err(|_| LineError::malformed("sc-status", fields[c.status], "a status code"))?;
        let value =
            |at: Option<usize>| at.and_then(|at| fields.get(at).copied()).filter(|v| !v.is_empty() && *v != "-");
        Ok(Some(Access {
            at: Utc.from_utc_datetime(&at),
            key: fields[c.stem],
            origin_path: Some(&self.origin_path),
            bucket: None,
            operation: fields[c.method],
            status,
            requester: None,
            referrer: value(c.referrer),
            user_agent: value(c.user_agent),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClientKind;

    /// AWS's documented example file ("Standard log file format"), its first line.
    const EXAMPLE: &str = "#Version: 1.0
#Fields: date time x-edge-location sc-bytes c-ip cs-method cs(Host) cs-uri-stem sc-status cs(Referer) cs(User-Agent) cs-uri-query cs(Cookie) x-edge-result-type x-edge-request-id x-host-header cs-protocol cs-bytes time-taken x-forwarded-for ssl-protocol ssl-cipher x-edge-response-result-type cs-protocol-version fle-status fle-encrypted-fields c-port time-to-first-byte x-edge-detailed-result-type sc-content-type sc-content-len sc-range-start sc-range-end
2019-12-04	21:02:31	LAX1	392	192.0.2.100	GET	d111111abcdef8.cloudfront.net	/index.html	200	-	Mozilla/5.0%20(Windows%20NT%2010.0;%20Win64;%20x64)%20AppleWebKit/537.36%20(KHTML,%20like%20Gecko)%20Chrome/78.0.3904.108%20Safari/537.36	-	-	Hit	SOX4xwn4XV6Q4rgb7XiVGOHms_BGlTAC4KyHmureZmBNrjGdRLiNIQ==	d111111abcdef8.cloudfront.net	https	23	0.001	-	TLSv1.2	ECDHE-RSA-AES128-GCM-SHA256	Hit	HTTP/2.0	-	-	11040	0.001	Hit	text/html	78	-	-";

    /// Each request's keys, status, client and whether it is a read.
    fn accesses(reader: &mut Reader, text: &str) -> Vec<(Vec<String>, u16, ClientKind, bool)> {
        let mut found = Vec::new();
        for line in text.lines() {
            if let Some(a) = reader.parse(line).expect("a line of the format") {
                found.push((a.keys(), a.status, a.client(), a.is_read()));
            }
        }
        found
    }

    #[test]
    fn awss_example_is_a_browsers_read_served_from_the_cache() {
        let mut reader = Reader::new("");
        assert_eq!(accesses(&mut reader, EXAMPLE), [(vec!["index.html".to_owned()], 200, ClientKind::Browser, true)]);
        let line = EXAMPLE.lines().nth(2).expect("the example's line");
        let read = reader.parse(line).expect("a line").expect("a request");
        assert_eq!(read.requester, None);
        assert_eq!(read.at, Utc.with_ymd_and_hms(2019, 12, 4, 21, 2, 31).single().expect("a time"));
    }

    #[test]
    fn a_path_under_an_origin_path_names_its_key_decoded_as_the_viewer_sent_it() {
        let mut reader = Reader::new("/production/");
        let line = EXAMPLE
            .lines()
            .nth(2)
            .expect("the example's line")
            .replace("/index.html", "/acme/caf%25C3%25A9%2520menu+1%2525.jpg")
            .replace("\t-\tMozilla", "\thttps://www.example.com/menu\tMozilla");
        let read = reader.parse(&line).expect("a line").expect("a request");
        assert_eq!(
            read.keys(),
            [
                "production/acme/café menu+1%.jpg",
                "production/acme/caf%C3%A9%20menu+1%25.jpg",
                "production/acme/caf%C3%A9%20menu 1%25.jpg"
            ]
        );
        assert_eq!(read.referrer_host().as_deref(), Some("www.example.com"));
    }

    #[test]
    fn a_header_reorders_the_fields_and_a_short_or_malformed_line_is_named() {
        let mut reader = Reader::new("");
        assert_eq!(reader.parse("#Fields: time date cs-uri-stem sc-status cs-method"), Ok(None));
        // A user agent placed past the fields a line is split into is not read, and nothing panics.
        let far = (0..45).map(|i| format!("x-{i}")).collect::<Vec<_>>().join(" ");
        let mut far_reader = Reader::new("");
        assert_eq!(
            far_reader.parse(&format!("#Fields: date time cs-method cs-uri-stem sc-status {far} cs(User-Agent)")),
            Ok(None)
        );
        let read = far_reader.parse("2026-12-04\t08:00:00\tGET\t/a.png\t200").expect("a line").expect("a request");
        assert_eq!((read.user_agent, read.is_read()), (None, true));
        assert_eq!(
            accesses(&mut reader, "08:00:00\t2026-12-04\t/a.png\t304\tHEAD"),
            [(vec!["a.png".to_owned()], 304, ClientKind::Unknown, true)]
        );
        assert_eq!(reader.parse("08:00:00\t2026-12-04\t/a.png"), Err(LineError::Truncated("sc-status")));
        assert!(matches!(
            reader.parse("8h\t2026-12-04\t/a.png\t200\tGET"),
            Err(LineError::Malformed { field: "date", .. })
        ));
        assert!(matches!(
            reader.parse("#Fields: date time cs-method"),
            Err(LineError::Malformed { field: "#Fields", .. })
        ));
        assert!(
            matches!(
                reader.parse("08:00:00\t2026-12-04\t/a.png\t200\tGET"),
                Err(LineError::Malformed { field: "#Fields", .. })
            ),
            "no line is read by an older order after a header that names too little"
        );
        assert_eq!(reader.parse("#Fields: time date cs-uri-stem sc-status cs-method"), Ok(None));
        let closed = accesses(&mut reader, "08:00:00\t2026-12-04\t/a.png\t000\tGET");
        assert!(!closed[0].3, "a viewer that closed the connection first read nothing");
        assert_eq!(accesses(&mut reader, "08:00:00\t2026-12-04\t/\t200\tGET")[0].0, Vec::<String>::new(), "the root");
    }
}
