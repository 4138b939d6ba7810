//! What kind of client made a request, from its user agent: enough for a person to tell a reader's browser from a
//! crawler or a job of their own, never a reason to discount a read.

/// A requester's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKind {
    /// No user agent.
    Unknown,
    /// A web browser (or something that says it is one).
    Browser,
    /// A crawler or a link preview.
    Crawler,
    /// An AWS SDK, the CLI or the console.
    AwsTool,
    /// Anything else: an HTTP library, an app.
    Other,
}

/// The words that name a crawler, then those that name AWS's own tools, matched without regard to case.
const CRAWLER_WORDS: [&str; 6] = ["bot", "crawler", "spider", "slurp", "facebookexternalhit", "preview"];
const AWS_WORDS: [&str; 6] = ["aws-sdk-", "aws-cli/", "boto3/", "botocore/", "s3console", "aws-internal"];

/// One automaton for all of them, built once: a user agent is read once, not once a word.
static WORDS: std::sync::LazyLock<Option<aho_corasick::AhoCorasick>> = std::sync::LazyLock::new(|| {
    aho_corasick::AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .kind(Some(aho_corasick::AhoCorasickKind::DFA))
        .build(CRAWLER_WORDS.iter().chain(AWS_WORDS.iter()))
        .ok()
});

impl ClientKind {
    /// The kind `user_agent` says (decoded or as a log encodes it: the words it looks for hold nothing a log
    /// encodes; `-` or empty is none).
    pub fn of(user_agent: &str) -> ClientKind {
        if user_agent.is_empty() || user_agent == "-" {
            return ClientKind::Unknown;
        }
        let mut aws = false;
        if let Some(words) = WORDS.as_ref() {
            for found in words.find_iter(user_agent) {
                if found.pattern().as_usize() < CRAWLER_WORDS.len() {
                    return ClientKind::Crawler;
                }
                aws = true;
            }
        }
        if aws {
            ClientKind::AwsTool
        } else if user_agent.get(..8).is_some_and(|p| p.eq_ignore_ascii_case("mozilla/")) {
            ClientKind::Browser
        } else {
            ClientKind::Other
        }
    }

    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientKind::Unknown => "unknown",
            ClientKind::Browser => "browser",
            ClientKind::Crawler => "crawler",
            ClientKind::AwsTool => "aws-tool",
            ClientKind::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ClientKind;

    #[test]
    fn a_user_agent_names_its_kind() {
        let chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36";
        assert_eq!(ClientKind::of(chrome), ClientKind::Browser);
        assert_eq!(ClientKind::of("Mozilla/5.0 (compatible; Googlebot/2.1)"), ClientKind::Crawler);
        assert_eq!(ClientKind::of("S3Console/0.4"), ClientKind::AwsTool);
        assert_eq!(ClientKind::of("aws-sdk-rust/1.3.0 os/linux"), ClientKind::AwsTool);
        assert_eq!(ClientKind::of("okhttp/4.12.0"), ClientKind::Other);
        assert_eq!(ClientKind::of("-"), ClientKind::Unknown);
    }
}
