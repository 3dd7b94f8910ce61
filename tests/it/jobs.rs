//! Jobs end to end on the real Docker Engine: busybox containers (Debian's static busybox
//! in a FROM-scratch image) write into real output dirs; the real sparkctl binary starts,
//! follows, stops and finalizes them (tests/it/job_lineage.rs: what `up` makes of a job's outputs).
//!
//! The suite runs as root, so most tests set "the invoking user" the way sudo sets it
//! (SUDO_UID/SUDO_GID); one runs sparkctl as a plain user for real (setpriv to uid 4321 with
//! the docker socket's group). Both prove the outputs end owned by that uid — given back
//! after a root container wrote them, or written by a container running as it.

use std::time::Duration;

use serde_json::Value;

use crate::jobs_support::*;
use crate::support::{self, Ran};

#[test]
fn a_root_job_leaves_outputs_owned_by_the_invoking_user() {
    let j = Jobs::new("job-owner");
    let script =
        "id -u > /out/written-by && mkdir -p /out/sub && echo w > /out/sub/weights && echo done";
    j.job("as-root", script, "user: root\n");
    // As root sparkctl chowns directly; the helper container (the job's own image) is what
    // a non-root sparkctl uses: force it, so that path is the one proven here.
    Ran::of(
        j.cmd(&["run", "as-root"])
            .env("SPARKCTL_CHOWN_HELPER", "always"),
    )
    .succeeds()
    .says("job as-root succeeded");
    let dir = j.out_dir("as-root-out");
    assert_eq!(
        std::fs::read_to_string(dir.join("written-by"))
            .unwrap()
            .trim(),
        "0"
    );
    for (path, uid, gid) in owners(&dir) {
        assert_eq!((uid, gid), (UID, UID), "{path} is not the invoking user's");
    }
    let rec = j.latest("as-root");
    assert_eq!(rec["state"], "succeeded");
    assert!(rec["chowned"].as_u64().unwrap() >= 3, "{rec}");
    assert!(!dir.join(".sparkctl-incomplete.json").exists());
}

/// Left to its default, the container runs as the invoking user and writes as it; a secret
/// from the host reaches it and nothing sparkctl writes or prints.
#[test]
fn a_job_runs_as_the_invoking_user_and_its_host_secret_is_never_written() {
    let j = Jobs::new("job-as-user");
    const SECRET: &str = "hf_secret_value_4321";
    j.job(
        "as-user",
        "id -u > /out/written-by && echo \"$JOB_TOKEN\" > /out/token",
        "env_from_host: [JOB_TOKEN]\n",
    );
    Ran::of(
        j.cmd(&["run", "as-user", "--dry-run"])
            .env("JOB_TOKEN", SECRET),
    )
    .succeeds()
    .says("-e JOB_TOKEN ")
    .never_says(SECRET);
    Ran::of(j.cmd(&["run", "as-user"]).env("JOB_TOKEN", SECRET))
        .succeeds()
        .never_says(SECRET);
    let dir = j.out_dir("as-user-out");
    assert_eq!(
        std::fs::read_to_string(dir.join("token")).unwrap().trim(),
        SECRET
    );
    for e in std::fs::read_dir(j.deck.dir.join("state/jobs")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            assert!(
                !std::fs::read_to_string(&p).unwrap().contains(SECRET),
                "{}",
                p.display()
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("written-by"))
            .unwrap()
            .trim(),
        UID.to_string()
    );
    for (path, uid, _) in owners(&dir) {
        assert_eq!(uid, UID, "{path}");
    }
    assert_eq!(j.latest("as-user")["chowned"], 0);
}

