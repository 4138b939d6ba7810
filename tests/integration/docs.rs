//! The documents' relative links resolve: a reader who follows one from the README or `docs/` lands on a file
//! that exists and, for `#anchor`, on a heading that does. Needs no services.

use std::collections::BTreeSet;
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
