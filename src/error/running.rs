//! What runs, or does not, and what sparkctl will not touch: the facts of `Stopped`,
//! `AlreadyRunning`, `NotEnded`, `NotConfirmed`, `Refused` and `PathTaken`, worded here.

use std::fmt;
use std::path::PathBuf;

/// What the command works on, which is not running (`Error::Stopped`).
#[derive(Debug)]
pub enum Gone {
    /// A process sparkctl was to signal.
    Pid { pid: u32 },
    /// A process just started (`artifact`), which ended as it started.
    Ended { artifact: String, pid: u32 },
    /// The candidate `name`, which `how` (its exit) during its benchmark.
    DuringBench { name: String, how: String },
    /// A job whose last run ended (`state`).
    Job {
        job: String,
        run: String,
        state: String,
    },
    /// The front door, which never ran here.
    DoorNeverRan,
    /// The process a recipe was imported from.
    ImportedPid { pid: u32 },
    /// The container a recipe was imported from.
    ImportedContainer { name: String },
    /// A container to import.
    Container { name: String },
}

impl fmt::Display for Gone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gone::Pid { pid } => write!(f, "pid {pid} is not running"),
            Gone::Ended { artifact, pid } => write!(
                f,
                "{artifact} (pid {pid}) is not running; it ended as it started; `sparkctl logs` \
                 shows its output"
            ),
            Gone::DuringBench { name, how } => write!(
                f,
                "{name} is not running; it {how} during the benchmark; see `sparkctl logs {name}`"
            ),
            Gone::Job { job, run, state } => write!(
                f,
                "job {job} (its last run {run} {state}) is not running; nothing to stop"
            ),
            Gone::DoorNeverRan => f.write_str(
                "the front door is not running; it has not run yet: `sparkctl frontdoor start`",
            ),
            Gone::ImportedPid { pid } => write!(
                f,
                "pid {pid}, that the recipe was imported from, is not running; nothing to adopt \
                 (`sparkctl up NAME` serves the recipe behind the front door)"
            ),
            Gone::ImportedContainer { name } => write!(
                f,
                "container {name}, that the recipe was imported from, is not running; nothing \
                 to adopt"
            ),
            Gone::Container { name } => write!(
                f,
                "container {name} is not running; start it, or import its docker run line with \
                 --docker-run"
            ),
        }
    }
}

/// What was asked to start, which already runs; it is left as it is
/// (`Error::AlreadyRunning`).
#[derive(Debug)]
pub enum Running {
    /// A process recipe's server, started meanwhile by another sparkctl (`id`: its pid).
    Process { name: String, id: String },
    /// A deployment of the recipe, serving at `url` since run `run`.
    Deployment {
        name: String,
        runtime: &'static str,
        id: String,
        url: String,
        run: String,
    },
    /// A deployment that reads the model dir something would change (`doing`).
    ReadsModel {
        name: String,
        runtime: &'static str,
        id: String,
        doing: String,
    },
    /// A job's run.
    Job { job: String, run: String },
    /// This state dir's front door, on another port than production's.
    DoorElsewhere {
        pid: u32,
        port: u16,
        production_port: u16,
    },
    /// This state dir's front door; `for_adopt`: in the way of an adoption.
    Door {
        pid: u32,
        port: u16,
        for_adopt: bool,
    },
}

impl fmt::Display for Running {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = crate::units::short_id;
        match self {
            Running::Process { name, id } => write!(
                f,
                "{name} is already running (pid {id}, started meanwhile by another sparkctl); \
                 `sparkctl status` shows it"
            ),
            Running::Deployment {
                name,
                runtime,
                id,
                url,
                run,
            } => write!(
                f,
                "{name} is already running ({runtime} {}, {url}, run {run}); it is left as it \
                 is. `sparkctl down {name}` first, or `sparkctl rollback --to {name}` to route \
                 production to that very instance",
                short(id)
            ),
            Running::ReadsModel {
                name,
                runtime,
                id,
                doing,
            } => write!(
                f,
                "{name} is already running ({runtime} {}); it reads this model dir; `sparkctl \
                 down {name}` before you {doing}",
                short(id)
            ),
            Running::Job { job, run } => write!(
                f,
                "job {job} is already running (run {run}); `sparkctl logs {job} -f` follows it, \
                 `sparkctl stop {job}` ends it"
            ),
            Running::DoorElsewhere {
                pid,
                port,
                production_port,
            } => write!(
                f,
                "the front door of this state dir is already running (pid {pid}, on port {port}, \
                 not the production port {production_port}); `sparkctl frontdoor stop` first, \
                 or set SPARKCTL_PRODUCTION_PORT={port}"
            ),
            Running::Door {
                pid,
                port,
                for_adopt,
            } => {
                write!(
                    f,
                    "a front door of this state dir is already running (pid {pid}, port {port})"
                )?;
                if *for_adopt {
                    f.write_str(
                        "; adopt hands over a port that another server holds, not the front \
                         door's",
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// A process sparkctl stopped that did not end, even after SIGKILL (`Error::NotEnded`).
#[derive(Debug)]
pub enum Stuck {
    /// A deployment's process.
    Server { name: String, pid: u32 },
    /// The process adopt stopped, still holding its port after `secs` (`state`: its state
    /// letter in /proc).
    Adopted { pid: u32, secs: u64, state: char },
}

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stuck::Server { name, pid } => {
                write!(f, "{name} (pid {pid}) did not end after SIGKILL")
            }
            Stuck::Adopted { pid, secs, state } => write!(
                f,
                "pid {pid} did not end after SIGKILL within {secs} s (state {state}: stuck in \
                 the kernel, on a disk or a device); it still holds its port"
            ),
        }
    }
}

/// A step that stops what serves, not confirmed (`Error::NotConfirmed`).
#[derive(Debug)]
pub enum Unconfirmed {
    /// `up NAME` (a swap), which stops `production` first.
    Swap { name: String, production: String },
    /// A job, which stops `production` first to fit.
    JobSwap { job: String, production: String },
    /// `adopt`, which stops the server it takes over (`foreign`, described).
    Adopt { foreign: String },
}

impl fmt::Display for Unconfirmed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unconfirmed::Swap { name, production } => {
                write!(f, "{name} needs production {production} stopped first")
            }
            Unconfirmed::JobSwap { job, production } => {
                write!(f, "job {job} needs production {production} stopped first")
            }
            Unconfirmed::Adopt { foreign } => write!(f, "adopt stops {foreign}"),
        }
    }
}

