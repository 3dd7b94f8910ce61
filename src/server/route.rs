//! Where the front door sends requests, and who is waiting for it to know. One upstream
//! (production) or none (holding: a swap, a restart); requests taken while holding wait for
//! the next upstream, bounded in number and time; in-flight requests are counted per
//! upstream so a switch can drain the old one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::accept::Client;
pub(crate) use super::lane::Route;
use super::lane::{Cell, StartFailed};
pub(crate) use crate::production::Upstream;

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

/// One lane's routing, a view of its state (`lane::Cell`), shared by the proxy, the control
/// API and the watch.
#[derive(Clone)]
pub(crate) struct Table {
    cell: Arc<Cell>,
    max_waiting: usize,
}

/// A request's claim on an upstream: counted in flight until dropped.
pub(crate) struct Lease {
    pub(in crate::server) upstream: Upstream,
    cell: Arc<Cell>,
    client: Option<Client>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut s = self.cell.lock();
        match self.client {
            Some(c) => s.ended(c),
            None => s.last = std::time::Instant::now(),
        }
        let now_idle = match s.in_flight.get_mut(&self.upstream.deployment) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            None => false,
        };
        if now_idle {
            s.in_flight.remove(&self.upstream.deployment);
            drop(s);
            // A drain may wait for this one.
            self.cell.tick();
        }
    }
}

/// One request's place among those waiting, freed when its wait ends or is dropped.
struct WaitSlot<'a>(&'a Table, Option<Client>);

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        let mut s = self.0.cell.lock();
        s.waiting -= 1;
        if let Some(i) = self.1.and_then(|c| s.waiters.iter().position(|w| *w == c)) {
            s.waiters.swap_remove(i);
        }
    }
}

/// What a request finds when it asks for an upstream.
enum Found {
    Upstream(Upstream),
    Refused(Refusal),
    Wait,
}

impl Table {
    /// A table of a lane of its own (no model's, loaded): the unit tests'.
    #[cfg(test)]
    pub(crate) fn new(route: Route, max_waiting: usize) -> Table {
        Table::of(
            Cell::new("", route, super::demand::Load::Loaded),
            max_waiting,
        )
    }

    /// The routing view of `cell`.
    pub(crate) fn of(cell: Arc<Cell>, max_waiting: usize) -> Table {
        Table { cell, max_waiting }
    }

    pub(crate) fn route(&self) -> Route {
        self.cell.lock().route.clone()
    }

    /// Sends new requests to `route` from now on; returns what it replaced.
    pub(crate) fn set(&self, route: Route) -> Route {
        self.cell.change(|s| std::mem::replace(&mut s.route, route))
    }

    /// `u` failed a request it had taken: new requests wait for the watch's look.
    pub(crate) fn suspect(&self, u: &Upstream) {
        self.cell.change(|s| match &s.route {
            Route::Serving(now) if now.deployment == u.deployment => {
                s.route = Route::Suspect(now.clone());
            }
            _ => {}
        });
    }

    /// The watch found `u` well: it serves again (unless the route changed meanwhile).
    pub(crate) fn clear_suspicion(&self, u: &Upstream) {
        self.cell.change(|s| match &s.route {
            Route::Suspect(now) if now.deployment == u.deployment => {
                s.route = Route::Serving(now.clone());
            }
            _ => {}
        });
    }

    /// What a request finds now, claiming the upstream it finds (under the same lock, so a
    /// hold cannot drain past it).
    fn find(&self, avoid: Option<&str>) -> Found {
        let mut s = self.cell.lock();
        match &s.route {
            Route::Offline => return Found::Refused(Refusal::Offline),
            Route::Serving(u) if Some(u.deployment.as_str()) != avoid => {
                let u = u.clone();
                s.last = std::time::Instant::now();
                *s.in_flight.entry(u.deployment.clone()).or_default() += 1;
                return Found::Upstream(u);
            }
            _ => {}
        }
        match (&s.failure, s.refusing) {
            (Some(why), true) => Found::Refused(Refusal::StartFailed(why.clone())),
            _ => Found::Wait,
        }
    }

