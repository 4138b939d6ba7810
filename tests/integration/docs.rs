//! The documents' relative links resolve: a reader who follows one from the README or `docs/` lands on a file
//! that exists and, for `#anchor`, on a heading that does. docs/architecture.md names every workspace crate and
//! every public module of a library crate, and the architecture invariants it marks as tested hold: each crate's
//! dependencies stay within its row of the map, and the calls and writes it says only one place makes are made
//! only there, and no module of a crate names one that names it back. Needs no services.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).to_path_buf()
}

/// README.md and every markdown file in docs/.
fn documents() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut documents = vec![root.join("README.md")];
    for entry in fs::read_dir(root.join("docs")).expect("docs/ exists") {
        let path = entry.expect("a docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            documents.push(path);
        }
    }
    documents.sort();
    documents
}

/// The lines outside fenced code blocks, where a `#` is a heading and `[x](y)` a link.
fn prose(text: &str) -> Vec<&str> {
    let mut in_fence = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                in_fence = !in_fence;
                return false;
            }
            !in_fence
        })
        .collect()
}

/// A heading's anchor as GitHub makes it: lowercase, spaces to hyphens, punctuation other than `-` and `_`
/// dropped, and `-1`, `-2`… for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose(text) {
        let Some(heading) = line.strip_prefix('#') else { continue };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                '-' | '_' => Some(c),
                c if c.is_alphanumeric() => Some(c),
                _ => None,
            })
            .flat_map(char::to_lowercase)
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while !seen.insert(unique.clone()) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
    }
    seen
}

/// The targets of the inline links `[text](target)` outside code, spans of inline code removed first.
fn links(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let without_code: String = line.split('`').step_by(2).collect();
        let mut rest = without_code.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    targets
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for document in documents() {
        let text = fs::read_to_string(&document).expect("a readable document");
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let linked = if file.is_empty() {
                document.clone()
            } else {
                document.parent().expect("a document's directory").join(file)
            };
            let problem = if !linked.exists() {
                Some("no such file")
            } else if let Some(anchor) = anchor {
                let linked_text = fs::read_to_string(&linked).unwrap_or_default();
                (!anchors(&linked_text).contains(anchor)).then_some("no heading with that anchor")
            } else {
                None
            };
            if let Some(problem) = problem {
                let name = document.strip_prefix(workspace_root()).unwrap_or(&document);
                broken.push(format!("{}: ({target}): {problem}", name.display()));
            }
        }
    }
    assert!(checked > 0, "no relative links found: is the link parser broken?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_short() {
    let readme = fs::read_to_string(workspace_root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(lines < 200, "README.md has {lines} lines: move detail into docs/ and link to it");
}

// The code map: docs/architecture.md against the workspace as it is.

fn architecture() -> String {
    fs::read_to_string(workspace_root().join("docs/architecture.md")).expect("docs/architecture.md")
}

/// The workspace's members, as the root `Cargo.toml` lists them (`cli`, `localstack/demo`, …).
fn members() -> Vec<String> {
    let manifest = fs::read_to_string(workspace_root().join("Cargo.toml")).expect("the root Cargo.toml");
    let start = manifest.find("members = [").expect("a members list") + "members = [".len();
    let end = start + manifest[start..].find(']').expect("the members list's end");
    manifest[start..end].split(',').map(|m| m.trim().trim_matches('"').to_owned()).filter(|m| !m.is_empty()).collect()
}

/// What the code map needs of one member's `Cargo.toml`.
struct Manifest {
    /// `[package] name`.
    package: String,
    /// `[lib] name`, when it has one.
    lib: Option<String>,
    /// The keys of `[dependencies]`.
    dependencies: BTreeSet<String>,
    /// The keys of `[dev-dependencies]`.
    dev_dependencies: BTreeSet<String>,
}

fn manifest(member: &str) -> Manifest {
    let path = workspace_root().join(member).join("Cargo.toml");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut manifest = Manifest {
        package: String::new(),
        lib: None,
        dependencies: BTreeSet::new(),
        dev_dependencies: BTreeSet::new(),
    };
    let mut section = "";
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        if line.starts_with('#') {
            continue;
        }
        // `aws-config.workspace = true` and `clap = { … }` alike.
        let key = key.trim().split('.').next().unwrap_or_default().to_owned();
        let value = value.trim().trim_matches('"').to_owned();
        match section {
            "[package]" if key == "name" => manifest.package = value,
            "[lib]" if key == "name" => manifest.lib = Some(value),
            "[dependencies]" => {
                manifest.dependencies.insert(key);
            }
            "[dev-dependencies]" => {
                manifest.dev_dependencies.insert(key);
            }
            _ => {}
        }
    }
    assert!(!manifest.package.is_empty(), "{}: no package name", path.display());
    manifest
}

