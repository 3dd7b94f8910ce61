//! Jobs end to end on the real Docker Engine: busybox containers (Debian's static busybox
//! in a FROM-scratch image) write into real output dirs; the real sparkctl binary starts,
//! follows, stops and finalizes them (tests/job_lineage.rs: what `up` makes of a job's outputs).
//!
//! The suite runs as root, so most tests set "the invoking user" the way sudo sets it
//! (SUDO_UID/SUDO_GID); one runs sparkctl as a plain user for real (setpriv to uid 4321 with
//! the docker socket's group). Both prove the outputs end owned by that uid — given back
//! after a root container wrote them, or written by a container running as it.

mod jobs_support;
mod support;

use std::process::Stdio;
use std::time::Duration;

use jobs_support::*;
use serde_json::Value;
use support::text;

#[test]
fn a_root_job_leaves_outputs_owned_by_the_invoking_user() {
    let j = Jobs::new("job-owner");
    let script =
        "id -u > /out/written-by && mkdir -p /out/sub && echo w > /out/sub/weights && echo done";
    j.job("as-root", script, "user: root\n");
    // As root sparkctl chowns directly; the helper container (the job's own image) is what
    // a non-root sparkctl uses: force it, so that path is the one proven here.
    let out = j
        .cmd(&["run", "as-root"])
        .env("SPARKCTL_CHOWN_HELPER", "always")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("job as-root succeeded"), "{stdout}");
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

    // Left to its default, the container runs as the invoking user and writes as it; a
    // secret from the host reaches it and nothing sparkctl writes or prints.
    const SECRET: &str = "hf_secret_value_4321";
    j.job(
        "as-user",
        "id -u > /out/written-by && echo \"$JOB_TOKEN\" > /out/token",
        "env_from_host: [JOB_TOKEN]\n",
    );
    let dry = j
        .cmd(&["run", "as-user", "--dry-run"])
        .env("JOB_TOKEN", SECRET)
        .output()
        .unwrap();
    assert!(
        text(&dry.stdout).contains("-e JOB_TOKEN "),
        "{}",
        text(&dry.stdout)
    );
    let out = j
        .cmd(&["run", "as-user"])
        .env("JOB_TOKEN", SECRET)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains(SECRET) && !text(&out.stderr).contains(SECRET));
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
        "    expect:\n      - expect-files: {files: [shard-100]}\nprogress: 'step (\\d+)/(\\d+)'\n",
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
    let mut cli = j
        .cmd(&["run", "forever"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dir = j.out_dir("forever-out");
    // Its output as it comes: once ticks are printed, the CLI is following (and listening
    // for Ctrl-C).
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (seen, mut pipe) = (seen.clone(), cli.stdout.take().unwrap());
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
    unsafe { libc::kill(cli.id() as i32, libc::SIGINT) };
    let out = cli.wait_with_output().unwrap();
    reader.join().unwrap();
    let stdout = seen.lock().unwrap().clone();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
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
    let follower = j
        .cmd(&["logs", "forever", "-f"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));

    let dry = j.ok(&["stop", "forever", "--dry-run"]);
    assert!(dry.contains("would stop job forever"), "{dry}");
    assert_eq!(j.latest("forever")["state"], "running");
    let stopped = j.ok(&["stop", "forever", "--grace", "5s"]);
    assert!(stopped.contains("job forever stopped"), "{stopped}");
    assert!(stopped.contains("sparkctl stop"), "{stopped}");
    let followed = follower.wait_with_output().unwrap();
    let followed = text(&followed.stdout);
    assert!(
        followed.contains("got TERM"),
        "the follower saw the end: {followed}"
    );
    let rec = j.latest("forever");
    assert_eq!(rec["state"], "stopped");
    assert!(dir.join(".sparkctl-incomplete.json").exists());
    assert!(container_exists(rec["container"].as_str().unwrap()));
    let again = j.run(&["stop", "forever"]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));
}

