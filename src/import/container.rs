//! A running container as the Docker Engine describes it: image and the id it runs,
//! entrypoint and command, environment names, bind mounts, published ports, GPUs, IPC,
//! shared memory, ulimits, user. Engine defaults (64 MB /dev/shm, private IPC) are not
//! written into the recipe: only what `docker run` was told.

use std::collections::BTreeMap;

use super::{record::Origin, ContainerSeen, Observed, Published, Seen};
use crate::error::{Error, Result};
use crate::lock::{repository, Lock, Pin, Source};
use crate::recipe::{ExtraMount, Gpus, Ipc};
use crate::runtime::docker::{engine_error, is_not_found};
use crate::units::ByteSize;

/// Docker's /dev/shm when none is asked for.
const DEFAULT_SHM: i64 = 64 << 20;

pub(crate) async fn observe(docker: &bollard::Docker, id: &str) -> Result<Observed> {
    let info = match docker.inspect_container(id, None).await {
        Ok(i) => i,
        Err(e) if is_not_found(&e) => {
            return Err(Error::NoSuch {
                what: crate::error::Thing::Container,
                name: id.to_string(),
                hint: crate::error::Hint::DockerPs,
            })
        }
        Err(e) => return Err(engine_error(&format!("inspecting container {id}"), e)),
    };
    let full_id = info.id.clone().unwrap_or_else(|| id.to_string());
    let name = info
        .name
        .clone()
        .unwrap_or_default()
        .trim_start_matches('/')
        .to_string();
    if !info.state.as_ref().and_then(|s| s.running).unwrap_or(false) {
        return Err(Error::Stopped(crate::error::Gone::Container {
            name: name.to_string(),
        }));
    }
    let config = info.config.clone().unwrap_or_default();
    let host = info.host_config.clone().unwrap_or_default();
    let image_id = info.image.clone();
    let image_env = match &image_id {
        Some(i) => docker
            .inspect_image(i)
            .await
            .ok()
            .and_then(|i| i.config)
            .and_then(|c| c.env)
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let mut dropped = Vec::new();
    let seen = ContainerSeen {
        image: config.image.clone().unwrap_or_default(),
        image_id,
        entrypoint: config.entrypoint.clone(),
        entrypoint_given: false,
        cmd: config.cmd.clone().unwrap_or_default(),
        mounts: mounts(&info.mounts.clone().unwrap_or_default(), &mut dropped),
        ports: ports(&host),
        network_host: host.network_mode.as_deref() == Some("host"),
        gpus: gpus(&host),
        ipc: match host.ipc_mode.as_deref() {
            Some("host") => Some(Ipc::Host),
            _ => None,
        },
        shm_size: host
            .shm_size
            .filter(|s| *s != DEFAULT_SHM && *s > 0)
            .map(|s| ByteSize(s as u64)),
        ulimits: host
            .ulimits
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|u| Some((u.name?, u.soft?)))
            .collect::<BTreeMap<_, _>>(),
        user: config.user.clone().filter(|u| !u.is_empty()),
    };
    if let Some(dir) = config.working_dir.as_deref().filter(|d| !d.is_empty()) {
        let image_dir = docker
            .inspect_image(seen.image_id.as_deref().unwrap_or_default())
            .await
            .ok()
            .and_then(|i| i.config)
            .and_then(|c| c.working_dir)
            .unwrap_or_default();
        if dir != image_dir {
            dropped.push(format!("working dir {dir} inside the container"));
        }
    }
    let port = seen.ports.first().map(|p| p.host_port);
    Ok(Observed {
        from: format!("container {name} ({})", crate::units::short_id(&full_id)),
        launch: Seen::Container(seen),
        env_names: env_names(&config.env.unwrap_or_default(), &image_env),
        dropped,
        origin: Some(Origin::Container {
            id: full_id,
            name,
            port,
        }),
        rss: None,
    })
}