#[test]
fn a_job_killed_midway_keeps_its_logs_and_marks_its_partial_outputs() {
    let j = Jobs::new("job-killed");
    let script = "i=0; while [ $i -lt 100 ]; do i=$((i+1)); echo \"step $i/100\"; echo part > /out/shard-$i; sleep 0.2; done";
    j.job(
        "train",
        script,
        r#"    expect:
      - expect-files: {files: [shard-100]}
progress: 'step (\d+)/(\d+)'
"#,
    );
    j.ok(&["run", "train", "--detach"]);
    let dir = j.out_dir("train-out");
    j.wait_for("a few shards", Duration::from_secs(20), || {
        dir.join("shard-3").exists()
    });
    let rec = j.latest("train");
    assert_eq!(rec["state"], "running");
    // Progress from the log, by the recipe's pattern.
    assert!(rec["progress"][1] == 100, "{rec}");
    assert!(j.ok(&["jobs"]).contains("/100"));
    let id = rec["container"].as_str().unwrap().to_string();
    // Killed from outside, as the kernel's OOM killer or a `docker kill` would.
    let kill = id.clone();
    support::block_on(async move {
        support::docker()
            .await
            .kill_container(
                &kill,
                None::<bollard::query_parameters::KillContainerOptions>,
            )
            .await
            .unwrap()
    });
    j.wait_for("the finalize", Duration::from_secs(20), || {
        j.latest("train")["state"] != "running"
    });
    let rec = j.latest("train");
    assert_eq!(rec["state"], "failed", "{rec}");
    let why = rec["explanation"].as_str().unwrap();
    assert!(why.contains("137") && why.contains("SIGKILL"), "{why}");
    // Partial outputs: marked, no fingerprint, the shards left as they were.
    assert!(dir.join(".sparkctl-incomplete.json").exists());
    assert!(rec["outputs"][0]["fingerprint"].is_null());
    assert_eq!(rec["outputs"][0]["incomplete"], true);
    assert!(!dir.join("shard-100").exists() && dir.join("shard-3").exists());
    // The logs: copied into the run, and the container kept.
    let log = std::fs::read_to_string(rec["log"].as_str().unwrap()).unwrap();
    assert!(log.contains("step 3/100"), "{log}");
    assert!(container_exists(&id), "the container is never auto-removed");
    let logs = j.ok(&["logs", "train"]);
    assert!(logs.contains("step 3/100"), "{logs}");
}

