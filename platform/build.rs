//! Names the commit this build comes from, so every run record and audit row points at the exact code
//! (`crate::version::CODE_VERSION`). `ASSET_SWEEPER_COMMIT` overrides it for a build from a source tree
//! without its git history (a release tarball).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=ASSET_SWEEPER_COMMIT");
    let given = std::env::var("ASSET_SWEEPER_COMMIT").ok().filter(|c| !c.trim().is_empty());
    // Rebuilt when HEAD moves (a commit, a checkout) or the index changes (what `+dirty` reflects).
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]).unwrap_or(git_dir.clone());
        println!("cargo:rerun-if-changed={}", Path::new(&git_dir).join("HEAD").display());
        println!("cargo:rerun-if-changed={}", Path::new(&git_dir).join("index").display());
        println!("cargo:rerun-if-changed={}", Path::new(&common).join("packed-refs").display());
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", Path::new(&common).join(branch).display());
        }
    }
    let commit = given.map(|c| c.trim().to_owned()).or_else(|| {
        let head = git(&["rev-parse", "HEAD"])?;
        // Tracked files that differ from HEAD: the build is not exactly that commit.
        let dirty = git(&["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"])
            .is_some_and(|s| !s.is_empty());
        Some(if dirty { format!("{head}+dirty") } else { head })
    });
    println!("cargo:rustc-env=ASSET_SWEEPER_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
