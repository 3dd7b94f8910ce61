//! The instruments: which processes a deployment has, their resident memory (per runtime)
//! and their GPU memory (nvidia-smi).

use super::{Figure, Method, PidSource, Processes};
use crate::host;
use crate::nvidia::{ComputeApp, SmiError};
use crate::recipe::Runtime;
use crate::runtime::{Deployment, Runtimes};

/// A busy Engine API must not hold up a start that has already succeeded.
const ENGINE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn engine_slow() -> String {
    format!(
        "the Engine API did not answer within {} s",
        ENGINE_TIMEOUT.as_secs()
    )
}

/// The Docker Engine named by DOCKER_HOST on another machine (tcp://, ssh://): the pids it
/// reports are that machine's, and must not be matched against this one's nvidia-smi.
fn remote_engine() -> Option<String> {
    crate::settings::environment().remote_docker_host.clone()
}

/// The deployment's processes and its resident CPU memory, as its runtime allows.
pub(super) async fn holdings(rt: &Runtimes, d: &Deployment) -> (Processes, Figure) {
    match d.runtime {
        Runtime::Process => session_holdings(d),
        Runtime::Docker => match rt.docker() {
            Ok(docker) => {
                let client = docker.client();
                let (mut processes, memory) = tokio::join!(
                    container_processes(client, &d.id),
                    container_memory(client, &d.id)
                );
                if let Some(host) = remote_engine() {
                    processes = no_processes(format!(
                        "the Docker Engine is on another machine (DOCKER_HOST={host}); its pids \
                         are not this machine's"
                    ));
                }
                (processes, memory)
            }
            Err(e) => (
                no_processes(format!("the Docker Engine is not reachable: {e}")),
                Figure::missing(Method::ContainerCgroup, e.to_string()),
            ),
        },
    }
}

pub(super) fn no_processes(why: String) -> Processes {
    Processes {
        pids: Vec::new(),
        found_by: PidSource::Unknown,
        detail: why,
    }
}

fn session_holdings(d: &Deployment) -> (Processes, Figure) {
    let Ok(leader) = d.id.parse::<u32>() else {
        let why = format!("deployment id {} is not a pid", d.id);
        return (
            no_processes(why.clone()),
            Figure::missing(Method::SessionRss, why),
        );
    };
    let pids = host::session_processes(leader);
    let rss: Vec<u64> = pids.iter().filter_map(|p| host::rss_bytes(*p)).collect();
    let processes = Processes {
        detail: format!(
            "{} process(es): the session pid {leader} leads, and descendants that left it",
            pids.len()
        ),
        pids,
        found_by: PidSource::ProcessSession,
    };
    let resident = if rss.is_empty() {
        Figure::missing(
            Method::SessionRss,
            format!("no VmRSS readable for pid {leader} or its session (gone?)"),
        )
    } else {
        // Pages shared between its processes count once per process: with forked workers
        // this errs high, never low.
        Figure::measured(
            Method::SessionRss,
            rss.iter().sum(),
            format!(
                "VmRSS (/proc/PID/status) summed over {} process(es)",
                rss.len()
            ),
        )
    };
    (processes, resident)
}

/// The container's processes as host pids: `top` lists its cgroup's processes; without it
/// (no `ps` where dockerd runs) the main process from inspect is all that is known.
async fn container_processes(docker: &bollard::Docker, id: &str) -> Processes {
    let top = tokio::time::timeout(
        ENGINE_TIMEOUT,
        docker.top_processes(id, None::<bollard::query_parameters::TopOptions>),
    )
    .await;
    let top_error = match top {
        Err(_) => engine_slow(),
        Ok(Err(e)) => e.to_string(),
        Ok(Ok(top)) => match pids_of_top(&top) {
            Some(pids) => {
                return Processes {
                    detail: format!("{} process(es) from the Engine API's top", pids.len()),
                    pids,
                    found_by: PidSource::DockerTop,
                }
            }
            None => "top gave no PID column".to_string(),
        },
    };
    match docker.inspect_container(id, None).await {
        Ok(info) => match info.state.and_then(|s| s.pid).filter(|p| *p > 0) {
            Some(pid) => Processes {
                pids: vec![pid as u32],
                found_by: PidSource::ContainerMainPid,
                detail: format!(
                    "top failed ({top_error}); only the main process (inspect State.Pid) is \
                     counted, workers it forked are not"
                ),
            },
            None => no_processes(format!("top failed ({top_error}); inspect gives no pid")),
        },
        Err(e) => no_processes(format!("top failed ({top_error}); inspect failed ({e})")),
    }
}

