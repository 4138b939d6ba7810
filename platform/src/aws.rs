//! AWS clients. Endpoints and credentials come from the SDK's own environment (`AWS_ENDPOINT_URL`,
//! `AWS_REGION`, ...), so the same code talks to AWS or to LocalStack without a branch.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

/// The shared SDK configuration, loaded once per cold start. The SDK sets no operation timeout of its own: a
/// service that accepts a connection and never answers would otherwise hold a function until its deadline.
pub async fn sdk_config() -> SdkConfig {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .operation_attempt_timeout(Duration::from_secs(10))
        .operation_timeout(Duration::from_secs(30))
        .build();
    aws_config::defaults(BehaviorVersion::latest()).timeout_config(timeouts).load().await
}

/// An S3 client; `force_path_style` is for S3-compatible endpoints without virtual-host DNS.
pub fn s3_client(config: &SdkConfig, force_path_style: bool) -> aws_sdk_s3::Client {
    let s3_config = aws_sdk_s3::config::Builder::from(config).force_path_style(force_path_style).build();
    aws_sdk_s3::Client::from_conf(s3_config)
}

/// An SQS client.
pub fn sqs_client(config: &SdkConfig) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(config)
}

/// What went wrong in one AWS call, in words an operator can act on, and whether trying again may help. The
/// SDK's full error chain goes to the log where the failure is met; this is what records and messages keep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} failed: {cause}")]
pub struct AwsFailure {
    /// The API call, with what it was about (`DeleteObject photos/1.jpg`).
    pub operation: String,
    /// Why it failed, and whether trying again may help.
    pub cause: AwsCause,
}

/// Why an AWS call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwsCause {
    /// No answer within the call's timeout.
    #[error("no answer in time (retryable)")]
    Timeout,
    /// The service refused for the request rate.
    #[error("the service is throttling requests ({code}; retryable)")]
    Throttled {
        /// The service's error code (`SlowDown`, `ThrottlingException`, ...).
        code: String,
    },
    /// The connection failed: DNS, TCP or TLS.
    #[error("the service could not be reached (retryable)")]
    Unreachable,
    /// The service answered with an error.
    #[error("the service answered {status} {code}: {message}{}", if *retryable { " (retryable)" } else { "" })]
    Service {
        /// The HTTP status.
        status: u16,
        /// The service's error code.
        code: String,
        /// The service's message.
        message: String,
        /// A 5xx status or a code the service documents as transient.
        retryable: bool,
    },
    /// Anything else the SDK reported (a request it could not build or an answer it could not read).
    #[error("{0}")]
    Other(String),
}

impl AwsFailure {
    /// Timeouts, throttling, connection failures and server-side errors pass; a refusal (access denied, no such
    /// bucket) or a malformed request does not.
    pub fn retryable(&self) -> bool {
        match &self.cause {
            AwsCause::Timeout | AwsCause::Throttled { .. } | AwsCause::Unreachable => true,
            AwsCause::Service { retryable, .. } => *retryable,
            AwsCause::Other(_) => false,
        }
    }

    /// A call that got no answer within `timeout` of the caller's own clock.
    pub fn timed_out(operation: impl Into<String>) -> Self {
        AwsFailure { operation: operation.into(), cause: AwsCause::Timeout }
    }

    /// Classifies an SDK error, and logs its whole chain (the detail a person debugging needs, not a record).
    pub fn from_sdk<E>(operation: impl Into<String>, error: &SdkError<E>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let operation = operation.into();
        tracing::warn!(operation, error = %aws_sdk_s3::error::DisplayErrorContext(error), "AWS call failed");
        let cause = match error {
            SdkError::TimeoutError(_) => AwsCause::Timeout,
            SdkError::DispatchFailure(failure) if failure.is_timeout() => AwsCause::Timeout,
            SdkError::DispatchFailure(_) => AwsCause::Unreachable,
            SdkError::ResponseError(_) => AwsCause::Service {
                status: 0,
                code: "ResponseError".into(),
                message: "unreadable answer".into(),
                retryable: true,
            },
            SdkError::ServiceError(context) => {
                let status = context.raw().status().as_u16();
                let code = context.err().code().unwrap_or("Unknown").to_owned();
                let message = context.err().message().unwrap_or("no message").to_owned();
                const THROTTLING: &[&str] = &[
                    "SlowDown",
                    "Throttling",
                    "ThrottlingException",
                    "RequestLimitExceeded",
                    "TooManyRequestsException",
                    "RequestThrottled",
                ];
                if THROTTLING.contains(&code.as_str()) || status == 429 {
                    AwsCause::Throttled { code }
                } else {
                    AwsCause::Service { status, retryable: status >= 500, code, message }
                }
            }
            other => AwsCause::Other(aws_sdk_s3::error::DisplayErrorContext(other).to_string()),
        };
        AwsFailure { operation, cause }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_throttling_and_server_errors_pass_and_refusals_do_not() {
        let failure = |cause| AwsFailure { operation: "DeleteObject photos/1.jpg".into(), cause };
        assert!(AwsFailure::timed_out("DeleteObject photos/1.jpg").retryable());
        assert!(failure(AwsCause::Throttled { code: "SlowDown".into() }).retryable());
        assert!(failure(AwsCause::Unreachable).retryable());
        let server =
            AwsCause::Service { status: 503, code: "ServiceUnavailable".into(), message: "x".into(), retryable: true };
        assert!(failure(server).retryable());
        let denied =
            AwsCause::Service { status: 403, code: "AccessDenied".into(), message: "no".into(), retryable: false };
        let denied = failure(denied);
        assert!(!denied.retryable());
        assert_eq!(
            denied.to_string(),
            "DeleteObject photos/1.jpg failed: the service answered 403 AccessDenied: no",
            "a sentence, not a debug dump"
        );
        assert_eq!(
            AwsFailure::timed_out("DeleteObject photos/1.jpg").to_string(),
            "DeleteObject photos/1.jpg failed: no answer in time (retryable)"
        );
    }
}
