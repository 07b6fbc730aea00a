//! Dashboard figures whose cost grows with the organisation (counts over its audience or its
//! deliveries), shared by every request to this replica.
//!
//! Without this, 50 open dashboards on an org of 200,000 subscribers kept PostgreSQL busy
//! recounting the same rows and starved the senders (the soak, docs/lab-notes/benchmarks.md).
//! Two rules bound that work however many pages are open:
//! - concurrent requests for the same figure wait for one computation (moka's single flight);
//! - a result that took at least [`CACHE_FROM`] to compute is reused for ten times what it cost,
//!   at most [`MAX_AGE`]: these queries then take at most about a tenth of one database backend
//!   per figure, while a small org's figures (cheap) are always computed fresh.

use std::future::Future;
use std::hash::Hash;
use std::time::{Duration, Instant};

use moka::future::Cache;
use moka::Expiry;

use super::overview::Overview;
use crate::error::AppError;

/// Results cheaper than this are never reused.
pub const CACHE_FROM: Duration = Duration::from_millis(20);
/// The oldest a reused figure can be.
pub const MAX_AGE: Duration = Duration::from_secs(10);

/// How long a result may be reused, from what it cost.
pub fn reuse_for(cost: Duration) -> Duration {
    if cost < CACHE_FROM {
        Duration::ZERO
    } else {
        (cost * 10).min(MAX_AGE)
    }
}

struct ByCost;

impl<K, V> Expiry<K, (V, Duration)> for ByCost {
    fn expire_after_create(
        &self,
        _key: &K,
        value: &(V, Duration),
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(reuse_for(value.1))
    }
}

/// One kind of figure, keyed by what it depends on.
#[derive(Clone)]
pub struct Memo<K, V> {
    cache: Cache<K, (V, Duration)>,
}

impl<K, V> Default for Memo<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Memo {
            // A bound on memory only: entries expire within MAX_AGE anyway.
            cache: Cache::builder()
                .max_capacity(10_000)
                .expire_after(ByCost)
                .build(),
        }
    }
}

impl<K, V> Memo<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// The figure for `key`: reused, awaited from a computation already running, or computed.
    pub async fn get<F>(&self, key: K, compute: F) -> Result<V, AppError>
    where
        F: Future<Output = Result<V, AppError>>,
    {
        self.cache
            .try_get_with(key, async {
                let started = Instant::now();
                let value = compute.await?;
                Ok((value, started.elapsed()))
            })
            .await
            .map(|(value, _)| value)
            .map_err(|e: std::sync::Arc<AppError>| (*e).clone())
    }
}

/// Every memoised figure of the dashboard. The server provides one per replica as context.
#[derive(Clone, Default)]
pub struct Figures {
    /// The Overview page, by org.
    pub overview: Memo<i64, Overview>,
    /// Deliveries per status, by org (the Deliveries page).
    pub delivery_counts: Memo<i64, Vec<(crate::domain::DeliveryStatus, i64)>>,
    /// The org's lists with their member counts (the campaign editor's choice of lists).
    pub list_sizes: Memo<i64, Vec<crate::db::lists::ListRow>>,
    /// A campaign's audience estimate, by (org, campaign, content version).
    pub estimate: Memo<(i64, i64, i32), i64>,
}

/// This replica's figures; a fresh, empty set where none was provided (nothing is reused).
/// Take it before the first await, like every context.
pub fn figures() -> Figures {
    leptos::prelude::use_context::<Figures>().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn only_costly_results_are_reused_and_never_for_long() {
        assert_eq!(reuse_for(Duration::from_millis(5)), Duration::ZERO);
        assert_eq!(
            reuse_for(Duration::from_millis(50)),
            Duration::from_millis(500)
        );
        assert_eq!(reuse_for(Duration::from_secs(3)), MAX_AGE);
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_computation_and_cheap_ones_are_recomputed() {
        let memo: Memo<i64, i64> = Memo::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let slow = |runs: Arc<AtomicUsize>| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok::<i64, AppError>(7)
        };
        let all = futures_join(
            (0..10)
                .map(|_| {
                    let memo = memo.clone();
                    let runs = runs.clone();
                    tokio::spawn(async move { memo.get(1, slow(runs)).await })
                })
                .collect(),
        )
        .await;
        assert!(all.iter().all(|v| *v == 7));
        assert_eq!(runs.load(Ordering::SeqCst), 1, "ten requests, one query");
        // Reused while fresh (60 ms cost → 600 ms).
        assert_eq!(memo.get(1, slow(runs.clone())).await.unwrap(), 7);
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        let cheap: Memo<i64, i64> = Memo::default();
        for _ in 0..3 {
            let runs = runs.clone();
            cheap
                .get(1, async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok(1)
                })
                .await
                .unwrap();
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            4,
            "cheap figures are always fresh"
        );

        // An error is not kept: the next request computes again.
        let failing: Memo<i64, i64> = Memo::default();
        assert!(failing
            .get(1, async { Err(AppError::Internal) })
            .await
            .is_err());
        assert_eq!(failing.get(1, async { Ok(2) }).await.unwrap(), 2);
    }

    async fn futures_join(
        handles: Vec<tokio::task::JoinHandle<Result<i64, AppError>>>,
    ) -> Vec<i64> {
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap().unwrap());
        }
        out
    }
}
