//! The project's own PostgreSQL launcher (`localstack/postgres`): it starts a server, reuses it, stops it, and
//! keeps one per port key and per checkout, so two runs side by side never share (or stop) each other's.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sqlx::{Connection, PgConnection};

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn launcher(localstack_dir: &Path, port_key: u16, verb: &str) -> Output {
    Command::new(localstack_dir.join("postgres"))
        .arg(verb)
        .env("LOCALSTACK_PORT", port_key.to_string())
        .output()
        .expect("localstack/postgres runs")
}

/// `up`, which must succeed: the URL it prints and what it said on stderr.
fn up(localstack_dir: &Path, port_key: u16) -> (String, String) {
    let output = launcher(localstack_dir, port_key, "up");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "up failed: {stderr}");
    (String::from_utf8_lossy(&output.stdout).trim().to_owned(), stderr)
}

async fn answers(url: &str) -> bool {
    match PgConnection::connect(url).await {
        Ok(mut conn) => sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&mut conn).await.is_ok(),
        Err(_) => false,
    }
}

/// A port key no other test or run uses (the launcher keys its state by it; nothing listens on it).
fn unused_key() -> u16 {
    47_000 + (uuid::Uuid::new_v4().as_u128() % 2_000) as u16
}

#[tokio::test]
async fn the_embedded_postgres_starts_is_reused_and_stops_and_two_never_collide() {
    let here = checkout().join("localstack");
    let (a, b) = (unused_key(), unused_key() + 2_000);

    let (url, said) = up(&here, a);
    assert!(url.starts_with("postgres://asset_sweeper:") && url.ends_with("/postgres"), "{url}");
    let password = url.split([':', '@']).nth(2).expect("a password in the URL");
    assert!(!said.contains(password), "progress never prints the password: {said}");
    assert!(answers(&url).await);

    let (again, said) = up(&here, a);
    assert_eq!(again, url, "a running server is reused");
    assert!(said.contains("reusing"), "{said}");

    // Another port key of the same checkout: its own server.
    let (other, _) = up(&here, b);
    assert_ne!(other, url);
    assert!(answers(&other).await);

    // A second checkout (a copy of localstack/ sharing the pinned environment): its own server too.
    let second = tempdir();
    let copy = second.join("localstack");
    std::fs::create_dir_all(&copy).expect("copy dir");
    for file in
        ["postgres", "python-env", "bootstrap-requirements.txt", "requirements.txt", "postgres-requirements.txt"]
    {
        std::fs::copy(here.join(file), copy.join(file)).expect("copy launcher");
    }
    std::os::unix::fs::symlink(here.join(".venv"), copy.join(".venv")).expect("share the environment");
    let (theirs, _) = up(&copy, a);
    assert_ne!(theirs, url, "same port key, other checkout: another server");

    // Stopping one stops only that one.
    assert!(launcher(&here, a, "down").status.success());
    assert!(!answers(&url).await, "stopped");
    assert!(answers(&other).await && answers(&theirs).await, "the others run on");
    assert!(!launcher(&here, a, "url").status.success(), "url says none runs");

    // Up again after a stop: the same cluster, its data kept.
    let (restarted, _) = up(&here, a);
    assert!(answers(&restarted).await);

    for (dir, key) in [(&here, a), (&here, b), (&copy, a)] {
        assert!(launcher(dir, key, "down").status.success());
    }
    for key in [a, b] {
        let _ = std::fs::remove_dir_all(here.join(".state").join(key.to_string()));
    }
    let _ = std::fs::remove_dir_all(&second);
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("asset-sweeper-launcher-{}", integration_tests::short_id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // As root the server runs as an unprivileged user, who must be able to reach its data directory.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("permissions");
    dir
}

/// As root from a private directory (root's home is 0700, as containers commonly have it), the server's unprivileged
/// user cannot reach the checkout: the launcher copies the server's binaries and keeps its data outside it, and the
/// server starts, answers, is reused, keeps its data across a stop, and stops. Before, `scripts/test` and
/// `scripts/demo` stopped there ("put the checkout where other users can read it").
#[tokio::test]
async fn as_root_a_checkout_in_a_private_directory_still_gets_its_server() {
    let uid = Command::new("id").arg("-u").output().expect("id runs");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        eprintln!("note: not root: the launcher runs the server as this user, and a private directory is its own");
        return;
    }
    let here = checkout().join("localstack");
    let private = tempdir();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("a private directory");
    let copy = private.join("checkout").join("localstack");
    std::fs::create_dir_all(&copy).expect("copy dir");
    for file in
        ["postgres", "python-env", "bootstrap-requirements.txt", "requirements.txt", "postgres-requirements.txt"]
    {
        std::fs::copy(here.join(file), copy.join(file)).expect("copy launcher");
    }
    // The environment, seen through the private directory as a checkout's own would be.
    std::os::unix::fs::symlink(here.join(".venv"), copy.join(".venv")).expect("share the environment");
    let key = unused_key();

    let (url, said) = up(&copy, key);
    assert!(said.contains("cannot reach this checkout"), "{said}");
    let place = said
        .split("the server runs from ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .map(PathBuf::from)
        .expect("where it runs from");
    assert!(place.starts_with("/var/lib/asset-sweeper-pg"), "{}", place.display());
    assert!(answers(&url).await, "{said}");
    let (again, said) = up(&copy, key);
    assert_eq!(again, url, "reused: {said}");
    assert!(launcher(&copy, key, "down").status.success());
    assert!(!answers(&url).await, "stopped");
    let (restarted, said) = up(&copy, key);
    assert!(answers(&restarted).await, "{said}");
    assert!(!said.contains("initialising"), "its data kept: {said}");

    assert!(launcher(&copy, key, "down").status.success());
    let _ = std::fs::remove_dir_all(&private);
    let _ = std::fs::remove_dir_all(&place);
    if let Some(checkout_dir) = place.parent() {
        let _ = std::fs::remove_dir(checkout_dir);
    }
}
