//! Reading back what criterion measured in this run, for the summaries the benchmarks
//! print as tables of ratios. Included by path (`#[path = "support/figures.rs"]`) by
//! each benchmark that prints one.

/// Where criterion keeps its figures: as criterion itself finds it, `$CRITERION_HOME`, or
/// `criterion` in the target directory (`$CARGO_TARGET_DIR`, or the one this benchmark
/// was built in: `<target>/release/deps/<bench>-<hash>`).
pub fn criterion_home() -> Option<std::path::PathBuf> {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return Some(home.into());
    }
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(target) => std::path::PathBuf::from(target),
        None => std::env::current_exe().ok()?.ancestors().nth(3)?.to_owned(),
    };
    Some(target.join("criterion"))
}

/// Nanoseconds per operation of one benchmark, if this run measured it: the estimate
/// criterion prints as `time` (the slope, or the mean where there is no slope), from its
/// `estimates.json`, over `per_iteration` operations. A file older than `since` is an
/// earlier run's (a filtered run leaves the others' in place), so it is passed over.
pub fn nanoseconds(
    home: &std::path::Path,
    group: &str,
    bench: &str,
    per_iteration: u64,
    since: std::time::SystemTime,
) -> Option<f64> {
    let path = home
        .join(group.replace('/', "_"))
        .join(bench)
        .join("new")
        .join("estimates.json");
    let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
    if modified < since {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let estimate = |name: &str| -> Option<f64> {
        let rest = &text[text.find(&format!("\"{name}\":{{"))?..];
        let rest = &rest[rest.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
        let end = rest.find([',', '}'])?;
        rest[..end].trim().parse().ok()
    };
    let per_iteration_ns = estimate("slope").or_else(|| estimate("mean"))?;
    Some(per_iteration_ns / per_iteration as f64)
}

/// A table cell for nanoseconds, or a dash where this run measured none.
pub fn ns(value: Option<f64>) -> String {
    value.map_or("—".to_owned(), |ns| format!("{ns:.1}"))
}

/// A table cell for `a ÷ b`, or a dash.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".to_owned(),
    }
}

/// This run's nanoseconds per operation (one an iteration) for the benchmarks
/// `row/column` of `group`, one for each of `columns`, as [`nanoseconds`] reads them.
// Not every benchmark that includes this file prints its table this way.
#[allow(dead_code)]
pub fn row(
    home: &std::path::Path,
    group: &str,
    row: &str,
    columns: &[&str],
    since: std::time::SystemTime,
) -> Vec<Option<f64>> {
    columns
        .iter()
        .map(|column| nanoseconds(home, group, &format!("{row}_{column}"), 1, since))
        .collect()
}
