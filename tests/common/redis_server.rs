//! A throwaway `redis-server` for the Redis tests, the bench and the example: on a free
//! loopback port, persisting nothing, in its own temporary directory (which keeps what
//! it writes, shown if it fails to start), stopped on drop; and a [`RedisCluster`] of
//! several, joined with `redis-cli --cluster create`.
//!
//! A server never outlives its test: it is killed when its [`RedisServer`] is dropped,
//! which a panicking test does too as it unwinds. A test process that is killed (or
//! aborts) drops nothing, so every server is also recorded in a file of the registry
//! ([`registry`]) naming the process that owns it; the next process to start a server
//! first stops every recorded server whose owner is gone ([`stop_orphans`]).
//!
//! Uses only std, so that any test or example can include it with `#[path]`.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// How long a starting server gets to answer.
const STARTUP: Duration = Duration::from_secs(10);

/// Names temporary directories apart within one process.
static SERVERS_STARTED: AtomicU64 = AtomicU64::new(0);

/// Held from finding free ports until a server listens on them, so that no other server
/// of this process is given them meanwhile.
static STARTING: Mutex<()> = Mutex::new(());

/// A running `redis-server` child process.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    /// In cluster mode: how long a node may not answer before it is taken for failed,
    /// and the port of its cluster bus.
    cluster: Option<(Duration, u16)>,
}

impl RedisServer {
    /// Starts a server on a free loopback port.
    ///
    /// Panics, saying how to fix it, when `redis-server` is not installed: the Redis tests
    /// must fail loudly rather than pass without having run.
    pub fn start() -> RedisServer {
        RedisServer::start_with(None)
    }

    /// Starts a server in cluster mode, a cluster of this one node. It owns no hash slot
    /// yet: the caller assigns them (`CLUSTER ADDSLOTSRANGE 0 16383`). Even holding every
    /// slot, it refuses a command or script whose keys are in different slots
    /// (`CROSSSLOT`), as any cluster does.
    pub fn start_cluster() -> RedisServer {
        RedisServer::start_cluster_node(Duration::from_secs(15))
    }

    /// Starts a server in cluster mode that takes another node for failed once it has
    /// not answered for `node_timeout` (`--cluster-node-timeout`), for [`RedisCluster`].
    pub fn start_cluster_node(node_timeout: Duration) -> RedisServer {
        RedisServer::start_with(Some(node_timeout))
    }

