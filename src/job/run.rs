//! `sparkctl run JOB`: every check that can fail cheaply first (image pinned and present,
//! inputs there, outputs writable, free disk, memory), then make room, create the output
//! dirs (owned by the invoking user, marked incomplete), start the container detached, and
//! record the run. Nothing is created or stopped before every check has passed.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::container;
use super::recipe::{host_path, LoadedJob};
use super::record::{InputPrint, JobRecord, JobState, OutputResult};
use crate::context::Context;
use crate::error::{Error, Interruption, Result};
use crate::memory::MemoryPlan;
use crate::patch::owner::Owner;
use crate::progress::Progress;
use crate::runtime::docker::engine_error;

/// How a run may go, and how it talks to people.
pub(crate) struct RunOptions<'a> {
    /// Asked before production is stopped to make room; false refuses.
    pub(crate) confirm: &'a dyn Fn(&str) -> bool,
    pub(crate) progress: &'a dyn Progress,
}

/// One output's free-disk check.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DiskCheck {
    output: PathBuf,
    needs: u64,
    free: u64,
}

impl DiskCheck {
    pub(crate) fn output(&self) -> &Path {
        &self.output
    }

    pub(crate) fn needs(&self) -> u64 {
        self.needs
    }

    pub(crate) fn free(&self) -> u64 {
        self.free
    }
}

/// Everything decided before a job starts; `--dry-run` shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct JobPlan {
    job: String,
    recipe_file: PathBuf,
    recipe_hash: String,
    image_ref: String,
    /// What runs: the pinned digest (or the tag, unpinned).
    image: String,
    image_id: String,
    unpinned: bool,
    /// `UID:GID` the container runs as, and who owns the outputs afterwards.
    user: String,
    owner: Owner,
    command: Vec<String>,
    memory: MemoryPlan,
    production: Option<String>,
    disk: Vec<DiskCheck>,
    #[serde(skip)]
    loaded: LoadedJob,
}

impl JobPlan {
    pub(crate) fn job(&self) -> &str {
        &self.job
    }

    pub(crate) fn recipe_file(&self) -> &Path {
        &self.recipe_file
    }

    pub(crate) fn image_ref(&self) -> &str {
        &self.image_ref
    }

    pub(crate) fn image(&self) -> &str {
        &self.image
    }

    pub(crate) fn unpinned(&self) -> bool {
        self.unpinned
    }

    pub(crate) fn user(&self) -> &str {
        &self.user
    }

    pub(crate) fn owner(&self) -> Owner {
        self.owner
    }

    pub(crate) fn command(&self) -> &[String] {
        &self.command
    }

    pub(crate) fn memory(&self) -> &MemoryPlan {
        &self.memory
    }

    pub(crate) fn disk(&self) -> &[DiskCheck] {
        &self.disk
    }
}

/// Checks everything; changes nothing.
pub(crate) async fn plan(
    ctx: &Context,
    loaded: &LoadedJob,
    allow_unpinned: bool,
) -> Result<JobPlan> {
    let r = &loaded.recipe;
    let (image, pinned, image_id) = resolve_image(ctx, loaded, allow_unpinned).await?;
    refuse_if_running(ctx, &r.name).await?;
    check_inputs(loaded)?;
    let (user, owner) = r.users()?;
    check_outputs_writable(loaded, &user)?;
    let disk = check_disk(loaded)?;
    let (deployments, _) = ctx.runtimes.list().await?;
    // Other running jobs keep what they declared: servers can be stopped, they are not.
    let jobs = super::Runs::of(ctx)?.running_memory().await;
    let jobs_gb: f64 = jobs.iter().map(|(_, gb)| gb).sum();
    let prod = crate::production::Book::current_recipes(&ctx.state);
    let holders = deployments
        .iter()
        .filter(|d| d.running())
        .map(|d| crate::memory::Holder::declared(d, &prod))
        .collect();
    let memory = MemoryPlan::new(
        ctx.settings.memory_budget_gb - jobs_gb,
        r.memory_gb,
        holders,
    );
    if !memory.fits {
        let held: Vec<String> = jobs.iter().map(|(j, gb)| format!("{j} {gb} GB")).collect();
        return Err(Error::DoesNotFit {
            name: r.name.clone(),
            plan: memory.describe(),
            unfit: crate::error::Unfit::JobAlone(held),
        });
    }
    let production = crate::production::Book::load(&ctx.state)
        .ok()
        .and_then(|p| p.top().current.map(|e| e.recipe));
    Ok(JobPlan {
        job: r.name.clone(),
        recipe_file: loaded.path.clone(),
        recipe_hash: r.hash(),
        image_ref: r.image.clone(),
        command: container::equivalent_command(r, &image, &user),
        image,
        image_id,
        unpinned: !pinned,
        user,
        owner,
        memory,
        production,
        disk,
        loaded: loaded.clone(),
    })
}

