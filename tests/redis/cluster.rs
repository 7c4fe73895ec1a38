//! The Redis limiters on a real Redis Cluster of three masters on loopback ports (see
//! `RedisCluster` in `common/redis_server.rs`), over the cluster's own async connection:
//! the tests of one server again with keys spread over every master's slots, a slot
//! migrated and a master killed while traffic runs.
//!
//! The tests that leave the cluster as they found it share one (started by the first
//! of them to run, stopped when the last that holds it ends); the failover has its own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use token_bucket::redis::driver::cluster::ClusterClient;
use token_bucket::redis::driver::cluster_async::ClusterConnection;
use token_bucket::redis::{
    RedisAlgorithm, RedisAll, RedisFixedWindow, RedisLimitError, RedisLimiter, RedisOptions,
    RedisSlidingLog, RedisTokenBucket,
};
use token_bucket::{Quota, Rate};

use super::all::{bucket_and_window, refused_cross_slot};
use super::leased::{front_holding_nine, takeable};
use super::redis_server::{cli, RedisCluster};
use super::{
    fail_closed, fail_open, hourly_bucket, hourly_log, hourly_window, is_limited, key_expires,
    thirty_two_tasks_share_one_limit, two_instances_share_one_limit, HOUR,
};

/// How long a master of the shared cluster may be silent before it is taken for failed:
/// long, so that a loaded machine does not fail one by mistake.
const SHARED_NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// The cluster the tests that change nothing share: started by the first to ask, kept
/// while any test holds it, so stopped when the last of a batch ends.
fn shared_cluster() -> Arc<RedisCluster> {
    static SHARED: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(RedisCluster::start(3, 0, SHARED_NODE_TIMEOUT));
    *shared = Arc::downgrade(&cluster);
    cluster
}

/// A connection to `cluster`, as an application server would make it: the driver's
/// defaults.
async fn connect(cluster: &RedisCluster) -> ClusterConnection {
    ClusterClient::new(cluster.urls())
        .expect("a cluster client")
        .get_async_connection()
        .await
        .expect("connect to the test's cluster")
}

/// Keys whose Redis keys, for every kind, are spread over all three masters.
const KEYS: [&str; 6] = ["user-1", "user-2", "user-3", "user-4", "user-5", "user-6"];

/// Checks that `keys`, as one kind's Redis keys, are served by every master.
fn assert_spread_over_every_master(
    cluster: &RedisCluster,
    keys: &[&str],
    redis_key: impl Fn(&str) -> String,
) {
    let mut owners: Vec<u16> = keys
        .iter()
        .map(|key| cluster.owner(cluster.slot(&redis_key(key))))
        .collect();
    owners.sort_unstable();
    owners.dedup();
    let mut masters = cluster.master_ports();
    masters.sort_unstable();
    assert_eq!(owners, masters, "{keys:?}");
}

/// Checks that `keys`, as every kind's Redis keys (of the default prefix), are served by
/// every master.
async fn assert_every_kind_spread_over_every_master(cluster: &RedisCluster, keys: &[&str]) {
    let bucket = hourly_bucket(connect(cluster).await, 1);
    assert_spread_over_every_master(cluster, keys, |key| bucket.redis_key(key));
    let window = hourly_window(connect(cluster).await, 1);
    assert_spread_over_every_master(cluster, keys, |key| window.redis_key(key));
    let log = hourly_log(connect(cluster).await, 1);
    assert_spread_over_every_master(cluster, keys, |key| log.redis_key(key));
}