/// Every member's manifest, by member.
fn manifests() -> BTreeMap<String, Manifest> {
    members().into_iter().map(|m| (m.clone(), manifest(&m))).collect()
}

/// A member's workspace dependencies, as members (a dependency is named by its package).
fn workspace_dependencies(manifests: &BTreeMap<String, Manifest>, member: &str) -> BTreeSet<String> {
    let by_package: BTreeMap<&str, &str> =
        manifests.iter().map(|(m, man)| (man.package.as_str(), m.as_str())).collect();
    manifests[member].dependencies.iter().filter_map(|d| by_package.get(d.as_str()).map(|m| (*m).to_owned())).collect()
}

/// `pub mod x;` lines of `file`, and theirs in turn, as `prefix::x` paths: `src/x.rs` or `src/x/mod.rs` beside a
/// crate root or a `mod.rs`, below `src/parent/` for a module file `src/parent.rs`.
fn public_modules(file: &Path, prefix: &str, found: &mut Vec<String>) {
    let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let parent = file.parent().expect("a source file's directory");
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let children = if stem == "lib" || stem == "mod" { parent.to_path_buf() } else { parent.join(stem) };
    for line in text.lines().map(str::trim) {
        let Some(name) = line.strip_prefix("pub mod ").and_then(|rest| rest.strip_suffix(';')) else { continue };
        let path = format!("{prefix}::{name}");
        found.push(path.clone());
        let file =
            [children.join(format!("{name}.rs")), children.join(name).join("mod.rs")].into_iter().find(|f| f.exists());
        if let Some(file) = file {
            public_modules(&file, &path, found);
        }
    }
}

#[test]
fn the_architecture_names_every_workspace_crate_and_every_public_module() {
    let doc = architecture();
    let headings: BTreeSet<&str> = prose(&doc).into_iter().filter(|l| l.starts_with("### ")).collect();
    let mut missing = Vec::new();
    let mut modules = 0;
    for (member, manifest) in manifests() {
        if !headings.iter().any(|h| h.starts_with(&format!("### `{member}`"))) {
            missing.push(format!("a section `### `{member}``"));
        }
        let root = workspace_root().join(&member).join("src/lib.rs");
        if !root.exists() {
            continue;
        }
        let name = manifest.lib.clone().unwrap_or_else(|| manifest.package.replace('-', "_"));
        let mut found = Vec::new();
        public_modules(&root, &name, &mut found);
        modules += found.len();
        missing.extend(found.into_iter().filter(|m| !doc.contains(&format!("`{m}`"))).map(|m| format!("`{m}`")));
    }
    assert!(modules > 0, "no public modules found: is the module reader broken?");
    assert!(missing.is_empty(), "docs/architecture.md does not name:\n{}", missing.join("\n"));
}

/// The code map's table of which workspace crates each crate may use: member to the members it may name.
fn allowed_dependencies(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let lines = prose(doc);
    let header =
        lines.iter().position(|l| l.starts_with("| crate | may use |")).expect("the table of what each crate may use");
    let mut allowed = BTreeMap::new();
    for line in lines[header + 1..].iter().take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(crate_cell), Some(uses)) = (cells.get(1), cells.get(2)) else { continue };
        let Some(member) = crate_cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')) else { continue };
        let names = uses.split('`').skip(1).step_by(2).map(str::to_owned).collect();
        allowed.insert(member.to_owned(), names);
    }
    allowed
}

