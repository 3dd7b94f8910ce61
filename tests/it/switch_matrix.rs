//! The one switch, path by path: `up`, `rollback`, `rollback --to`, the front door's watch
//! (its restart, its fallback), bisect's steps, `adopt` and the way back after a failed
//! run, each where the next server fits beside what runs (blue/green) and where it does not
//! (swap), on the simulated engine as host processes, the pool set by `SPARKCTL_MEMORY_GB`
//! (servers declare 6 GB: 20 GB holds two, 10 GB one). In every cell a client streams to
//! the production port all along: no request fails, the right recipe serves afterwards (by
//! the port's own answer and by `status`), the run is recorded, and nothing runs that
//! should not. Each cell prints its client's counts and its longest wait (the hold).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, free_port, Deck, Ran, Traffic, TrafficReport};

const SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 8\n";
const EVERY: Duration = Duration::from_millis(20);
const BOTH: &str = "20";
const ONE: &str = "10";
const SIM: &str = "--load-time, 300ms, --ttft, 10ms, --token-rate, \"400\", --tokens, \"4\"";

/// A deck whose commands all run with the front door's warm grace at 0 (a replaced
/// production stops: the next switch back starts it, which is what is tried here).
fn deck(tag: &str) -> Deck {
    let deck = Deck::new(tag);
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
    deck
}

/// A process recipe of the sim declaring `gb`, with more recipe text after its server.
fn recipe(deck: &Deck, name: &str, gb: u32, args: &str, extra: &str) {
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [{args}]\n  memory_gb: {gb}\nhealth:\n  timeout: 30s\nbench:\n  suite: tiny\n{extra}",
            free_port()
        ),
    );
}

/// `sparkctl ARGS` in a pool of `gb` GB, no reserve, replaced productions not kept warm.
fn in_pool(deck: &Deck, gb: &str, args: &[&str]) -> Ran {
    Ran::of(
        deck.cmd(args)
            .env("SPARKCTL_MEMORY_GB", gb)
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0")
            .env("SPARKCTL_WARM_GRACE", "0s"),
    )
}

/// The running deployments' names.
fn running(deck: &Deck) -> BTreeSet<String> {
    deck.status()
        .iter()
        .filter(|d| d["state"] == "running")
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

fn history(deck: &Deck) -> Vec<Value> {
    let v = deck.sparkctl(&["--json", "history"]).succeeds().json();
    v.as_array().unwrap().clone()
}

/// One cell: a client streaming to the production port from before the switch until the
/// new production has answered it.
struct Cell<'a> {
    deck: &'a Deck,
    path: &'a str,
    mode: &'a str,
    client: Traffic,
}

