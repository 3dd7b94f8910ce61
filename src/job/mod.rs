//! Jobs: one-shot container runs (quantize, train, export, convert) with a pinned image,
//! inputs read-only, outputs owned by the invoking user, logs kept, outputs verified and
//! fingerprinted, and a lineage a serving recipe can name (`model.produced_by`).
//!
//! `recipe` is the file format, `load` finds and checks recipe files, `run` the checks and the start, `finalize` what happens
//! once the container ends, `lineage` what `up` asks of a model's producer.

mod check;
pub(crate) mod container;
pub(crate) mod fatal;
pub(crate) mod finalize;
pub(crate) mod lineage;
pub(crate) mod load;
pub(crate) mod progress;
pub(crate) mod recipe;
pub(crate) mod record;
pub(crate) mod run;

use std::time::Duration;

use bollard::query_parameters::StopContainerOptionsBuilder;
use futures_util::StreamExt;

use crate::error::{Error, Result};
use crate::runtime::{LineBuffer, LogSink, LogView};
use crate::state::StateDir;
pub(crate) use record::{JobRecord, JobState};

/// What following a job ended with.
#[derive(Debug)]
pub(crate) enum Followed {
    /// The container ended; the run is finalized.
    Ended(JobRecord),
    /// Ctrl-C: the job keeps running, detached.
    Detached(JobRecord),
}

/// What a follower sees.
pub(crate) enum FollowEvent<'a> {
    Line(&'a str),
    /// The recipe's progress pattern matched: (done, total).
    Progress(u64, u64),
}

/// The job runs of one state dir on one engine: what `stop`, `logs`, `jobs` and the
/// memory plan work on.
pub(crate) struct Runs<'a> {
    pub(crate) docker: &'a bollard::Docker,
    pub(crate) state: &'a StateDir,
}

