//! What runs now, as `status` shows it: each recipe's latest deployment with its health,
//! its role behind the front door, its uptime and, for a group, its containers node by node.

use std::time::Duration;

use serde::Serialize;

use super::Role;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::frontdoor::DoorStatus;
use crate::runtime::group::Placed;
use crate::runtime::Deployment;

/// One recipe's latest deployment (`status --json` prints these).
#[derive(Debug, Serialize)]
pub(crate) struct StatusRow {
    #[serde(flatten)]
    pub(crate) deployment: Deployment,
    pub(crate) health: String,
    production: bool,
    pub(crate) role: Role,
    /// The model it is production of, or kept warm for, when several are served (the name
    /// clients send).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    pub(crate) uptime_s: Option<u64>,
    /// A multi-node deployment's containers, node by node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) nodes: Vec<Placed>,
    /// What it holds now (GPU memory per nvidia-smi, resident memory), beside its
    /// declaration; running deployments only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) memory: Option<crate::memory::Held>,
    /// What its recipe's starts took: the latest step by step, the p50 of the kept ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) starts: Option<crate::starts::Summary>,
    /// What its recipe as it runs held at its starts (`memory::learned`), when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) learned_gb: Option<f64>,
}

impl StatusRow {
    /// Its learned figure when it is more than a fifth off the declaration.
    pub(crate) fn drift(&self) -> Option<crate::memory::learned::Drift> {
        let d = &self.deployment;
        crate::memory::learned::Drift::of(&d.name, d.memory_gb, self.learned_gb?)
    }
}

pub(crate) struct Status {
    pub(crate) rows: Vec<StatusRow>,
    /// What the front door says, when it runs.
    pub(crate) door: Option<DoorStatus>,
    /// Records that could not be read, nodes that could not be reached.
    pub(crate) warnings: Vec<String>,
    /// Pin moves an upgrade's promotion left undone, made now (`super::pin::heal`).
    pub(crate) healed: Vec<String>,
}

pub(crate) async fn status(ctx: &Context) -> Result<Status> {
    let healed = super::pin::heal_if_free(&ctx.lock_path, &ctx.state, "status");
    let (deployments, mut warnings) = ctx.runtimes.latest_per_recipe().await?;
    // Each request carries its own limit (health_now bounds health and generation apart);
    // connecting on loopback is instant or refused.
    let client = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .map_err(|e| Error::HttpClient {
            cause: e.to_string(),
        })?;
    let now = crate::units::unix_now().as_secs();
    let door = crate::frontdoor::Remote::new(crate::frontdoor::control_socket(&ctx.state))
        .status()
        .await
        .ok();
    // All at once: a wedged deployment costs its few seconds once, not once per row.
    let health = futures_util::future::join_all(
        deployments
            .iter()
            .map(|d| crate::runtime::ready::health_now(&client, d)),
    )
    .await;
    let groups = futures_util::future::join_all(
        deployments
            .iter()
            .map(|d| crate::runtime::group::members_of(&ctx.runtimes, d)),
    )
    .await;
    let running: Vec<&Deployment> = deployments.iter().filter(|d| d.running()).collect();
    let mut held = crate::memory::held(&ctx.runtimes, &running)
        .await
        .into_iter();
    let mut rows = Vec::new();
    for ((d, health), (nodes, notes)) in deployments.into_iter().zip(health).zip(groups) {
        warnings.extend(notes);
        let role = Role::of(&d, door.as_ref());
        rows.push(StatusRow {
            health: health.to_string(),
            production: role == Role::Production,
            role,
            model: door.as_ref().and_then(|s| model_of(&d, s)),
            uptime_s: d.running().then(|| now.saturating_sub(d.started_at)),
            memory: if d.running() { held.next() } else { None },
            starts: crate::starts::summary(&crate::starts::of(&ctx.state, &d.name)),
            learned_gb: learned(ctx, &d),
            nodes,
            deployment: d,
        });
    }
    Ok(Status {
        rows,
        door,
        warnings,
        healed,
    })
}

/// What `d`'s recipe, as it ran, held at its latest measured start.
fn learned(ctx: &Context, d: &Deployment) -> Option<f64> {
    let key = crate::memory::learned::Key {
        recipe: d.name.clone(),
        recipe_hash: d.recipe_hash.clone(),
        digest: None,
        fingerprint: None,
    };
    crate::memory::learned::of(&ctx.state, &key).map(|f| f.gb)
}

/// The model whose production `d` is, or is kept warm for, when the front door serves
/// several.
fn model_of(d: &Deployment, door: &DoorStatus) -> Option<String> {
    if door.models.len() < 2 {
        return None;
    }
    let m = door.models.iter().find(|m| {
        m.upstream.as_ref().is_some_and(|u| u.deployment == d.id)
            || m.production
                .warm
                .iter()
                .any(|w| w.upstream.deployment == d.id)
    })?;
    m.name.clone()
}