/// The image that runs (the pinned digest), whether it was pinned, and its id here.
async fn resolve_image(
    ctx: &Context,
    loaded: &LoadedJob,
    allow_unpinned: bool,
) -> Result<(String, bool, String)> {
    let r = &loaded.recipe;
    let docker = ctx.runtimes.docker()?.client();
    let lock = crate::lock::Lock::load(&ctx.lock_path)?.intact()?;
    let (image, pinned) =
        crate::images::run_reference(docker, &r.name, &r.image, &lock, allow_unpinned).await?;
    let image_id = docker
        .inspect_image(&image)
        .await
        .ok()
        .and_then(|i| i.id)
        .ok_or_else(|| Error::ImageMissing {
            image: image.clone(),
            needed: crate::error::ImageNeed::Start {
                recipe: r.name.clone(),
            },
        })?;
    if r.gpus
        .as_ref()
        .is_some_and(|g| *g != crate::recipe::Gpus::None)
        && !ctx.runtimes.docker()?.has_nvidia_runtime().await?
    {
        return Err(Error::NoNvidiaRuntime {
            recipe: r.name.clone(),
            gpus: None,
        });
    }
    Ok((image, pinned, image_id))
}

async fn refuse_if_running(ctx: &Context, job: &str) -> Result<()> {
    let Some(rec) = super::record::latest(&ctx.state, job)? else {
        return Ok(());
    };
    if rec.state != JobState::Running {
        return Ok(());
    }
    let docker = ctx.runtimes.docker()?.client();
    if matches!(container::ended(docker, &rec.container).await?, Ok(None)) {
        return Err(Error::AlreadyRunning(crate::error::Running::Job {
            job: job.to_string(),
            run: rec.run_id.clone(),
        }));
    }
    Ok(())
}

fn check_inputs(loaded: &LoadedJob) -> Result<()> {
    let diags: Vec<_> = loaded
        .recipe
        .inputs
        .iter()
        .enumerate()
        .filter(|(_, i)| !host_path(&i.path).exists())
        .map(|(n, i)| {
            loaded.diagnostic(
                &format!("inputs[{n}].path"),
                format!("input {} does not exist", host_path(&i.path).display()),
                Some("download or create it first, or fix the path".into()),
            )
        })
        .collect();
    if diags.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(diags))
    }
}

/// An existing output dir the container's user could not write fails now, not after an
/// hour of training.
fn check_outputs_writable(loaded: &LoadedJob, user: &str) -> Result<()> {
    let uid: u32 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or(0);
    for (i, o) in loaded.recipe.outputs.iter().enumerate() {
        let path = host_path(&o.path);
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_dir() {
            return Err(Error::Invalid(vec![loaded.diagnostic(
                &format!("outputs[{i}].path"),
                format!("{} exists and is not a directory", path.display()),
                Some("an output is a directory the job writes into".into()),
            )]));
        }
        let writable = uid == 0 || meta.uid() == uid || meta.mode() & 0o002 != 0;
        if !writable {
            return Err(Error::Refused(crate::error::Refusal::OutputNotWritable {
                file: loaded.path.clone(),
                i,
                path: path.to_path_buf(),
                uid: meta.uid(),
                user: user.to_string(),
            }));
        }
    }
    Ok(())
}

/// Free bytes on the filesystem that holds `path` (its nearest existing ancestor).
fn free_bytes(path: &Path) -> Option<(u64, u64)> {
    let mut probe = path.to_path_buf();
    while !probe.exists() {
        if !probe.pop() {
            return None;
        }
    }
    let c = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs fills the struct it is given; the path is a valid C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let dev = std::fs::metadata(&probe).ok()?.dev();
    Some((s.f_bavail as u64 * s.f_frsize as u64, dev))
}

