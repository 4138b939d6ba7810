//! The census's standby (`CENSUS_DATABASE_URL`): what its URL names, completed with the sweep's own login.

use sqlx::postgres::PgConnectOptions;

/// What `CENSUS_DATABASE_URL` says of the census's standby: its host and port, and whatever else it names. A physical
/// standby has the primary's logins, so the user, password and database it leaves out are the sweep's own (from
/// `DATABASE_URL` or the secret): `postgres://replica.internal:5432` needs no second secret.
pub(crate) struct Standby {
    pub(crate) host: String,
    pub(crate) port: Option<u16>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) database: Option<String>,
    pub(crate) ssl_mode: Option<sqlx::postgres::PgSslMode>,
    pub(crate) ssl_root_cert: Option<String>,
}

impl Standby {
    /// The primary's `options` pointed at the standby.
    pub(crate) fn over(self, options: PgConnectOptions) -> PgConnectOptions {
        let mut options = options.host(&self.host);
        if let Some(port) = self.port {
            options = options.port(port);
        }
        if let Some(username) = &self.username {
            options = options.username(username);
        }
        if let Some(password) = &self.password {
            options = options.password(password);
        }
        if let Some(database) = &self.database {
            options = options.database(database);
        }
        if let Some(mode) = self.ssl_mode {
            options = options.ssl_mode(mode);
        }
        if let Some(cert) = &self.ssl_root_cert {
            options = options.ssl_root_cert(cert);
        }
        options
    }
}

/// `url` read as [`Standby`], or why not (never quoting it: it may hold a password).
pub(crate) fn standby_options(url: &str) -> Result<Standby, String> {
    let invalid = || "is not a valid postgres:// connection URL".to_owned();
    let parsed = url::Url::parse(url).map_err(|_| invalid())?;
    if !matches!(parsed.scheme(), "postgres" | "postgresql") {
        return Err(invalid());
    }
    let host = parsed.host_str().filter(|h| !h.is_empty()).ok_or_else(invalid)?.to_owned();
    let decoded = |part: &str| percent_encoding::percent_decode_str(part).decode_utf8_lossy().into_owned();
    let database = parsed.path().trim_start_matches('/');
    let mut standby = Standby {
        host,
        port: parsed.port(),
        username: Some(parsed.username()).filter(|u| !u.is_empty()).map(decoded),
        password: parsed.password().map(decoded),
        database: Some(database).filter(|d| !d.is_empty()).map(decoded),
        ssl_mode: None,
        ssl_root_cert: None,
    };
    for (name, value) in parsed.query_pairs() {
        match name.as_ref() {
            "sslmode" => {
                standby.ssl_mode = Some(value.parse().map_err(|_| format!("has an unknown sslmode {value:?}"))?);
            }
            "sslrootcert" => standby.ssl_root_cert = Some(value.into_owned()),
            other => {
                return Err(format!(
                    "has the parameter {other:?}; it may name only sslmode and sslrootcert (the rest of the census's \
                     connection is the sweep's own)"
                ));
            }
        }
    }
    Ok(standby)
}
