//! A running server as a memory plan counts it: its declaration, what it measurably holds,
//! and whether it sleeps (then what it holds is what counts).

use serde::Serialize;

use crate::runtime::Deployment;

/// A running server as the plan counts it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Holder {
    pub(crate) name: String,
    /// `server.memory_gb` of its recipe.
    pub(crate) declared_gb: Option<f64>,
    /// What it holds in this pool now (None: not measured): GPU memory on a discrete GPU;
    /// on unified memory or host RAM its GPU memory and its own resident pages, page cache
    /// left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) measured_gb: Option<f64>,
    /// What the front door routes production to: stopped last.
    pub(crate) production: bool,
    /// It says it sleeps (`Profile::sleep_probe`): it counts what it measurably holds, not
    /// its declaration, which is what it holds awake.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) asleep: bool,
}

impl Holder {
    /// A deployment counted by its declaration alone.
    pub(crate) fn declared(d: &Deployment, production: &[String]) -> Holder {
        Holder {
            name: d.name.clone(),
            declared_gb: d.memory_gb,
            measured_gb: None,
            production: production.contains(&d.name),
            asleep: false,
        }
    }

    /// What the plan counts: the larger of the declaration and the measure; asleep, the
    /// measure when there is one.
    pub(crate) fn gb(&self) -> f64 {
        if let (true, Some(m)) = (self.asleep, self.measured_gb) {
            return m;
        }
        self.declared_gb
            .unwrap_or(0.0)
            .max(self.measured_gb.unwrap_or(0.0))
    }

    /// It holds more than it declares.
    pub(crate) fn over(&self) -> bool {
        self.measured_gb
            .is_some_and(|m| m > self.declared_gb.unwrap_or(0.0))
    }

    /// What stopping it gives back: what it measurably holds, else its declaration.
    pub(super) fn frees_gb(&self) -> f64 {
        self.measured_gb.or(self.declared_gb).unwrap_or(0.0)
    }

    /// `prod 7 GB`, `prod ?`, or with both figures when it holds more than it declares.
    pub(crate) fn describe(&self) -> String {
        match (self.over(), self.measured_gb, self.declared_gb) {
            (true, Some(m), Some(d)) => {
                format!(
                    "{} {m:.2} GB held, more than its declared {d} GB",
                    self.name
                )
            }
            (true, Some(m), None) => format!("{} {m:.2} GB held, none declared", self.name),
            (_, Some(m), _) if self.asleep => format!("{} {m:.2} GB held asleep", self.name),
            (_, _, Some(d)) => format!("{} {d} GB", self.name),
            (_, _, None) => format!("{} ?", self.name),
        }
    }
}

/// Whether each of `running` says it sleeps, asked all at once.
pub(crate) async fn asleep(running: &[&Deployment]) -> Vec<bool> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(std::time::Duration::from_millis(500))
        .build()
        .unwrap_or_default();
    let asks = running
        .iter()
        .map(|d| crate::runtime::ready::asleep(&client, d));
    futures_util::future::join_all(asks).await
}
