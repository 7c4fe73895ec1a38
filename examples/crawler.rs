//! A polite crawler: 20 URLs on 5 hosts, at most 2 requests a second to any one host and
//! 20 a second overall. Nothing goes on the network: "fetching" a URL is noting when its
//! request was allowed. It crawls twice, with the URLs grouped by host and then
//! interleaved, and prints when each host was asked for its pages (about 1.7 s each, in
//! real time). Host `h`'s `u`-th page is due at `h × 50 ms + u × 500 ms`; in real time
//! each grant comes a millisecond or so late, as tokio's timer ticks every millisecond,
//! and a bucket of capacity 1 cannot bank the delay, so the instants drift by a few ms.
//!
//! Run it with `cargo run --example crawler`.
//!
//! Each request waits with `all_in_turn((per_host, global))`: first in its host's line
//! until the host would allow it, and only then in the global line. With `all`, a request
//! joins both lines at once, and one whose host is not ready yet stands at the head of
//! the global line, holding back every other host behind it: with the URLs grouped by
//! host, the hosts are then crawled one after another, in 7.7 s instead of 1.7 s.

#![forbid(unsafe_code)]

use std::error::Error;
use std::time::Duration;

use token_bucket::{all_in_turn, Keyed, Rate, TokenBucket};
use tokio::time::Instant;

pub type BoxError = Box<dyn Error + Send + Sync>;

pub const HOSTS: usize = 5;
pub const PAGES_PER_HOST: usize = 4;

/// The URL of page `page` on host `host`: `https://host-a.example/page-0` and on.
pub fn url(host: usize, page: usize) -> String {
    let letter = char::from(b'a' + u8::try_from(host).expect("fewer than 26 hosts"));
    format!("https://host-{letter}.example/page-{page}")
}

/// Every host's pages, one host after another.
pub fn grouped_by_host() -> Vec<String> {
    (0..HOSTS)
        .flat_map(|host| (0..PAGES_PER_HOST).map(move |page| url(host, page)))
        .collect()
}

/// Every host's first page, then every host's second page, and so on.
pub fn interleaved() -> Vec<String> {
    (0..PAGES_PER_HOST)
        .flat_map(|page| (0..HOSTS).map(move |host| url(host, page)))
        .collect()
}

/// The host of `url`: what lies between `://` and the next `/`.
pub fn host_of(url: &str) -> Option<&str> {
    let (_scheme, rest) = url.split_once("://")?;
    rest.split('/').next().filter(|host| !host.is_empty())
}

/// Crawls `urls`, one task each, and returns each URL with how long after the start its
/// request was allowed, in the order of `urls`.
///
/// The tasks join the lines in the order they first run; on a current-thread runtime
/// that is the order they are spawned, the order of `urls`.
pub async fn crawl(urls: &[String]) -> Result<Vec<(String, Duration)>, BoxError> {
    // Capacity 1 on both, so no bursts: one request every 500 ms per host, every 50 ms
    // overall. Each host's bucket is made from the template when the host is first seen.
    let per_host: Keyed<String, TokenBucket> =
        Keyed::new(TokenBucket::new(Rate::per_second(2), 1)?);
    let global = TokenBucket::new(Rate::per_second(20), 1)?;
    let start = Instant::now();
    let tasks: Vec<_> = urls
        .iter()
        .map(|url| {
            let host = host_of(url).ok_or_else(|| format!("no host in {url:?}"))?;
            let (url, host) = (url.clone(), host.to_owned());
            // Clones share the same buckets.
            let (per_host, global) = (per_host.clone(), global.clone());
            Ok(tokio::spawn(async move {
                // The host's line first, the global line last. The host is decided on its
                // one-word state while nobody waits on it, and made a whole bucket (shared by
                // its waiters) only to wait.
                all_in_turn((per_host.member(&host), &global))?
                    .acquire(1)
                    .await?;
                // A real crawler would fetch `url` here.
                Ok::<_, BoxError>((url, start.elapsed()))
            }))
        })
        .collect::<Result<_, BoxError>>()?;
    let mut schedule = Vec::with_capacity(tasks.len());
    for task in tasks {
        schedule.push(task.await??);
    }
    Ok(schedule)
}

/// The instants of `schedule` host by host, hosts in the order they first appear.
pub fn by_host(schedule: &[(String, Duration)]) -> Vec<(&str, Vec<Duration>)> {
    let mut hosts: Vec<(&str, Vec<Duration>)> = Vec::new();
    for (url, allowed_at) in schedule {
        let host = host_of(url).unwrap_or(url);
        match hosts.iter_mut().find(|(seen, _)| *seen == host) {
            Some((_, instants)) => instants.push(*allowed_at),
            None => hosts.push((host, vec![*allowed_at])),
        }
    }
    hosts
}

// Current-thread, so that the tasks join the lines in the order they are spawned.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    for (name, urls) in [
        ("grouped by host", grouped_by_host()),
        ("interleaved", interleaved()),
    ] {
        let start = Instant::now();
        let schedule = crawl(&urls).await?;
        println!("{} URLs {name}: allowed at (ms)", urls.len());
        for (host, instants) in by_host(&schedule) {
            let millis: Vec<_> = instants.iter().map(Duration::as_millis).collect();
            println!("  {host:<16} {millis:?}");
        }
        println!("  done in {} ms", start.elapsed().as_millis());
    }
    Ok(())
}
