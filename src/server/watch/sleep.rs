//! A model's server put to sleep instead of stopped (`serve.sleep: auto`), and woken for
//! its next request: vLLM's sleep mode, through its development routes (which the door
//! refuses to clients). Level 1 (weights kept in host RAM) where the GPU has memory of its
//! own; level 2 (weights dropped, reloaded at the wake) where the host's memory is the
//! GPU's, since level 1 would keep them in the same memory. A server whose sleep routes are
//! not open is stopped as before; a wake that fails, hangs, or takes longer than the
//! recipe's start is given up: the server is stopped and started cold.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::context::Context;
use crate::production::Upstream;
use crate::recipe::serve::Sleep;
use crate::runtime::ready::{health_now, Health, Liveness};
use crate::runtime::Deployment;
use crate::server::Door;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap_or_default()
}

/// `POST url` with `body`, answered 2xx within `within`; its JSON.
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

/// `u`, the idle server of `door`'s model, put to sleep when its recipe asks for it and
/// its sleep routes answer; the level it sleeps at, or None (it is to be stopped).
pub(super) async fn put_to_sleep(ctx: &Context, door: &Door, u: &Upstream) -> Option<u8> {
    if door.demand.settings().sleep != Sleep::Auto {
        return None;
    }
    let d = ctx
        .runtimes
        .instance(&u.recipe, &u.deployment)
        .await
        .ok()??;
    let client = client();
    if is_sleeping(&client, &d).await != Some(false) {
        return None;
    }
    let level = match crate::pagecache::shared_with_the_gpu().await {
        true => 2,
        false => 1,
    };
    let url = format!("{}/sleep?level={level}", d.url());
    match post(&client, &url, None).await {
        Ok(_) => Some(level),
        Err(why) => {
            tracing::warn!("{}: put to sleep failed, stopped instead: {why}", u.recipe);
            None
        }
    }
}

/// Wakes `u`, asleep at `level`, until it says it is awake and a one-token completion
/// answers, within `limit`; how long it took, or why not.
pub(super) async fn wake(
    ctx: &Context,
    u: &Upstream,
    level: u8,
    limit: Duration,
) -> Result<Duration, String> {
    let began = Instant::now();
    let d = match ctx.runtimes.instance(&u.recipe, &u.deployment).await {
        Ok(Some(d)) if d.running() => d,
        _ => return Err(format!("{} ({}) no longer runs", u.recipe, u.deployment)),
    };
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
        while is_sleeping(&client, &d).await != Some(false) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        match health_now(&client, &d).await {
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

/// Whether `d`'s own sleep ends at its next request (llama-server's idle sleep), where
/// vLLM's waits for a wake.
pub(super) fn woken_by_requests(d: &Deployment) -> bool {
    !matches!(
        d.engine,
        crate::engine::Engine::Vllm | crate::engine::Engine::Sim
    )
}

/// `u`, routed to and found asleep (a front door that stopped left it so), woken at the
/// level this machine's sleeps take.
pub(super) async fn wake_routed(ctx: &Context, u: &Upstream) -> Result<(), String> {
    let level = match crate::pagecache::shared_with_the_gpu().await {
        true => 2,
        false => 1,
    };
    wake(ctx, u, level, Duration::from_secs(120))
        .await
        .map(|_| ())
}