    fn start_with(node_timeout: Option<Duration>) -> RedisServer {
        static ORPHANS_STOPPED: Once = Once::new();
        ORPHANS_STOPPED.call_once(stop_orphans);
        let serial = SERVERS_STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "token-bucket-redis-{}-{serial}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create the Redis server's temporary directory");
        // One server for every try, so that its directory, removed on drop, outlives a
        // failed try.
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            cluster: None,
        };
        // A port found free may still be taken before the server binds it, by another
        // process or any socket bound to port 0: the server then exits, and is started
        // again on other ports.
        let _starting = STARTING.lock().unwrap_or_else(PoisonError::into_inner);
        let mut failures = Vec::new();
        while failures.len() < 5 {
            let [port, bus_port] = free_ports();
            server.port = port;
            server.cluster = node_timeout.map(|timeout| (timeout, bus_port));
            match server.launch() {
                Ok(()) => return server,
                Err(failure) if failure.contains(PORT_TAKEN) => {
                    eprintln!("{failure}");
                    failures.push(failure);
                }
                Err(failure) => panic!("{failure}"),
            }
        }
        panic!(
            "redis-server did not start on any of 5 free ports:\n{}",
            failures.join("\n")
        );
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (as a crash would: nothing is saved), and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(registry().join(child.id().to_string()));
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + STARTUP;
        // The port can take a moment to be free again.
        while let Err(failure) = self.launch() {
            assert!(
                failure.contains(PORT_TAKEN) && Instant::now() < deadline,
                "redis-server did not restart: {failure}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Spawns the server and waits for it to answer. If it exited first: its port, its
    /// command line and what it wrote (kept in its directory, `redis-<port>.log`).
    fn launch(&mut self) -> Result<(), String> {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir);
        if let Some((node_timeout, bus_port)) = self.cluster {
            // The cluster bus needs a port too: by default the port + 10000, which may
            // be taken or past 65535, so a free one is named.
            command
                .args(["--cluster-enabled", "yes"])
                .args([
                    "--cluster-config-file",
                    &format!("nodes-{}.conf", self.port),
                ])
                .args(["--cluster-port", &bus_port.to_string()])
                .args([
                    "--cluster-node-timeout",
                    &node_timeout.as_millis().to_string(),
                ]);
        }
        let log_path = self.dir.join(format!("redis-{}.log", self.port));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("create the Redis server's log");
        let log_again = log.try_clone().expect("share the Redis server's log");
        let spawned = command.stdout(log).stderr(log_again).spawn();
        let failure = |how: String| {
            let output = std::fs::read_to_string(&log_path).unwrap_or_default();
            format!(
                "redis-server on port {} {how}: {command:?}\n{}:\n{output}",
                self.port,
                log_path.display()
            )
        };
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) if error.kind() == ErrorKind::NotFound => panic!(
                "redis-server was not found on PATH: the Redis tests need a real server \
                 (`apt-get install -y redis-server`; .ci/run installs it)"
            ),
            Err(error) => panic!("could not start redis-server: {error}"),
        };
        // Recorded before anything else can fail, so that it is stopped even if this
        // process dies before it can stop it.
        record(child.id(), &self.dir);
        let deadline = Instant::now() + STARTUP;
        loop {
            // Another test's server may hold the port (ours then exits): only ours counts.
            if server_pid(self.port) == Some(child.id()) {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                let _ = std::fs::remove_file(registry().join(child.id().to_string()));
                return Err(failure(format!("exited ({status})")));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_file(registry().join(child.id().to_string()));
                panic!("{}", failure(format!("did not answer within {STARTUP:?}")));
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

/// What a server that exits because its port was taken writes.
const PORT_TAKEN: &str = "Address already in use";

/// `N` ports nothing listens on now, all different: each probe is held until every one
/// is found (a server's port and its cluster bus port, probed one after the other, were
/// once the same).
fn free_ports<const N: usize>() -> [u16; N] {
    let probes = [(); N]
        .map(|()| TcpListener::bind("127.0.0.1:0").expect("bind a probe socket on loopback"));
    probes.map(|probe| probe.local_addr().expect("probe socket address").port())
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

/// The folder where every running test server is recorded, one file each, named by its
/// process id: the process that owns it (its id and start time) and the server's start
/// time and directory. Shared by every checkout and test run on the machine.
pub fn registry() -> PathBuf {
    std::env::temp_dir().join("token-bucket-redis-servers")
}

/// Records the server `pid`, just started in `dir`, as owned by this process.
fn record(pid: u32, dir: &std::path::Path) {
    let registry = registry();
    std::fs::create_dir_all(&registry).expect("create the test servers' registry");
    let owner = std::process::id();
    let entry = format!(
        "{owner} {}\n{} {}\n",
        start_time(owner).unwrap_or(0),
        start_time(pid).unwrap_or(0),
        dir.display()
    );
    std::fs::write(registry.join(pid.to_string()), entry).expect("record a test server");
}

/// Stops every recorded server whose owner is no longer running (a test process killed,
/// or aborted, before it could stop its servers), removes its directory and forgets it.
/// A server of a process still running, here or in another checkout, is left alone; so
/// is a process id that now names another process (its start time differs).
pub fn stop_orphans() {
    let Ok(entries) = std::fs::read_dir(registry()) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let mut lines = text.lines();
        let owner: Vec<u64> = lines
            .next()
            .unwrap_or_default()
            .split(' ')
            .filter_map(|field| field.parse().ok())
            .collect();
        let Some((started, dir)) = lines.next().and_then(|line| line.split_once(' ')) else {
            continue;
        };
        let [owner, owner_started] = owner[..] else {
            continue;
        };
        let owner_runs = u32::try_from(owner)
            .ok()
            .and_then(start_time)
            .is_some_and(|time| time == owner_started);
        if owner_runs {
            continue;
        }
        if start_time(pid).is_some_and(|time| Some(time) == started.parse().ok()) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_file(entry.path());
    }
}

/// When process `pid` started, in clock ticks since boot (`/proc/<pid>/stat`, field 22):
/// with its id, it names one process for good. None if there is no such process (or no
/// `/proc`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: count fields after it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// A Redis Cluster on loopback: masters holding every hash slot, joined with
/// `redis-cli --cluster create`, and perhaps replicas; every node a [`RedisServer`], so
/// stopped when the cluster is dropped.
pub struct RedisCluster {
    /// The masters first, in the order they were given slots, then the replicas.
    nodes: Vec<RedisServer>,
    masters: usize,
}

impl RedisCluster {
    /// Starts `masters` masters (at least 3, as `redis-cli --cluster create` asks), the
    /// slots split evenly between them in order, and `replicas` replicas of the first;
    /// returns once every node says the cluster is ok and the replicas have synced.
    /// A node missing for `node_timeout` is taken for failed, and a replica of it takes
    /// its place.
    ///
    /// Panics, saying how to fix it, when `redis-cli` is not installed.
    pub fn start(masters: usize, replicas: usize, node_timeout: Duration) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters + replicas)
            .map(|_| RedisServer::start_cluster_node(node_timeout))
            .collect();
        let cluster = RedisCluster { nodes, masters };
        let mut create = vec!["--cluster".to_owned(), "create".to_owned()];
        create.extend(
            cluster.nodes[..masters]
                .iter()
                .map(|node| address(node.port)),
        );
        create.extend(["--cluster-replicas", "0", "--cluster-yes"].map(str::to_owned));
        cluster_cli(&create);
        cluster.wait_until_agreed(&cluster.master_ports(), |_| true);
        let first = cluster.nodes[0].port;
        let first_id = cli(first, &["CLUSTER", "MYID"]);
        for replica in &cluster.nodes[masters..] {
            cluster_cli(&[
                "--cluster".into(),
                "add-node".into(),
                address(replica.port),
                address(first),
                "--cluster-slave".into(),
                "--cluster-master-id".into(),
                first_id.clone(),
            ]);
        }
        let deadline = Instant::now() + STARTUP * 3;
        while !cluster.nodes[masters..].iter().all(|replica| {
            cli(replica.port, &["INFO", "replication"]).contains("master_link_status:up")
        }) {
            assert!(Instant::now() < deadline, "the replicas never synced");
            thread::sleep(Duration::from_millis(50));
        }
        cluster.wait_until_ok();
        cluster
    }

    /// Waits until every running node says `cluster_state:ok` and agrees on who serves
    /// every slot.
    pub fn wait_until_ok(&self) {
        self.wait_until_agreed(&self.running_ports(), |_| true);
    }

    /// As [`wait_until_ok`](Self::wait_until_ok), and until they agree that the node on
    /// `port` serves `slot` (a replica taking over a failed master, say).
    pub fn wait_until_served_by(&self, slot: u16, port: u16) {
        self.wait_until_agreed(&self.running_ports(), |map| {
            map.iter()
                .any(|&(first, last, owner)| (first..=last).contains(&slot) && owner == port)
        });
    }

    /// Waits until the nodes on `running` say `cluster_state:ok` and agree on a slot map
    /// that is `done`.
    fn wait_until_agreed(&self, running: &[u16], done: impl Fn(&[(u16, u16, u16)]) -> bool) {
        let deadline = Instant::now() + STARTUP * 3;
        loop {
            let ok = running
                .iter()
                .all(|&port| cli(port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            let maps: Vec<Vec<(u16, u16, u16)>> =
                running.iter().map(|&port| slot_map(port)).collect();
            if ok && maps.windows(2).all(|pair| pair[0] == pair[1]) && done(&maps[0]) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not come to agree: {maps:?}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The URLs of every running node, to give a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|node| node.child.is_some())
            .map(RedisServer::url)
            .collect()
    }

    /// The ports of the masters it started with (one may since have failed).
    pub fn master_ports(&self) -> Vec<u16> {
        self.nodes[..self.masters]
            .iter()
            .map(RedisServer::port)
            .collect()
    }

    /// The ports of the replicas it started with.
    pub fn replica_ports(&self) -> Vec<u16> {
        self.nodes[self.masters..]
            .iter()
            .map(RedisServer::port)
            .collect()
    }

    fn running_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|node| node.child.is_some())
            .map(RedisServer::port)
            .collect()
    }

    /// The hash slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        let port = self.running_ports()[0];
        cli(port, &["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot")
    }

    /// The port of the master serving `slot`, as the first running node sees it.
    pub fn owner(&self, slot: u16) -> u16 {
        slot_map(self.running_ports()[0])
            .into_iter()
            .find(|&(first, last, _)| (first..=last).contains(&slot))
            .map(|(_, _, port)| port)
            .unwrap_or_else(|| panic!("nobody serves slot {slot}"))
    }

    /// Kills the node on `port` (as a crash would).
    pub fn kill(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|node| node.port == port);
        node.expect("a node of this cluster").stop();
    }

    /// Moves `slot` from its master to the master on `to`, as `redis-cli --cluster
    /// reshard` does, one key at a time, `pause` after each: the target imports and the
    /// source migrates the slot (so the source answers `ASK` for keys already moved or
    /// new), each key is sent with `MIGRATE`, then every master is told the slot's new
    /// owner (so the source answers `MOVED`). Returns how many keys moved.
    pub fn migrate_slot(&self, slot: u16, to: u16, pause: Duration) -> usize {
        let from = self.owner(slot);
        let (from_id, to_id) = (
            cli(from, &["CLUSTER", "MYID"]),
            cli(to, &["CLUSTER", "MYID"]),
        );
        let slot_text = slot.to_string();
        let set_slot = |port: u16, state: &str, id: &str| {
            let reply = cli(port, &["CLUSTER", "SETSLOT", &slot_text, state, id]);
            assert_eq!(reply, "OK", "SETSLOT {state} on {port}");
        };
        set_slot(to, "IMPORTING", &from_id);
        set_slot(from, "MIGRATING", &to_id);
        let mut moved = 0;
        loop {
            let keys = cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot_text, "1"]);
            let Some(key) = keys.lines().next().filter(|key| !key.is_empty()) else {
                break;
            };
            let to_text = to.to_string();
            let reply = cli(from, &["MIGRATE", "127.0.0.1", &to_text, key, "0", "5000"]);
            assert!(reply == "OK" || reply == "NOKEY", "MIGRATE {key}: {reply}");
            moved += 1;
            thread::sleep(pause);
        }
        // The new owner first, as redis-cli does, so that the slot is never nobody's.
        set_slot(to, "NODE", &to_id);
        set_slot(from, "NODE", &to_id);
        for port in self.master_ports() {
            if port != to && port != from && self.running_ports().contains(&port) {
                set_slot(port, "NODE", &to_id);
            }
        }
        moved
    }
}