/// Declared output sizes against free space, summed per filesystem.
fn check_disk(loaded: &LoadedJob) -> Result<Vec<DiskCheck>> {
    let mut checks = Vec::new();
    let mut per_fs: Vec<(u64, u64, u64, Vec<String>)> = Vec::new();
    for (i, o) in loaded.recipe.outputs.iter().enumerate() {
        let Some(size) = o.size else { continue };
        let path = host_path(&o.path);
        let Some((free, dev)) = free_bytes(&path) else {
            continue;
        };
        checks.push(DiskCheck {
            output: path.clone(),
            needs: size.0,
            free,
        });
        match per_fs.iter_mut().find(|f| f.0 == dev) {
            Some(f) => {
                f.1 += size.0;
                f.3.push(format!("outputs[{i}]"));
            }
            None => per_fs.push((dev, size.0, free, vec![format!("outputs[{i}]")])),
        }
    }
    if let Some((_, need, free, keys)) = per_fs.iter().find(|f| f.1 > f.2) {
        return Err(Error::Refused(crate::error::Refusal::OutputNoSpace {
            file: loaded.path.clone(),
            keys: keys.clone(),
            need: *need,
            free: *free,
        }));
    }
    Ok(checks)
}

/// Makes room, creates the outputs, starts the container and records the run. The caller
/// holds the state lock.
/// What `run` did: planned only (`dry_run`), or started.
pub(crate) enum Ran {
    Planned(Box<JobPlan>),
    Started(Box<JobRecord>),
}

/// `sparkctl run JOB`: planned under the state lock and, unless `dry_run`, started. The
/// lock goes once the job runs: following it takes as long as the job, and other commands
/// may change state meanwhile.
pub(crate) async fn run(
    ctx: &Context,
    loaded: &LoadedJob,
    allow_unpinned: bool,
    dry_run: bool,
    opts: &RunOptions<'_>,
) -> Result<Ran> {
    let _state_lock = ctx.state.lock(&format!("run {}", loaded.recipe.name))?;
    let plan = plan(ctx, loaded, allow_unpinned).await?;
    if dry_run {
        return Ok(Ran::Planned(Box::new(plan)));
    }
    Ok(Ran::Started(Box::new(start(ctx, &plan, opts).await?)))
}

async fn start(ctx: &Context, plan: &JobPlan, opts: &RunOptions<'_>) -> Result<JobRecord> {
    let r = &plan.loaded.recipe;
    // Read before anything changes: a missing secret refuses the run, not half of it.
    let host_env = host_env(r)?;
    let run_id = crate::state::new_run_id();
    // Hashing a large input may take a while: Ctrl-C then leaves nothing behind.
    let inputs = tokio::select! {
        r = fingerprint_inputs(ctx, r, opts) => r?,
        _ = tokio::signal::ctrl_c() => {
            return Err(Error::Interrupted(Interruption::Fingerprinting {
                job: r.name.clone(),
            }))
        }
    };
    make_room(ctx, plan, opts).await?;
    let mut outputs = Vec::new();
    for o in &r.outputs {
        let path = host_path(&o.path);
        super::finalize::prepare_output(&path, plan.owner, &r.name, &run_id)?;
        outputs.push(OutputResult {
            path,
            checks: Vec::new(),
            fingerprint: None,
            incomplete: true,
        });
    }
    let docker = ctx.runtimes.docker()?.client();
    let state_id = ctx.state.id();
    let spec = container::Spec {
        recipe: r,
        image: &plan.image,
        image_ref: &plan.image_ref,
        run_id: &run_id,
        state_id: &state_id,
        user: &plan.user,
        host_env,
    };
    let name = format!("sparkctl-job-{}-{run_id}", r.name);
    let id = create_and_start(docker, &name, container::body(&spec)).await?;
    let record = started_record(plan, run_id, (id, name), inputs, outputs);
    record.save(&ctx.state)?;
    Ok(record)
}

/// The record of a run whose container (id, name) just started.
fn started_record(
    plan: &JobPlan,
    run_id: String,
    (container, container_name): (String, String),
    inputs: Vec<InputPrint>,
    outputs: Vec<OutputResult>,
) -> JobRecord {
    let r = &plan.loaded.recipe;
    JobRecord {
        run_id,
        job: r.name.clone(),
        recipe_hash: plan.recipe_hash.clone(),
        recipe_file: plan.recipe_file.clone(),
        recipe: r.clone(),
        image: plan.image_ref.clone(),
        image_digest: plan.image_id.clone(),
        unpinned: plan.unpinned,
        container,
        container_name,
        user: plan.user.clone(),
        owner: plan.owner.to_string(),
        started_at: crate::units::now_utc(),
        started_unix: crate::units::unix_now().as_secs(),
        finished_at: None,
        state: JobState::Running,
        exit: None,
        explanation: None,
        findings: Vec::new(),
        inputs,
        outputs,
        log: None,
        chowned: 0,
        stop_requested: false,
        stopped_for_memory: plan.memory.must_stop.clone(),
        warnings: Vec::new(),
        progress: None,
    }
}