#[test]
fn an_oom_like_exit_is_named() {
    let j = Jobs::new("job-oom");
    j.job(
        "quantize",
        "echo 'Inserted 843 quantizers'; echo 'torch.OutOfMemoryError: CUDA out of memory.'; exit 137",
        "",
    );
    let out = j.run(&["run", "quantize"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("job quantize failed"), "{stdout}");
    assert!(stdout.contains("out of memory (OOM)"), "{stdout}");
    assert!(
        stdout.contains("sparkctl down NAME"),
        "the known line's fix: {stdout}"
    );
    assert!(stdout.contains("marked incomplete"), "{stdout}");
    // A damaged record is named and left alone; the others still list.
    let bad = j.deck.dir.join("state/jobs/20000101-000000000-dead.json");
    std::fs::write(&bad, "{broken").unwrap();
    let listed = j.run(&["jobs"]);
    assert_eq!(listed.status.code(), Some(0));
    assert!(text(&listed.stdout).contains("quantize"));
    assert!(
        text(&listed.stderr).contains("dead.json is damaged"),
        "{}",
        text(&listed.stderr)
    );
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), "{broken");
}

#[test]
fn the_free_disk_check_refuses_before_anything_starts() {
    let j = Jobs::new("job-disk");
    j.job("huge", "echo never", "    size: 900t\n");
    let out = j.run(&["run", "huge"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("outputs[0]") && stderr.contains("free"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was started"), "{stderr}");
    assert!(!j.out_dir("huge-out").exists(), "no output dir was created");
    // An image without a pin in images.lock does not run, unless asked (and recorded).
    std::fs::write(
        j.deck.dir.join("recipes/jobs/loose.yaml"),
        format!(
            "name: loose\nimage: {}\nargv: [\"true\"]\noutputs:\n  - {{path: {}, mount: /out}}\n",
            support::busybox_image(),
            j.out_dir("loose-out").display()
        ),
    )
    .unwrap();
    let unpinned = j.run(&["run", "loose"]);
    assert_eq!(unpinned.status.code(), Some(2));
    assert!(text(&unpinned.stderr).contains("no pin in images.lock"));
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
fn the_container_gets_the_recipes_workdir_ulimits_shm_and_ipc_and_gpus_are_checked_first() {
    let j = Jobs::new("job-settings");
    let input = j.deck.dir.join("weights");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("w.bin"), "weights").unwrap();
    j.job(
        "settings",
        "pwd > /out/cwd; ulimit -n > /out/nofile; df -k /dev/shm | tail -n 1 > /out/shm; \
         if echo x > /in/w.bin; then echo writable; else echo read-only; fi > /out/input",
        &format!(
            "workdir: /out\nulimits: {{nofile: 4096}}\nshm_size: 64m\nipc: shareable\n\
             inputs:\n  - {{path: {}, mount: /in}}\n",
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

    // This engine has no NVIDIA runtime: a GPU job is refused before anything exists.
    j.job("gpu", "echo never", "gpus: all\n");
    let out = j.run(&["run", "gpu"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no `nvidia` runtime"), "{stderr}");
    assert!(!j.out_dir("gpu-out").exists());
}

/// `sparkctl ARGS` run as uid 4321 for real (setpriv, with the docker socket's group): no
/// root, no SUDO_UID — the way a user in the docker group runs it.
fn as_plain_user(j: &Jobs, args: &[&str]) -> std::process::Output {
    use std::os::unix::fs::MetadataExt;
    let docker_gid = std::fs::metadata("/var/run/docker.sock").unwrap().gid();
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
        .env_remove("SPARKCTL_CHOWN_HELPER")
        .output()
        .unwrap()
}

#[test]
fn a_plain_user_s_root_job_leaves_outputs_owned_by_that_user() {
    let j = Jobs::new("job-plain-user");
    j.job(
        "as-root",
        "id -u > /out/written-by && mkdir /out/sub && echo w > /out/sub/weights",
        "user: root\n",
    );
    j.job("as-me", "id -u > /out/written-by", "");
    // Everything of this deck belongs to the plain user, as it would in their home.
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{UID}:{UID}")])
        .arg(&j.deck.dir)
        .status()
        .unwrap();
    assert!(chown.success());

    let out = as_plain_user(&j, &["run", "as-root"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let dir = j.out_dir("as-root-out");
    assert_eq!(
        std::fs::read_to_string(dir.join("written-by"))
            .unwrap()
            .trim(),
        "0"
    );
    // Given back through the helper container (a plain user cannot chown root's files).
    for (path, uid, gid) in owners(&dir) {
        assert_eq!((uid, gid), (UID, UID), "{path} is not the user's");
    }
    assert!(
        stdout.contains("gave 3 path(s) back to 4321:4321"),
        "{stdout}"
    );

    let out = as_plain_user(&j, &["run", "as-me"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
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
