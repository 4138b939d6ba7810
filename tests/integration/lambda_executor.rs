//! The project's LocalStack executor plugin (`localstack/plugins`): functions run as local processes. This is
//! the smoke test that fails loudly if LocalStack's executor interface changes under the pinned version.
//!
//! The functions here are tiny custom runtimes in bash speaking the Lambda Runtime API with curl, so the test
//! needs no build: the executor sees exactly what it sees from a Rust `bootstrap`.

use std::io::Write;

use aws_sdk_lambda::client::Waiters;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{FunctionCode, LogType, Runtime};
use integration_tests::short_id;

/// Echoes each event with the process id (to see warm reuse); sleeps past any timeout when asked. The timeout
/// is generous: other tests build and run beside this one.
const ECHO: &str = r#"#!/bin/bash
set -euo pipefail
api="http://${AWS_LAMBDA_RUNTIME_API}/2018-06-01/runtime"
while true; do
  headers=$(mktemp)
  event=$(curl -sS -D "$headers" "$api/invocation/next")
  id=$(grep -i '^Lambda-Runtime-Aws-Request-Id:' "$headers" | cut -d' ' -f2 | tr -d '\r')
  echo "handling $id"
  if [[ "$event" == *sleep* ]]; then sleep 60; fi
  curl -sS -X POST "$api/invocation/$id/response" -d "{\"pid\":$$,\"event\":$event}" >/dev/null
done
"#;

const BROKEN: &str = "#!/bin/bash\necho 'cannot start: DATABASE_URL is not set' >&2\nexit 1\n";

fn zipped(bootstrap: &str) -> Vec<u8> {
    let mut buffer = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut buffer);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .unix_permissions(0o755);
    zip.start_file("bootstrap", options).expect("zip entry");
    zip.write_all(bootstrap.as_bytes()).expect("zip write");
    zip.finish().expect("zip finish");
    buffer.into_inner()
}

