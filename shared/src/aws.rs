//! AWS clients. Endpoints and credentials come from the SDK's own environment (`AWS_ENDPOINT_URL`,
//! `AWS_REGION`, ...), so the same code talks to AWS or to LocalStack without a branch.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};

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