/// Something sparkctl refused to change or start, before anything was (`Error::Refused`).
#[derive(Debug)]
pub enum Refusal {
    /// A run's records that the state dir cannot take (`why`: the write's error).
    RecordsUnwritable { root: PathBuf, why: String },
    /// A run's records that the state dir has no room for (`free`, `need`: MB).
    NoRoomForRecords { root: PathBuf, free: u64, need: u64 },
    /// A job's container (per its record) without this state dir's labels.
    ForeignJobContainer { container: String, job: String },
    /// A job's output (`outputs[i]` of `file`) that its user cannot write.
    OutputNotWritable {
        file: PathBuf,
        i: usize,
        path: PathBuf,
        uid: u32,
        user: String,
    },
    /// A job's outputs (`keys` of `file`) that declare more than their filesystem holds.
    OutputNoSpace {
        file: PathBuf,
        keys: Vec<String>,
        need: u64,
        free: u64,
    },
    /// A process of another user (`owner`) than this sparkctl's (`me`), for adopt.
    OtherUser { pid: u32, owner: String, me: String },
    /// A process whose user sparkctl cannot read, for adopt.
    UnreadableUser { pid: u32 },
    /// A file a patch would change, read-only (`mode`).
    ReadOnly { path: PathBuf, mode: u32 },
    /// The backups (`missing`, each with `suffix`) a revert needs, under `root`.
    BackupsGone {
        missing: Vec<String>,
        suffix: &'static str,
        root: PathBuf,
    },
}

impl Refusal {
    /// What was left alone: "changed", "started".
    fn left(&self) -> &'static str {
        match self {
            Refusal::OutputNotWritable { .. } | Refusal::OutputNoSpace { .. } => "started",
            _ => "changed",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::RecordsUnwritable { root, why } => write!(
                f,
                "the state dir {} cannot take this run's records ({why}); free some space there \
                 and run it again",
                root.display()
            ),
            Refusal::NoRoomForRecords { root, free, need } => write!(
                f,
                "the state dir {} cannot take this run's records ({free} MB free, {need} MB \
                 needed); free some space there and run it again",
                root.display()
            ),
            Refusal::ForeignJobContainer { container, job } => write!(
                f,
                "container {container} of job {job}'s record does not carry this state dir's \
                 job labels; sparkctl stops only its own containers"
            ),
            Refusal::OutputNotWritable {
                file,
                i,
                path,
                uid,
                user,
            } => write!(
                f,
                "{}: outputs[{i}].path {} belongs to uid {uid} and the job runs as {user}: it \
                 could not write there; `sudo chown -R {user} {}` or choose another path",
                file.display(),
                path.display(),
                path.display()
            ),
            Refusal::OutputNoSpace {
                file,
                keys,
                need,
                free,
            } => write!(
                f,
                "{}: {} declare {} of output but their filesystem has {} free; free space or \
                 point the output elsewhere",
                file.display(),
                keys.join(", "),
                crate::units::ByteSize(*need),
                crate::units::ByteSize(*free)
            ),
            Refusal::OtherUser { pid, owner, me } => write!(
                f,
                "pid {pid} runs as {owner}, and this sparkctl as {me}: adopt stops the server it \
                 hands over and starts it again as it was if anything fails, which only its own \
                 user may do; run `sparkctl adopt` as {owner}"
            ),
            Refusal::UnreadableUser { pid } => write!(
                f,
                "pid {pid} runs as a user sparkctl cannot read, so it cannot be adopted"
            ),
            Refusal::ReadOnly { path, mode } => write!(
                f,
                "{} is read-only (mode {mode:o}); make it writable (`chmod u+w`) if it may be \
                 patched",
                path.display()
            ),
            Refusal::BackupsGone {
                missing,
                suffix,
                root,
            } => {
                let files: Vec<String> = missing.iter().map(|m| format!("{m}{suffix}")).collect();
                write!(
                    f,
                    "the backups of {} in {} are gone, so it cannot be reverted",
                    files.join(", "),
                    root.display()
                )
            }
        }?;
        write!(f, "; nothing was {}", self.left())
    }
}

/// Why a path where sparkctl would write is taken (`Error::PathTaken`).
#[derive(Debug)]
pub enum Taken {
    /// `init`'s place, a file.
    NotADir,
    /// A directory where `init` writes its file `rel`.
    DirWhereFile { rel: String },
    /// An import's recipe that exists.
    Exists,
}

impl fmt::Display for Taken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Taken::NotADir => f.write_str(
                "exists and is not a directory; give `sparkctl init` another place (--dir)",
            ),
            Taken::DirWhereFile { rel } => write!(
                f,
                "is a directory where sparkctl's {rel} goes; move it aside, nothing was written"
            ),
            Taken::Exists => f.write_str(
                "exists; choose another name with --name, or pass --force to replace it",
            ),
        }
    }
}