/// `NAME=value` for each `env_from_host` name, read from sparkctl's environment now.
fn host_env(r: &super::recipe::JobRecipe) -> Result<Vec<String>> {
    r.env_from_host
        .iter()
        .map(|name| {
            crate::settings::host_var(name)
                .map(|v| format!("{name}={v}"))
                .ok_or_else(|| Error::HostVarUnset {
                    recipe: r.name.clone(),
                    key: "env_from_host",
                    name: name.clone(),
                })
        })
        .collect()
}

async fn fingerprint_inputs(
    ctx: &Context,
    r: &super::recipe::JobRecipe,
    opts: &RunOptions<'_>,
) -> Result<Vec<InputPrint>> {
    let mut inputs = Vec::new();
    for i in &r.inputs {
        let path = host_path(&i.path);
        opts.progress
            .step(&format!("fingerprinting input {}", path.display()));
        let fp = crate::patch::fingerprint_in_background(&path, &ctx.state).await?;
        inputs.push(InputPrint {
            path,
            fingerprint: fp.digest,
        });
    }
    Ok(inputs)
}

async fn create_and_start(
    docker: &bollard::Docker,
    name: &str,
    body: bollard::models::ContainerCreateBody,
) -> Result<String> {
    use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
    let opts = CreateContainerOptionsBuilder::new().name(name).build();
    let created = docker
        .create_container(Some(opts), body)
        .await
        .map_err(|e| engine_error(&format!("creating container {name}"), e))?;
    if let Err(e) = docker.start_container(&created.id, None).await {
        // Never started: it has no logs worth keeping.
        let opts = RemoveContainerOptionsBuilder::new().force(true).build();
        let _ = docker.remove_container(&created.id, Some(opts)).await;
        return Err(engine_error(&format!("starting container {name}"), e));
    }
    Ok(created.id)
}

/// Stops what the memory plan names; production only when confirmed.
async fn make_room(ctx: &Context, plan: &JobPlan, opts: &RunOptions<'_>) -> Result<()> {
    for victim in &plan.memory.must_stop {
        let productions = crate::production::Book::current_recipes(&ctx.state);
        let is_prod = productions.contains(victim);
        if is_prod
            && !(opts.confirm)(&format!(
                "stop production {victim} to make room for job {}? (the production port \
                 answers 503 until `sparkctl rollback`)",
                plan.job
            ))
        {
            return Err(Error::NotConfirmed(crate::error::Unconfirmed::JobSwap {
                job: plan.job.clone(),
                production: victim.to_string(),
            }));
        }
        let Some(d) = ctx.runtimes.find(victim).await?.filter(|d| d.running()) else {
            continue;
        };
        opts.progress.step(&format!(
            "stopping {victim} to make room for job {}",
            plan.job
        ));
        if is_prod {
            leave_front_door(ctx, victim).await?;
        }
        ctx.runtimes.stop(&d, crate::runtime::STOP_GRACE).await?;
        if is_prod {
            opts.progress.step(&format!(
                "production {victim} stopped: `sparkctl rollback` brings it back after the job"
            ));
        }
    }
    Ok(())
}

/// Production leaves the front door before it is stopped (as `down --force` does), so the
/// door's watch does not start it again in the middle of the job; it goes on the rollback
/// stack, and `sparkctl rollback` brings it back.
async fn leave_front_door(ctx: &Context, victim: &str) -> Result<()> {
    let door = crate::frontdoor::Remote::about(&ctx.state, victim);
    let Ok(status) = door.status().await else {
        // No front door runs: nothing watches production.
        return Ok(());
    };
    let mut next = status.production.clone();
    if let Some(mut old) = next.current.take() {
        old.upstream = None;
        next.previous.push(old);
    }
    door.switch(&next, std::time::Duration::from_secs(30))
        .await?;
    Ok(())
}
