//! `images audit`: each recipe's pin against what its tag points at now and what is
//! pulled here, as findings.

use bollard::Docker;
use serde::Serialize;

use super::{local, registry_digest};
use crate::error::Result;
use crate::lock::{repository, Lock, Source};

/// One recipe's audit.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AuditRow {
    recipe: String,
    reference: String,
    pinned: Option<String>,
    pinned_created: Option<String>,
    /// The pinned image is on this machine.
    present: bool,
    /// What the tag points to in the registry now (None when unknown).
    registry: Option<String>,
    registry_created: Option<String>,
    registry_error: Option<String>,
    /// What the tag is on this machine, when it differs from the pin.
    local_differs: Option<String>,
    findings: Vec<Finding>,
}

impl AuditRow {
    pub(crate) fn recipe(&self) -> &str {
        &self.recipe
    }

    pub(crate) fn reference(&self) -> &str {
        &self.reference
    }

    pub(crate) fn pinned(&self) -> Option<&str> {
        self.pinned.as_deref()
    }

    pub(crate) fn pinned_created(&self) -> Option<&str> {
        self.pinned_created.as_deref()
    }

    pub(crate) fn present(&self) -> bool {
        self.present
    }

    pub(crate) fn registry(&self) -> Option<&str> {
        self.registry.as_deref()
    }

    pub(crate) fn registry_created(&self) -> Option<&str> {
        self.registry_created.as_deref()
    }

    pub(crate) fn registry_error(&self) -> Option<&str> {
        self.registry_error.as_deref()
    }

    pub(crate) fn findings(&self) -> &[Finding] {
        &self.findings
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Finding {
    /// The recipe's image has no pin.
    NotPinned,
    /// The recipe now names another image than the pin's.
    ReferenceChanged,
    /// The tag points elsewhere in the registry.
    Drift,
    /// This machine's image under the tag differs from the pin.
    LocalDiffers,
    /// The pinned digest is not on this machine (pull it).
    NotPresent,
    /// The registry could not be asked.
    RegistryUnreachable,
}

impl Finding {
    /// Whether cron/CI should fail on it.
    pub(crate) fn fails(self) -> bool {
        matches!(
            self,
            Finding::NotPinned | Finding::ReferenceChanged | Finding::Drift | Finding::LocalDiffers
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Audit {
    rows: Vec<AuditRow>,
    /// Lock entries for recipes that no longer exist.
    stale: Vec<String>,
    ok: bool,
}

impl Audit {
    pub(crate) fn rows(&self) -> &[AuditRow] {
        &self.rows
    }

    pub(crate) fn stale(&self) -> &[String] {
        &self.stale
    }

    pub(crate) fn ok(&self) -> bool {
        self.ok
    }

    /// Keeps only the stale pins `keep` says are (a caller's own judgement of a name).
    pub(crate) fn retain_stale(&mut self, keep: impl FnMut(&String) -> bool) {
        self.stale.retain(keep);
    }
}

/// Audits every (recipe, image reference) against the lock, this machine and the registry.
pub(crate) async fn audit(
    docker: &Docker,
    recipes: &[(String, String)],
    lock: &Lock,
) -> Result<Audit> {
    let mut rows = Vec::new();
    for (recipe, reference) in recipes {
        let pin = lock.images.get(recipe);
        let mut row = AuditRow {
            recipe: recipe.clone(),
            reference: reference.clone(),
            pinned: pin.map(|p| p.digest.clone()),
            pinned_created: None,
            present: false,
            registry: None,
            registry_created: None,
            registry_error: None,
            local_differs: None,
            findings: Vec::new(),
        };
        let repo = repository(reference);
        let here = local(docker, reference).await?;
        match pin {
            None => row.findings.push(Finding::NotPinned),
            Some(p) => {
                if &p.reference != reference {
                    row.findings.push(Finding::ReferenceChanged);
                }
                let pinned = local(docker, &p.run_reference()).await?;
                row.present = pinned.is_some();
                row.pinned_created = pinned.and_then(|i| i.created).or_else(|| p.created.clone());
                if !row.present {
                    row.findings.push(Finding::NotPresent);
                }
                if let Some(img) = &here {
                    let now = match p.source {
                        Source::Registry => img.digest_in(repo).unwrap_or_else(|| img.id.clone()),
                        Source::Local => img.id.clone(),
                    };
                    if now != p.digest {
                        row.local_differs = Some(now);
                        row.findings.push(Finding::LocalDiffers);
                    }
                }
            }
        }
        // Images built here have no registry to ask.
        let local_only = pin.is_some_and(|p| p.source == Source::Local)
            || (pin.is_none() && here.as_ref().is_some_and(|i| i.digest_in(repo).is_none()));
        if !local_only {
            match registry_digest(docker, reference).await {
                Ok((digest, _)) => {
                    if pin.is_some_and(|p| p.source == Source::Registry && p.digest != digest) {
                        row.findings.push(Finding::Drift);
                    }
                    row.registry_created = local(docker, &format!("{repo}@{digest}"))
                        .await?
                        .and_then(|i| i.created);
                    row.registry = Some(digest);
                }
                Err(e) => {
                    row.registry_error = Some(e.to_string());
                    row.findings.push(Finding::RegistryUnreachable);
                }
            }
        }
        rows.push(row);
    }
    let names: Vec<&str> = recipes.iter().map(|(n, _)| n.as_str()).collect();
    let stale: Vec<String> = lock
        .images
        .keys()
        .filter(|k| !names.contains(&k.as_str()))
        .cloned()
        .collect();
    let ok = rows.iter().all(|r| r.findings.iter().all(|f| !f.fails()));
    Ok(Audit { rows, stale, ok })
}
