//! [`RedisConnection`]: what a Redis limiter needs of the connection it is made with.

/// An async connection of the [`redis`](super::driver) crate that a Redis limiter can
/// decide over: anything that sends commands
/// ([`ConnectionLike`](super::driver::aio::ConnectionLike)) and is cheap to clone, to
/// share with other tasks and to keep.
///
/// Implemented for every such type, among them:
///
/// - [`ConnectionManager`](super::driver::aio::ConnectionManager), the default: one
///   server, reconnecting by itself in the background when the connection drops.
/// - [`MultiplexedConnection`](super::driver::aio::MultiplexedConnection): one server,
///   one connection; once it drops it stays dropped (every call fails and the
///   [failure policy](super::FailurePolicy) decides), so make a new limiter, or use a
///   `ConnectionManager`.
/// - [`ClusterConnection`](super::driver::cluster_async::ClusterConnection) (Redis
///   Cluster; the `redis` crate's `cluster-async` feature, which this crate turns on).
///   Each script goes to the master of its keys' hash slot, and the connection
///   follows the cluster's `MOVED` and `ASK` redirections itself: see
///   [Redis Cluster](super#redis-cluster).
///
/// ```
/// use token_bucket::redis::driver::aio::{ConnectionManager, MultiplexedConnection};
/// use token_bucket::redis::driver::cluster_async::ClusterConnection;
/// use token_bucket::redis::RedisConnection;
///
/// fn fits<C: RedisConnection>() {}
/// fits::<ConnectionManager>();
/// fits::<MultiplexedConnection>();
/// fits::<ClusterConnection>();
/// ```
pub trait RedisConnection: ::redis::aio::ConnectionLike + Clone + Send + Sync + 'static {}

impl<C> RedisConnection for C where C: ::redis::aio::ConnectionLike + Clone + Send + Sync + 'static {}