/// `127.0.0.1:<port>`.
fn address(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// Runs `redis-cli -p <port> <args>` and returns its reply, trimmed. Panics when it
/// fails to run or the reply is an error.
pub fn cli(port: u16, args: &[&str]) -> String {
    let output = redis_cli()
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    let reply = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert!(
        output.status.success() && !reply.starts_with("ERR") && !reply.starts_with("(error)"),
        "redis-cli -p {port} {args:?}: {reply} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    reply
}

/// Runs `redis-cli <args>` (a `--cluster` command), panicking with its output if it fails.
fn cluster_cli(args: &[String]) {
    let output = redis_cli().args(args).output().expect("run redis-cli");
    assert!(
        output.status.success(),
        "redis-cli {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `redis-cli`, reading nothing, or a panic saying how to install it.
fn redis_cli() -> Command {
    let found = Command::new("redis-cli")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    if matches!(&found, Err(error) if error.kind() == ErrorKind::NotFound) {
        panic!(
            "redis-cli was not found on PATH: the Redis Cluster tests need it \
             (`apt-get install -y redis-server` brings it; .ci/run installs it)"
        );
    }
    let mut command = Command::new("redis-cli");
    command.stdin(Stdio::null());
    command
}

/// Who serves which slots, as the node on `port` sees it: (first, last, port of the
/// master), sorted.
fn slot_map(port: u16) -> Vec<(u16, u16, u16)> {
    let mut map = Vec::new();
    for line in cli(port, &["CLUSTER", "NODES"]).lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 8 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        let Some(node_port) = fields[1]
            .split(['@', ','])
            .next()
            .and_then(|address| address.rsplit(':').next())
            .and_then(|port| port.parse().ok())
        else {
            continue;
        };
        // Slots, as `first-last` or `slot`; `[slot->-id]` marks a migration.
        for range in fields[8..].iter().filter(|range| !range.starts_with('[')) {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            if let (Ok(first), Ok(last)) = (first.parse(), last.parse()) {
                map.push((first, last, node_port));
            }
        }
    }
    map.sort_unstable();
    map
}