impl<'a> Cell<'a> {
    fn open(deck: &'a Deck, path: &'a str, mode: &'a str) -> Cell<'a> {
        Cell::with(deck, path, mode, Traffic::start(&deck.door_url(), EVERY))
    }

    fn with(deck: &'a Deck, path: &'a str, mode: &'a str, client: Traffic) -> Cell<'a> {
        client.answers(3, Duration::from_secs(60));
        Cell {
            deck,
            path,
            mode,
            client,
        }
    }

    /// Once `serving` answers through the door: the client's report, checked and printed,
    /// and the production by `status` and by what runs.
    fn close(self, serving: &str, runs: &[&str]) -> TrafficReport {
        self.close_cut(serving, runs, 0)
    }

    /// As `close`, where the test killed production itself: the one answer its server was
    /// streaming when SIGKILL came may be cut (no proxy finishes a stream whose server
    /// died) — or, when it died between its headers and its first byte, end with the
    /// connection before the client read a head (seen once in a loaded run), or, when it died
    /// before its headers, with the front door's 502 (seen in a loaded run); nothing else
    /// may fail.
    fn close_cut(self, serving: &str, runs: &[&str], killed: usize) -> TrafficReport {
        self.client.answers(3, Duration::from_secs(120));
        let report = self.client.stop();
        let mut waits = report.latency_ms.clone();
        waits.sort_by(f64::total_cmp);
        let longest = waits.last().copied().unwrap_or(0.0);
        println!(
            "cell {:<18} {:<10}: {} answered, {} failed, {} cut; longest wait {longest:.0} ms \
             (median {:.0} ms)",
            self.path,
            self.mode,
            report.ok,
            report.failed(),
            report.cut,
            waits.get(waits.len() / 2).copied().unwrap_or(0.0)
        );
        let cell = format!("{} × {}", self.path, self.mode);
        // The killed server's own request ends as a 502, a transport error or a cut stream,
        // whichever the timing gives; nothing else may fail.
        let bad_gateway = report.http_errors.iter().filter(|c| **c == 502).count();
        assert_eq!(bad_gateway, report.http_errors.len(), "{cell}: {report:?}");
        assert!(
            bad_gateway + report.transport_errors.len() + report.cut <= killed,
            "{cell}: {report:?}"
        );
        let last = report.upstreams.last().cloned().unwrap_or_default();
        assert!(
            last.contains(serving),
            "{cell}: the port answered from {last}"
        );
        let prod = self
            .deck
            .status()
            .into_iter()
            .find(|d| d["role"] == "production")
            .unwrap_or_else(|| panic!("{cell}: no production in status"));
        assert_eq!(prod["name"], serving, "{cell}");
        let want: BTreeSet<String> = runs.iter().map(|s| s.to_string()).collect();
        assert_eq!(running(self.deck), want, "{cell}: what runs");
        report
    }
}

#[test]
fn up_switches_blue_green_and_as_a_swap() {
    let deck = deck("mx-up");
    for name in ["prod", "cand", "cand2"] {
        recipe(&deck, name, 6, SIM, "");
    }
    in_pool(&deck, BOTH, &["rollback", "--to", "prod"]).succeeds();

    let cell = Cell::open(&deck, "up", "blue/green");
    in_pool(&deck, BOTH, &["up", "cand", "--yes"])
        .succeeds()
        .warns("keeps serving until cand serves (blue/green)");
    cell.close("cand", &["cand"]);
    assert_eq!(history(&deck)[0]["outcome"], "promoted");

    // One fits: production stops first, held at the door.
    let cell = Cell::open(&deck, "up", "swap");
    in_pool(&deck, ONE, &["up", "cand2", "--yes"])
        .succeeds()
        .warns("production cand must stop first (swap");
    cell.close("cand2", &["cand2"]);
    let run = &history(&deck)[0];
    assert_eq!(
        (run["command"].as_str(), run["outcome"].as_str()),
        (Some("up"), Some("promoted"))
    );
}

/// (path, mode, pool, arguments, what the plan line says, what serves afterwards)
type RollbackCell<'a> = (&'a str, &'a str, &'a str, &'a [&'a str], &'a str, &'a str);

#[test]
fn rollback_and_rollback_to_switch_blue_green_and_as_a_swap() {
    let deck = deck("mx-rollback");
    for name in ["a", "b", "c"] {
        recipe(&deck, name, 6, SIM, "");
    }
    in_pool(&deck, BOTH, &["rollback", "--to", "a"]).succeeds();
    let cells: [RollbackCell; 4] = [
        (
            "rollback --to",
            "blue/green",
            BOTH,
            &["rollback", "--to", "b"],
            "keeps serving until b serves (blue/green)",
            "b",
        ),
        (
            "rollback",
            "blue/green",
            BOTH,
            &["rollback"],
            "keeps serving until a serves (blue/green)",
            "a",
        ),
        (
            "rollback --to",
            "swap",
            ONE,
            &["rollback", "--to", "c"],
            "production a must stop first (swap",
            "c",
        ),
        (
            "rollback",
            "swap",
            ONE,
            &["rollback"],
            "production c must stop first (swap",
            "a",
        ),
    ];
    for (path, mode, pool, args, says, serves) in cells {
        let cell = Cell::open(&deck, path, mode);
        in_pool(&deck, pool, args)
            .succeeds()
            .warns(says)
            .never_says("does not fit");
        cell.close(serves, &[serves]);
        let run = &history(&deck)[0];
        assert_eq!(run["command"], "rollback", "{run}");
        assert_eq!(run["outcome"], "rolled-back", "{run}");
        assert_eq!(run["recipe"], serves, "{run}");
    }
}

/// The pid of a process deployment.
fn pid_of(deck: &Deck, name: &str) -> i32 {
    let rec: Value = serde_json::from_slice(
        &std::fs::read(deck.dir.join(format!("state/deployments/{name}.json"))).unwrap(),
    )
    .unwrap();
    rec["process"]["pid"].as_i64().unwrap() as i32
}