fn pids_of_top(top: &bollard::models::ContainerTopResponse) -> Option<Vec<u32>> {
    let column = top.titles.as_ref()?.iter().position(|t| t == "PID")?;
    Some(
        top.processes
            .iter()
            .flatten()
            .filter_map(|row| row.get(column)?.parse().ok())
            .collect(),
    )
}

/// The container's memory as `docker stats` shows it: the cgroup's use less its inactive
/// page cache (file pages the kernel drops first; a server's loaded weights stay active).
async fn container_memory(docker: &bollard::Docker, id: &str) -> Figure {
    use futures_util::StreamExt;
    // One sample, no second one for CPU deltas: answers within the daemon's collection
    // interval (at most ~1 s) instead of after two.
    let opts = bollard::query_parameters::StatsOptionsBuilder::new()
        .stream(false)
        .one_shot(true)
        .build();
    let method = Method::ContainerCgroup;
    let stats = match tokio::time::timeout(ENGINE_TIMEOUT, docker.stats(id, Some(opts)).next())
        .await
    {
        Err(_) => return Figure::missing(method, format!("container stats: {}", engine_slow())),
        Ok(Some(Ok(s))) => s,
        Ok(Some(Err(e))) => return Figure::missing(method, format!("container stats: {e}")),
        Ok(None) => return Figure::missing(method, "the Engine API sent no stats"),
    };
    let Some(mem) = stats.memory_stats else {
        return Figure::missing(method, "the Engine API sent no memory stats");
    };
    let Some(usage) = mem.usage else {
        return Figure::missing(
            method,
            "the Engine API reports no memory use (memory cgroup not enabled?)",
        );
    };
    let stat = mem.stats.unwrap_or_default();
    // cgroup v2 names it inactive_file, v1 total_inactive_file.
    let inactive = stat
        .get("inactive_file")
        .or_else(|| stat.get("total_inactive_file"))
        .copied()
        .unwrap_or(0);
    Figure::measured(
        method,
        usage.saturating_sub(inactive),
        "the container's cgroup memory use less inactive page cache (Engine API stats, as \
         `docker stats` counts it)",
    )
}

/// What a running deployment holds, as the memory plan counts it: its processes' GPU memory,
/// whether a GPU holds any of it, and its own resident memory with the page cache left out
/// (a process's anonymous and shared pages; a container's cgroup less inactive page cache).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Share {
    gpu: Option<u64>,
    pub(in crate::memory) on_gpu: bool,
    resident: Option<u64>,
}

pub(super) async fn share(rt: &Runtimes, d: &Deployment, apps: &[ComputeApp]) -> Share {
    let (processes, resident) = holdings(rt, d).await;
    share_of(d, &processes, &resident, apps)
}

/// The share of a deployment whose processes and resident figure were measured already.
pub(super) fn share_of(
    d: &Deployment,
    processes: &Processes,
    resident: &Figure,
    apps: &[ComputeApp],
) -> Share {
    let pids = &processes.pids;
    let resident = match d.runtime {
        Runtime::Process => {
            let own: Vec<u64> = pids
                .iter()
                .filter_map(|p| host::own_rss_bytes(*p))
                .collect();
            (!own.is_empty()).then(|| own.iter().sum())
        }
        Runtime::Docker => resident.bytes,
    };
    let ours: Vec<&ComputeApp> = apps.iter().filter(|a| pids.contains(&a.pid)).collect();
    Share {
        gpu: (!ours.is_empty()).then(|| ours.iter().filter_map(|a| a.used_bytes).sum()),
        on_gpu: !ours.is_empty(),
        resident,
    }
}

