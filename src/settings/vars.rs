//! The variables' names, defaults and meanings: what `--help` and docs/GUIDE.md list.

/// One variable: its name, its default, and what it changes.
pub(crate) struct Var {
    pub(in crate::settings) name: &'static str,
    pub(in crate::settings) default: &'static str,
    pub(in crate::settings) meaning: &'static str,
}

pub(crate) const RECIPES: &str = "SPARKCTL_RECIPES";
pub(crate) const STATE_DIR: &str = "SPARKCTL_STATE_DIR";
pub(crate) const LOCK: &str = "SPARKCTL_LOCK";
pub(crate) const LOG: &str = "SPARKCTL_LOG";
pub(crate) const MEMORY_GB: &str = "SPARKCTL_MEMORY_GB";
pub(crate) const MEMORY_RESERVE_GB: &str = "SPARKCTL_MEMORY_RESERVE_GB";
pub(crate) const PRODUCTION_PORT: &str = "SPARKCTL_PRODUCTION_PORT";
pub(crate) const KEEP_EXITED: &str = "SPARKCTL_KEEP_EXITED";
pub(crate) const KEEP_IMAGES: &str = "SPARKCTL_KEEP_IMAGES";
pub(crate) const BANDWIDTH_GBPS: &str = "SPARKCTL_BANDWIDTH_GBPS";
pub(crate) const FRONTDOOR_HOST: &str = "SPARKCTL_FRONTDOOR_HOST";
pub(crate) const FRONTDOOR_HOLD: &str = "SPARKCTL_FRONTDOOR_HOLD";
pub(crate) const FRONTDOOR_QUEUE: &str = "SPARKCTL_FRONTDOOR_QUEUE";
pub(crate) const FRONTDOOR_DRAIN: &str = "SPARKCTL_FRONTDOOR_DRAIN";
pub(crate) const WARM_GRACE: &str = "SPARKCTL_WARM_GRACE";
pub(crate) const FRONTDOOR_CONNECTIONS: &str = "SPARKCTL_FRONTDOOR_CONNECTIONS";
pub(crate) const FRONTDOOR_NAMES: &str = "SPARKCTL_FRONTDOOR_NAMES";
pub(crate) const FRONTDOOR_ORIGINS: &str = "SPARKCTL_FRONTDOOR_ORIGINS";
pub(crate) const FRONTDOOR_SEND_TIMEOUT: &str = "SPARKCTL_FRONTDOOR_SEND_TIMEOUT";
pub(crate) const FRONTDOOR_API_KEY: &str = "SPARKCTL_FRONTDOOR_API_KEY";
pub(crate) const FRONTDOOR_API_KEY_FILE: &str = "SPARKCTL_FRONTDOOR_API_KEY_FILE";
pub(crate) const FRONTDOOR_PAGE: &str = "SPARKCTL_FRONTDOOR_PAGE";
pub(crate) const FRONTDOOR_QUALITY: &str = "SPARKCTL_FRONTDOOR_QUALITY";
pub(crate) const NVIDIA_SMI: &str = "SPARKCTL_NVIDIA_SMI";
pub(crate) const CHOWN_HELPER: &str = "SPARKCTL_CHOWN_HELPER";

