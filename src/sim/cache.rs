//! The simulator's prefix cache: prompts split into blocks of `BLOCK` tokens, each block
//! known by a hash chained over everything before it (as vLLM's automatic prefix caching
//! keys its blocks), so a block counts as cached only when its whole prefix was seen.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// Tokens per cache block.
pub(crate) const BLOCK: usize = 16;

/// Blocks kept before the cache starts over: bounds the memory of a long-running sim.
const MAX_BLOCKS: usize = 1 << 20;

#[derive(Default)]
pub(crate) struct PrefixCache {
    blocks: Mutex<HashSet<u64>>,
}

fn chain(tokens: &[u64]) -> Vec<u64> {
    let mut prev = 0u64;
    tokens
        .chunks_exact(BLOCK)
        .map(|block| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            prev.hash(&mut h);
            block.hash(&mut h);
            prev = h.finish();
            prev
        })
        .collect()
}

impl PrefixCache {
    /// How many leading tokens of `tokens` are cached; then remembers all its blocks. At
    /// least the last token is always evaluated (its logits are needed), as real engines do.
    pub(crate) fn lookup_and_insert(&self, tokens: &[u64]) -> usize {
        let keys = chain(tokens);
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let hit = keys.iter().take_while(|k| blocks.contains(k)).count();
        if blocks.len() + keys.len() > MAX_BLOCKS {
            blocks.clear();
        }
        blocks.extend(keys);
        (hit * BLOCK).min(tokens.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_prefix_is_cached_by_whole_blocks_and_a_changed_start_is_not() {
        let c = PrefixCache::default();
        let a: Vec<u64> = (0..100).collect();
        assert_eq!(c.lookup_and_insert(&a), 0);
        // Same first 40 tokens: two whole blocks (32) are cached.
        let mut b = a.clone();
        b[40] = 999;
        assert_eq!(c.lookup_and_insert(&b), 32);
        // The identical prompt: everything but the last token.
        assert_eq!(c.lookup_and_insert(&a), 96);
        // A different first token: the chain differs from the start.
        let mut d = a.clone();
        d[0] = 7;
        assert_eq!(c.lookup_and_insert(&d), 0);
    }
}