    /// An upstream for one request: now, or once one is set, within `bound`. `avoid` is a
    /// deployment that just failed this request: it waits for another one.
    pub(crate) async fn lease(
        &self,
        bound: Duration,
        avoid: Option<&str>,
        client: Option<Client>,
    ) -> Result<Lease, Refusal> {
        // Subscribed before the first look: a change right after it still wakes the wait.
        let mut ticks = self.cell.ticks();
        match self.find(avoid) {
            Found::Upstream(u) => return Ok(self.lease_of(u, client)),
            Found::Refused(why) => return Err(why),
            Found::Wait => {}
        }
        {
            let mut s = self.cell.lock();
            if s.waiting >= self.max_waiting {
                return Err(Refusal::QueueFull);
            }
            s.waiting += 1;
            s.waiters.extend(client);
        }
        // Given back however the wait ends: a client that goes away drops this future.
        let _slot = WaitSlot(self, client);
        let waited = tokio::time::timeout(bound, async {
            loop {
                ticks.borrow_and_update();
                match self.find(avoid) {
                    Found::Upstream(u) => return Ok(u),
                    Found::Refused(why) => return Err(why),
                    Found::Wait => {}
                }
                if ticks.changed().await.is_err() {
                    return Err(Refusal::TimedOut);
                }
            }
        })
        .await;
        match waited {
            Ok(Ok(u)) => Ok(self.lease_of(u, client)),
            Ok(Err(why)) => Err(why),
            Err(_) => Err(Refusal::TimedOut),
        }
    }

    /// The lease of an upstream `find` claimed.
    fn lease_of(&self, upstream: Upstream, client: Option<Client>) -> Lease {
        Lease {
            upstream,
            cell: self.cell.clone(),
            client,
        }
    }

    /// The clients whose requests wait here now.
    pub(crate) fn waiters(&self) -> Vec<Client> {
        self.cell.lock().waiters.clone()
    }

    /// Whether everyone who used this idle lane within `within` waits in `waiters`.
    pub(crate) fn moved_on(&self, waiters: &[Client], within: Duration) -> bool {
        self.cell.lock().moved_on(waiters, within)
    }

    /// Requests waiting for an upstream, and in flight per deployment.
    pub(crate) fn counts(&self) -> (usize, HashMap<String, usize>) {
        let s = self.cell.lock();
        (s.waiting, s.in_flight.clone())
    }

    /// How long nothing was asked of this lane: None while a request is in flight or
    /// waiting.
    pub(crate) fn idle_for(&self) -> Option<std::time::Duration> {
        let s = self.cell.lock();
        (s.waiting == 0 && s.in_flight.values().all(|n| *n == 0)).then(|| s.last.elapsed())
    }

    /// Waits until nothing is in flight to `deployment`, at most `bound`. Returns what is left.
    pub(crate) async fn drain(&self, deployment: &str, bound: Duration) -> usize {
        let mut ticks = self.cell.ticks();
        let left = || self.counts().1.get(deployment).copied().unwrap_or(0);
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            ticks.borrow_and_update();
            // Read after the subscription: a last request ending in between still ticks.
            let n = left();
            if n == 0 {
                return 0;
            }
            match tokio::time::timeout_at(deadline, ticks.changed()).await {
                Ok(Ok(())) => {}
                _ => return left(),
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
                t.lease(Duration::from_secs(5), None, None)
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
        let r = t.lease(Duration::from_millis(50), None, None).await;
        assert!(matches!(r, Err(Refusal::TimedOut)));
        assert!(began.elapsed() >= Duration::from_millis(50));
        // ... and in number.
        let a = {
            let t = t.clone();
            tokio::spawn(async move { t.lease(Duration::from_secs(1), None, None).await.is_ok() })
        };
        let b = {
            let t = t.clone();
            tokio::spawn(async move { t.lease(Duration::from_secs(1), None, None).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(matches!(
            t.lease(Duration::from_secs(1), None, None).await,
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
                t.lease(Duration::from_secs(60), None, None),
            )
            .await;
            assert!(gone.is_err(), "still holding");
        }
        assert_eq!(t.counts().0, 0);
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move { t.lease(Duration::from_secs(5), None, None).await.is_ok() })
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
            t.lease(Duration::from_secs(5), None, None).await,
            Err(Refusal::Offline)
        ));
        assert!(began.elapsed() < Duration::from_secs(1));
        t.set(Route::Holding);
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move { t.lease(Duration::from_secs(5), None, None).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        t.set(Route::Offline);
        assert!(!waiter.await.unwrap());
    }

    #[tokio::test]
    async fn a_switch_drains_the_old_upstream() {
        let t = Table::new(Route::Serving(up("old")), 8);
        let lease = t.lease(Duration::ZERO, None, None).await.ok().unwrap();
        t.set(Route::Serving(up("new")));
        assert_eq!(
            t.lease(Duration::ZERO, None, None)
                .await
                .ok()
                .unwrap()
                .upstream
                .clone(),
            up("new")
        );
        // A request that failed on `new` waits for another deployment.
        assert!(matches!(
            t.lease(Duration::from_millis(20), Some("new-id"), None)
                .await,
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