impl Share {
    /// What it holds in the pool it counts in, in GB: on a discrete GPU its GPU memory (or
    /// its resident pages when no GPU holds any); in one unified pool both together.
    pub(crate) fn gb(&self, discrete: bool) -> Option<f64> {
        let bytes = match discrete {
            true if self.on_gpu => self.gpu,
            true => self.resident,
            false => match (self.gpu, self.resident) {
                (None, None) => None,
                (g, r) => Some(g.unwrap_or(0) + r.unwrap_or(0)),
            },
        }?;
        Some(bytes as f64 / 1e9)
    }
}

/// The GPU memory of `pids` in nvidia-smi's per-process list.
pub(super) fn gpu_figure(pids: &[u32], apps: Result<Vec<ComputeApp>, SmiError>) -> Figure {
    let method = Method::NvidiaSmiComputeApps;
    let apps = match apps {
        Ok(apps) => apps,
        Err(e) => return Figure::missing(method, e.to_string()),
    };
    if pids.is_empty() {
        return Figure::missing(method, "the deployment's processes are not known");
    }
    let ours: Vec<&ComputeApp> = apps.iter().filter(|a| pids.contains(&a.pid)).collect();
    let without: Vec<u32> = ours
        .iter()
        .filter(|a| a.used_bytes.is_none())
        .map(|a| a.pid)
        .collect();
    if !without.is_empty() {
        return Figure::missing(
            method,
            format!("nvidia-smi lists pid(s) {without:?} of the deployment with [N/A] memory"),
        );
    }
    let bytes = ours.iter().filter_map(|a| a.used_bytes).sum();
    Figure::measured(
        method,
        bytes,
        format!(
            "nvidia-smi --query-compute-apps: {} of the deployment's {} process(es) use the GPU",
            ours.iter()
                .map(|a| a.pid)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            pids.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_memory_is_summed_over_the_deployments_pids_only() {
        let apps = vec![
            ComputeApp {
                pid: 10,
                used_bytes: Some(90 << 30),
            },
            ComputeApp {
                pid: 11,
                used_bytes: Some(2 << 30),
            },
            ComputeApp {
                pid: 99,
                used_bytes: Some(7 << 30),
            },
        ];
        let f = gpu_figure(&[10, 11, 12], Ok(apps.clone()));
        assert_eq!(f.bytes, Some(92 << 30));
        assert!(f.how.contains("2 of the deployment's 3"), "{}", f.how);
        // nvidia-smi answered and lists none of its pids: a measured zero, not a missing figure.
        assert_eq!(gpu_figure(&[12], Ok(apps)).bytes, Some(0));
    }

    #[test]
    fn gpu_memory_is_missing_not_zero_when_nvidia_smi_cannot_say() {
        let f = gpu_figure(&[10], Err(SmiError::NotInstalled));
        assert_eq!(f.bytes, None);
        assert!(f.how.contains("nvidia-smi is not on PATH"), "{}", f.how);
        let na = vec![ComputeApp {
            pid: 10,
            used_bytes: None,
        }];
        let f = gpu_figure(&[10], Ok(na));
        assert_eq!(f.bytes, None);
        assert!(f.how.contains("[N/A]"), "{}", f.how);
        assert_eq!(gpu_figure(&[], Ok(vec![])).bytes, None);
    }

    #[test]
    fn pids_come_from_tops_pid_column() {
        let top = bollard::models::ContainerTopResponse {
            titles: Some(
                ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"]
                    .map(String::from)
                    .to_vec(),
            ),
            processes: Some(vec![
                [
                    "root",
                    "4242",
                    "4200",
                    "0",
                    "06:40",
                    "?",
                    "00:00:00",
                    "/sparkctl sim",
                ]
                .map(String::from)
                .to_vec(),
                [
                    "root", "4250", "4242", "0", "06:40", "?", "00:00:00", "worker",
                ]
                .map(String::from)
                .to_vec(),
            ]),
        };
        assert_eq!(pids_of_top(&top), Some(vec![4242, 4250]));
        let no_pid = bollard::models::ContainerTopResponse {
            titles: Some(vec!["CMD".into()]),
            processes: Some(vec![]),
        };
        assert_eq!(pids_of_top(&no_pid), None);
    }
}
