use anyhow::Context;
use lambda_runtime::{run, service_fn};
use shared::Settings;
use sweep_lambda::Sweeper;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // The runtime's subscriber follows the function's logging configuration: JSON lines under the template's
    // `LogFormat: JSON` (with the current span's fields), the level from `ApplicationLogLevel`.
    lambda_runtime::tracing::init_default_subscriber();
    let config = shared::aws::sdk_config().await;
    let settings = Settings::load(&config).await.context("sweep-lambda cannot start")?;
    let sweeper = Sweeper::new(shared::db::pool(&settings.database), shared::aws::sqs_client(&config), settings);
    run(service_fn(|event| sweeper.handle(event))).await
}