async fn function(lambda: &aws_sdk_lambda::Client, bootstrap: &str, timeout: i32) -> String {
    let name = format!("smoke-{}", short_id());
    lambda
        .create_function()
        .function_name(&name)
        .runtime(Runtime::Providedal2023)
        .handler("bootstrap")
        .role("arn:aws:iam::000000000000:role/smoke")
        .timeout(timeout)
        .code(FunctionCode::builder().zip_file(Blob::new(zipped(bootstrap))).build())
        .send()
        .await
        .expect("create function");
    lambda
        .wait_until_function_active_v2()
        .function_name(&name)
        .wait(std::time::Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{name} never became Active (is the process executor loaded?): {e:?}"));
    name
}

async fn invoke(
    lambda: &aws_sdk_lambda::Client,
    name: &str,
    payload: &str,
) -> aws_sdk_lambda::operation::invoke::InvokeOutput {
    lambda
        .invoke()
        .function_name(name)
        .payload(Blob::new(payload.as_bytes()))
        .log_type(LogType::Tail)
        .send()
        .await
        .expect("invoke")
}

fn body(output: &aws_sdk_lambda::operation::invoke::InvokeOutput) -> serde_json::Value {
    serde_json::from_slice(output.payload().map(Blob::as_ref).unwrap_or_default()).expect("JSON payload")
}

#[tokio::test]
async fn a_function_runs_as_a_warm_local_process_with_its_logs_and_timeout() {
    let config = platform::aws::sdk_config().await;
    let lambda = aws_sdk_lambda::Client::new(&config);
    let name = function(&lambda, ECHO, 5).await;

    let first = invoke(&lambda, &name, r#"{"n":1}"#).await;
    assert_eq!(first.function_error(), None);
    assert_eq!(body(&first)["event"]["n"], 1);
    let log = first.log_result().and_then(|l| aws_smithy_types::base64::decode(l).ok()).unwrap_or_default();
    let log = String::from_utf8_lossy(&log);
    assert!(log.contains("handling "), "the function's output is its log: {log:?}");
    let second = invoke(&lambda, &name, r#"{"n":2}"#).await;
    assert_eq!(body(&second)["pid"], body(&first)["pid"], "warm: the same process served both");

    let timed_out = invoke(&lambda, &name, r#"{"sleep":true}"#).await;
    assert_eq!(timed_out.function_error(), Some("Unhandled"));
    assert_eq!(body(&timed_out)["errorMessage"], "Task timed out after 5.00 seconds");
    let after = invoke(&lambda, &name, r#"{"n":3}"#).await;
    assert_eq!(body(&after)["event"]["n"], 3, "a new process after the timeout");
    assert_ne!(body(&after)["pid"], body(&first)["pid"]);
}

#[tokio::test]
async fn an_init_error_is_reported_with_the_bootstrap_output() {
    let config = platform::aws::sdk_config().await;
    let lambda = aws_sdk_lambda::Client::new(&config);
    let name = function(&lambda, BROKEN, 3).await;
    let error = lambda
        .invoke()
        .function_name(&name)
        .payload(Blob::new("{}"))
        .send()
        .await
        .expect_err("the function cannot start");
    let message = aws_sdk_lambda::error::DisplayErrorContext(&error).to_string();
    assert!(message.contains("cannot start: DATABASE_URL is not set"), "{message}");
}

/// Answers every event with the build it was cut from: what a redeploy must change.
fn build_answering(build: &str) -> Vec<u8> {
    zipped(&format!(
        r#"#!/bin/bash
set -euo pipefail
api="http://${{AWS_LAMBDA_RUNTIME_API}}/2018-06-01/runtime"
while true; do
  headers=$(mktemp)
  curl -sS -D "$headers" "$api/invocation/next" >/dev/null
  id=$(grep -i '^Lambda-Runtime-Aws-Request-Id:' "$headers" | cut -d' ' -f2 | tr -d '\r')
  curl -sS -X POST "$api/invocation/$id/response" -d '{{"build":"{build}"}}' >/dev/null
done
"#
    ))
}

/// `localstack/deploy`'s packaging step with the build in `target` (as `CARGO_TARGET_DIR`): the stack's outputs.
fn deploy_build(target: &std::path::Path, stack: &str) -> serde_json::Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = root.join("localstack/.venv/bin/python");
    let output = std::process::Command::new(venv)
        .arg(root.join("localstack/deploy.py"))
        .args([root.to_str().expect("utf-8 path"), stack, "x86_64", "postgres://nobody@127.0.0.1:1/none"])
        .env("CARGO_TARGET_DIR", target)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .output()
        .expect("deploy.py runs");
    assert!(output.status.success(), "deploy failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("deploy prints JSON")
}

/// A changed build is deployed: the code is named by its content, so the template CloudFormation sees changes
/// and the functions are updated (a fixed key answered "No updates are to be performed" and kept the old code).
#[tokio::test]
async fn a_redeploy_of_a_changed_build_runs_the_new_code() {
    let target = std::env::temp_dir().join(format!("asset-sweeper-build-{}", short_id()));
    let write = |build: &str| {
        for binary in ["sweep-lambda", "consumer-lambda"] {
            let dir = target.join("localstack").join(binary);
            std::fs::create_dir_all(&dir).expect("build dir");
            std::fs::write(dir.join("bootstrap.zip"), build_answering(build)).expect("zip");
        }
    };
    let config = platform::aws::sdk_config().await;
    let lambda = aws_sdk_lambda::Client::new(&config);
    let stack = format!("redeploy-{}", short_id());
    let answer = |name: String| {
        let lambda = lambda.clone();
        async move {
            let invoked = lambda.invoke().function_name(name).payload(Blob::new("{}")).send().await.expect("invoke");
            let payload = invoked.payload().map(|p| p.as_ref().to_vec()).unwrap_or_default();
            serde_json::from_slice::<serde_json::Value>(&payload).expect("JSON answer")["build"].clone()
        }
    };

    write("one");
    let first = deploy_build(&target, &stack);
    let sweep = first["outputs"]["SweepFunctionName"].as_str().expect("sweep function").to_owned();
    assert_eq!(answer(sweep.clone()).await, "one");

    write("two");
    let second = deploy_build(&target, &stack);
    assert_eq!(second["outputs"]["SweepFunctionName"], first["outputs"]["SweepFunctionName"]);
    assert_eq!(answer(sweep).await, "two", "the redeploy runs the new build");

    let cloudformation = aws_sdk_cloudformation::Client::new(&config);
    let _ = cloudformation.delete_stack().stack_name(&stack).send().await;
    let _ = std::fs::remove_dir_all(&target);
}
