//! Issue 17 case 14: one damaged record must not hide the others. A damaged run record is
//! reported by `history`, a damaged deployment record by `status`, and the rest is shown.

use crate::support::{free_port, Deck, Ran};

fn process_sim(port: u16) -> String {
    format!(
        "engine: sim\nruntime: process\nserver:\n  port: {port}\n  args: [--load-time, 100ms]\n  memory_gb: 4\nhealth:\n  timeout: 20s\n"
    )
}

#[test]
fn a_damaged_run_record_is_named_and_the_other_runs_are_listed() {
    let deck = Deck::new("dmg-history");
    let prod_port = free_port();
    deck.recipe("demo-production", &process_sim(free_port()));
    Ran::of(
        deck.cmd(&["rollback", "--to", "demo-production"])
            .env("SPARKCTL_PRODUCTION_PORT", prod_port.to_string()),
    )
    .succeeds();
    let runs = deck.dir.join("state/runs");
    std::fs::write(runs.join("20260101-000000000-dead.json"), "{\"run_id\": ").unwrap();
    deck.sparkctl(&["history"])
        .succeeds()
        .warns("20260101-000000000-dead.json is damaged")
        .says("rolled-back");
}

#[test]
fn a_damaged_deployment_record_is_named_and_status_shows_the_rest() {
    let deck = Deck::new("dmg-status");
    deck.recipe("fine", &process_sim(free_port()));
    deck.ok(&["start", "fine"]);
    let broken = deck.dir.join("state/deployments/other.json");
    std::fs::write(&broken, "{\"name\": \"other\", ").unwrap();
    deck.sparkctl(&["status"])
        .succeeds()
        .warns("other.json is damaged")
        .says("fine");
    assert_eq!(
        std::fs::read_to_string(&broken).unwrap(),
        "{\"name\": \"other\", "
    );
}
