//! What the relative gates (`vs_production_*`) compare with: production's measurement, or
//! why there is none to trust, or no production at all. Without a measurement of a
//! production those gates are inconclusive, never passed; with no production they do not
//! apply (there is nothing their figures could be relative to, and none will come from
//! asking again).

/// Production's measurement (a whole result, or its measures), or why there is none.
#[derive(Debug, Clone)]
pub(crate) enum Baseline<T> {
    /// A complete measurement of production.
    Measured(T),
    /// Why there is no measurement to trust (said in the gates' details).
    Missing(String),
    /// Nothing serves production: the first `up`. The relative gates do not apply.
    NoProduction,
}

impl<T> Baseline<T> {
    /// Why there is none: `why` reads after "no production baseline: ".
    pub(crate) fn missing(why: impl Into<String>) -> Self {
        Baseline::Missing(why.into())
    }

    /// The measurement, if there is one.
    pub(crate) fn measured(&self) -> Option<&T> {
        match self {
            Baseline::Measured(t) => Some(t),
            Baseline::Missing(_) | Baseline::NoProduction => None,
        }
    }

    /// The same baseline seen through `f` (a result's measures); the reason is kept.
    pub(crate) fn map<U>(&self, f: impl FnOnce(&T) -> U) -> Baseline<U> {
        match self {
            Baseline::Measured(t) => Baseline::Measured(f(t)),
            Baseline::Missing(why) => Baseline::Missing(why.clone()),
            Baseline::NoProduction => Baseline::NoProduction,
        }
    }
}