#[test]
fn each_crate_uses_only_the_crates_the_architecture_allows_it() {
    let allowed = allowed_dependencies(&architecture());
    let manifests = manifests();
    let mut problems = Vec::new();
    for member in manifests.keys() {
        let Some(may) = allowed.get(member) else {
            problems.push(format!("{member}: no row in the table of what each crate may use"));
            continue;
        };
        for dependency in workspace_dependencies(&manifests, member).difference(may) {
            problems.push(format!("{member} depends on {dependency}, which its row does not allow"));
        }
    }
    // Not even for its tests: the CLI's end-to-end test is in tests/.
    for function in ["sweep-lambda", "consumer-lambda"] {
        if manifests["cli"].dev_dependencies.contains(function) {
            problems.push(format!("cli has {function} as a dev-dependency"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The crates that read inventory files: reconciliation's alone.
const INVENTORY_READERS: [&str; 5] = ["csv", "flate2", "parquet", "orc-rust", "arrow-array"];

#[test]
fn the_consumer_links_no_inventory_reader_no_reconciliation_no_retention_and_no_queue_client() {
    let manifests = manifests();
    let mut reached = BTreeSet::from(["consumer-lambda".to_owned()]);
    let mut todo = vec!["consumer-lambda".to_owned()];
    while let Some(member) = todo.pop() {
        for dependency in workspace_dependencies(&manifests, &member) {
            if reached.insert(dependency.clone()) {
                todo.push(dependency);
            }
        }
    }
    for forbidden in ["reconcile", "records", "sweep-lambda"] {
        assert!(!reached.contains(forbidden), "consumer-lambda reaches {forbidden}: {reached:?}");
    }
    for member in &reached {
        for reader in INVENTORY_READERS {
            assert!(
                !manifests[member].dependencies.contains(reader),
                "{member}, which the consumer links, uses {reader}"
            );
        }
    }
    assert!(!manifests["consumer-lambda"].dependencies.contains("aws-sdk-sqs"), "the consumer sends no message");
    let sqs = mentions(&["consumer-lambda"], &["aws_sdk_sqs"]);
    assert!(sqs.is_empty(), "the consumer sends no message: {sqs:?}");
}

/// Every crate `function`'s release build for Lambda compiles, with its features, as `cargo tree` resolves them (a
/// crate built for the build machine too, under a build script or a macro, may appear twice, with other features).
fn resolved_features(function: &str) -> BTreeSet<String> {
    let output = std::process::Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .args(["tree", "--locked", "--offline", "-q", "-p", function, "-e", "normal,build", "--prefix", "none"])
        .args(["--target", "aarch64-unknown-linux-gnu", "-f", "{p} [{f}]"])
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim_end_matches(" (*)").replace(" (proc-macro)", ""))
        .collect()
}

/// `sam build` builds one function at a time: a crate both share, compiled with other features for the consumer,
/// is compiled twice, with everything over it (tokio-util's, under the AWS SDK, was most of CI's longest step).
#[test]
fn the_consumer_compiles_every_crate_it_shares_with_the_sweep_with_the_sweeps_features() {
    let (sweep, consumer) = (resolved_features("sweep-lambda"), resolved_features("consumer-lambda"));
    let differing: Vec<&String> =
        consumer.difference(&sweep).filter(|line| !line.starts_with("consumer-lambda ")).collect();
    assert!(
        differing.is_empty(),
        "crates the consumer's build compiles with features the sweep's does not: add the sweep's to \
         consumer-lambda/Cargo.toml (see its comment):\n{differing:#?}"
    );
}

/// The comparison's local engine is the tests': a Lambda carries none of it, and the consumer no Athena client.
#[test]
fn neither_function_links_the_local_engine_and_the_consumer_links_no_athena_client() {
    for function in ["sweep-lambda", "consumer-lambda"] {
        let linked = resolved_features(function);
        for engine in ["datafusion", "datafusion-orc", "object_store"] {
            let found: Vec<&String> = linked.iter().filter(|l| l.starts_with(&format!("{engine} v"))).collect();
            assert!(found.is_empty(), "{function} links {engine}: {found:?}");
        }
    }
    let consumer = resolved_features("consumer-lambda");
    assert!(!consumer.iter().any(|l| l.starts_with("aws-sdk-athena ")), "the consumer links Athena's client");
    assert!(resolved_features("sweep-lambda").iter().any(|l| l.starts_with("aws-sdk-athena ")));
}

#[test]
fn only_reconciliation_reads_inventory_files_and_neither_schema_nor_records_can_call_s3() {
    let manifests = manifests();
    for (member, manifest) in &manifests {
        if ["reconcile", "tests", "localstack/demo"].contains(&member.as_str()) {
            continue;
        }
        for reader in INVENTORY_READERS {
            assert!(!manifest.dependencies.contains(reader), "{member} uses {reader}: inventory files are reconcile's");
        }
    }
    for member in ["schema", "records"] {
        assert!(!manifests[member].dependencies.contains("aws-sdk-s3"), "{member} depends on aws-sdk-s3");
    }
}

#[test]
fn observed_parses_and_does_no_io() {
    let manifest = manifest("observed");
    for io in ["aws-config", "aws-sdk-s3", "sqlx", "tokio", "reqwest", "hyper"] {
        assert!(!manifest.dependencies.contains(io), "observed uses {io}: it parses lines, it reads nothing");
    }
    let workspace = workspace_dependencies(&manifests(), "observed");
    assert!(workspace.is_empty(), "observed uses {workspace:?}");
}

/// The product's own code: every member but the tests and the demo, which play the application.
fn product() -> Vec<String> {
    members().into_iter().filter(|m| m != "tests" && m != "localstack/demo").collect()
}

/// Every file under `dir` with extension `ext`, recursively.
fn files(dir: &Path, ext: &str, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files(&path, ext, found);
        } else if path.extension().is_some_and(|e| e == ext) {
            found.push(path);
        }
    }
}

/// The Rust sources (`src/`) and SQL definitions (`sql/`) of `members`, each as its path from the workspace
/// root and its text without comment lines, whitespace runs as one space, lowercase.
fn sources(members: &[&str]) -> Vec<(String, String)> {
    let root = workspace_root();
    let mut sources = Vec::new();
    for member in members {
        let mut found = Vec::new();
        files(&root.join(member).join("src"), "rs", &mut found);
        files(&root.join(member).join("sql"), "sql", &mut found);
        for file in found {
            let text = fs::read_to_string(&file).expect("a readable source");
            let comment = if file.extension().is_some_and(|e| e == "sql") { "--" } else { "//" };
            let code: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with(comment)).collect();
            // A Rust string continued with `\` at a line's end is one line of SQL.
            let code = code.join("\n").replace("\\\n", " ").to_lowercase();
            let code = code.split_whitespace().collect::<Vec<_>>().join(" ");
            let name = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
            sources.push((name, code));
        }
    }
    sources
}

/// The files of `members` whose code contains any of `needles` (matched in lowercase, whitespace runs as one
/// space), with the needle.
fn mentions(members: &[&str], needles: &[&str]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (file, code) in sources(members) {
        for needle in needles {
            if code.contains(&needle.to_lowercase()) {
                found.push((file.clone(), (*needle).to_owned()));
            }
        }
    }
    found
}

/// The product's files that write `table`, with the statement's start: `INSERT INTO`, `UPDATE`, `DELETE FROM`,
/// `TRUNCATE` or `COPY` of it (with or without `ONLY` or `public.`).
fn writers_of(table: &str) -> BTreeSet<String> {
    let product = product();
    let product: Vec<&str> = product.iter().map(String::as_str).collect();
    let mut writers = BTreeSet::new();
    for (file, code) in sources(&product) {
        for verb in ["insert into ", "update ", "delete from ", "truncate ", "copy "] {
            for only in ["", "only "] {
                for schema in ["", "public.", "asset_sweeper.", "asset_sweeper_private."] {
                    let statement = format!("{verb}{only}{schema}{table}");
                    let writes = code.match_indices(&statement).any(|(at, _)| {
                        let next = code[at + statement.len()..].chars().next();
                        let before = code[..at].chars().next_back();
                        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                            && !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    });
                    if writes {
                        writers.insert(file.clone());
                    }
                }
            }
        }
    }
    writers
}

#[test]
fn the_products_tables_are_written_only_where_the_architecture_says() {
    for (table, owners) in [
        ("assets", &["lifecycle/src/assets.rs"][..]),
        ("stored_objects", &["lifecycle/src/assets.rs", "lifecycle/sql/lifecycle.sql"][..]),
        ("settlement_events", &["platform/src/audit.rs"][..]),
        // What keeps assets whatever the rows say: a person's window and pins, and the function the application
        // declares its own windows with.
        ("destruction_holds", &["lifecycle/src/holds/declared.rs", "lifecycle/sql/lifecycle.sql"][..]),
        ("asset_pins", &["lifecycle/src/holds/declared.rs"][..]),
        // The approvals that let a brake's deletions through: each by the library of what it releases.
        ("brake_approvals", &["lifecycle/src/brake.rs"][..]),
        ("reconcile_prefixes", &["reconcile/src/adopt.rs"][..]),
        // A rule is the application's own (it writes and removes it through the contract's view); its approval and
        // its turn are the records crate's.
        ("retention_rules", &["records/src/lib.rs", "records/src/rule.rs", "platform/sql/contract.sql"][..]),
    ] {
        let writers = writers_of(table);
        let owners: BTreeSet<String> = owners.iter().map(|o| (*o).to_owned()).collect();
        let strangers: Vec<&String> = writers.difference(&owners).collect();
        assert!(strangers.is_empty(), "{table} is written outside {owners:?}: {strangers:?}");
        assert!(!writers.is_empty(), "no writer of {table} found: is the statement reader broken?");
    }
}

#[test]
fn only_the_settle_deletes_bytes_and_only_through_platform_objects() {
    let product = product();
    let product: Vec<&str> = product.iter().map(String::as_str).collect();
    let calls =
        |needles: &[&str]| -> BTreeSet<String> { mentions(&product, needles).into_iter().map(|(f, _)| f).collect() };
    assert_eq!(
        calls(&[".delete_object()", ".delete_objects()"]),
        BTreeSet::from(["platform/src/objects.rs".to_owned()])
    );
    assert_eq!(calls(&["objects::remove("]), BTreeSet::from(["lifecycle/src/settle.rs".to_owned()]));
    // The sweep decides nothing about an asset's fate.
    let sweep = mentions(&["sweep-lambda"], &["settle::", "objects::"]);
    assert!(sweep.is_empty(), "the sweep settles or touches objects: {sweep:?}");
}

#[test]
fn the_settle_plan_and_explain_recheck_through_one_judgement() {
    let product = product();
    let product: Vec<&str> = product.iter().map(String::as_str).collect();
    let callers: BTreeSet<String> = mentions(&product, &["recheck::recheck"]).into_iter().map(|(f, _)| f).collect();
    assert_eq!(callers, BTreeSet::from(["lifecycle/src/judgement.rs".to_owned()]));
}

#[test]
fn the_cli_runs_no_statement_of_its_own() {
    // It presents: every read and write is a library's function, so a statement has one home and one test.
    let found =
        mentions(&["cli"], &["sqlx::query", "sqlx::raw_sql", "query_as", "query_scalar", ".fetch_", "copy_in_raw"]);
    assert!(found.is_empty(), "the CLI runs statements of its own: {found:?}");
}

#[test]
fn s3s_expiry_rule_is_written_once_in_sql_and_once_in_rust_both_in_the_ledger() {
    let product = product();
    let product: Vec<&str> = product.iter().map(String::as_str).collect();
    let files =
        |needles: &[&str]| -> BTreeSet<String> { mentions(&product, needles).into_iter().map(|(f, _)| f).collect() };
    // The rule rounds up to a midnight UTC: `date_trunc('day', …)` in SQL, a date's days added in Rust.
    assert_eq!(files(&["date_trunc('day'"]), BTreeSet::from(["ledger/sql/money.sql".to_owned()]));
    let callers = files(&["asset_sweeper_version_expires("]);
    assert!(callers.iter().all(|f| f.starts_with("ledger/")), "the rule is called outside the ledger: {callers:?}");
    assert!(files(&["fn expiry_day("]).len() == 1, "the Rust rule is written once");
}

#[test]
fn no_crate_of_the_product_but_settings_reads_the_environment() {
    let product = product();
    let readers: Vec<&str> = product.iter().map(String::as_str).filter(|m| *m != "settings").collect();
    let found = mentions(&readers, &["std::env::var", "env::var(", "env::var_os(", "env::vars(", "env::vars_os("]);
    assert!(found.is_empty(), "the environment is the settings' to read: {found:?}");
}

#[test]
fn the_migrator_holds_no_checked_query_and_later_migrations_define_no_function_or_trigger() {
    let checked = mentions(&["migrator"], &["query!", "query_as!", "query_scalar!", "query_file"]);
    assert!(checked.is_empty(), "the migrator builds before the query data exists: {checked:?}");

    let dir = workspace_root().join("migrator/migrations");
    let mut later = 0;
    for entry in fs::read_dir(&dir).expect("migrator/migrations") {
        let path = entry.expect("a migration").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let version: u64 = name.split('_').next().and_then(|v| v.parse().ok()).unwrap_or(0);
        if version <= 20_261_201_000_010 {
            continue;
        }
        later += 1;
        let text = fs::read_to_string(&path).expect("a readable migration");
        let code: Vec<&str> = text.lines().map(|l| l.split("--").next().unwrap_or_default()).collect();
        let code = code.join(" ").to_uppercase().split_whitespace().collect::<Vec<_>>().join(" ");
        for definition in ["FUNCTION", "TRIGGER", "PROCEDURE"] {
            for create in ["CREATE ", "CREATE OR REPLACE ", "CREATE CONSTRAINT ", "CREATE EVENT "] {
                let statement = format!("{create}{definition}");
                assert!(!code.contains(&statement), "{name}: {statement} belongs in a <crate>/sql/*.sql file");
            }
        }
    }
    assert!(later > 0, "no migration after 20261201000010 found: is the reader broken?");

    let migrator = fs::read_to_string(workspace_root().join("migrator/src/lib.rs")).expect("migrator/src/lib.rs");
    for member in members() {
        let mut found = Vec::new();
        files(&workspace_root().join(&member).join("sql"), "sql", &mut found);
        for file in found {
            let name = file.strip_prefix(workspace_root()).unwrap_or(&file).display().to_string();
            assert!(
                migrator.contains(&format!("definition!(\"{name}\")")),
                "{name} is not in the migrator's DEFINITIONS"
            );
        }
    }
}

/// A crate's module path of the file `file` under its `src` (`census::scan` for `src/census/scan.rs`; the crate's
/// root is the empty path).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut path: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    if let Some(last) = path.pop() {
        let stem = last.trim_end_matches(".rs");
        if !(stem == "mod" || (path.is_empty() && (stem == "lib" || stem == "main"))) {
            path.push(stem.to_owned());
        }
    }
    path
}

