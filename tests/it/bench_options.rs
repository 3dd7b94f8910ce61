//! A flag given on the command line wins over the recipe's `bench.load`, whatever its value;
//! an unset flag takes the recipe's.

use serde_json::Value;

use crate::support::{free_port, Deck};

fn repeat_of(deck: &Deck, extra: &[&str]) -> Value {
    let out = deck.dir.join(format!("r{}.json", extra.join("")));
    let mut args = vec![
        "bench", "r", "--suite", "quick", "--runs", "5", "--warmup", "0",
    ];
    args.extend_from_slice(&["--out", out.to_str().unwrap()]);
    args.extend_from_slice(extra);
    deck.sparkctl(&args).succeeds();
    let result: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    result["repeat"].clone()
}

#[test]
fn repeat_1_on_the_command_line_overrides_a_recipe_s_repeat_3() {
    let deck = Deck::new("bench-options");
    deck.recipe(
        "r",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--load-time, 0s, --ttft, 2ms, --token-rate, 2000, --tokens, 4]\n  memory_gb: 1\nbench:\n  load:\n    repeat: 3\n",
            free_port()
        ),
    );
    deck.ok(&["start", "r"]);
    assert_eq!(repeat_of(&deck, &[]), 3, "unset: the recipe's");
    assert_eq!(repeat_of(&deck, &["--repeat", "1"]), 1, "given: the flag's");
    deck.ok(&["down", "r"]);
}
