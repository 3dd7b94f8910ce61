//! images.lock's pin moved after an upgrade's promotion, and healed when a kill came between
//! the two: the front door's switch records the promotion in production.json first, with the
//! digest it runs and the move of the pin it asks for (`PinMove`); the pin moves next. A pin
//! left behind (still on the digest it moved from, unchanged since the promotion) is moved
//! by the next `upgrade`, `up`, `rollback` or `status`, which say so.

use std::path::Path;

use crate::error::Result;
use crate::images::history::{self, Event, EventKind};
use crate::lock::{Lock, Pin};
use crate::production::Entry;
use crate::progress::Progress;
use crate::state::StateDir;

/// Moves `recipe`'s pin in images.lock to `new` (the old digest stays in its history),
/// read afresh and written whole (temp file and rename), and remembers the pin.
pub(crate) fn move_pin(lock_path: &Path, state: &StateDir, recipe: &str, new: &Pin) -> Result<()> {
    let mut lock = Lock::load(lock_path)?.intact()?;
    let mut pin = new.clone();
    pin.pinned_at = crate::units::now_utc();
    lock.set(recipe, pin);
    lock.save(lock_path)?;
    let mut event = Event::now(EventKind::Pinned, &new.digest, None);
    event.image_id = new.image_id.clone();
    event.created = new.created.clone();
    history::record(state, recipe, &event)
}

/// `heal` for a command that holds the state lock, its lines said; nothing in a dry run.
pub(crate) fn healed(ctx: &crate::context::Context, dry_run: bool, progress: &dyn Progress) {
    if !dry_run {
        for line in heal(&ctx.lock_path, &ctx.state) {
            progress.step(&line);
        }
    }
}

/// As `heal`, for a caller that holds no state lock (`status`, an upgrade before it waits
/// for the lock): the lock is taken only when a pin was left behind, and only when it is
/// free (a command changing state heals it itself), so that a command started meanwhile
/// is not refused for it.
pub(crate) fn heal_if_free(lock_path: &Path, state: &StateDir, who: &str) -> Vec<String> {
    let lock = Lock::load(lock_path).unwrap_or_default();
    let left = crate::production::Book::load(state).is_ok_and(|file| {
        (file.lanes().into_values())
            .filter_map(|lane| lane.current)
            .any(|e| undone(&lock, &e).is_some())
    });
    match left.then(|| state.lock(&format!("{who}: moving a pin an upgrade left behind"))) {
        Some(Ok(_held)) => heal(lock_path, state),
        _ => Vec::new(),
    }
}

/// Makes the pin moves that promotions recorded and a kill left undone, one line said for
/// each (a move that fails too: the command goes on, as it would have without the heal).
/// The caller holds the state lock (nothing else changes the lock meanwhile). A state file
/// that cannot be read heals nothing; the commands that need it report it.
pub(crate) fn heal(lock_path: &Path, state: &StateDir) -> Vec<String> {
    let Ok(file) = crate::production::Book::load(state) else {
        return Vec::new();
    };
    let lock = Lock::load(lock_path).unwrap_or_default();
    let mut said = Vec::new();
    for lane in file.lanes().into_values() {
        let Some(entry) = lane.current else { continue };
        let Some(pin) = undone(&lock, &entry) else {
            continue;
        };
        let (recipe, digest) = (&entry.recipe, crate::units::short_digest(&pin.digest));
        let by = match &entry.run_id {
            Some(r) => format!("the upgrade that promoted it (run {r})"),
            None => "the upgrade that promoted it".into(),
        };
        said.push(match move_pin(lock_path, state, recipe, pin) {
            Ok(()) => format!(
                "images.lock: {recipe} is pinned to {digest} now, the digest production runs: \
                 {by} ended before it moved the pin"
            ),
            Err(e) => format!(
                "images.lock: {recipe} still pins an older digest than production runs \
                 ({digest}): {by} ended before it moved the pin, and moving it failed: {e}"
            ),
        });
    }
    said
}

