use anyhow::Context;
use lambda_runtime::{run, service_fn};
use settings::Settings;
use sweep_lambda::Sweeper;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // The runtime's subscriber follows the function's logging configuration: JSON lines under the template's
    // `LogFormat: JSON` (with the current span's fields), the level from `ApplicationLogLevel`.
    lambda_runtime::tracing::init_default_subscriber();
    let config = platform::aws::sdk_config().await;
    let settings = Settings::load(&config).await.context("sweep-lambda cannot start")?;
    let s3 = platform::aws::s3_client(&config, settings.s3_force_path_style);
    let sweeper = Sweeper::new(platform::db::pool(&settings.database), platform::aws::sqs_client(&config), settings)
        .with_storage(s3)
        .with_storage_metrics(aws_sdk_cloudwatch::Client::new(&config))
        .with_athena(aws_sdk_athena::Client::new(&config));
    run(service_fn(|event| sweeper.handle(event))).await
}
