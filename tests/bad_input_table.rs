//! The "Bad input" table in `docs/errors.md` promises a test behind every row: this checks
//! that each test it names exists, so that renaming or deleting one cannot leave the table
//! promising what nothing shows.

use std::path::Path;

/// Where the table lives, from the crate's root.
const PAGE: &str = "docs/errors.md";
const SECTION: &str = "## Bad input, and what each gets";

/// The table's rows: (input, the `file::test` references in its last column).
fn rows(page: &str) -> Vec<(String, Vec<String>)> {
    let Some((_, section)) = page.split_once(SECTION) else {
        return Vec::new();
    };
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| input"))
        .filter(|line| !line.starts_with("| ---"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            let references = cells
                .last()
                .unwrap_or(&"")
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            (cells[0].trim().to_owned(), references)
        })
        .collect()
}

/// What is wrong with the table in `page`, checked against the tests under `root`.
fn problems(root: &Path, page: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (input, references) in rows(page) {
        if references.is_empty() {
            problems.push(format!("no test named for {input:?}"));
        }
        for reference in references {
            let Some((file, test)) = reference.split_once("::") else {
                problems.push(format!("{reference:?} is not file::test ({input:?})"));
                continue;
            };
            let path = root.join("tests").join(format!("{file}.rs"));
            match std::fs::read_to_string(&path) {
                Ok(source) if source.contains(&format!("fn {test}(")) => {}
                Ok(_) => problems.push(format!("tests/{file}.rs has no test {test} ({input:?})")),
                Err(error) => problems.push(format!("tests/{file}.rs: {error} ({input:?})")),
            }
        }
    }
    problems
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_bad_input_in_the_table_names_tests_that_exist() {
    let page = std::fs::read_to_string(root().join(PAGE))
        .unwrap_or_else(|error| panic!("{PAGE}: {error}: the table moved? update PAGE"));
    let rows = rows(&page).len();
    // Also fails if the section's heading changed, since then no row is found.
    assert!(rows >= 25, "only {rows} rows: the table lost rows");
    assert_eq!(problems(root(), &page), Vec::<String>::new());
}

#[test]
fn the_check_catches_a_missing_test_a_missing_file_and_a_row_without_a_test() {
    let page = format!(
        "{SECTION}\n\n| input | what it gets | shown by |\n| --- | --- | --- |\n\
         | zero | an error | `bad_input::no_such_test` |\n\
         | one | an error | `no_such_file::a_test` |\n\
         | two | an error | nothing |\n\n## Next\n"
    );
    let problems = problems(root(), &page);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains("no test no_such_test"), "{problems:?}");
    assert!(problems[1].contains("no_such_file.rs"), "{problems:?}");
    assert!(problems[2].contains("no test named"), "{problems:?}");
}
