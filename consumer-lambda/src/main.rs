use anyhow::Context;
use consumer_lambda::Consumer;
use lambda_runtime::{run, service_fn};
use settings::Settings;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // The runtime's subscriber follows the function's logging configuration: JSON lines under the template's
    // `LogFormat: JSON` (with the current span's fields), the level from `ApplicationLogLevel`.
    lambda_runtime::tracing::init_default_subscriber();
    let config = platform::aws::sdk_config().await;
    let settings = Settings::load(&config).await.context("consumer-lambda cannot start")?;
    let s3 = platform::aws::s3_client(&config, settings.s3_force_path_style);
    let consumer = Consumer::new(platform::db::pool(&settings.database), s3, settings);
    run(service_fn(|event| consumer.handle(event))).await
}
