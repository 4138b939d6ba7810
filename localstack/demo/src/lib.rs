//! The main job on one machine (README, first command): the real functions deployed into LocalStack with the
//! real template, a demo catalog seeded as an application would have left it, one sweep, LocalStack's event
//! source mapping driving the consumer until the queue is empty, and a report of what happened.
//!
//! The end-to-end test drives the same steps and asserts on the same report.

pub mod bucket;
pub mod catalog;
pub mod deploy;
pub mod drive;
pub mod logins;
pub mod report;

use anyhow::Context;
use sqlx::{Connection, PgConnection, PgPool};

pub use deploy::Stack;

/// The AWS clients the demo uses, from the SDK's usual environment (`AWS_ENDPOINT_URL` for LocalStack).
#[derive(Clone)]
pub struct Clients {
    pub s3: aws_sdk_s3::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub lambda: aws_sdk_lambda::Client,
    pub cloudwatch: aws_sdk_cloudwatch::Client,
}

impl Clients {
    pub async fn from_env() -> Self {
        let config = platform::aws::sdk_config().await;
        Self {
            // LocalStack serves S3 on the same host as everything else: path-style addressing.
            s3: platform::aws::s3_client(&config, true),
            sqs: platform::aws::sqs_client(&config),
            lambda: aws_sdk_lambda::Client::new(&config),
            cloudwatch: aws_sdk_cloudwatch::Client::new(&config),
        }
    }
}

/// A session of the sweeper's own, on `pool`'s database: the search path and limits the functions and the CLI get
/// (`platform::db::session_options`). The pool the demo is given is the application's, whose search path need not
/// hold the sweeper's schema (the demo's own holds `public` alone), and the sweeper's code names its tables and
/// functions unqualified; so where the demo runs that code as an operator's command would (`guards install`,
/// `reconcile`, `usage`), it runs it here.
pub async fn sweeper_session(pool: &PgPool) -> anyhow::Result<PgConnection> {
    let options = platform::db::session_options((*pool.connect_options()).clone());
    PgConnection::connect_with(&options).await.context("opening a session as the sweeper's CLI does")
}