/// Every `SPARKCTL_*` variable, in the order the guide's table lists them.
pub(crate) const VARS: &[Var] = &[
    Var {
        name: RECIPES,
        default: "./recipes when it exists, else $XDG_CONFIG_HOME/sparkctl/recipes",
        meaning: "the recipes dir (`--recipes`)",
    },
    Var {
        name: STATE_DIR,
        default: "$XDG_STATE_HOME/sparkctl, else ~/.local/state/sparkctl",
        meaning: "deployments, run records, logs (`--state-dir`)",
    },
    Var {
        name: LOCK,
        default: "images.lock beside the recipes dir",
        meaning: "the image lock (`--lock`)",
    },
    Var {
        name: LOG,
        default: "warn (info with -v, debug with -vv)",
        meaning: "sparkctl's log filter on stderr; dependencies stay at info at most",
    },
    Var {
        name: MEMORY_GB,
        default: "the installed memory (MemTotal)",
        meaning: "the memory pool servers and jobs are planned against",
    },
    Var {
        name: MEMORY_RESERVE_GB,
        default: "8",
        meaning: "left to the OS; no start may push available memory under it (the floor)",
    },
    Var {
        name: PRODUCTION_PORT,
        default: "8003",
        meaning: "the port the front door serves production on",
    },
    Var {
        name: KEEP_EXITED,
        default: "5",
        meaning: "exited containers kept per recipe (`prune`, and before each start)",
    },
    Var {
        name: KEEP_IMAGES,
        default: "3",
        meaning: "newest image digests kept per recipe beyond those retained (`prune`)",
    },
    Var {
        name: BANDWIDTH_GBPS,
        default: "the GPUs' own figure",
        meaning: "this machine's memory bandwidth in GB/s, for the benchmark's roofline",
    },
    Var {
        name: FRONTDOOR_HOST,
        default: "127.0.0.1",
        meaning: "the address the front door binds (0.0.0.0 for the LAN needs a key)",
    },
    Var {
        name: FRONTDOOR_HOLD,
        default: "2m",
        meaning: "how long a request may wait for a backend",
    },
    Var {
        name: FRONTDOOR_QUEUE,
        default: "256",
        meaning: "requests that may wait at once",
    },
    Var {
        name: FRONTDOOR_DRAIN,
        default: "2m",
        meaning: "how long a switch lets the old backend's streams finish",
    },
    Var {
        name: WARM_GRACE,
        default: "10m",
        meaning: "how long a replaced production stays warm for an instant rollback (0s: none)",
    },
    Var {
        name: FRONTDOOR_CONNECTIONS,
        default: "what the open-file limit allows",
        meaning: "client connections at once; more wait in the kernel's backlog",
    },
    Var {
        name: FRONTDOOR_NAMES,
        default: "none (the machine's own name is always one)",
        meaning: "host names the front door answers to, comma-separated",
    },
    Var {
        name: FRONTDOOR_ORIGINS,
        default: "none (only the front door's own page)",
        meaning: "web page origins (scheme://host:port) that may call the API, comma-separated",
    },
    Var {
        name: FRONTDOOR_SEND_TIMEOUT,
        default: "60s",
        meaning: "how long a client may leave an answer unread before it is cut",
    },
    Var {
        name: FRONTDOOR_API_KEY,
        default: "none",
        meaning: "the door's own key, an admin's (client keys: `sparkctl keys`)",
    },
    Var {
        name: FRONTDOOR_API_KEY_FILE,
        default: "none",
        meaning: "a file (mode 600) whose first line is that key",
    },
    Var {
        name: FRONTDOOR_PAGE,
        default: "on",
        meaning: "`off`: no live page, nothing sampled for it (to measure its cost)",
    },
    Var {
        name: FRONTDOOR_QUALITY,
        default: "on",
        meaning: "`off`: no live quality classifier (to measure its cost)",
    },
    Var {
        name: NVIDIA_SMI,
        default: "nvidia-smi",
        meaning: "the nvidia-smi to run (tests point it at a stand-in)",
    },
    Var {
        name: CHOWN_HELPER,
        default: "as needed",
        meaning: "`always`: change owners through the helper container even as root",
    },
];

/// The variables as `sparkctl --help` (and so the man page) lists them, after the options.
pub(crate) fn help() -> String {
    let rows: Vec<String> = VARS
        .iter()
        .map(|v| {
            format!(
                "  {} [default: {}]\n          {}",
                v.name, v.default, v.meaning
            )
        })
        .collect();
    format!("Environment:\n{}", rows.join("\n"))
}