/// The paths a line of code names from `crate::`, `super::` or `self::`, each resolved from `module` to segments
/// from the crate's root; a group (`super::{a, b::c}`) gives one path per item.
fn named_paths(line: &str, module: &[String]) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let bytes: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .find(|s| line[line.char_indices().nth(i).map_or(line.len(), |(b, _)| b)..].starts_with(*s));
        let at_boundary = i == 0 || !ident(bytes[i - 1]) && bytes[i - 1] != ':';
        let (Some(_), true) = (starts, at_boundary) else {
            i += 1;
            continue;
        };
        // The whole path from here: identifiers, `::`, and groups in braces.
        let rest: String = bytes[i..].iter().collect();
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|(_, c)| {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => return true,
                    '}' => depth -= 1,
                    ',' if depth == 0 => return true,
                    _ => {}
                }
                depth == 0 && !(ident(*c) || *c == ':' || *c == '{' || *c == '}')
            })
            .map_or(rest.len(), |(n, _)| n);
        for path in expand(&rest[..end]) {
            let mut resolved: Vec<String> = Vec::new();
            let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
            match segments.peek().copied() {
                Some("crate") => {
                    segments.next();
                }
                Some("self") => {
                    segments.next();
                    resolved = module.to_vec();
                }
                _ => {
                    resolved = module.to_vec();
                    while segments.peek() == Some(&"super") {
                        segments.next();
                        resolved.pop();
                    }
                }
            }
            resolved.extend(segments.map(str::to_owned));
            found.push(resolved);
        }
        i += end.max(1);
    }
    found
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d` and `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else { return vec![path.to_owned()] };
    let (prefix, group) = (&path[..open], path[open + 1..].trim_end_matches('}'));
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (n, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..n]);
                start = n + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .flat_map(|item| expand(&format!("{prefix}{item}")))
        .collect()
}