#[test]
fn a_detached_job_outlives_the_cli_and_is_listed_followed_and_stopped() {
    let j = Jobs::new("job-detach");
    // The count is renamed into place: a reader never sees the file truncated mid-write.
    let script = "trap 'echo got TERM; exit 143' TERM; i=0; while true; do i=$((i+1)); echo \"tick $i\"; echo $i > /out/last.new; mv /out/last.new /out/last; sleep 0.2; done";
    j.job("forever", script, "");
    let mut cli = Ran::spawn(&mut j.cmd(&["run", "forever"]));
    let dir = j.out_dir("forever-out");
    // Its output as it comes: once ticks are printed, the CLI is following (and listening
    // for Ctrl-C).
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (seen, mut pipe) = (seen.clone(), cli.child.stdout.take().unwrap());
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    j.wait_for("the CLI following", Duration::from_secs(20), || {
        seen.lock().unwrap().contains("tick 2")
    });
    // Ctrl-C at the CLI: it detaches; the job keeps running.
    cli.interrupt();
    let ran = cli.wait();
    reader.join().unwrap();
    let stdout = seen.lock().unwrap().clone();
    assert_eq!(ran.code(), Some(0), "{stdout}{}", ran.stderr());
    assert!(stdout.contains("keeps running, detached"), "{stdout}");
    let before: u64 = std::fs::read_to_string(dir.join("last"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let after: u64 = std::fs::read_to_string(dir.join("last"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(after > before, "still running after the CLI exited");

    let table = j.ok(&["jobs"]);
    assert!(
        table.contains("forever") && table.contains("running"),
        "{table}"
    );
    assert!(j.ok(&["logs", "forever", "--tail", "2"]).contains("tick"));
    let follower = Ran::spawn(&mut j.cmd(&["logs", "forever", "-f"]));
    std::thread::sleep(Duration::from_secs(1));

    let dry = j.ok(&["stop", "forever", "--dry-run"]);
    assert!(dry.contains("would stop job forever"), "{dry}");
    assert_eq!(j.latest("forever")["state"], "running");
    let stopped = j.ok(&["stop", "forever", "--grace", "5s"]);
    assert!(stopped.contains("job forever stopped"), "{stopped}");
    assert!(stopped.contains("sparkctl stop"), "{stopped}");
    // The follower saw the end.
    follower.wait().succeeds().says("got TERM");
    let rec = j.latest("forever");
    assert_eq!(rec["state"], "stopped");
    assert!(dir.join(".sparkctl-incomplete.json").exists());
    assert!(container_exists(rec["container"].as_str().unwrap()));
    j.sparkctl(&["stop", "forever"]).exits(2);
}

#[test]
fn an_oom_like_exit_is_named() {
    let j = Jobs::new("job-oom");
    j.job(
        "quantize",
        "echo 'Inserted 843 quantizers'; echo 'torch.OutOfMemoryError: CUDA out of memory.'; exit 137",
        "",
    );
    j.sparkctl(&["run", "quantize"])
        .exits(1)
        .says("job quantize failed")
        .says("out of memory (OOM)")
        // The known line's fix.
        .says("sparkctl down NAME")
        .says("marked incomplete");
}

#[test]
fn a_damaged_job_record_is_named_and_left_alone_and_the_others_still_list() {
    let j = Jobs::new("job-damaged");
    j.job("quantize", "echo done", "");
    j.sparkctl(&["run", "quantize"]).succeeds();
    let bad = j.deck.dir.join("state/jobs/20000101-000000000-dead.json");
    std::fs::write(&bad, "{broken").unwrap();
    j.sparkctl(&["jobs"])
        .succeeds()
        .says("quantize")
        .warns("dead.json is damaged");
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), "{broken");
}

#[test]
fn the_free_disk_check_refuses_before_anything_starts() {
    let j = Jobs::new("job-disk");
    j.job("huge", "echo never", "    size: 900t\n");
    let stderr = j
        .sparkctl(&["run", "huge"])
        .exits(1)
        .warns("nothing was started")
        .stderr();
    assert!(
        stderr.contains("outputs[0]") && stderr.contains("free"),
        "{stderr}"
    );
    assert!(!j.out_dir("huge-out").exists(), "no output dir was created");
}

/// An image without a pin in images.lock does not run, unless asked (and recorded).
#[test]
fn a_job_image_without_a_pin_runs_only_when_allowed() {
    let j = Jobs::new("job-unpinned");
    std::fs::write(
        j.deck.dir.join("recipes/jobs/loose.yaml"),
        format!(
            r#"name: loose
image: {}
argv: ["true"]
outputs:
  - {{path: {}, mount: /out}}
"#,
            support::busybox_image(),
            j.out_dir("loose-out").display()
        ),
    )
    .unwrap();
    j.sparkctl(&["run", "loose"])
        .exits(2)
        .warns("no pin in images.lock");
    assert!(!j.out_dir("loose-out").exists());
    let runs: Value = serde_json::from_str(&j.ok(&["--json", "jobs"])).unwrap();
    assert_eq!(runs, Value::Array(vec![]), "no run was recorded");
    let state = j.deck.state().display().to_string();
    let none = support::block_on(async move { support::containers_of(&state).await.is_empty() });
    assert!(none, "no container was created");
    j.ok(&["run", "loose", "--allow-unpinned"]);
    assert_eq!(j.latest("loose")["unpinned"], true);
}

#[test]
fn the_container_gets_the_recipes_workdir_ulimits_shm_and_ipc() {
    let j = Jobs::new("job-settings");
    let input = j.deck.dir.join("weights");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("w.bin"), "weights").unwrap();
    j.job(
        "settings",
        "pwd > /out/cwd; ulimit -n > /out/nofile; df -k /dev/shm | tail -n 1 > /out/shm; \
         if echo x > /in/w.bin; then echo writable; else echo read-only; fi > /out/input",
        &format!(
            r#"workdir: /out
ulimits: {{nofile: 4096}}
shm_size: 64m
ipc: shareable
inputs:
  - {{path: {}, mount: /in}}
"#,
            input.display()
        ),
    );
    j.ok(&["run", "settings"]);
    let dir = j.out_dir("settings-out");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert_eq!(read("cwd").trim(), "/out");
    assert_eq!(
        read("input").trim(),
        "read-only",
        "inputs are mounted read-only"
    );
    assert_eq!(
        std::fs::read_to_string(input.join("w.bin")).unwrap(),
        "weights"
    );
    assert_eq!(read("nofile").trim(), "4096");
    assert!(
        read("shm").split_whitespace().nth(1) == Some("65536"),
        "{}",
        read("shm")
    );
    let inspect = j.latest("settings")["container"]
        .as_str()
        .unwrap()
        .to_string();
    let ipc = support::block_on(async move {
        let c = support::docker()
            .await
            .inspect_container(&inspect, None)
            .await
            .unwrap();
        c.host_config.unwrap().ipc_mode.unwrap()
    });
    assert_eq!(ipc.to_string(), "shareable");
}

/// This engine has no NVIDIA runtime: a GPU job is refused before anything exists.
#[test]
fn a_gpu_job_is_refused_before_anything_exists_on_an_engine_without_gpus() {
    let j = Jobs::new("job-gpu");
    j.job("gpu", "echo never", "gpus: all\n");
    j.sparkctl(&["run", "gpu"])
        .exits(1)
        .warns("no `nvidia` runtime");
    assert!(!j.out_dir("gpu-out").exists());
}

/// `sparkctl ARGS` run as uid 4321 for real (setpriv, with the docker socket's group): no
/// root, no SUDO_UID — the way a user in the docker group runs it.
fn as_plain_user(j: &Jobs, args: &[&str]) -> Ran {
    use std::os::unix::fs::MetadataExt;
    let docker_gid = std::fs::metadata("/var/run/docker.sock").unwrap().gid();
    Ran::of(
        std::process::Command::new("setpriv")
            .arg(format!("--reuid={UID}"))
            .arg(format!("--regid={UID}"))
            .arg(format!("--groups={docker_gid}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_sparkctl"))
            .arg("--recipes")
            .arg(j.deck.dir.join("recipes"))
            .args(args)
            .current_dir(&j.deck.dir)
            .env("HOME", &j.deck.dir)
            .env("NO_COLOR", "1")
            .env("SPARKCTL_STATE_DIR", j.deck.dir.join("state"))
            .env("SPARKCTL_MEMORY_GB", "128")
            .env_remove("SUDO_UID")
            .env_remove("SUDO_GID")
            .env_remove("SPARKCTL_RECIPES")
            .env_remove("SPARKCTL_CHOWN_HELPER"),
    )
}

/// The deck handed to the plain user: everything in it belongs to uid 4321, as it would in
/// their home.
fn plain_users_deck(j: Jobs) -> Jobs {
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{UID}:{UID}")])
        .arg(&j.deck.dir)
        .status()
        .unwrap();
    assert!(chown.success());
    j
}

#[test]
fn a_plain_user_s_root_job_leaves_outputs_owned_by_that_user() {
    let j = Jobs::new("job-plain-user");
    j.job(
        "as-root",
        "id -u > /out/written-by && mkdir /out/sub && echo w > /out/sub/weights",
        "user: root\n",
    );
    let j = plain_users_deck(j);
    as_plain_user(&j, &["run", "as-root"])
        .succeeds()
        // Given back through the helper container (a plain user cannot chown root's files).
        .says("gave 3 path(s) back to 4321:4321");
    let dir = j.out_dir("as-root-out");
    assert_eq!(
        std::fs::read_to_string(dir.join("written-by"))
            .unwrap()
            .trim(),
        "0"
    );
    for (path, uid, gid) in owners(&dir) {
        assert_eq!((uid, gid), (UID, UID), "{path} is not the user's");
    }
}

#[test]
fn a_plain_user_s_job_runs_as_that_user() {
    let j = Jobs::new("job-plain-user-as-me");
    j.job("as-me", "id -u > /out/written-by", "");
    let j = plain_users_deck(j);
    as_plain_user(&j, &["run", "as-me"]).succeeds();
    let dir = j.out_dir("as-me-out");
    assert_eq!(
        std::fs::read_to_string(dir.join("written-by"))
            .unwrap()
            .trim(),
        UID.to_string(),
        "by default the container runs as the invoking user"
    );
    for (path, uid, _) in owners(&dir) {
        assert_eq!(uid, UID, "{path}");
    }
}
