//! A server put to sleep and woken through vLLM's sleep routes (development mode, which
//! the front door refuses to clients): the door's evictions and a swap's making of room
//! both use them. Level 1 (weights kept in host RAM) where the GPU has memory of its own;
//! level 2 (weights dropped, reloaded at the wake) where the host's memory is the GPU's,
//! since level 1 would keep them in the same memory. A wake is given up past its limit.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::ready::{health_now, Health, Liveness};
use super::Deployment;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap_or_default()
}

/// `POST url` with `body`, answered 2xx; its JSON.
async fn post(client: &reqwest::Client, url: &str, body: Option<Value>) -> Result<Value, String> {
    let mut req = client.post(url).timeout(Duration::from_secs(120));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    match status.is_success() {
        true => Ok(v),
        false => Err(format!("{url} answered {status}: {v}")),
    }
}

/// Whether `d` says it sleeps (None: its sleep routes are not open).
async fn is_sleeping(client: &reqwest::Client, d: &Deployment) -> Option<bool> {
    let url = format!("{}/is_sleeping", d.url());
    let r = client
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json::<Value>().await.ok()?.get("is_sleeping")?.as_bool()
}

/// The level this machine's sleeps take.
pub(crate) async fn level() -> u8 {
    match crate::pagecache::shared_with_the_gpu().await {
        true => 2,
        false => 1,
    }
}

/// Puts `d`, awake with its sleep routes open, to sleep; the level it sleeps at. An error:
/// it cannot (no sleep routes, asleep already, or the sleep failed).
pub(crate) async fn put_to_sleep(d: &Deployment) -> Result<u8, String> {
    let client = client();
    match is_sleeping(&client, d).await {
        Some(false) => {}
        Some(true) => return Err("it sleeps already".into()),
        None => return Err("its sleep routes do not answer (no sleep mode)".into()),
    }
    let level = level().await;
    let url = format!("{}/sleep?level={level}", d.url());
    post(&client, &url, None).await.map(|_| level)
}

/// Wakes `recipe`'s instance `id`, asleep at `level`, when it still runs (`wake`).
pub(crate) async fn wake_instance(
    rt: &super::Runtimes,
    (recipe, id): (&str, &str),
    level: u8,
    limit: Duration,
) -> Result<Duration, String> {
    match rt.instance(recipe, id).await {
        Ok(Some(d)) if d.running() => wake(&d, level, limit).await,
        _ => Err(format!("{recipe} ({id}) no longer runs")),
    }
}

/// Wakes `d`, asleep at `level`, until it says it is awake and answers as ready, within
/// `limit`; how long it took, or why not.
pub(crate) async fn wake(d: &Deployment, level: u8, limit: Duration) -> Result<Duration, String> {
    let began = Instant::now();
    let client = client();
    let base = d.url();
    let woken = async {
        match level {
            // Its weights were dropped: memory back for them, reloaded, then the cache.
            2 => {
                post(&client, &format!("{base}/wake_up?tags=weights"), None).await?;
                let reload = json!({"method": "reload_weights"});
                post(&client, &format!("{base}/collective_rpc"), Some(reload)).await?;
                post(&client, &format!("{base}/wake_up?tags=kv_cache"), None).await?;
            }
            _ => {
                post(&client, &format!("{base}/wake_up"), None).await?;
            }
        }
        while is_sleeping(&client, d).await != Some(false) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        match health_now(&client, d).await {
            Liveness::Running(Health::Ready) => Ok(began.elapsed()),
            other => Err(format!("awake but not serving: {other}")),
        }
    };
    match tokio::time::timeout(limit, woken).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "not awake within {:.1} s, what a start takes",
            limit.as_secs_f64()
        )),
    }
}
