//! A recipe's `serve` section: how the front door serves its model beside others on the one
//! production port (`crate::models`): when its server is unloaded, kept, started with the
//! front door, and whether requests naming no model go to it.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::diag::Report;
use super::Recipe;
use crate::units::HumanDuration;

/// The shortest `ttl`: an idle model unloaded faster than it loads would only thrash.
const MIN_TTL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Serve {
    /// Unloaded (its server stopped) after this long without a request, e.g. `10m`; the
    /// next request that names it starts it again. None: it stays loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ttl: Option<HumanDuration>,
    /// Never unloaded for room nor by `ttl`: started with the front door, and kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) keep: bool,
    /// Started with the front door rather than by the first request that names it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    preload: bool,
    /// Requests that name no `model` go to this recipe's model while it is production (with
    /// one model behind the front door, every request goes to it anyway).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    default: bool,
}

impl Serve {
    /// Started with the front door: preloaded, or kept.
    pub(crate) fn eager(&self) -> bool {
        self.preload || self.keep
    }
}

/// Whether requests without `model` go to `r`'s model.
pub(crate) fn is_default(r: &Recipe) -> bool {
    r.serve.as_ref().is_some_and(|s| s.default)
}

/// `r`'s serve section, defaults when it has none.
pub(crate) fn of(r: &Recipe) -> Serve {
    r.serve.clone().unwrap_or_default()
}

pub(super) fn check(out: &mut Report, r: &Recipe) {
    let Some(s) = &r.serve else { return };
    if let Some(ttl) = s.ttl {
        if ttl.0 < MIN_TTL {
            out.bad(
                "serve.ttl",
                format!("a ttl of {ttl} unloads the model faster than it can serve"),
                "give 1s or more, e.g. 10m; leave it out to keep the model loaded",
            );
        }
        if s.keep {
            out.bad(
                "serve.ttl",
                "a kept model (`serve.keep: true`) is never unloaded, so its ttl would never \
                 apply"
                    .into(),
                "drop `ttl`, or `keep`",
            );
        }
    }
}
