//! Where the front door sends requests, and who is waiting for it to know. One upstream
//! (production) or none (holding: a swap, a restart); requests taken while holding wait for
//! the next upstream, bounded in number and time; in-flight requests are counted per
//! upstream so a switch can drain the old one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::demand::StartFailed;
pub(crate) use crate::production::Upstream;

/// What the table says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Serving(Upstream),
    /// Production dropped a request it had taken without answering (a dying server): new
    /// requests wait until the watch has looked at it — serving again, or brought back.
    Suspect(Upstream),
    /// Production is being switched or brought back: requests wait.
    Holding,
    /// There is no production (none yet, or it was taken down): nothing to wait for.
    Offline,
}

/// Why a request got no upstream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refusal {
    /// Too many requests already waiting.
    QueueFull,
    /// Waited the whole bound.
    TimedOut,
    /// There is no production.
    Offline,
    /// Its model's server was started for it and did not start: told at once, not after
    /// the hold.
    StartFailed(Arc<StartFailed>),
}

/// The routing table, shared by the proxy, the control API and the watch.
#[derive(Clone)]
pub(crate) struct Table {
    route: watch::Sender<Route>,
    /// A start on demand that failed: waiting and new requests are refused with it until
    /// it is cleared (the back-off ends and a request asks again, or a start serves).
    failed: watch::Sender<Option<Arc<StartFailed>>>,
    inner: Arc<Mutex<Counts>>,
    max_waiting: usize,
}

struct Counts {
    waiting: usize,
    /// When a request last claimed an upstream or finished with it (the table's start
    /// before any did): how long a model has been idle.
    last: std::time::Instant,
    /// Requests in flight per upstream deployment (two instances on one port stay apart).
    in_flight: HashMap<String, usize>,
    /// Notified when a deployment's in-flight count reaches 0.
    drained: HashMap<String, Arc<tokio::sync::Notify>>,
}

/// A request's claim on an upstream: counted in flight until dropped.
pub(crate) struct Lease {
    pub(crate) upstream: Upstream,
    table: Table,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut c = self.table.inner.lock().expect("route counts");
        c.last = std::time::Instant::now();
        let now_idle = match c.in_flight.get_mut(&self.upstream.deployment) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            None => false,
        };
        if now_idle {
            c.in_flight.remove(&self.upstream.deployment);
            if let Some(n) = c.drained.get(&self.upstream.deployment) {
                n.notify_waiters();
            }
        }
    }
}

/// One request's place among those waiting, freed when its wait ends or is dropped.
struct WaitSlot<'a>(&'a Table);

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        self.0.inner.lock().expect("route counts").waiting -= 1;
    }
}

impl Table {
    pub(crate) fn new(route: Route, max_waiting: usize) -> Table {
        Table {
            route: watch::Sender::new(route),
            failed: watch::Sender::new(None),
            inner: Arc::new(Mutex::new(Counts {
                waiting: 0,
                last: std::time::Instant::now(),
                in_flight: HashMap::new(),
                drained: HashMap::new(),
            })),
            max_waiting,
        }
    }

    pub(crate) fn route(&self) -> Route {
        self.route.borrow().clone()
    }

    /// Sends new requests to `route` from now on; returns what it replaced.
    pub(crate) fn set(&self, route: Route) -> Route {
        self.route.send_replace(route)
    }

    /// Its model's start failed: the requests waiting and those that come are refused with
    /// `why` until `clear_failure`.
    pub(crate) fn fail(&self, why: Arc<StartFailed>) {
        self.failed.send_replace(Some(why));
    }

    /// Requests wait for a start again.
    pub(crate) fn clear_failure(&self) {
        self.failed.send_if_modified(|f| f.take().is_some());
    }

    /// `u` failed a request it had taken: new requests wait for the watch's look.
    pub(crate) fn suspect(&self, u: &Upstream) {
        self.route.send_if_modified(|r| match r {
            Route::Serving(now) if now.deployment == u.deployment => {
                *r = Route::Suspect(now.clone());
                true
            }
            _ => false,
        });
    }

    /// The watch found `u` well: it serves again (unless the route changed meanwhile).
    pub(crate) fn clear_suspicion(&self, u: &Upstream) {
        self.route.send_if_modified(|r| match r {
            Route::Suspect(now) if now.deployment == u.deployment => {
                *r = Route::Serving(now.clone());
                true
            }
            _ => false,
        });
    }

    /// An upstream for one request: now, or once one is set, within `bound`. `avoid` is a
    /// deployment that just failed this request: it waits for another one.
    pub(crate) async fn lease(
        &self,
        bound: Duration,
        avoid: Option<&str>,
    ) -> Result<Lease, Refusal> {
        let usable = |r: &Route| match r {
            Route::Serving(u) if Some(u.deployment.as_str()) != avoid => Some(u.clone()),
            _ => None,
        };
        let mut rx = self.route.subscribe();
        let mut failed = self.failed.subscribe();
        match &*rx.borrow_and_update() {
            Route::Offline => return Err(Refusal::Offline),
            r => {
                if let Some(u) = usable(r) {
                    return Ok(self.claim(u));
                }
            }
        }
        if let Some(why) = failed.borrow_and_update().clone() {
            return Err(Refusal::StartFailed(why));
        }
        {
            let mut c = self.inner.lock().expect("route counts");
            if c.waiting >= self.max_waiting {
                return Err(Refusal::QueueFull);
            }
            c.waiting += 1;
        }
        // Given back however the wait ends: a client that goes away drops this future.
        let _slot = WaitSlot(self);
        let waited = tokio::time::timeout(bound, async {
            loop {
                let route = rx.borrow_and_update().clone();
                if route == Route::Offline {
                    return Err(Refusal::Offline);
                }
                if let Some(u) = usable(&route) {
                    return Ok(u);
                }
                if let Some(why) = failed.borrow_and_update().clone() {
                    return Err(Refusal::StartFailed(why));
                }
                let changed = tokio::select! {
                    r = rx.changed() => r,
                    r = failed.changed() => r,
                };
                if changed.is_err() {
                    return Err(Refusal::TimedOut);
                }
            }
        })
        .await;
        match waited {
            Ok(Ok(u)) => Ok(self.claim(u)),
            Ok(Err(why)) => Err(why),
            Err(_) => Err(Refusal::TimedOut),
        }
    }

