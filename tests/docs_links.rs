//! The README sends readers to pages in `docs/`, and those pages link to each other and
//! back: this checks that every relative link points to a file that exists and, where it
//! names a heading (`page.md#heading`), to a heading that exists, so that moving or
//! renaming a page or a section cannot leave a link pointing nowhere. It also checks that
//! every page in `docs/` is compiled as doc tests (listed in `src/lib.rs`), so a Rust
//! example added to a page cannot rot unseen.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The pages whose links are checked: the README, `fuzz/README.md`, and `docs/*.md`.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md"), root().join("fuzz/README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|extension| extension == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

/// The text of `page` outside fenced code blocks: a link inside a code block is text.
fn prose(page: &str) -> String {
    let mut in_code = false;
    let mut prose = String::new();
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
}

/// The targets of the links and images in `page`, as written: `[text](target)`.
fn links(page: &str) -> Vec<String> {
    // Inline code spans come in pairs of backticks; what is between them is not a link.
    let text: String = prose(page).split('`').step_by(2).collect();
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')'))
        .map(|(target, _)| target.trim().to_owned())
        .collect()
}

/// The anchors GitHub makes for the headings of `page`: lower case, spaces turned to
/// hyphens, punctuation other than `-` and `_` dropped, and `-1`, `-2`... on repeats.
fn anchors(page: &str) -> HashSet<String> {
    let mut anchors = HashSet::new();
    for line in prose(page).lines() {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut anchor = slug.clone();
        let mut repeat = 0;
        while !anchors.insert(anchor.clone()) {
            repeat += 1;
            anchor = format!("{slug}-{repeat}");
        }
    }
    anchors
}

/// What is wrong with the links of the page at `path` whose text is `page`.
fn problems(path: &Path, page: &str) -> Vec<String> {
    let name = path
        .strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string();
    let mut problems = Vec::new();
    for target in links(page) {
        if target.starts_with("http://") || target.starts_with("https://") {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (target.as_str(), None),
        };
        // A pure `#anchor` names a heading of the page itself.
        let linked_page = if file.is_empty() {
            page.to_owned()
        } else {
            let linked = path.parent().unwrap().join(file);
            if !linked.exists() {
                problems.push(format!("{name}: {target:?} points to a missing file"));
                continue;
            }
            if anchor.is_none() {
                continue;
            }
            match std::fs::read_to_string(&linked) {
                Ok(linked_page) => linked_page,
                Err(error) => {
                    problems.push(format!("{name}: {target:?}: {error}"));
                    continue;
                }
            }
        };
        let Some(anchor) = anchor else { continue };
        if !anchors(&linked_page).contains(anchor) {
            problems.push(format!(
                "{name}: {target:?} names a heading that does not exist"
            ));
        }
    }
    problems
}

#[test]
fn every_relative_link_points_to_a_file_and_heading_that_exist() {
    let mut all = Vec::new();
    let mut count = 0;
    for path in pages() {
        let page = std::fs::read_to_string(&path).unwrap();
        count += links(&page).len();
        all.extend(problems(&path, &page));
    }
    // The README alone links to every page in docs/: far fewer means the parsing broke.
    assert!(count >= 20, "only {count} links found");
    assert_eq!(all, Vec::<String>::new());
}

#[test]
fn every_page_in_docs_is_compiled_as_doc_tests() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let missing: Vec<String> = pages()
        .iter()
        .filter_map(|path| path.strip_prefix(root()).ok())
        .filter(|path| path.starts_with("docs"))
        .map(|path| path.display().to_string())
        .filter(|path| !lib.contains(&format!("include_str!(\"../{path}\")")))
        .collect();
    assert_eq!(missing, Vec::<String>::new(), "add them to src/lib.rs");
}

#[test]
fn the_check_catches_a_missing_file_a_missing_heading_and_skips_code() {
    let page = "# Title\n\n## A section (feature `x`)\n\n\
                [ok](#a-section-feature-x) [ok](docs/errors.md#errors) [web](https://x.y/z)\n\
                [gone](docs/no_such_page.md) [no heading](#no-such-heading)\n\
                [bad anchor](docs/errors.md#no-such-heading) `[code](span.md)`\n\n\
                ```rust\nlet x = [1](no_such_file.md);\n```\n";
    let problems = problems(&root().join("README.md"), page);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains("no_such_page.md"), "{problems:?}");
    assert!(problems[1].contains("#no-such-heading"), "{problems:?}");
    assert!(
        problems[2].contains("errors.md#no-such-heading"),
        "{problems:?}"
    );
}
