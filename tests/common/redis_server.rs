//! A throwaway `redis-server` for the Redis tests, the bench and the example: on a free
//! loopback port, persisting nothing, in its own temporary directory, stopped on drop.
//!
//! Uses only std, so that any test or example can include it with `#[path]`.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// How long a starting server gets to answer.
const STARTUP: Duration = Duration::from_secs(10);

/// Names temporary directories apart within one process.
static SERVERS_STARTED: AtomicU64 = AtomicU64::new(0);

/// A running `redis-server` child process.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    cluster: bool,
}

impl RedisServer {
    /// Starts a server on a free loopback port.
    ///
    /// Panics, saying how to fix it, when `redis-server` is not installed: the Redis tests
    /// must fail loudly rather than pass without having run.
    pub fn start() -> RedisServer {
        RedisServer::start_with(false)
    }

    /// Starts a server in cluster mode, a cluster of this one node. It owns no hash slot
    /// yet: the caller assigns them (`CLUSTER ADDSLOTSRANGE 0 16383`). Even holding every
    /// slot, it refuses a command or script whose keys are in different slots
    /// (`CROSSSLOT`), as any cluster does.
    pub fn start_cluster() -> RedisServer {
        RedisServer::start_with(true)
    }

    fn start_with(cluster: bool) -> RedisServer {
        let serial = SERVERS_STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "token-bucket-redis-{}-{serial}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create the Redis server's temporary directory");
        // Another process may take the port between our probe and the server's bind: try
        // a few.
        for _ in 0..5 {
            let port = free_port();
            let mut server = RedisServer {
                child: None,
                port,
                dir: dir.clone(),
                cluster,
            };
            if server.launch() {
                return server;
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (as a crash would: nothing is saved), and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + STARTUP;
        // The port can take a moment to be free again.
        while !self.launch() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not restart on port {}",
                self.port
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Spawns the server and waits for it to answer; false if it exited first.
    fn launch(&mut self) -> bool {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir);
        if self.cluster {
            // The cluster bus needs a port too: by default the port + 10000, which may
            // be taken or past 65535, so a free one is named.
            command
                .args(["--cluster-enabled", "yes"])
                .args([
                    "--cluster-config-file",
                    &format!("nodes-{}.conf", self.port),
                ])
                .args(["--cluster-port", &free_port().to_string()]);
        }
        let spawned = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) if error.kind() == ErrorKind::NotFound => panic!(
                "redis-server was not found on PATH: the Redis tests need a real server \
                 (`apt-get install -y redis-server`; .ci/run installs it)"
            ),
            Err(error) => panic!("could not start redis-server: {error}"),
        };
        let deadline = Instant::now() + STARTUP;
        loop {
            // Another test's server may hold the port (ours then exits): only ours counts.
            if server_pid(self.port) == Some(child.id()) {
                self.child = Some(child);
                return true;
            }
            if let Ok(Some(_status)) = child.try_wait() {
                return false;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "redis-server on port {} did not answer within {STARTUP:?}",
                    self.port
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a probe socket on loopback");
    listener.local_addr().expect("probe socket address").port()
}

/// The process id of the Redis server answering on `port`, if one answers.
fn server_pid(port: u16) -> Option<u32> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(b"INFO server\r\n").ok()?;
    // A bulk reply, "$<length>\r\n<text>\r\n": read until the whole text is in.
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    let text = loop {
        let read = stream.read(&mut chunk).ok()?;
        if read == 0 {
            return None;
        }
        reply.extend_from_slice(&chunk[..read]);
        let header_end = reply.windows(2).position(|pair| pair == b"\r\n");
        if let Some(header_end) = header_end {
            let length: usize = std::str::from_utf8(reply.get(1..header_end)?)
                .ok()?
                .parse()
                .ok()?;
            let body = header_end + 2;
            if reply.len() >= body + length {
                break String::from_utf8_lossy(&reply[body..body + length]).into_owned();
            }
        }
    };
    text.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}