/// A file's lines without its comment lines, a `use` that rustfmt spread over several lines joined into one.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut open = false;
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let trimmed = line.trim();
        match lines.last_mut() {
            Some(last) if open => last.push_str(trimmed),
            _ => lines.push(trimmed.to_owned()),
        }
        let statement = lines.last().map(String::as_str).unwrap_or_default();
        let is_use =
            statement.starts_with("use ") || statement.split_once(" use ").is_some_and(|(v, _)| v.starts_with("pub"));
        open = is_use && !statement.contains(';');
    }
    lines
}

/// Each module of `member` and the modules of the same crate it names, a module's own ancestors and descendants
/// left out (a folder's `mod.rs` and its modules are one room; only arrows between rooms can make a circle).
fn module_arrows(member: &str) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = workspace_root().join(member).join("src");
    let mut found = Vec::new();
    files(&src, "rs", &mut found);
    let modules: BTreeSet<Vec<String>> = found.iter().map(|file| module_of(&src, file)).collect();
    let mut arrows = BTreeMap::new();
    for file in &found {
        let module = module_of(&src, file);
        let text = fs::read_to_string(file).expect("a readable source");
        let mut to = BTreeSet::new();
        for line in logical_lines(&text) {
            for path in named_paths(&line, &module) {
                let Some(target) = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains(p))
                else {
                    continue;
                };
                let related = target.starts_with(&module) || module.starts_with(&target);
                if !related {
                    to.insert(target);
                }
            }
        }
        arrows.insert(module, to);
    }
    arrows
}

