//! The test harness itself: a server outlives neither its test's panic nor, past the
//! next start, its test process killed outright.

use std::time::{Duration, Instant};

use super::redis_server::{self, RedisServer};

/// Set for the process that [`start_a_server_and_wait_to_be_killed`] runs in.
const ORPHAN_HELPER: &str = "TOKEN_BUCKET_TEST_ORPHAN_HELPER";

/// Run only by [`a_server_left_by_a_killed_test_process_is_stopped_at_the_next_start`],
/// in a process of its own: starts a server, says which, and waits to be killed.
#[test]
#[ignore = "a helper that another test runs in a process of its own"]
fn start_a_server_and_wait_to_be_killed() {
    if std::env::var_os(ORPHAN_HELPER).is_none() {
        return;
    }
    let server = RedisServer::start();
    println!("server {} {}", server.pid().unwrap(), server.port());
    std::thread::sleep(Duration::from_secs(60));
}

/// Whether process `pid` runs (and is not a zombie waiting to be reaped).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

#[test]
fn a_server_left_by_a_killed_test_process_is_stopped_at_the_next_start() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "harness::start_a_server_and_wait_to_be_killed",
            "--exact",
            "--ignored",
        ])
        .arg("--nocapture")
        .env(ORPHAN_HELPER, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let said = BufReader::new(helper.stdout.take().unwrap())
        .lines()
        .map(Result::unwrap)
        .find_map(|line| {
            let (pid, port) = line.strip_prefix("server ")?.split_once(' ')?;
            Some((pid.parse::<u32>().ok()?, port.parse::<u16>().ok()?))
        });
    let (pid, port) = said.expect("the helper started a server");
    // Killed at once: no destructor runs, so the server outlives its test process.
    helper.kill().unwrap();
    helper.wait().unwrap();
    assert!(runs(pid), "the server went with its test process");
    assert!(redis_server::registry().join(pid.to_string()).exists());

    // What every test process does once, before it starts its first server.
    redis_server::stop_orphans();
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs(pid) {
        assert!(
            Instant::now() < deadline,
            "the orphan on port {port} still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!redis_server::registry().join(pid.to_string()).exists());
    // The servers of processes that still run, this one's among them, are left alone.
    let mine = RedisServer::start();
    redis_server::stop_orphans();
    assert!(runs(mine.pid().unwrap()));
}

#[test]
fn a_server_is_stopped_when_its_test_panics() {
    let pid = std::sync::Mutex::new(None);
    let failed = std::panic::catch_unwind(|| {
        let server = RedisServer::start();
        *pid.lock().unwrap() = server.pid();
        panic!("a test that fails while its server runs");
    });
    assert!(failed.is_err());
    let pid = pid.into_inner().unwrap().unwrap();
    assert!(!runs(pid));
    assert!(!redis_server::registry().join(pid.to_string()).exists());
}