/// Names the container sets beyond what its image sets (same value): what `-e` gave.
fn env_names(env: &[String], image_env: &[String]) -> Vec<String> {
    env.iter()
        .filter(|kv| !image_env.contains(kv))
        .filter_map(|kv| kv.split('=').next())
        .map(String::from)
        .collect()
}

fn mounts(points: &[bollard::models::MountPoint], dropped: &mut Vec<String>) -> Vec<ExtraMount> {
    let mut out = Vec::new();
    for m in points {
        let (Some(src), Some(dst)) = (m.source.as_deref(), m.destination.as_deref()) else {
            continue;
        };
        let typ = m.typ.as_ref().map(|t| t.to_string()).unwrap_or_default();
        if typ != "bind" {
            dropped.push(format!("{typ} mount at {dst}"));
            continue;
        }
        out.push(ExtraMount {
            host: super::tilde(src),
            container: dst.to_string(),
            read_only: m.rw == Some(false),
        });
    }
    out
}

fn ports(host: &bollard::models::HostConfig) -> Vec<Published> {
    let mut out: Vec<Published> = host
        .port_bindings
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(key, bindings)| {
            let container_port: u16 = key.strip_suffix("/tcp")?.parse().ok()?;
            let b = bindings?.into_iter().next()?;
            Some(Published {
                host_ip: b.host_ip.unwrap_or_default(),
                host_port: b.host_port?.parse().ok()?,
                container_port,
            })
        })
        .collect();
    out.sort_by_key(|p| p.host_port);
    out
}

fn gpus(host: &bollard::models::HostConfig) -> Option<Gpus> {
    let asks_gpu = |r: &bollard::models::DeviceRequest| {
        r.driver.as_deref() == Some("nvidia")
            || r.capabilities
                .iter()
                .flatten()
                .flatten()
                .any(|c| c == "gpu")
    };
    let request = host.device_requests.iter().flatten().find(|r| asks_gpu(r));
    match request {
        Some(r) => match r.count {
            Some(n) if n > 0 => Some(Gpus::Count(n as u32)),
            _ => match &r.device_ids {
                Some(ids) if !ids.is_empty() => Some(Gpus::Count(ids.len() as u32)),
                _ => Some(Gpus::All),
            },
        },
        None if host.runtime.as_deref() == Some("nvidia") => Some(Gpus::All),
        None => None,
    }
}

/// Pins what the container runs: the registry digest its image came with, else its id.
pub(crate) async fn pin(
    docker: &bollard::Docker,
    lock_path: &std::path::Path,
    recipe: &str,
    reference: &str,
    image_id: &str,
    state: &crate::state::StateDir,
) -> Result<String> {
    let image = crate::images::local(docker, image_id)
        .await?
        .ok_or_else(|| Error::ImageMissing {
            image: image_id.to_string(),
            needed: crate::error::ImageNeed::Read,
        })?;
    let platform = crate::images::platform(docker).await.ok();
    let (digest, source) = match image.digest_in(repository(reference)) {
        Some(d) => (d, Source::Registry),
        None => (image.id().to_string(), Source::Local),
    };
    let at = crate::units::now_utc();
    let mut lock = Lock::load(lock_path)?.intact()?;
    lock.set(
        recipe,
        Pin {
            reference: reference.to_string(),
            digest: digest.clone(),
            source,
            media_type: None,
            platform,
            image_id: Some(image.id().to_string()),
            created: image.created().map(str::to_string),
            pinned_at: at.clone(),
            history: Vec::new(),
        },
    );
    lock.save(lock_path)?;
    let mut event = crate::images::history::Event::now(
        crate::images::history::EventKind::Pinned,
        &digest,
        None,
    );
    event.image_id = Some(image.id().to_string());
    if let Err(e) = crate::images::history::record(state, recipe, &event) {
        tracing::warn!("the pin of {recipe} is not in its image history: {e}");
    }
    Ok(digest)
}
