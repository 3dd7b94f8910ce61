//! What Ray says about its cluster: `ray status` parsed into nodes and GPUs, the check
//! that every worker joined before the API server starts.

/// Nodes and GPUs a `ray status` report shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Cluster {
    pub(in crate::node) nodes: usize,
    pub(in crate::node) gpus: u32,
}

/// Reads `ray status` output: one ` 1 node_…` line per active node under `Active:`, and
/// the ` USED/TOTAL GPU` line under `Usage:`. None when it is not such a report.
pub(crate) fn parse_status(text: &str) -> Option<Cluster> {
    let mut in_active = false;
    let mut seen_active = false;
    let mut cluster = Cluster::default();
    for line in text.lines() {
        let t = line.trim();
        if t == "Active:" {
            (in_active, seen_active) = (true, true);
            continue;
        }
        if t.ends_with(':') {
            in_active = false;
        }
        if in_active {
            if let Some((count, name)) = t.split_once(' ') {
                if name.starts_with("node_") {
                    cluster.nodes += count.parse::<usize>().unwrap_or(0);
                }
            }
        }
        if let Some(usage) = t.strip_suffix(" GPU") {
            let total = usage.rsplit_once('/').map_or(usage, |(_, t)| t);
            cluster.gpus = total.parse::<f64>().map_or(0, |g| g as u32);
        }
    }
    seen_active.then_some(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_ray_status_report_parses() {
        // As Ray 2.x prints it on a two-node cluster.
        let text = "======== Autoscaler status: 2025-10-01 12:00:00.000000 ========\n\
Node status\n---------------------------------------------------------------\nActive:\n \
1 node_3f9e8d0c0a6f4b1e9c1d2a7b5e4f3c2b1a0d9e8f7c6b5a4f3e2d1c0b\n \
1 node_8a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5\nPending:\n \
(no pending nodes)\nRecent failures:\n (no failures)\n\nResources\n\
---------------------------------------------------------------\nUsage:\n 0.0/40.0 CPU\n \
0.0/2.0 GPU\n 0B/215.44GiB memory\n 0B/46.17GiB object_store_memory\n\nDemands:\n \
(no resource demands)\n";
        assert_eq!(parse_status(text), Some(Cluster { nodes: 2, gpus: 2 }));
        assert_eq!(
            parse_status("ConnectionError: could not find any running Ray instance"),
            None
        );
    }
}
