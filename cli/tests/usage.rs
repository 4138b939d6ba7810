//! The binary's own contract, needing no service: its version, and a usage error as one line on stderr with exit
//! code 2. (Its commands against Postgres and LocalStack are tested in `tests/integration/cli.rs`, beside the
//! functions that make the states they read.)

use std::process::Command;

#[test]
fn it_names_its_version_and_a_usage_error_is_one_line_with_exit_2() {
    let version = Command::new(env!("CARGO_BIN_EXE_asset-sweeper")).arg("--version").output().expect("runs");
    assert!(version.status.success());
    let printed = String::from_utf8_lossy(&version.stdout);
    assert_eq!(printed.trim(), format!("asset-sweeper {}", env!("CARGO_PKG_VERSION")));

    let usage = Command::new(env!("CARGO_BIN_EXE_asset-sweeper")).arg("explain").output().expect("runs");
    assert_eq!(usage.status.code(), Some(2));
    assert!(usage.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&usage.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("asset-sweeper: ") && stderr.contains("required arguments were not provided"),
        "{stderr}"
    );
}

#[test]
fn guards_install_asks_for_the_database_alone() {
    let output = Command::new(env!("CARGO_BIN_EXE_asset-sweeper"))
        .args(["guards", "install"])
        .env_remove("DATABASE_URL")
        .env_remove("DATABASE_SECRET_ARN")
        .env_remove("CLEANUP_QUEUE_URL")
        .env_remove("ASSET_BUCKET")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("DATABASE_URL is not set (nor DATABASE_SECRET_ARN)"), "{stderr}");
    assert!(!stderr.contains("CLEANUP_QUEUE_URL") && !stderr.contains("ASSET_BUCKET"), "{stderr}");
}
