//! The crawler example (examples/crawler.rs) on tokio's paused clock: its schedule, in
//! either order of URLs, is the ideal one, to the exact instant.

use std::collections::HashMap;
use std::time::Duration;

// The example's `main` is not called here.
#[allow(dead_code)]
#[path = "../examples/crawler.rs"]
mod crawler;

const PER_HOST_GAP: Duration = Duration::from_millis(500);
const GLOBAL_GAP: Duration = Duration::from_millis(50);

/// The ideal schedule, hosts appearing in the order a, b, c, d, e: host `h`'s `u`-th page
/// at `h × 50 ms + u × 500 ms`. The global bucket grants the hosts' first pages 50 ms
/// apart; each host's next page comes 500 ms after its last.
fn ideal(urls: &[String]) -> Vec<(String, Duration)> {
    let instants: HashMap<String, Duration> = (0..crawler::HOSTS)
        .flat_map(|host| {
            (0..crawler::PAGES_PER_HOST).map(move |page| {
                let at = GLOBAL_GAP * host as u32 + PER_HOST_GAP * page as u32;
                (crawler::url(host, page), at)
            })
        })
        .collect();
    urls.iter()
        .map(|url| (url.clone(), instants[url]))
        .collect()
}

async fn assert_ideal_schedule(urls: Vec<String>) {
    let schedule = crawler::crawl(&urls).await.unwrap();
    assert_eq!(schedule, ideal(&urls));

    // What the limits promise, read off the schedule: a host's requests exactly 500 ms
    // apart, and no two requests anywhere less than 50 ms apart.
    let hosts = crawler::by_host(&schedule);
    assert_eq!(hosts.len(), crawler::HOSTS);
    for (host, mut instants) in hosts {
        instants.sort();
        for pair in instants.windows(2) {
            assert_eq!(pair[1] - pair[0], PER_HOST_GAP, "{host}: {instants:?}");
        }
    }
    let mut instants: Vec<Duration> = schedule.iter().map(|(_, at)| *at).collect();
    instants.sort();
    for pair in instants.windows(2) {
        assert!(pair[1] - pair[0] >= GLOBAL_GAP, "{instants:?}");
    }
    // The last host's last page: 4 × 50 ms + 3 × 500 ms.
    assert_eq!(instants.last(), Some(&Duration::from_millis(1700)));
}

#[tokio::test(start_paused = true)]
async fn the_crawler_gets_the_ideal_schedule_with_its_urls_grouped_by_host() {
    assert_ideal_schedule(crawler::grouped_by_host()).await;
}

#[tokio::test(start_paused = true)]
async fn the_crawler_gets_the_ideal_schedule_with_its_urls_interleaved() {
    assert_ideal_schedule(crawler::interleaved()).await;
}

#[tokio::test]
async fn a_url_without_a_host_is_refused() {
    let error = crawler::crawl(&["no-scheme/page-0".to_owned()])
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "no host in \"no-scheme/page-0\"");
}
