//! The same bits on every node: the image id the head runs must be on every other node.
//! Where a node lacks it, it is copied engine to engine through the Engine API (export on
//! the head, load on the node, no registry needed) and its id verified; an id that does
//! not come out the same is refused.

use bollard::query_parameters::ImportImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;

use crate::error::{Error, Result};
use crate::runtime::remote::Connected;

/// What happened to the image on one node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Presence {
    /// It had the image already.
    Present,
    /// Copied from the head; the id checked.
    Copied,
}

async fn has_image(docker: &Docker, id: &str) -> Result<Option<String>> {
    match docker.inspect_image(id).await {
        Ok(info) => Ok(info.id),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(crate::runtime::docker::engine_error(
            &format!("inspecting image {id}"),
            e,
        )),
    }
}

/// Makes sure `node` holds image `id` (as the head's engine names it), copying it from
/// `head` when it does not.
pub(crate) async fn ensure(head: &Connected, node: &Connected, id: &str) -> Result<Presence> {
    if has_image(&node.docker, id).await?.as_deref() == Some(id) {
        return Ok(Presence::Present);
    }
    let export = head.docker.export_image(id);
    let options = ImportImageOptionsBuilder::new().quiet(true).build();
    let mut load = node.docker.import_image_stream(options, export, None);
    while let Some(step) = load.next().await {
        let step = step.map_err(|e| copy_failed(head, node, id, &e.to_string()))?;
        if let Some(message) = step.error_detail.and_then(|d| d.message) {
            return Err(copy_failed(head, node, id, &message));
        }
    }
    match has_image(&node.docker, id).await? {
        Some(got) if got == id => Ok(Presence::Copied),
        got => Err(Error::OnNode {
            node: node.node.name.clone(),
            what: crate::error::NodeProblem::WrongImage {
                head: head.node.name.clone(),
                got,
                id: id.to_string(),
            },
        }),
    }
}

fn copy_failed(head: &Connected, node: &Connected, id: &str, why: &str) -> Error {
    Error::OnNode {
        node: node.node.name.clone(),
        what: crate::error::NodeProblem::CopyFailed {
            id: id.to_string(),
            head: head.node.name.clone(),
            why: why.to_string(),
        },
    }
}