#[tokio::test]
async fn on_a_cluster_two_instances_never_grant_more_than_the_limit_together() {
    let cluster = shared_cluster();
    assert_every_kind_spread_over_every_master(&cluster, &KEYS).await;
    for key in KEYS {
        let connections = || async { [connect(&cluster).await, connect(&cluster).await] };
        two_instances_share_one_limit("token bucket", hourly_bucket, connections().await, key)
            .await;
        two_instances_share_one_limit("fixed window", hourly_window, connections().await, key)
            .await;
        two_instances_share_one_limit("sliding log", hourly_log, connections().await, key).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_thirty_two_tasks_never_grant_more_than_the_limit() {
    let cluster = shared_cluster();
    // Three keys that each kind's Redis keys spread over the three masters.
    let keys = ["tasks-2", "tasks-11", "tasks-12"];
    assert_every_kind_spread_over_every_master(&cluster, &keys).await;
    for key in keys {
        let connection = connect(&cluster).await;
        thirty_two_tasks_share_one_limit("token bucket", hourly_bucket, connection.clone(), key)
            .await;
        thirty_two_tasks_share_one_limit("fixed window", hourly_window, connection.clone(), key)
            .await;
        thirty_two_tasks_share_one_limit("sliding log", hourly_log, connection, key).await;
    }
}

#[tokio::test]
async fn on_a_cluster_keys_expire_once_idle() {
    let cluster = shared_cluster();
    let connection = connect(&cluster).await;
    let mut admin = connection.clone();
    let window = Duration::from_millis(400);
    // Three keys that each kind's Redis keys spread over the three masters.
    let keys = ["idle-3", "idle-4", "idle-12"];
    assert_every_kind_spread_over_every_master(&cluster, &keys).await;
    for key in keys {
        let bucket =
            RedisTokenBucket::new(connection.clone(), Rate::new(2, window), 2, fail_closed())
                .unwrap();
        let ttl = Duration::from_millis(200);
        key_expires("token bucket", bucket, &mut admin, key, ttl).await;
        let fixed = RedisFixedWindow::new(connection.clone(), 2, window, fail_closed()).unwrap();
        key_expires("fixed window", fixed, &mut admin, key, window).await;
        let log = RedisSlidingLog::new(connection.clone(), 2, window, fail_closed()).unwrap();
        key_expires("sliding log", log, &mut admin, key, window).await;
    }
}

#[tokio::test]
async fn on_a_cluster_all_decides_over_keys_of_one_hash_tag_only() {
    let cluster = shared_cluster();
    let connection = connect(&cluster).await;
    let (bucket, window) = bucket_and_window(connection, fail_open().with_prefix("all:"));
    refused_cross_slot(&RedisAll::new([
        bucket.member("user-42"),
        window.member("user-42"),
    ]))
    .await;
    // One tag on each master's slots: routed to that master, decided there.
    for tag in ["{user-1}", "{user-2}", "{user-3}"] {
        let limits = RedisAll::new([bucket.member(tag), window.member(&format!("{tag}:search"))]);
        limits.try_acquire(5).await.unwrap();
        assert!(is_limited(limits.try_acquire(1).await));
    }
    assert_eq!(bucket.fail_open_count() + window.fail_open_count(), 0);
}

#[tokio::test]
async fn on_a_cluster_a_node_that_lost_its_scripts_is_sent_them_again() {
    let cluster = shared_cluster();
    // A prefix of its own: the shared cluster's other tests use the same keys.
    let options = fail_closed().with_prefix("scripts:");
    let limiter = RedisSlidingLog::new(connect(&cluster).await, 10, HOUR, options).unwrap();
    assert_spread_over_every_master(&cluster, &KEYS, |key| limiter.redis_key(key));
    for key in KEYS {
        limiter.try_acquire(key, 1).await.unwrap();
    }
    // One master forgets every script; the others keep theirs.
    let port = cluster.owner(cluster.slot(&limiter.redis_key(KEYS[0])));
    assert_eq!(cli(port, &["SCRIPT", "FLUSH"]), "OK");
    for key in KEYS {
        limiter.try_acquire(key, 9).await.unwrap();
        assert!(is_limited(limiter.try_acquire(key, 1).await));
    }
}

#[tokio::test]
async fn on_a_cluster_a_leased_front_gives_back_into_its_keys_slot_whatever_the_key() {
    let cluster = shared_cluster();
    let options = fail_closed().with_prefix("leased:");
    let connection = connect(&cluster).await;
    let limiter = RedisTokenBucket::new(connection, Rate::per_hour(1), 100, options).unwrap();
    // The give-back remembers itself in a key of the bucket's slot, named after the key
    // without a hash tag, after its hash tag, and after a tag found for a key that has
    // neither (its `}` would cut `{key}` short). In another slot, Redis would refuse it.
    for key in ["hot", "{tenant-7}:hot", "a}b"] {
        let front = front_holding_nine(&limiter, key).await;
        front.close().await;
        assert_eq!(front.stats().given_back, 9, "{key}");
        // 80 left, and the 9 back (less what the bucket gained meanwhile, under a token).
        assert_eq!(takeable(&limiter, key).await, 89, "{key}");
    }
}

#[tokio::test]
async fn on_a_cluster_decisions_report_each_keys_quota_from_its_master() {
    let cluster = shared_cluster();
    // A prefix of its own: the shared cluster's other tests use the same keys.
    let options = fail_closed().with_prefix("quota:");
    let connection = connect(&cluster).await;
    let bucket =
        RedisTokenBucket::new(connection.clone(), Rate::per_hour(1), 3, options.clone()).unwrap();
    let window = RedisFixedWindow::new(connection.clone(), 4, HOUR, options.clone()).unwrap();
    let log = RedisSlidingLog::new(connection, 5, HOUR, options).unwrap();
    assert_spread_over_every_master(&cluster, &KEYS, |key| bucket.redis_key(key));
    let whole_after = |remaining, full_after| {
        Some(Quota {
            remaining,
            full_after,
        })
    };
    for key in KEYS {
        // Untouched, then one taken: exact on each master's clock.
        let read = bucket.try_acquire_decision(key, 0).await.unwrap();
        assert_eq!(read.quota, whole_after(3, Duration::ZERO), "{key}");
        let taken = bucket.try_acquire_decision(key, 1).await.unwrap();
        assert_eq!(taken.quota, whole_after(2, HOUR), "{key}");
        let taken = window.try_acquire_decision(key, 1).await.unwrap();
        assert_eq!(taken.quota, whole_after(3, HOUR), "{key}");
        let taken = log.try_acquire_decision(key, 1).await.unwrap();
        assert_eq!(taken.quota, whole_after(4, HOUR), "{key}");
    }
    // Several keys of one hash tag, decided and reported together on its master.
    for tag in ["{user-1}", "{user-2}", "{user-3}"] {
        let limits = RedisAll::new([bucket.member(tag), window.member(&format!("{tag}:search"))]);
        let decision = limits.try_acquire_decision(3).await.unwrap();
        assert_eq!(decision.result, Ok(()), "{tag}");
        let quotas: Vec<_> = decision.members.iter().map(|member| member.quota).collect();
        assert_eq!(
            quotas,
            [whole_after(0, HOUR * 3), whole_after(1, HOUR)],
            "{tag}"
        );
        let refused = limits.try_acquire_decision(1).await.unwrap();
        assert_eq!(refused.refused_by().collect::<Vec<_>>(), [0], "{tag}");
        assert_eq!(
            refused.members[1].quota.map(|quota| quota.remaining),
            Some(1)
        );
    }
}

/// One limiter on one key, its type erased: what traffic asks.
struct Asker {
    name: String,
    ask: Box<dyn Fn() -> BoxFuture<'static, Result<(), RedisLimitError>> + Send + Sync>,
    fail_open_count: Box<dyn Fn() -> u64 + Send + Sync>,
    /// Of the traffic's asks: granted, refused by Redis, not decided (fail-closed).
    granted: AtomicU64,
    refused: AtomicU64,
    undecided: AtomicU64,
}

impl Asker {
    fn new<A: RedisAlgorithm>(
        name: &str,
        limiter: RedisLimiter<A, ClusterConnection>,
        key: &str,
    ) -> Asker {
        let (counter, key) = (limiter.clone(), key.to_owned());
        Asker {
            name: format!("{name} on {}", limiter.redis_key(&key)),
            ask: Box::new(move || {
                let (limiter, key) = (limiter.clone(), key.clone());
                Box::pin(async move { limiter.try_acquire(&key, 1).await })
            }),
            fail_open_count: Box::new(move || counter.fail_open_count()),
            granted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            undecided: AtomicU64::new(0),
        }
    }

    /// Asks for one permit, and counts the answer.
    async fn ask_counted(&self) -> Result<(), RedisLimitError> {
        let result = (self.ask)().await;
        let counter = match &result {
            Ok(()) => &self.granted,
            Err(RedisLimitError::Limited { .. }) => &self.refused,
            Err(
                error @ (RedisLimitError::Unavailable { .. } | RedisLimitError::Timeout { .. }),
            ) => {
                eprintln!("{}: {error}", self.name);
                &self.undecided
            }
            Err(other) => panic!("{}: {other}", self.name),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }
}

/// A limit of `LIMIT` an hour per key, of which `TAKEN_BEFORE` are taken before the
/// traffic: if the state of a key were lost, its limit would start afresh and the
/// traffic would be granted more than the `LIMIT - TAKEN_BEFORE` left.
const LIMIT: u64 = 150;
const TAKEN_BEFORE: u64 = 100;

/// Each kind of limiter under each policy, on `key` (its own prefix for each policy),
/// each call bounded by `timeout`: six askers, their Redis keys in `key`'s slot when `key`
/// is a hash tag.
async fn askers(connection: &ClusterConnection, key: &str, timeout: Duration) -> Vec<Arc<Asker>> {
    let mut askers = Vec::new();
    for (policy, options) in [("fail-open", fail_open()), ("fail-closed", fail_closed())] {
        let options: RedisOptions = options
            .with_timeout(timeout)
            .with_prefix(format!("{policy}:"));
        let c = connection.clone();
        askers.push(Asker::new(
            &format!("token bucket, {policy}"),
            RedisTokenBucket::new(c.clone(), Rate::per_hour(1), LIMIT, options.clone()).unwrap(),
            key,
        ));
        askers.push(Asker::new(
            &format!("fixed window, {policy}"),
            RedisFixedWindow::new(c.clone(), LIMIT, HOUR, options.clone()).unwrap(),
            key,
        ));
        askers.push(Asker::new(
            &format!("sliding log, {policy}"),
            RedisSlidingLog::new(c, LIMIT, HOUR, options).unwrap(),
            key,
        ));
    }
    let askers: Vec<Arc<Asker>> = askers.into_iter().map(Arc::new).collect();
    for asker in &askers {
        for _ in 0..TAKEN_BEFORE {
            (asker.ask)().await.unwrap();
        }
    }
    askers
}

/// Eight tasks ask every asker in turn, a millisecond apart, until `stop`.
fn run_traffic(askers: &[Arc<Asker>], stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
    (0..8)
        .map(|task| {
            let (askers, stop) = (askers.to_vec(), Arc::clone(stop));
            tokio::spawn(async move {
                let mut turn = task;
                while !stop.load(Ordering::Relaxed) {
                    let _ = askers[turn % askers.len()].ask_counted().await;
                    turn += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect()
}

/// Nothing over-admitted: of the traffic's grants, those Redis decided (all but the
/// fail-opens, which the policy allows and counts) are no more than what was left; and
/// the traffic was refused too, so it asked for more than that.
fn assert_nothing_over_admitted(askers: &[Arc<Asker>]) {
    for asker in askers {
        let granted = asker.granted.load(Ordering::Relaxed);
        let fail_opens = (asker.fail_open_count)();
        let by_redis = granted - fail_opens;
        println!(
            "{}: {granted} granted ({fail_opens} failing open), {} refused, {} undecided",
            asker.name,
            asker.refused.load(Ordering::Relaxed),
            asker.undecided.load(Ordering::Relaxed)
        );
        assert!(
            by_redis <= LIMIT - TAKEN_BEFORE,
            "{}: Redis granted {by_redis} of the {} left",
            asker.name,
            LIMIT - TAKEN_BEFORE
        );
        assert!(asker.refused.load(Ordering::Relaxed) > 0, "{}", asker.name);
    }
}

/// How many times the node on `port` answered `error` (`MOVED`, `ASK`): `INFO errorstats`.
fn errors_answered(port: u16, error: &str) -> u64 {
    cli(port, &["INFO", "errorstats"])
        .lines()
        .find_map(|line| line.strip_prefix(&format!("errorstat_{error}:count=")))
        .map_or(0, |count| count.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_traffic_over_admits_nothing_under_either_policy() {
    let cluster = shared_cluster();
    let connection = connect(&cluster).await;
    // A hash tag of its own: every asker's key in one slot that no other test uses.
    let key = "{migrating}";
    // Nothing should fall to the policy while the slot moves: a call is bounded only by
    // a timeout no loaded machine reaches, so that one it hits says something is wrong.
    let askers = askers(&connection, key, Duration::from_secs(10)).await;
    let slot = cluster.slot(key);
    let from = cluster.owner(slot);
    let to = *cluster
        .master_ports()
        .iter()
        .find(|&&port| port != from)
        .unwrap();
    let asks_before = errors_answered(from, "ASK");
    // A connection that will not be used while the slot moves: it will still send the
    // slot's keys to the source afterwards, to be answered MOVED.
    let stale = RedisTokenBucket::new(
        connect(&cluster).await,
        Rate::per_hour(1),
        LIMIT,
        fail_closed().with_prefix("fail-closed:"),
    )
    .unwrap();
    let spent = format!("{key}:spent");
    stale.try_acquire(&spent, LIMIT).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let traffic = run_traffic(&askers, &stop);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    let migrating = Arc::clone(&cluster);
    let moved = tokio::task::spawn_blocking(move || {
        migrating.migrate_slot(slot, to, Duration::from_millis(100))
    })
    .await
    .unwrap();
    let took = start.elapsed();
    // Decisions go on at the new owner for a while.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for task in traffic {
        task.await.unwrap();
    }

    println!("moved {moved} keys of slot {slot} from {from} to {to} in {took:?}");
    assert_eq!(moved, askers.len() + 1);
    assert_eq!(cluster.owner(slot), to);
    // The source sent the client on with ASK while the slot moved...
    assert!(
        errors_answered(from, "ASK") > asks_before,
        "no ASK followed"
    );
    // ...and sends a client that did not see it move on with MOVED, to the same state.
    let moves_before = errors_answered(from, "MOVED");
    assert!(is_limited(stale.try_acquire(&spent, 1).await));
    assert!(
        errors_answered(from, "MOVED") > moves_before,
        "no MOVED followed"
    );
    assert_nothing_over_admitted(&askers);
    for asker in &askers {
        // Every ask during the migration was decided by Redis.
        assert_eq!(asker.undecided.load(Ordering::Relaxed), 0, "{}", asker.name);
        assert_eq!((asker.fail_open_count)(), 0, "{}", asker.name);
        // The state moved with the keys: still spent at the new owner.
        assert!(is_limited(asker.ask_counted().await), "{}", asker.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_traffic_over_admits_nothing_under_either_policy() {
    // Its own cluster, with a replica of the first master, which is killed. A node silent
    // for 2 s is taken for failed: long enough that a loaded machine stalling a node does
    // not fail its master over before the kill (losing its last grants to asynchronous
    // replication), short enough that the test does not wait long.
    let mut cluster = RedisCluster::start(3, 1, Duration::from_secs(2));
    let master = cluster.master_ports()[0];
    let replica = cluster.replica_ports()[0];
    // A hash tag served by the first master.
    let key = (0..)
        .map(|n| format!("{{failover-{n}}}"))
        .find(|tag| cluster.owner(cluster.slot(tag)) == master)
        .unwrap();
    let connection = connect(&cluster).await;
    // Short, so that while no master serves the key many calls fall to the policy.
    let askers = askers(&connection, &key, Duration::from_millis(500)).await;
    // The replica has every write so far.
    assert_eq!(cli(master, &["WAIT", "1", "5000"]), "1");

    let stop = Arc::new(AtomicBool::new(false));
    let traffic = run_traffic(&askers, &stop);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    cluster.kill(master);
    let cluster = Arc::new(cluster);
    let waiting = Arc::clone(&cluster);
    let slot = cluster.slot(&key);
    tokio::task::spawn_blocking(move || waiting.wait_until_served_by(slot, replica))
        .await
        .unwrap();
    let took = start.elapsed();
    // Decisions go on at the new master for a while.
    let deadline = Instant::now() + Duration::from_secs(30);
    for asker in &askers {
        while !is_limited(asker.ask_counted().await) {
            assert!(Instant::now() < deadline, "{}: no decision", asker.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for task in traffic {
        task.await.unwrap();
    }

    println!("the replica on {replica} took over from {master} in {took:?}");
    assert_nothing_over_admitted(&askers);
    // While no master served the key, fail-open allowed and counted, fail-closed refused.
    for asker in &askers {
        let (fail_opens, undecided) = (
            (asker.fail_open_count)(),
            asker.undecided.load(Ordering::Relaxed),
        );
        if asker.name.contains("fail-open") {
            assert!(fail_opens > 0 && undecided == 0, "{}", asker.name);
        } else {
            assert!(fail_opens == 0 && undecided > 0, "{}", asker.name);
        }
    }
}
