//! Issue 25's fault probe of the front door, each fault against the real binary, real
//! processes and real HTTP: clients that give up while held, a production restarted by the
//! watch, the state lock and disk taken, idle connections past the open-file limit, a
//! killed supervisor, long streams through stop, SIGTERM and restart, large bodies — and
//! an `up` that never stops an instance it did not start.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, free_port, http_status, text, Deck, Traffic};

const SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 16\n";
const EVERY: Duration = Duration::from_millis(20);

/// A deck with the suite and a process recipe `name` with these sim args.
pub(crate) fn deck(tag: &str) -> Deck {
    let deck = Deck::new(tag);
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
    deck
}

fn process(deck: &Deck, name: &str, args: &str, extra: &str) {
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [{args}]\n  memory_gb: 7\nhealth:\n  timeout: 30s\nbench:\n  suite: tiny\n{extra}",
            free_port()
        ),
    );
}

/// Production: a process sim that answers at once (2 tokens at 400 a second).
fn quick_prod(deck: &Deck) {
    process(
        deck,
        "prod",
        "--load-time, 300ms, --ttft, 5ms, --token-rate, \"400\", --tokens, \"2\"",
        "",
    );
}

fn door(deck: &Deck) -> Value {
    serde_json::from_str(&deck.ok(&["--json", "frontdoor", "status"])).unwrap()
}

fn history(deck: &Deck) -> Vec<Value> {
    let v: Value = serde_json::from_str(&deck.ok(&["--json", "history"])).unwrap();
    v.as_array().unwrap().clone()
}

fn pid_of(deck: &Deck, name: &str) -> i32 {
    let rec: Value = serde_json::from_slice(
        &std::fs::read(deck.dir.join(format!("state/deployments/{name}.json"))).unwrap(),
    )
    .unwrap();
    rec["process"]["pid"].as_i64().unwrap() as i32
}

/// Waits until `pid` catches SIGINT (`SigCgt` in /proc/PID/status): a SIGINT sent earlier
/// can land between fork and exec, where the test binary's own handler swallows it and
/// the command then runs to its end uninterrupted (seen: an `up` that promoted).
fn catches_sigint(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & (1 << (libc::SIGINT - 1)) != 0);
        if caught {
            return;
        }
        assert!(Instant::now() < deadline, "pid {pid} never caught SIGINT");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
    })
}

fn supervisor(deck: &Deck) -> Value {
    serde_json::from_slice(
        &std::fs::read(deck.dir.join("state/frontdoor/supervisor.json")).unwrap(),
    )
    .unwrap()
}