/// The newest run record of `command` after the first `after` records, once there is one.
fn wait_record(deck: &Deck, command: &str, after: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let h = history(deck);
        if h.len() > after && h[0]["command"] == command {
            return h[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {command} recorded: {:?}",
            h.first()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills production's process group, as an OOM kill would.
fn kill(deck: &Deck, name: &str) {
    unsafe { libc::kill(-pid_of(deck, name), libc::SIGKILL) };
}

// The watch's cells: production is dead, so it never serves beside its successor; what
// differs is whether the successor fits beside what else runs ("blue/green") or another
// server must stop first while the door holds ("swap"). The front door (and its watch)
// plans in a 10 GB pool: it is started by the first command, in that pool.

/// One watch cell: `before_kill` (a recipe changed), production killed, the watch's
/// `command` recorded as recovered, and `serves` alone running and serving afterwards.
fn watch_cell(
    deck: &Deck,
    (path, mode): (&str, &str),
    command: &str,
    serves: &str,
    before_kill: impl FnOnce(),
) {
    let cell = Cell::open(deck, path, mode);
    let before = history(deck).len();
    before_kill();
    kill(deck, "prod");
    let run = wait_record(deck, command, before);
    assert_eq!(
        (run["recipe"].as_str(), run["outcome"].as_str()),
        (Some(serves), Some("recovered")),
        "{run}"
    );
    cell.close_cut(serves, &[serves], 1);
}

#[test]
fn the_watch_restarts_production_where_it_fits_and_where_room_must_be_made() {
    let deck = deck("mx-restart");
    recipe(&deck, "prod", 6, SIM, "");
    recipe(&deck, "side", 3, SIM, "");
    in_pool(&deck, ONE, &["rollback", "--to", "prod"]).succeeds();
    watch_cell(
        &deck,
        ("watch restart", "blue/green"),
        "restart",
        "prod",
        || {},
    );
    // `side` runs beside production (6 + 3 of 10); production's recipe now needs 8 GB, so
    // its restart must stop `side` first.
    in_pool(&deck, ONE, &["start", "side"]).succeeds();
    recipe(&deck, "prod", 8, SIM, "");
    watch_cell(&deck, ("watch restart", "swap"), "restart", "prod", || {});
}

#[test]
fn the_watch_fails_over_to_the_fallback_where_it_fits_and_where_room_must_be_made() {
    let deck = deck("mx-failover");
    let fallback = "fallback: fb\n";
    recipe(&deck, "prod", 6, SIM, fallback);
    recipe(&deck, "fb", 3, SIM, "");
    recipe(&deck, "side", 3, SIM, "");
    in_pool(&deck, ONE, &["rollback", "--to", "prod"]).succeeds();
    let crashing = format!("{SIM}, --load-fault, crash");
    let crash = || recipe(&deck, "prod", 6, &crashing, fallback);
    watch_cell(
        &deck,
        ("watch failover", "blue/green"),
        "failover",
        "fb",
        crash,
    );
    // Back to a working prod, `side` beside it; the fallback now needs 8 GB: `side` stops.
    recipe(&deck, "prod", 6, SIM, fallback);
    in_pool(&deck, ONE, &["rollback", "--to", "prod"]).succeeds();
    in_pool(&deck, ONE, &["start", "side"]).succeeds();
    recipe(&deck, "fb", 8, SIM, "");
    watch_cell(&deck, ("watch failover", "swap"), "failover", "fb", crash);
}

#[test]
fn bisect_steps_run_beside_production_or_hold_it_with_allow_swap() {
    let deck = deck("mx-bisect");
    // Three builds of a server: the third slower to its first token.
    let builds = deck.dir.join("builds");
    let paths = support::sim_builds(&builds, 3, 3, ("10ms", "300ms"));
    let path = |i: usize| paths[i - 1].clone();
    deck.recipe(
        "bin",
        &format!(
            "engine: sim\nruntime: process\nbinary: {}\nserver:\n  port: {}\n  args: [--load-time, 100ms, --token-rate, \"400\", --tokens, \"4\"]\n  memory_gb: 6\nbench:\n  suite: tiny\n",
            path(1).display(),
            free_port()
        ),
    );
    in_pool(&deck, BOTH, &["rollback", "--to", "bin"]).succeeds();
    let (first, last) = (path(1), path(3));
    let bisect = |gb: &str, more: &[&str]| {
        let mut args = vec![
            "bisect",
            "bin",
            "--builds",
            builds.to_str().unwrap(),
            "--good",
            first.to_str().unwrap(),
            "--bad",
            last.to_str().unwrap(),
            "--metric",
            "ttft_p50",
            "--repeat",
            "2",
            "--fresh",
        ];
        args.extend(more);
        in_pool(&deck, gb, &args)
    };
    let steps = |deck: &Deck| {
        history(deck)
            .iter()
            .filter(|r| r["command"] == "bisect")
            .count()
    };

    let cell = Cell::open(&deck, "bisect step", "blue/green");
    bisect(BOTH, &[]).succeeds().never_says("stopping bin");
    cell.close("bin", &["bin"]);
    let measured = steps(&deck);
    assert!(measured >= 2, "{measured} measurements recorded");

    let cell = Cell::open(&deck, "bisect step", "swap");
    bisect(ONE, &["--allow-swap"])
        .succeeds()
        .warns("stopping bin to make room");
    cell.close("bin", &["bin"]);
    assert!(
        steps(&deck) >= 2 * measured,
        "the second bisect's measurements are recorded"
    );
}

/// The simulator started by hand on the door's port: a server sparkctl did not start.
struct ByHand(std::process::Child);

impl Drop for ByHand {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn adopt_cell(tag: &str, mode: &'static str) {
    let deck = deck(tag);
    let port = deck.door_port.to_string();
    let by_hand = ByHand(
        support::sparkctl()
            .args([
                "sim",
                "--host",
                "127.0.0.1",
                "--port",
                &port,
                "--ttft",
                "5ms",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while support::http_status(&deck.door_url(), "/health") != Some(200) {
        assert!(Instant::now() < deadline, "sim did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = by_hand.0.id().to_string();
    deck.sparkctl(&["import", "handsim", "--pid", &pid])
        .succeeds();
    // Import chose the engine's usual port (or the next free one) for the recipe: another
    // test's may take it meanwhile; this one's own.
    let file = deck.dir.join("recipes/handsim.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let own: Vec<String> = text
        .lines()
        .map(|l| match l.starts_with("  port: ") {
            true => format!("  port: {}", free_port()),
            false => l.to_string(),
        })
        .collect();
    std::fs::write(&file, own.join("\n") + "\n").unwrap();
    let shown: Value =
        serde_json::from_str(&deck.ok(&["--json", "recipes", "show", "handsim"])).unwrap();
    let need = shown["recipe"]["server"]["memory_gb"].as_f64().unwrap();
    // Room for two of it, or for one and a half.
    let pool = match mode {
        "swap" => format!("{}", need * 1.5),
        _ => format!("{}", need * 2.5),
    };
    let cell = Cell::with(
        &deck,
        "adopt",
        mode,
        Traffic::fresh_connections(&deck.door_url(), EVERY),
    );
    in_pool(&deck, &pool, &["adopt", "handsim", "--yes"])
        .succeeds()
        .says(if mode == "swap" { "swap" } else { "blue/green" });
    cell.close("handsim", &["handsim"]);
    let run = &history(&deck)[0];
    assert_eq!(
        (run["command"].as_str(), run["outcome"].as_str()),
        (Some("adopt"), Some("promoted"))
    );
    drop(by_hand);
}

#[test]
fn adopt_hands_the_port_over_blue_green() {
    adopt_cell("mx-adopt-bg", "blue/green");
}

#[test]
fn adopt_hands_the_port_over_as_a_swap() {
    adopt_cell("mx-adopt-swap", "swap");
}

#[test]
fn the_way_back_after_a_failed_up_brings_production_back_in_both_modes() {
    let deck = deck("mx-restore");
    recipe(&deck, "prod", 6, SIM, "");
    recipe(
        &deck,
        "crashy",
        6,
        &format!("{SIM}, --load-fault, crash"),
        "",
    );
    in_pool(&deck, BOTH, &["rollback", "--to", "prod"]).succeeds();
    let failed = |deck: &Deck| {
        let run = &history(deck)[0];
        assert_eq!(
            (run["command"].as_str(), run["outcome"].as_str()),
            (Some("up"), Some("failed"))
        );
    };

    let cell = Cell::open(&deck, "way back", "blue/green");
    in_pool(&deck, BOTH, &["up", "crashy", "--yes"])
        .exits(1)
        .warns("(blue/green)")
        .never_says("restoring production");
    cell.close("prod", &["prod"]);
    failed(&deck);

    let cell = Cell::open(&deck, "way back", "swap");
    in_pool(&deck, ONE, &["up", "crashy", "--yes"])
        .exits(1)
        .warns("production prod must stop first (swap")
        .warns("prod serves production again");
    cell.close("prod", &["prod"]);
    failed(&deck);
}