/// The pin `entry`'s promotion asked for, when it was never moved: images.lock still pins
/// the digest it was to move from (or nothing, where it moved from nothing), and was not
/// pinned again since. A damaged lock is left for the commands that report it.
fn undone<'e>(lock: &Lock, entry: &'e Entry) -> Option<&'e Pin> {
    let (Some(image), Some(asked)) = (&entry.image, &entry.pin_move) else {
        return None;
    };
    match lock.pin(&entry.recipe).ok()? {
        Some(p) if p.digest == image.digest => None,
        Some(p) => {
            (Some(&p.digest) == asked.from.as_ref() && p.pinned_at <= entry.since).then_some(image)
        }
        None => asked.from.is_none().then_some(image),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::production::PinMove;

    fn pin(digest: &str, at: &str) -> Pin {
        serde_json::from_value(serde_json::json!({
            "reference": "127.0.0.1:5000/spark/sim:nightly", "digest": digest,
            "source": "registry", "pinned_at": at,
        }))
        .unwrap()
    }

    fn promoted(image: &str, from: Option<&str>) -> Entry {
        Entry {
            recipe: "nightly".into(),
            since: "2026-11-28T03:30:00Z".into(),
            run_id: Some("run-2".into()),
            bench: None,
            upstream: None,
            image: Some(pin(image, "2026-11-28T03:29:00Z")),
            pin_move: Some(PinMove {
                from: from.map(String::from),
            }),
        }
    }

    fn pinned(digest: &str, at: &str) -> Lock {
        let mut lock = Lock::default();
        lock.set("nightly", pin(digest, at));
        lock
    }

    #[test]
    fn only_a_pin_left_where_the_promotion_found_it_is_moved() {
        let left = pinned("sha256:11", "2026-11-27T03:30:00Z");
        let e = promoted("sha256:22", Some("sha256:11"));
        assert_eq!(undone(&left, &e).map(|p| &p.digest[..]), Some("sha256:22"));
        // Moved already: nothing to do.
        assert!(undone(&pinned("sha256:22", "2026-11-28T03:31:00Z"), &e).is_none());
        // Pinned since to anything, the old digest too: someone's choice, left alone.
        assert!(undone(&pinned("sha256:33", "2026-11-28T04:00:00Z"), &e).is_none());
        assert!(undone(&pinned("sha256:11", "2026-11-28T04:00:00Z"), &e).is_none());
        // A first pin that never came, and a pin someone removed since.
        let first = promoted("sha256:22", None);
        assert!(undone(&Lock::default(), &first).is_some());
        assert!(undone(&Lock::default(), &e).is_none());
        // Promoted by `up` or a rollback: no move asked for, whatever the lock says.
        let mut rolled_back = promoted("sha256:11", None);
        rolled_back.pin_move = None;
        assert!(undone(&pinned("sha256:22", "2026-11-28T03:31:00Z"), &rolled_back).is_none());
    }

    #[test]
    fn the_heal_moves_the_pin_once_and_says_so() {
        let dir = std::env::temp_dir().join(format!("sparkctl-pin-heal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = StateDir::open(&dir.join("state")).unwrap();
        let lock_path = dir.join("images.lock");
        pinned("sha256:11", "2026-11-27T03:30:00Z")
            .save(&lock_path)
            .unwrap();
        let mut file = crate::production::Production::default();
        file.promote(promoted("sha256:22", Some("sha256:11")));
        let book = crate::production::Book::default().with_lane("", file);
        crate::state::write_json(&state.production_file(), &book).unwrap();
        let said = heal(&lock_path, &state);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("images.lock: nightly is pinned to sha256:22")
                && said[0].contains("(run run-2)"),
            "{said:?}"
        );
        let lock = Lock::load(&lock_path).unwrap();
        let p = lock.pin("nightly").unwrap().unwrap();
        assert_eq!(
            (&p.digest[..], &p.history[0].digest[..]),
            ("sha256:22", "sha256:11")
        );
        assert!(heal(&lock_path, &state).is_empty(), "said once");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
