//! What the relative gates (`vs_production_*`) compare with: production's measurement, or
//! why there is none to trust. Without one those gates are inconclusive, never passed.

/// Production's measurement (a whole result, or its measures), or why there is none.
#[derive(Debug, Clone)]
pub(crate) enum Baseline<T> {
    /// A complete measurement of production.
    Measured(T),
    /// Why there is no measurement to trust (said in the gates' details).
    Missing(String),
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
            Baseline::Missing(_) => None,
        }
    }

    /// The same baseline seen through `f` (a result's measures); the reason is kept.
    pub(crate) fn map<U>(&self, f: impl FnOnce(&T) -> U) -> Baseline<U> {
        match self {
            Baseline::Measured(t) => Baseline::Measured(f(t)),
            Baseline::Missing(why) => Baseline::Missing(why.clone()),
        }
    }
}