impl<'a> Runs<'a> {
    /// The runs of the context's state dir on its Docker Engine (an error without one).
    pub(crate) fn of(ctx: &'a crate::context::Context) -> Result<Runs<'a>> {
        Ok(Runs {
            docker: ctx.runtimes.docker()?.client(),
            state: &ctx.state,
        })
    }

    /// Streams the job's output until its container ends (then finalizes it) or Ctrl-C
    /// (then leaves it running). `tail`: lines of the past to show first (None: all).
    pub(crate) async fn follow(
        &self,
        rec: JobRecord,
        tail: Option<usize>,
        on: &mut (dyn FnMut(FollowEvent) + Send),
    ) -> Result<Followed> {
        let pattern = progress::Progress::new(rec.recipe.progress.as_deref());
        let view = LogView { tail, follow: true };
        let opts = crate::runtime::docker::log_options(view);
        let mut stream = self.docker.logs(&rec.container, Some(opts));
        let mut buf = LineBuffer::default();
        let streamed = async {
            while let Some(chunk) = stream.next().await {
                let Ok(chunk) = chunk else { break };
                for line in buf.push(&chunk.into_bytes()) {
                    on(FollowEvent::Line(&line));
                    if let Some((done, total)) = pattern.as_ref().and_then(|p| p.read(&line)) {
                        on(FollowEvent::Progress(done, total));
                    }
                }
            }
        };
        tokio::select! {
            () = streamed => {}
            _ = tokio::signal::ctrl_c() => return Ok(Followed::Detached(rec)),
        }
        // The stream also ends when the engine restarts: only an ended container finalizes.
        let rec = finalize::finalize(self.docker, self.state, rec).await?;
        Ok(if rec.state.is_final() {
            Followed::Ended(rec)
        } else {
            Followed::Detached(rec)
        })
    }

    /// The newest run of `job`, finalized if its container has ended.
    pub(crate) async fn latest(&self, job: &str) -> Result<JobRecord> {
        let rec = record::latest(self.state, job)?.ok_or_else(|| Error::NoSuch {
            what: crate::error::Thing::JobRun,
            name: job.to_string(),
            hint: crate::error::Hint::RunJob {
                job: job.to_string(),
            },
        })?;
        finalize::finalize(self.docker, self.state, rec).await
    }

    /// `sparkctl stop JOB`: SIGTERM, SIGKILL after `grace`; the container, its logs and the
    /// partial outputs (marked incomplete) stay.
    pub(crate) async fn stop(&self, job: &str, grace: Duration) -> Result<JobRecord> {
        let _state_lock = self.state.lock(&format!("stop {job}"))?;
        let mut rec = self.latest(job).await?;
        if rec.state.is_final() {
            return Err(Error::Stopped(crate::error::Gone::Job {
                job: job.to_string(),
                run: rec.run_id.clone(),
                state: rec.state.to_string(),
            }));
        }
        if !container::is_ours(self.docker, &rec.container, &self.state.id(), job).await {
            return Err(Error::Refused(crate::error::Refusal::ForeignJobContainer {
                container: rec.container_name.clone(),
                job: job.to_string(),
            }));
        }
        // Recorded first, so the SIGKILL that may follow is not blamed on memory.
        rec.stop_requested = true;
        rec.save(self.state)?;
        let opts = StopContainerOptionsBuilder::new()
            .t(grace.as_secs().max(1) as i32)
            .build();
        match self.docker.stop_container(&rec.container, Some(opts)).await {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 304, ..
            }) => {}
            Err(e) => {
                return Err(crate::runtime::docker::engine_error(
                    &format!("stopping job {job}"),
                    e,
                ))
            }
        }
        let _ = self
            .docker
            .wait_container(&rec.container, None)
            .next()
            .await;
        finalize::finalize(self.docker, self.state, rec).await
    }

    /// `sparkctl logs JOB`: the container's output while the engine has it, else the copy in
    /// the run record.
    pub(crate) async fn logs(
        &self,
        job: &str,
        view: LogView,
        out: &mut LogSink,
    ) -> Result<JobRecord> {
        let LogView {
            tail,
            follow: follow_it,
        } = view;
        let rec = self.latest(job).await?;
        let write = |out: &mut LogSink, bytes: &[u8]| {
            out.write_all(bytes)
                .and_then(|_| out.flush())
                .map_err(|e| Error::io("cannot write the logs", e))
        };
        if !rec.state.is_final() && follow_it {
            let mut failed = None;
            let mut on = |e: FollowEvent| {
                if let (FollowEvent::Line(l), None) = (e, &failed) {
                    if let Err(e) = write(out, format!("{l}\n").as_bytes()) {
                        failed = Some(e);
                    }
                }
            };
            let followed = self.follow(rec, tail, &mut on).await?;
            if let Some(e) = failed {
                return Err(e);
            }
            return Ok(match followed {
                Followed::Ended(r) | Followed::Detached(r) => r,
            });
        }
        let bytes = match &rec.log {
            Some(path) => std::fs::read(path)
                .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?,
            None => container::output(self.docker, &rec.container).await?,
        };
        let text = String::from_utf8_lossy(&bytes);
        write(out, crate::runtime::last_lines(&text, tail).as_bytes())?;
        Ok(rec)
    }

    /// The runs whose containers run now (their records as they stand).
    pub(crate) async fn running(&self) -> Vec<JobRecord> {
        let Ok((runs, _)) = record::all(self.state) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for r in runs.into_iter().filter(|r| !r.state.is_final()) {
            if matches!(
                container::ended(self.docker, &r.container).await,
                Ok(Ok(None))
            ) {
                out.push(r);
            }
        }
        out
    }

    /// Running jobs and the memory they declared (GB), for the servers' memory plan.
    pub(crate) async fn running_memory(&self) -> Vec<(String, f64)> {
        self.running()
            .await
            .into_iter()
            .filter_map(|r| Some((r.job, r.recipe.memory_gb?)))
            .collect()
    }
}

/// `sparkctl prune`'s share of jobs: per job, the ended runs beyond the newest `keep` whose
/// containers may go (their output is already copied into the run; records, logs and
/// outputs stay). Never a running one; only containers still carrying this state dir's job
/// labels.
pub(crate) async fn ended_beyond(
    docker: &bollard::Docker,
    state: &StateDir,
    keep: usize,
) -> Result<Vec<JobRecord>> {
    let (runs, _) = record::all(state)?;
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    let mut out = Vec::new();
    for r in runs
        .into_iter()
        .filter(|r| r.state.is_final() && r.log.is_some())
    {
        let n = seen.entry(r.job.clone()).or_default();
        *n += 1;
        if *n > keep && container::is_ours(docker, &r.container, &state.id(), &r.job).await {
            out.push(r);
        }
    }
    Ok(out)
}

/// Whether `name` has job runs in this state dir (so `logs NAME` means the job).
pub(crate) fn has_runs(state: &StateDir, name: &str) -> bool {
    record::latest(state, name).ok().flatten().is_some()
}