/// A circle of `arrows`, as the modules in their order, if there is one.
fn circle(arrows: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit<'a>(
        at: &'a Vec<String>,
        arrows: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        path: &mut Vec<&'a Vec<String>>,
        done: &mut BTreeSet<&'a Vec<String>>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|p| *p == at) {
            return Some(path[start..].iter().chain([&at]).map(|m| m.join("::")).collect());
        }
        if !done.insert(at) {
            return None;
        }
        path.push(at);
        for next in arrows.get(at).into_iter().flatten() {
            if let Some(found) = visit(next, arrows, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    arrows.keys().find_map(|start| visit(start, arrows, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_of_a_crate_names_one_that_names_it_back() {
    // The reader works: a module of the census names its batch's parts, and a circle drawn by hand is found.
    let schema = module_arrows("schema");
    let scan = vec!["census".to_owned(), "scan".to_owned()];
    assert!(schema[&scan].contains(&vec!["census".to_owned(), "group".to_owned()]), "{:?}", schema[&scan]);
    let module = |m: &str| m.split("::").map(str::to_owned).collect::<Vec<_>>();
    let drawn = BTreeMap::from([
        (module("a"), BTreeSet::from([module("b")])),
        (module("b"), BTreeSet::from([module("c")])),
        (module("c"), BTreeSet::from([module("a")])),
    ]);
    assert_eq!(circle(&drawn), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    let spread = "use crate::map::{\n    ReferenceMap,\n    SchemaProblem,\n};\nfn f() {}";
    assert_eq!(logical_lines(spread), ["use crate::map::{ReferenceMap,SchemaProblem,};", "fn f() {}"]);
    assert_eq!(
        named_paths("use super::{group::{Column, Group}, named, scan::Found};", &module("census::advance")),
        [
            module("census::group::Column"),
            module("census::group::Group"),
            module("census::named"),
            module("census::scan::Found")
        ]
    );

    for member in members().iter().filter(|m| *m != "tests") {
        if let Some(circle) = circle(&module_arrows(member)) {
            panic!("{member}: these modules name each other in a circle: {}", circle.join(" -> "));
        }
    }
}

/// The repository paths the README and `docs/` name in code spans (`schema/src/census/scan.rs`, `scripts/test`):
/// each span whose first part is a folder or file at the repository's root, and that is no pattern, placeholder
/// or build output.
fn named_repository_paths(text: &str) -> Vec<String> {
    let root = workspace_root();
    let generated = ["target", ".aws-sam", "localstack/.venv", "localstack/.state", "localstack/.sam-venv"];
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|span| span.trim_end_matches([',', '.', ':', ';']))
        .filter(|span| span.contains('/') && !span.starts_with(['/', '.', '$', '~']))
        .filter(|span| !span.contains(|c: char| c.is_whitespace() || "<>*…{}()|=#?:'\"".contains(c)))
        .filter(|span| span.split('/').next().is_some_and(|first| root.join(first).exists()))
        .filter(|span| !generated.iter().any(|g| span.starts_with(g)))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_repository_path_the_readme_and_docs_name_exists() {
    let (mut named, mut missing) = (0, Vec::new());
    for document in documents() {
        let text = fs::read_to_string(&document).expect("a readable document");
        let name = document.strip_prefix(workspace_root()).unwrap_or(&document).display().to_string();
        for path in named_repository_paths(&text) {
            named += 1;
            if !workspace_root().join(&path).exists() {
                missing.push(format!("{name}: {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "paths the repository does not hold: {missing:#?}");
    assert!(named > 50, "only {named} paths found: is the reader broken?");
}
