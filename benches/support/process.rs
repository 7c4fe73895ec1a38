//! What this process costs the machine, read from Linux's `/proc/self`: resident memory,
//! and CPU time summed over the process's threads.
//!
//! One module for every program of the crate that measures itself, so that they all read
//! the same figures the same way: `benches/scenarios.rs` (memory per waiter, CPU per
//! token), `benches/keyed_memory.rs` (memory per key) and `examples/soak.rs` (memory
//! growth over a long run). Each takes it in with `#[path = "..."] mod process;`. It lives
//! beside the benchmarks because they are most of its users and the only ones reading CPU
//! time; the soak example borrows its memory readings from here rather than the other way
//! round, so that the benchmarks' support code stays in one folder. Every program uses a
//! part of it, so what one of them leaves unused is not a warning.
//!
//! # What it reads
//!
//! - **Memory**: the `kB` lines of `/proc/self/status`, chiefly `VmRSS` (resident now) and
//!   `VmHWM` (the peak of `VmRSS`). Resident memory is what the machine pays, allocator
//!   overhead included, which a counting allocator cannot see. Where there is no `/proc`
//!   (not Linux), every reading is 0.
//! - **CPU time**: the first field of `/proc/self/task/<tid>/schedstat`, nanoseconds on a
//!   CPU, summed over the process's live threads: precise, and it needs no libc crate. A
//!   thread that exits takes its time with it, so a measurement is only whole while every
//!   thread it covers still lives. As a cross-check, `utime + stime` (fields 14 and 15 of
//!   `/proc/self/stat`, what `getrusage` reports) is read beside it, in clock ticks: the
//!   tick length comes from `getconf CLK_TCK`, asked once by a parent process
//!   ([`getconf_clk_tck`]) and handed to its children in the [`CLK_TCK_ENV`] variable (100
//!   is assumed without it). [`CpuMeter`] warns on stderr when the two disagree by more
//!   than 20 ms plus 5 %, and falls back to the tick count when `schedstat` cannot be read.

#![allow(dead_code)]

use std::process::Command;

/// The environment variable through which a parent hands its children the length of a
/// clock tick (`getconf CLK_TCK`, ticks per second).
pub const CLK_TCK_ENV: &str = "SCENARIOS_CLK_TCK";

/// Bytes in a mebibyte, for printing memory.
pub const MIB: f64 = 1024.0 * 1024.0;

/// A `kB` line of `/proc/self/status` (`key` without its colon, as `"VmRSS"`), in
/// kibibytes; 0 where there is no such line.
pub fn status_kib(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// A `kB` line of `/proc/self/status`, in bytes; 0 where there is no such line.
pub fn status_bytes(key: &str) -> u64 {
    status_kib(key) * 1024
}

/// CPU time of the whole process: schedstat summed over its threads, with the
/// `/proc/self/stat` tick count beside it as a cross-check.
pub struct CpuMeter {
    schedstat: Option<u64>,
    ticks: u64,
}

impl CpuMeter {
    pub fn start() -> CpuMeter {
        CpuMeter {
            schedstat: schedstat_ns(),
            ticks: stat_cpu_ns(),
        }
    }

    /// CPU nanoseconds used since `start`.
    pub fn elapsed_ns(&self) -> u64 {
        let ticks = stat_cpu_ns().saturating_sub(self.ticks);
        let Some(start) = self.schedstat else {
            return ticks;
        };
        let Some(now) = schedstat_ns() else {
            return ticks;
        };
        let precise = now.saturating_sub(start);
        let tolerance = 20_000_000 + precise / 20;
        if precise.abs_diff(ticks) > tolerance {
            eprintln!(
                "    warning: schedstat says {:.3} s of CPU, /proc/self/stat {:.3} s",
                precise as f64 / 1e9,
                ticks as f64 / 1e9
            );
        }
        precise
    }
}

/// Nanoseconds on a CPU, summed over the process's live threads.
pub fn schedstat_ns() -> Option<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let path = entry.ok()?.path().join("schedstat");
        // A thread may end between listing and reading; it then counts nothing.
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// `utime + stime` of the process, from `/proc/self/stat`, in nanoseconds.
pub fn stat_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces), starting at field 3.
    let rest = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> u64 { fields.get(n - 3).and_then(|f| f.parse().ok()).unwrap_or(0) };
    let ticks = field(14) + field(15);
    ticks * 1_000_000_000 / clock_ticks()
}

/// Clock ticks per second, as the parent found them ([`CLK_TCK_ENV`]); 100 without.
fn clock_ticks() -> u64 {
    std::env::var(CLK_TCK_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// Clock ticks per second from `getconf CLK_TCK`, and whether it answered (if not, 100).
pub fn getconf_clk_tck() -> (u64, bool) {
    let asked = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&t| t > 0);
    match asked {
        Some(ticks) => (ticks, true),
        None => (100, false),
    }
}
