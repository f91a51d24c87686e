//! Waiting for a condition: poll it every 10 ms until it holds, and fail
//! the test, naming what did not happen, once the patience runs out. Tests
//! never sleep a fixed time and then look.

use std::future::Future;
use std::time::Duration;

/// How long [`eventually`] and [`eventually_some`] wait before they give
/// up: generous, for a loaded CI machine.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// How often a condition is checked again.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// Polls `check` until it holds.
///
/// # Panics
///
/// After [`PATIENCE`], naming `what`.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_some(what, || {
        let done = check();
        async move { done.await.then_some(()) }
    })
    .await;
}

/// Polls `check` until it yields a value, and returns it.
///
/// # Panics
///
/// After [`PATIENCE`], naming `what`.
pub async fn eventually_some<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match within(PATIENCE, check).await {
        Some(value) => value,
        None => panic!("timed out waiting for {what}"),
    }
}

/// Polls `check` until it yields a value or `patience` has passed; `None`
/// then, so the caller can say what it saw before it fails.
pub async fn within<T, F, Fut>(patience: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}