    fn claim(&self, upstream: Upstream) -> Lease {
        let mut c = self.inner.lock().expect("route counts");
        c.last = std::time::Instant::now();
        *c.in_flight.entry(upstream.deployment.clone()).or_default() += 1;
        drop(c);
        Lease {
            upstream,
            table: self.clone(),
        }
    }

    /// Requests waiting for an upstream, and in flight per deployment.
    pub(crate) fn counts(&self) -> (usize, HashMap<String, usize>) {
        let c = self.inner.lock().expect("route counts");
        (c.waiting, c.in_flight.clone())
    }

    /// How long nothing was asked of this table: None while a request is in flight or
    /// waiting.
    pub(crate) fn idle_for(&self) -> Option<std::time::Duration> {
        let c = self.inner.lock().expect("route counts");
        (c.waiting == 0 && c.in_flight.values().all(|n| *n == 0)).then(|| c.last.elapsed())
    }

    /// Waits until nothing is in flight to `deployment`, at most `bound`. Returns what is left.
    pub(crate) async fn drain(&self, deployment: &str, bound: Duration) -> usize {
        let notify = {
            let mut c = self.inner.lock().expect("route counts");
            if c.in_flight.get(deployment).copied().unwrap_or(0) == 0 {
                return 0;
            }
            c.drained.entry(deployment.to_string()).or_default().clone()
        };
        let left = || self.counts().1.get(deployment).copied().unwrap_or(0);
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            // Registered before the count is read: a last request ending in between still wakes us.
            notified.as_mut().enable();
            if left() == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return left();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(n: &str) -> Upstream {
        Upstream {
            recipe: n.into(),
            deployment: format!("{n}-id"),
            url: format!("http://127.0.0.1/{n}"),
        }
    }

    #[tokio::test]
    async fn held_requests_go_to_the_next_upstream_within_their_bound() {
        let t = Table::new(Route::Holding, 2);
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move {
                t.lease(Duration::from_secs(5), None)
                    .await
                    .map(|l| l.upstream.clone())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(t.counts().0, 1);
        t.set(Route::Serving(up("a")));
        assert_eq!(waiter.await.unwrap().unwrap(), up("a"));
        // Bounded in time...
        t.set(Route::Holding);
        let began = std::time::Instant::now();
        let r = t.lease(Duration::from_millis(50), None).await;
        assert!(matches!(r, Err(Refusal::TimedOut)));
        assert!(began.elapsed() >= Duration::from_millis(50));
        // ... and in number.
        let a = {
            let t = t.clone();
            tokio::spawn(async move { t.lease(Duration::from_secs(1), None).await.is_ok() })
        };
        let b = {
            let t = t.clone();
            tokio::spawn(async move { t.lease(Duration::from_secs(1), None).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(matches!(
            t.lease(Duration::from_secs(1), None).await,
            Err(Refusal::QueueFull)
        ));
        t.set(Route::Serving(up("b")));
        assert!(a.await.unwrap() && b.await.unwrap());
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_gives_its_place_back() {
        let t = Table::new(Route::Holding, 2);
        for _ in 0..10 {
            let gone = tokio::time::timeout(
                Duration::from_millis(5),
                t.lease(Duration::from_secs(60), None),
            )
            .await;
            assert!(gone.is_err(), "still holding");
        }
        assert_eq!(t.counts().0, 0);
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move { t.lease(Duration::from_secs(5), None).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        t.set(Route::Serving(up("a")));
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn without_production_a_request_is_refused_at_once_and_so_are_waiters() {
        let t = Table::new(Route::Offline, 4);
        let began = std::time::Instant::now();
        assert!(matches!(
            t.lease(Duration::from_secs(5), None).await,
            Err(Refusal::Offline)
        ));
        assert!(began.elapsed() < Duration::from_secs(1));
        t.set(Route::Holding);
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move { t.lease(Duration::from_secs(5), None).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        t.set(Route::Offline);
        assert!(!waiter.await.unwrap());
    }

    #[tokio::test]
    async fn a_switch_drains_the_old_upstream() {
        let t = Table::new(Route::Serving(up("old")), 8);
        let lease = t.lease(Duration::ZERO, None).await.ok().unwrap();
        t.set(Route::Serving(up("new")));
        assert_eq!(
            t.lease(Duration::ZERO, None)
                .await
                .ok()
                .unwrap()
                .upstream
                .clone(),
            up("new")
        );
        // A request that failed on `new` waits for another deployment.
        assert!(matches!(
            t.lease(Duration::from_millis(20), Some("new-id")).await,
            Err(Refusal::TimedOut)
        ));
        // Still one in flight on the old one: the drain waits for it.
        assert_eq!(t.drain("old-id", Duration::from_millis(30)).await, 1);
        let t2 = t.clone();
        let drain = tokio::spawn(async move { t2.drain("old-id", Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(lease);
        assert_eq!(drain.await.unwrap(), 0);
        assert!(t.counts().1.is_empty());
    }
}
