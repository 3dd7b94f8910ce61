//! Turns at a model's server, by key: a server that answers `slots` requests at once
//! (`serve.slots`, or its own `--parallel`) gets no more from the door; the rest wait here,
//! one queue per key, and a freed slot goes to the waiting key served longest ago, not to
//! the longest queue. A key that floods waits behind itself; another key's request waits
//! for one slot to free at most. Without slots known, nothing waits here (the server queues itself).

use std::collections::{HashMap, VecDeque};

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// A lane's queues.
#[derive(Default)]
pub(crate) struct Fair {
    inner: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Requests at the server now, by this gate's turns.
    busy: usize,
    /// The slots as last asked for (a new production may have others).
    slots: usize,
    queues: HashMap<String, VecDeque<oneshot::Sender<Turn>>>,
    /// When each key was last let in (a count of turns given): the waiting key with the
    /// oldest goes next.
    served: HashMap<String, u64>,
    turns: u64,
}

/// The queues are at their bound: the request is refused (503), as a full hold is.
#[derive(Debug)]
pub(crate) struct Full;

/// A request's place at the server, until its answer's last byte.
pub(crate) struct Turn(Option<Arc<Fair>>);

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(gate) = self.0.take() {
            gate.release();
        }
    }
}

impl Fair {
    /// Waits for a turn of `key` (any name; the keyless share one) at a server of `slots`
    /// (None: at once, no turn kept); `Full` when `bound` requests wait already and this
    /// key's queue is the longest.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        key: &str,
        slots: Option<u32>,
        bound: usize,
    ) -> Result<Option<Turn>, Full> {
        let Some(slots) = slots else {
            return Ok(None);
        };
        let slots = slots as usize;
        let waiting = {
            let mut s = self.inner.lock().expect("fair");
            s.slots = slots;
            if s.busy < slots && s.queues.is_empty() {
                s.busy += 1;
                s.turns += 1;
                let t = s.turns;
                s.served.insert(key.to_string(), t);
                return Ok(Some(Turn(Some(self.clone()))));
            }
            // At the bound, the key with the longest queue is the one refused: a flood
            // that fills the queues cannot crowd out another key's request.
            let total: usize = s.queues.values().map(VecDeque::len).sum();
            let mine = s.queues.get(key).map_or(0, VecDeque::len);
            let longest = s.queues.values().map(VecDeque::len).max().unwrap_or(0);
            if total >= bound && mine >= longest {
                return Err(Full);
            }
            let (tx, rx) = oneshot::channel();
            s.queues.entry(key.to_string()).or_default().push_back(tx);
            // A slot may be free with others waiting on it (its turn went to one that left).
            self.grant(&mut s);
            rx
        };
        // Its sender is only dropped unsent with the gate itself.
        Ok(waiting.await.ok())
    }

    fn release(self: &Arc<Self>) {
        let mut s = self.inner.lock().expect("fair");
        s.busy = s.busy.saturating_sub(1);
        self.grant(&mut s);
    }

    /// Free slots to the waiting keys served longest ago, one each in turn.
    fn grant(self: &Arc<Self>, s: &mut State) {
        while s.busy < s.slots {
            let next = (s.queues.keys())
                .min_by_key(|k| (s.served.get(*k).copied().unwrap_or(0), (*k).clone()))
                .cloned();
            let Some(key) = next else {
                return;
            };
            let queue = s.queues.get_mut(&key).expect("a waiting key has a queue");
            let tx = queue.pop_front().expect("a queue is removed once empty");
            if queue.is_empty() {
                s.queues.remove(&key);
            }
            s.busy += 1;
            s.turns += 1;
            let t = s.turns;
            s.served.insert(key, t);
            if let Err(mut unsent) = tx.send(Turn(Some(self.clone()))) {
                // Its request went away (its client, its hold): the slot stays free.
                unsent.0 = None;
                s.busy -= 1;
            }
        }
    }

    /// Requests waiting for a turn, by key.
    #[cfg(test)]
    fn waiting(&self) -> HashMap<String, usize> {
        let s = self.inner.lock().expect("fair");
        (s.queues.iter())
            .map(|(k, q)| (k.clone(), q.len()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_key_served_longest_ago_not_the_longest_queue() {
        let gate = Arc::new(Fair::default());
        let first = gate.enter("flood", Some(1), 100).await.unwrap().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (i, key) in ["flood", "flood", "flood", "quiet", "flood"]
            .iter()
            .enumerate()
        {
            let (g, tx) = (gate.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let turn = g.enter(key, Some(1), 100).await.unwrap().unwrap();
                tx.send((i, *key)).unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                drop(turn);
            }));
            // Queued in this order.
            while gate.waiting().values().sum::<usize>() < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        let mut order = Vec::new();
        for _ in 0..5 {
            order.push(rx.recv().await.unwrap().1);
        }
        // The flood had the turn before: the quiet key's one request comes first, not
        // after the four floods queued before it.
        assert_eq!(order, ["quiet", "flood", "flood", "flood", "flood"]);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(gate.inner.lock().unwrap().busy, 0);
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_leaves_its_slot_free() {
        let gate = Arc::new(Fair::default());
        let first = gate.enter("a", Some(1), 100).await.unwrap().unwrap();
        let gone = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            gate.enter("b", Some(1), 100),
        )
        .await;
        assert!(gone.is_err());
        drop(first);
        let again = gate.enter("c", Some(1), 100).await.unwrap();
        assert!(again.is_some());
        // At its bound, one more waiter of the longest queue is refused at once; another
        // key's is not.
        let g = gate.clone();
        let waiting = tokio::spawn(async move { g.enter("e", Some(1), 1).await.is_ok() });
        while gate.waiting().values().sum::<usize>() < 1 {
            tokio::task::yield_now().await;
        }
        assert!(gate.enter("e", Some(1), 1).await.is_err());
        let g = gate.clone();
        let other = tokio::spawn(async move { g.enter("f", Some(1), 1).await.is_ok() });
        while gate.waiting().values().sum::<usize>() < 2 {
            tokio::task::yield_now().await;
        }
        drop(again);
        assert!(waiting.await.unwrap());
        assert!(other.await.unwrap());
        // Every turn given back.
        assert_eq!(gate.inner.lock().unwrap().busy, 0);
        assert!(gate.enter("d", None, 0).await.unwrap().is_none());
    }
}