/// Waits until `what` holds, polling; panics with `why` after `within`.
fn wait_for(within: Duration, why: &str, mut what: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !what() {
        assert!(Instant::now() < deadline, "{why} (within {within:?})");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for a run record of `command` newer than `after` records, returns it.
fn wait_record(deck: &Deck, command: &str, after: usize, within: Duration) -> Value {
    let mut found = None;
    wait_for(within, &format!("no `{command}` record"), || {
        let h = history(deck);
        found = h
            .iter()
            .take(h.len().saturating_sub(after))
            .find(|r| r["command"] == command)
            .cloned();
        found.is_some()
    });
    found.unwrap()
}

/// `n` clients that each send a streamed request and give up after `patience`; how many
/// got a complete answer.
fn clients(url: &str, n: usize, patience: Duration) -> usize {
    let url = url.to_string();
    support::block_on(async move {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(patience)
            .build()
            .unwrap();
        let body = serde_json::json!({
            "model": "any", "max_tokens": 1, "stream": true,
            "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
        });
        let each = (0..n).map(|_| {
            let req = client
                .post(format!("{url}/v1/chat/completions"))
                .json(&body)
                .send();
            async move {
                match req.await {
                    Ok(r) if r.status() == 200 => {
                        r.text().await.is_ok_and(|t| t.contains("[DONE]"))
                    }
                    _ => false,
                }
            }
        });
        futures_util::future::join_all(each)
            .await
            .into_iter()
            .filter(|ok| *ok)
            .count()
    })
}

/// A production that resets one request's connection unread (as a server at its
/// connection limit, or a proxy in front of one, does) and serves on: that request is sent
/// to it again once the watch has looked, never held for another production that does not
/// come. The door's hold is short, so a request held for nothing fails within the test.
#[test]
fn a_request_production_reset_unread_is_sent_to_it_again_once_the_watch_looked() {
    let deck = deck("fd-reset-once");
    let args = format!(
        "--ttft, 5ms, --token-rate, \"400\", --tokens, \"2\", --reset-once-on, {}",
        support::TRAFFIC_AGENT
    );
    process(&deck, "prod", &args, "");
    deck.ok(&["start", "prod"]);
    let mut route = deck.cmd(&["rollback", "--to", "prod"]);
    support::Ran::of(route.env("SPARKCTL_FRONTDOOR_HOLD", "10s")).succeeds();
    let pid = pid_of(&deck, "prod");
    let client = Traffic::impatient(&deck.door_url(), EVERY, Duration::from_secs(30));
    client.answers(30, Duration::from_secs(60));
    let report = client.stop();
    let longest = report.latency_ms.iter().copied().fold(0.0, f64::max);
    println!(
        "reset once: {} answered, {} failed; longest wait {longest:.0} ms",
        report.ok,
        report.failed()
    );
    let logs = deck.ok(&["logs", "prod"]);
    assert!(logs.contains("reset a connection, unread"), "{logs}");
    assert_eq!((report.failed(), report.cut), (0, 0), "{report:?}");
    assert_eq!(pid_of(&deck, "prod"), pid, "the same production serves on");
}

#[test]
fn clients_that_give_up_while_held_free_their_places_for_the_next_restart() {
    let deck = deck("ff-queue");
    process(
        &deck,
        "prod",
        "--load-time, 4s, --ttft, 5ms, --token-rate, \"400\", --tokens, \"2\"",
        "",
    );
    deck.ok(&["rollback", "--to", "prod"]);
    // A restart that takes seconds (a 4 s load) while 300 clients with a 1 s timeout come
    // and go: more than the queue's 256 places.
    unsafe { libc::kill(-pid_of(&deck, "prod"), libc::SIGKILL) };
    let served = clients(&deck.door_url(), 300, Duration::from_secs(1));
    assert_eq!(served, 0, "the restart takes 4 s");
    let s = door(&deck);
    assert_eq!(s["waiting"], 0, "places kept by clients that left: {s}");
    wait_record(&deck, "restart", 0, Duration::from_secs(30));
    // The next restart: every patient client is served once production is back.
    let records = history(&deck).len();
    unsafe { libc::kill(-pid_of(&deck, "prod"), libc::SIGKILL) };
    let served = clients(&deck.door_url(), 40, Duration::from_secs(60));
    assert_eq!(served, 40);
    wait_record(&deck, "restart", records, Duration::from_secs(5));
    assert_eq!(door(&deck)["waiting"], 0);
}

#[test]
fn a_production_the_watch_restarted_never_holds_the_production_port() {
    let deck = deck("ff-cloexec");
    process(&deck, "prod", "--load-time, 200ms", "");
    deck.ok(&["rollback", "--to", "prod"]);
    let first = pid_of(&deck, "prod");
    unsafe { libc::kill(-first, libc::SIGKILL) };
    wait_record(&deck, "restart", 0, Duration::from_secs(20));
    let restarted = pid_of(&deck, "prod");
    assert_ne!(restarted, first);
    // It was started by the front door's server: none of its descriptors is a socket
    // listening on the production port.
    deck.ok(&["frontdoor", "stop"]);
    assert!(
        alive(restarted),
        "production keeps running without the front door"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", deck.door_port)).is_err(),
        "something still holds the production port after `frontdoor stop`"
    );
    let began = Instant::now();
    deck.ok(&["frontdoor", "start"]);
    assert!(began.elapsed() < Duration::from_secs(30));
    assert_eq!(http_status(&deck.door_url(), "/v1/models"), Some(200));
    assert_eq!(door(&deck)["upstream"]["recipe"], "prod");
}

#[test]
fn a_production_killed_while_an_up_holds_the_state_lock_is_held_and_restarted() {
    let deck = deck("ff-lock");
    quick_prod(&deck);
    // A candidate whose load takes long: the `up` holds the state lock all along.
    process(&deck, "cand", "--load-time, 15s", "");
    deck.ok(&["rollback", "--to", "prod"]);
    let mut up = deck
        .cmd(&["up", "cand", "--yes"])
        .env("SPARKCTL_FRONTDOOR_HOLD", "10s")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let cand = deck.dir.join("state/deployments/cand.json");
    wait_for(Duration::from_secs(20), "cand did not start", || {
        cand.exists()
    });
    let client = Traffic::start(&deck.door_url(), EVERY);
    std::thread::sleep(Duration::from_millis(200));
    let first = pid_of(&deck, "prod");
    unsafe { libc::kill(-first, libc::SIGKILL) };
    // Restarted while the `up` still loads its candidate.
    let restart = wait_record(&deck, "restart", 0, Duration::from_secs(10));
    assert_eq!(restart["outcome"], "recovered", "{restart}");
    assert!(up.try_wait().unwrap().is_none(), "the up is still running");
    std::thread::sleep(Duration::from_millis(300));
    let report = client.stop();
    assert_in_flight_only(&report);
    assert!(report.transport_errors.is_empty(), "{report:?}");
    assert_ne!(pid_of(&deck, "prod"), first);
    unsafe { libc::kill(up.id() as i32, libc::SIGINT) };
    let _ = up.wait();
    assert_eq!(door(&deck)["upstream"]["recipe"], "prod");
    assert_eq!(http_status(&deck.door_url(), "/v1/models"), Some(200));
}

#[test]
fn start_then_up_leaves_the_running_instance_alone() {
    let deck = deck("ff-owner");
    process(
        &deck,
        "prod",
        "--load-time, 300ms, --ttft, 5ms, --token-rate, \"400\", --tokens, \"8\"",
        "",
    );
    process(
        &deck,
        "x",
        "--load-time, 300ms, --ttft, 5ms, --token-rate, \"400\", --tokens, \"8\"",
        "",
    );
    deck.ok(&["rollback", "--to", "prod"]);
    deck.ok(&["start", "x"]);
    let by_hand = pid_of(&deck, "x");
    let up = deck.sparkctl(&["up", "x", "--yes"]).exits(1);
    let err = up.stderr();
    assert!(
        err.contains("x is already running") && err.contains("left as it is"),
        "{err}"
    );
    assert!(!err.contains("stopped x"), "{err}");
    assert!(alive(by_hand), "up stopped an instance it did not start");
    assert_eq!(deck.status_of("x").unwrap()["state"], "running");
    // Interrupted at several moments, an `up` of another recipe stops what it started
    // and nothing else.
    process(&deck, "y", "--load-time, 2s", "");
    for wait in [0u64, 300, 1500] {
        let mut child = deck
            .cmd(&["up", "y", "--yes"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        catches_sigint(child.id());
        std::thread::sleep(Duration::from_millis(wait));
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let status = child.wait().unwrap();
        assert!(alive(by_hand), "interrupted after {wait} ms: x was stopped");
        assert_eq!(
            door(&deck)["upstream"]["recipe"],
            "prod",
            "interrupted after {wait} ms ({status}); history: {}",
            deck.ok(&["--json", "history"])
        );
        assert!(
            deck.status_of("y").is_none_or(|y| y["state"] != "running"),
            "the interrupted up left y running"
        );
    }
}

#[test]
fn the_supervisor_killed_leaves_a_server_that_stops_and_restarts() {
    let deck = deck("ff-orphan");
    quick_prod(&deck);
    deck.ok(&["rollback", "--to", "prod"]);
    let first = supervisor(&deck)["pid"].as_i64().unwrap() as i32;
    let client = Traffic::start(&deck.door_url(), EVERY);
    std::thread::sleep(Duration::from_millis(200));
    unsafe { libc::kill(first, libc::SIGKILL) };
    // A new supervisor adopts the running server.
    wait_for(Duration::from_secs(10), "nothing took over", || {
        let s = supervisor(&deck)["pid"].as_i64().unwrap() as i32;
        s != first && alive(s)
    });
    // The server dies too: the new supervisor starts another on the same socket.
    let server = door(&deck)["pid"].as_i64().unwrap() as i32;
    unsafe { libc::kill(server, libc::SIGKILL) };
    wait_for(
        Duration::from_secs(10),
        "the server was not restarted",
        || {
            let out = deck.run(&["--json", "frontdoor", "status"]);
            out.status.success()
                && serde_json::from_slice::<Value>(&out.stdout).unwrap()["pid"] != server
        },
    );
    std::thread::sleep(Duration::from_millis(300));
    let report = client.stop();
    assert_eq!(report.refused(), 0, "{report:?}");
    // Only a request in flight when the server was killed can have failed.
    assert!(report.failed() + report.cut <= 1, "{report:?}");
    assert!(report.ok > 5, "{report:?}");
    let stopped = deck.sparkctl(&["frontdoor", "stop"]).succeeds();
    assert!(
        stopped.stdout().contains("front door stopped"),
        "{}",
        stopped.stdout()
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", deck.door_port)).is_err());
    let s = supervisor_pid_alive(&deck);
    assert!(!s, "a supervisor still runs");
}

fn supervisor_pid_alive(deck: &Deck) -> bool {
    std::fs::read(deck.dir.join("state/frontdoor/supervisor.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["pid"].as_i64())
        .is_some_and(|p| alive(p as i32))
}

/// Streams of 100 tokens at 5 a second (20 s each), `n` at once, on their own threads:
/// how many ended with `[DONE]`, and the errors of the others. `start` returns once every
/// stream has its answer's headers (or failed to): all are in flight.
struct LongStreams(Vec<std::thread::JoinHandle<Result<bool, String>>>);

impl LongStreams {
    fn start(url: &str, n: usize) -> LongStreams {
        let (sent, in_flight) = std::sync::mpsc::channel();
        let streams = LongStreams(
            (0..n)
                .map(|_| {
                    let (url, sent) = (url.to_string(), sent.clone());
                    std::thread::spawn(move || {
                        support::block_on(async move {
                            let client = reqwest::Client::builder().no_proxy().build().unwrap();
                            let body = serde_json::json!({
                                "model": "any", "max_tokens": 100, "stream": true,
                                "messages": [{"role": "user", "content": "Tell me a long story."}],
                            });
                            let r = client
                                .post(format!("{url}/v1/chat/completions"))
                                .json(&body)
                                .send()
                                .await;
                            let _ = sent.send(());
                            let r = r.map_err(|e| format!("{e:?}"))?;
                            let t = r.text().await.map_err(|e| format!("cut: {e:?}"))?;
                            Ok(t.contains("[DONE]") && t.matches("\"content\"").count() >= 100)
                        })
                    })
                })
                .collect(),
        );
        for _ in 0..n {
            in_flight
                .recv_timeout(Duration::from_secs(30))
                .expect("every stream gets its headers within 30 s");
        }
        streams
    }

    fn finish(self) -> (usize, Vec<String>) {
        let mut done = 0;
        let mut errors = Vec::new();
        for h in self.0 {
            match h.join().unwrap() {
                Ok(true) => done += 1,
                Ok(false) => errors.push("incomplete".into()),
                Err(e) => errors.push(e),
            }
        }
        (done, errors)
    }
}

#[test]
fn long_streams_finish_through_stop_sigterm_and_restart() {
    let deck = deck("ff-drain");
    process(
        &deck,
        "prod",
        "--load-time, 300ms, --ttft, 5ms, --token-rate, \"5\", --tokens, \"100\"",
        "",
    );
    deck.ok(&["rollback", "--to", "prod"]);
    // A restart: no connection refused, no stream cut, every request held or answered.
    let streams = LongStreams::start(&deck.door_url(), 4);
    let client = Traffic::start(&deck.door_url(), EVERY);
    client.answers(5, Duration::from_secs(30));
    let before = door(&deck)["pid"].clone();
    deck.ok(&["frontdoor", "restart"]);
    assert_ne!(door(&deck)["pid"], before);
    client.answers(5, Duration::from_secs(30));
    let report = client.stop();
    assert_eq!(report.failed(), 0, "{report:?}");
    assert_eq!(report.cut, 0, "{report:?}");
    assert_eq!(streams.finish(), (4, vec![]), "streams across the restart");
    // SIGTERM to the front door, then `frontdoor stop`: the streams in flight finish.
    for how in ["SIGTERM", "stop"] {
        let streams = LongStreams::start(&deck.door_url(), 4);
        match how {
            "SIGTERM" => {
                let pid = supervisor(&deck)["pid"].as_i64().unwrap() as i32;
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            _ => {
                deck.ok(&["frontdoor", "stop"]);
            }
        }
        assert_eq!(streams.finish(), (4, vec![]), "streams through {how}");
        wait_for(
            Duration::from_secs(30),
            "the front door did not end",
            || !supervisor_pid_alive(&deck),
        );
        deck.ok(&["frontdoor", "start"]);
    }
}

#[test]
fn idle_connections_past_the_open_file_limit_leave_room_for_clients_and_control() {
    let deck = deck("ff-fds");
    quick_prod(&deck);
    // The front door starts with systemd's default limit, soft and hard: 1,024 descriptors.
    let mut cmd = deck.cmd(&["rollback", "--to", "prod"]);
    {
        use std::os::unix::process::CommandExt;
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 1024,
                    rlim_max: 1024,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                Ok(())
            });
        }
    }
    support::Ran::of(&mut cmd).succeeds();
    // This test needs more than 2,000 itself.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", deck.door_port).parse().unwrap();
    let idle: Vec<std::net::TcpStream> = (0..2000)
        .filter_map(|_| std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok())
        .collect();
    assert!(idle.len() > 1024, "{} idle connections", idle.len());
    std::thread::sleep(Duration::from_millis(500));
    // Other clients are served, the control socket answers.
    let began = Instant::now();
    let served = clients(&deck.door_url(), 20, Duration::from_secs(30));
    assert_eq!(served, 20, "after {:?}", began.elapsed());
    let out = deck.run(&["--json", "frontdoor", "status"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    drop(idle);
    let log = std::fs::read_to_string(supervisor(&deck)["log_file"].as_str().unwrap()).unwrap();
    let complaints = log.lines().filter(|l| l.contains("accept on")).count();
    assert!(complaints <= 10, "{complaints} lines about accept:\n{log}");
}

#[test]
fn large_bodies_at_once_stay_within_a_memory_bound_that_is_given_back() {
    let deck = deck("ff-bodies");
    quick_prod(&deck);
    deck.ok(&["rollback", "--to", "prod"]);
    let server = door(&deck)["pid"].as_i64().unwrap() as i32;
    let url = deck.door_url();
    let statuses = support::block_on(async move {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        // A chat request of 20 MB (640 MB for all 32 at once; the bulk in a field the
        // engine skips, so the test waits for the front door, not the simulated prompt);
        // one buffer shared by all of them on this side.
        let body = bytes::Bytes::from(
            serde_json::json!({
                "model": "any", "max_tokens": 1,
                "messages": [{"role": "user", "content": "hi"}],
                "padding": "a".repeat(20 << 20),
            })
            .to_string(),
        );
        let sends = (0..32).map(|_| {
            client
                .post(format!("{url}/v1/chat/completions"))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
        });
        futures_util::future::join_all(sends)
            .await
            .into_iter()
            .map(|r| r.map(|r| r.status().as_u16()).unwrap_or(0))
            .collect::<Vec<u16>>()
    });
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // Over the cap: refused before its body is read.
    {
        use std::io::{Read, Write};
        let mut big = std::net::TcpStream::connect(("127.0.0.1", deck.door_port)).unwrap();
        big.write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
                70 << 20
            )
            .as_bytes(),
        )
        .unwrap();
        let mut head = [0u8; 12];
        big.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 413");
    }
    let (peak, _) = support::memory_of(server.into());
    assert!(peak < 700 << 20, "peak {} MB", peak >> 20);
    std::thread::sleep(Duration::from_secs(3));
    let (_, now) = support::memory_of(server.into());
    assert!(now < 150 << 20, "still {} MB 3 s later", now >> 20);
}

/// One read that a signal meant for another thread of this test binary does not cut short
/// (seen: `Interrupted system call` after 2.8 s, which passed for a closed connection).
fn read_once(stream: &mut std::net::TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[test]
fn a_client_that_sends_its_request_slowly_is_cut_off() {
    use std::io::Write;
    let deck = deck("ff-slow");
    process(&deck, "prod", "--load-time, 300ms", "");
    deck.ok(&["rollback", "--to", "prod"]);
    // Headers that never end: closed after the header timeout (15 s).
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", deck.door_port)).unwrap();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    let began = Instant::now();
    slow.set_read_timeout(Some(Duration::from_secs(40)))
        .unwrap();
    let mut buf = [0u8; 256];
    let n = read_once(&mut slow, &mut buf).unwrap_or(0);
    let took = began.elapsed();
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(
        n == 0 || text(&buf[..n]).contains("408"),
        "{}",
        text(&buf[..n])
    );
    // A body that stops coming: 408 after 15 s without a byte.
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", deck.door_port)).unwrap();
    stalled
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{\"mo",
        )
        .unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(40)))
        .unwrap();
    let began = Instant::now();
    let (n, failed) = match read_once(&mut stalled, &mut buf) {
        Ok(n) => (n, None),
        Err(e) => (0, Some(e)),
    };
    assert!(
        text(&buf[..n]).starts_with("HTTP/1.1 408"),
        "after {:?}: {:?} {failed:?}",
        began.elapsed(),
        text(&buf[..n])
    );
    assert_eq!(http_status(&deck.door_url(), "/v1/models"), Some(200));
}

#[test]
fn a_production_killed_on_a_full_state_disk_is_restarted_and_recorded_later() {
    let deck = deck("ff-enospc");
    quick_prod(&deck);
    deck.ok(&["rollback", "--to", "prod"]);
    deck.ok(&["frontdoor", "stop"]);
    let disk = support::disk::StateDisk::mount(&deck, false);
    deck.ok(&["frontdoor", "start"]);
    disk.fill();
    let client = Traffic::start(&deck.door_url(), EVERY);
    std::thread::sleep(Duration::from_millis(200));
    let first = pid_of(&deck, "prod");
    unsafe { libc::kill(-first, libc::SIGKILL) };
    // Back without a byte written: what it could not record waits in memory.
    wait_for(
        Duration::from_secs(15),
        "production was not restarted",
        || {
            let s = door(&deck);
            s["upstream"]["recipe"] == "prod" && s["pending_writes"].as_u64() > Some(0)
        },
    );
    assert_eq!(
        pid_of(&deck, "prod"),
        first,
        "the record on disk is the old one still"
    );
    std::thread::sleep(Duration::from_millis(300));
    let report = client.stop();
    assert_in_flight_only(&report);
    assert_eq!(http_status(&deck.door_url(), "/v1/models"), Some(200));
    // Room again: the records are written.
    disk.free();
    wait_for(
        Duration::from_secs(10),
        "the records were not written",
        || door(&deck)["pending_writes"] == 0,
    );
    let restarted = pid_of(&deck, "prod");
    assert_ne!(restarted, first);
    assert!(alive(restarted));
    let h = history(&deck);
    assert!(
        h.iter()
            .any(|r| r["command"] == "restart" && r["outcome"] == "recovered"),
        "{h:?}"
    );
    let production: Value =
        serde_json::from_slice(&std::fs::read(deck.dir.join("state/production.json")).unwrap())
            .unwrap();
    assert_eq!(
        production["current"]["upstream"]["deployment"],
        restarted.to_string()
    );
}

#[test]
fn an_up_on_a_full_state_disk_starts_nothing() {
    let deck = deck("ff-upfull");
    process(&deck, "prod", "--load-time, 300ms", "");
    deck.recipe(
        "cand",
        &format!(
            "engine: sim\nruntime: docker\nimage: {}\nserver:\n  port: {}\n  args: [--load-time, 300ms]\n  memory_gb: 7\nbench:\n  suite: tiny\n",
            support::sim_image(),
            free_port()
        ),
    );
    deck.ok(&["images", "pin", "cand"]);
    deck.ok(&["rollback", "--to", "prod"]);
    deck.ok(&["frontdoor", "stop"]);
    let disk = support::disk::StateDisk::mount(&deck, false);
    deck.ok(&["frontdoor", "start"]);
    disk.fill();
    let began = Instant::now();
    let up = deck.sparkctl(&["up", "cand", "--yes"]).exits(1);
    assert!(
        up.stderr().contains("cannot take this run's records")
            && up.stderr().contains("nothing was changed"),
        "{}",
        up.stderr()
    );
    // Refused before any start or benchmark (no container below), so well within 30 s.
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    let state = deck.state().display().to_string();
    let containers = support::block_on(async move { support::containers_of(&state).await.len() });
    assert_eq!(containers, 0, "a candidate was created");
    assert_eq!(door(&deck)["upstream"]["recipe"], "prod");
}

/// The Docker Engine's socket as the front door sees it (DOCKER_HOST): a forwarder to the
/// machine's engine that can go away at once, as a dead dockerd does. The machine's one
/// engine is shared by every test on it and is never stopped.
struct EngineSocket {
    path: std::path::PathBuf,
    gone: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<std::os::unix::net::UnixStream>>>,
}

impl EngineSocket {
    fn start(path: std::path::PathBuf) -> EngineSocket {
        use std::os::unix::net::{UnixListener, UnixStream};
        let real = std::env::var("DOCKER_HOST")
            .ok()
            .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
            .unwrap_or_else(|| "/var/run/docker.sock".into());
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let gone = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (g, c) = (gone.clone(), conns.clone());
        std::thread::spawn(move || {
            while !g.load(std::sync::atomic::Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let Ok(engine) = UnixStream::connect(&real) else {
                    continue;
                };
                let mut pair = c.lock().unwrap();
                pair.push(client.try_clone().unwrap());
                pair.push(engine.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), engine.try_clone().unwrap()),
                    (engine, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        EngineSocket { path, gone, conns }
    }

    fn host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// The engine stops answering: no new connection, every open one cut.
    fn die(&self) {
        self.gone.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::fs::remove_file(&self.path);
        for c in self.conns.lock().unwrap().iter() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for EngineSocket {
    fn drop(&mut self) {
        self.die();
    }
}

#[test]
fn with_the_docker_engine_gone_production_fails_over_to_a_ready_process_fallback() {
    let deck = deck("ff-dockerd");
    let engine = EngineSocket::start(deck.dir.join("docker.sock"));
    quick_prod(&deck);
    deck.recipe(
        "box",
        &format!(
            "engine: sim\nruntime: docker\nimage: {}\nserver:\n  port: {}\n  args: [--load-time, 300ms, --ttft, 5ms, --token-rate, \"400\", --tokens, \"2\"]\n  memory_gb: 7\nhealth:\n  timeout: 30s\nfallback: prod\n",
            support::sim_image(),
            free_port()
        ),
    );
    let on_engine = |args: &[&str]| {
        support::Ran::of(deck.cmd(args).env("DOCKER_HOST", engine.host())).succeeds()
    };
    on_engine(&["images", "pin", "box"]);
    // The fallback runs and answers already; production is the container.
    on_engine(&["start", "prod"]);
    on_engine(&["rollback", "--to", "box"]);
    let box_id = door(&deck)["upstream"]["deployment"]
        .as_str()
        .unwrap()
        .to_string();
    let client = Traffic::start(&deck.door_url(), EVERY);
    std::thread::sleep(Duration::from_millis(300));
    // dockerd dies: its socket stops answering and the container's port goes with it.
    engine.die();
    support::block_on(async move {
        let _ = support::docker().await.kill_container(&box_id, None).await;
    });
    let failover = wait_record(&deck, "failover", 0, Duration::from_secs(60));
    assert_eq!(failover["outcome"], "recovered", "{failover}");
    assert_eq!(door(&deck)["upstream"]["recipe"], "prod");
    std::thread::sleep(Duration::from_millis(300));
    let report = client.stop();
    // Held, never refused: no 503. Only what the container had taken as it died fails:
    // the stream in flight (cut), and a request its dying port took (502, not sent twice;
    // the requests after it wait for the watch's look).
    assert!(report.http_errors.iter().all(|c| *c == 502), "{report:?}");
    assert!(report.failed() + report.cut <= 2, "{report:?}");
    assert!(report.transport_errors.is_empty(), "{report:?}");
    assert_eq!(http_status(&deck.door_url(), "/v1/models"), Some(200));
}

/// An OpenAI-compatible server that closes the connection, without a word, on any chat
/// request carrying `CLOSE-ME` after reading it whole (and appends a line to a file per
/// such request); it answers everything else. A broken engine, scripted.
#[test]
#[ignore = "not a test: the server `a_request_an_upstream_took_is_never_sent_twice` runs"]
fn closing_engine() {
    use std::io::{BufRead, BufReader, Read, Write};
    let args: Vec<String> = std::env::args().collect();
    let Some(at) = args.iter().position(|a| a == "--") else {
        return;
    };
    let port: u16 = args[at + 1].parse().unwrap();
    let count = std::path::PathBuf::from(&args[at + 2]);
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    for conn in listener.incoming().flatten() {
        let count = count.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut conn = conn;
            loop {
                let mut head = String::new();
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    head.push_str(&line);
                    line.clear();
                }
                if head.is_empty() {
                    return;
                }
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                reader.read_exact(&mut body).unwrap();
                if String::from_utf8_lossy(&body).contains("CLOSE-ME") {
                    let mut f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&count)
                        .unwrap();
                    writeln!(f, "taken").unwrap();
                    return;
                }
                let answer = if head.starts_with("GET /v1/models") {
                    r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#
                } else {
                    r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"OK"},"finish_reason":"stop"}]}"#
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
    }
}

#[test]
fn a_request_an_upstream_took_is_never_sent_twice() {
    let deck = deck("ff-replay");
    let count = deck.dir.join("taken.txt");
    let port = free_port();
    deck.recipe(
        "closer",
        &format!(
            "engine: openai\nruntime: process\nbinary: {}\nserver:\n  port: {port}\n  args: [frontdoor_faults::closing_engine, --exact, --ignored, --nocapture, \"--\", \"{port}\", {}]\n  memory_gb: 1\nhealth:\n  timeout: 30s\n",
            std::env::current_exe().unwrap().display(),
            count.display()
        ),
    );
    deck.ok(&["rollback", "--to", "closer"]);
    let url = deck.door_url();
    let (status, text) = support::block_on(async move {
        let r = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(format!("{url}/v1/chat/completions"))
            .json(&serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "CLOSE-ME"}]}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    });
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("not sent again"), "{text}");
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1);
    let metrics = deck.metrics();
    assert!(
        metrics.contains("sparkctl_frontdoor_errors_total{upstream=\"closer\",kind=\"sent\"} 1"),
        "{metrics}"
    );
    // The upstream is still production, and answers the next request.
    assert_eq!(door(&deck)["upstream"]["recipe"], "closer");
}

/// A production killed with SIGKILL cannot answer the request it held at that instant: the
/// door answers that one 502 (it is never sent twice). Every other request is held until the
/// restart and answered. (A cold run on a machine at load 7 caught the one in flight.)
fn assert_in_flight_only(report: &support::TrafficReport) {
    assert!(report.failed() <= 1, "{report:?}");
    assert!(
        report.http_errors.iter().all(|s| *s == 502),
        "only the request in flight may fail, with 502: {report:?}"
    );
    assert!(report.ok > 5, "{report:?}");
}

/// A one-slot production busy with a long answer to a client that did not come through the
/// door (an `eval`, a script on the server's own port): its `/health` answers while the
/// watch's one-token probe waits for the slot. It is not restarted under that client (the
/// watch restarted it after three silent looks, about 15 s, cutting the answer: seen under
/// a loaded test run, where `eval` lost every item after the first set).
#[test]
fn a_production_busy_outside_the_door_is_not_restarted_under_its_client() {
    use std::io::{Read, Write};
    let deck = deck("ff-busy");
    let port = free_port();
    deck.recipe(
        "prod",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {port}\n  args: [--load-time, 300ms, --ttft, 5ms, \
             --token-rate, \"40\", --tokens, \"900\", --slots, \"1\"]\n  memory_gb: 7\nhealth:\n  timeout: 30s\n"
        ),
    );
    deck.ok(&["rollback", "--to", "prod"]);
    let first = pid_of(&deck, "prod");
    // 900 tokens at 40 a second: 22.5 s with the slot taken.
    let began = Instant::now();
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"a long answer"}]}"#;
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).unwrap();
    let answer = text(&answer);
    assert!(
        began.elapsed() > Duration::from_secs(20),
        "the answer was not long: {:?}",
        began.elapsed()
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"finish_reason\""), "cut: {answer}");
    assert_eq!(pid_of(&deck, "prod"), first, "production was restarted");
    assert!(
        history(&deck).iter().all(|r| r["command"] != "restart"),
        "{:?}",
        history(&deck)
    );
    // Free again, it answers through the door.
    assert_eq!(http_status(&deck.door_url(), "/v1/models"), Some(200));
}
