//! The database connection from a Secrets Manager secret, as the functions get it in AWS.
//!
//! Two shapes are read: the JSON an RDS- or Aurora-managed secret holds (`host`, `port`, `username`,
//! `password`, `dbname`), and a plain `postgres://` URL. The secret's value never reaches an error or a log.

use std::str::FromStr;

use aws_config::SdkConfig;
use serde::Deserialize;
use sqlx::postgres::PgConnectOptions;

/// Why the secret gave no connection. Names the secret, never its value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// `GetSecretValue` failed.
    #[error("cannot read database secret {arn}: {cause}")]
    Unreadable {
        /// The secret.
        arn: String,
        /// The failed call.
        #[source]
        cause: crate::aws::AwsFailure,
    },
    /// The secret is binary.
    #[error("database secret {arn} has no string value")]
    NotAString {
        /// The secret.
        arn: String,
    },
    /// The secret's text is neither form this build reads.
    #[error("database secret {arn} holds neither RDS-style JSON (host, username, password, ...) nor a postgres:// URL")]
    Malformed {
        /// The secret.
        arn: String,
    },
}

#[derive(Deserialize)]
struct RdsSecret {
    host: String,
    #[serde(default)]
    port: Option<serde_json::Value>,
    username: String,
    password: String,
    #[serde(default)]
    dbname: Option<String>,
}

/// Fetches secret `arn` and turns it into connection options.
pub async fn database_options(sdk: &SdkConfig, arn: &str) -> Result<PgConnectOptions, SecretError> {
    let client = aws_sdk_secretsmanager::Client::new(sdk);
    let value = client.get_secret_value().secret_id(arn).send().await.map_err(|e| SecretError::Unreadable {
        arn: arn.to_owned(),
        cause: crate::aws::AwsFailure::from_sdk("GetSecretValue", &e),
    })?;
    let text = value.secret_string().ok_or_else(|| SecretError::NotAString { arn: arn.to_owned() })?;
    parse(text).ok_or_else(|| SecretError::Malformed { arn: arn.to_owned() })
}

/// Reads either secret shape.
pub fn parse(text: &str) -> Option<PgConnectOptions> {
    let text = text.trim();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return PgConnectOptions::from_str(text).ok();
    }
    let secret: RdsSecret = serde_json::from_str(text).ok()?;
    // RDS writes the port as a number; hand-made secrets often as a string.
    let port = match secret.port {
        None => 5432,
        Some(serde_json::Value::Number(n)) => u16::try_from(n.as_u64()?).ok()?,
        Some(serde_json::Value::String(s)) => s.parse().ok()?,
        Some(_) => return None,
    };
    let options = PgConnectOptions::new_without_pgpass()
        .host(&secret.host)
        .port(port)
        .username(&secret.username)
        .password(&secret.password);
    Some(match secret.dbname {
        Some(db) => options.database(&db),
        None => options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_rds_managed_secret_becomes_connection_options() {
        let options = parse(
            r#"{"engine":"postgres","host":"db.internal","port":6543,"username":"sweeper","password":"p@ss/w:rd","dbname":"app"}"#,
        )
        .expect("rds secret");
        assert_eq!(
            (options.get_host(), options.get_port(), options.get_database()),
            ("db.internal", 6543, Some("app"))
        );
        assert_eq!(options.get_username(), "sweeper");
    }

    #[test]
    fn a_url_secret_and_a_string_port_are_read_and_garbage_is_not() {
        assert_eq!(parse("postgres://u:p@h:5433/d").map(|o| o.get_port()), Some(5433));
        assert_eq!(
            parse(r#"{"host":"h","port":"5434","username":"u","password":"p"}"#).map(|o| o.get_port()),
            Some(5434)
        );
        assert!(parse("hunter2").is_none());
        assert!(parse(r#"{"host":"h"}"#).is_none());
    }
}
