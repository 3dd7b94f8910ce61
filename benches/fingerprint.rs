//! Model fingerprint throughput against `sha256sum` on the same files, and the warm
//! re-verify time of a multi-GB directory whose files have not changed.
//!
//! `cargo bench --bench fingerprint` (FP_MB=N for the size of the throughput set, default 1024).
//! Both sides read the same files from the page cache (each set is read once before timing),
//! so this compares hashing and reading, not the disk.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sparkctl::testkit::fingerprint;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Files of non-repeating bytes (xorshift), so nothing can shortcut the hashing.
fn write_files(dir: &Path, files: usize, mb_each: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut chunk = vec![0u8; 1 << 20];
    (0..files)
        .map(|i| {
            let path = dir.join(format!("model-{i:05}-of-{files:05}.safetensors"));
            let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
            for _ in 0..mb_each {
                for word in chunk.chunks_mut(8) {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    word.copy_from_slice(&state.to_le_bytes());
                }
                f.write_all(&chunk).unwrap();
            }
            path
        })
        .collect()
}

fn sha256sum(files: &[PathBuf]) -> Duration {
    let began = Instant::now();
    let status = std::process::Command::new("sha256sum")
        .args(files)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("sha256sum runs");
    assert!(status.success());
    began.elapsed()
}

fn main() {
    let root = std::env::temp_dir().join(format!("sparkctl-bench-fp-{}", std::process::id()));
    let mb: usize = std::env::var("FP_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let data = root.join("data");
    let files = write_files(&data, 4, mb / 4);
    let total_mb = (mb / 4 * 4) as f64 * 1.048_576;
    let cache = root.join("cache");
    sha256sum(&files); // into the page cache

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (mut ours, mut ours_1, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        let _ = std::fs::remove_dir_all(&cache);
        let fp = fingerprint(&data, &cache, cores).unwrap();
        assert_eq!(fp.hashed_bytes as f64 / 1e6, total_mb);
        ours.push(total_mb / fp.took.as_secs_f64());
        let _ = std::fs::remove_dir_all(&cache);
        let fp = fingerprint(&data, &cache, 1).unwrap();
        ours_1.push(total_mb / fp.took.as_secs_f64());
        theirs.push(total_mb / sha256sum(&files).as_secs_f64());
    }
    let (ours, ours_1, theirs) = (median(ours), median(ours_1), median(theirs));
    println!(
        "fingerprint cold (no cache), 4 files, {total_mb:.0} MB, page cache warm, median of 3:"
    );
    println!("  sha256sum (coreutils)        {theirs:>8.0} MB/s");
    println!(
        "  sparkctl, 1 thread           {ours_1:>8.0} MB/s  ({:.0}% of sha256sum)",
        100.0 * ours_1 / theirs
    );
    println!(
        "  sparkctl, {cores} threads          {ours:>8.0} MB/s  ({:.0}% of sha256sum)",
        100.0 * ours / theirs
    );

    // A 19 GB-class model as sparse files: the cold pass hashes zeros, the warm ones stat.
    let sparse = root.join("sparse");
    std::fs::create_dir_all(&sparse).unwrap();
    for i in 0..4 {
        let f = std::fs::File::create(sparse.join(format!("model-{i}.safetensors"))).unwrap();
        f.set_len(2 << 30).unwrap();
    }
    for name in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "hf_quant_config.json",
    ] {
        std::fs::write(sparse.join(name), b"{}").unwrap();
    }
    let cold = fingerprint(&sparse, &cache, cores).unwrap();
    let warm: Vec<f64> = (0..20)
        .map(|_| {
            let fp = fingerprint(&sparse, &cache, cores).unwrap();
            assert_eq!(fp.digest, cold.digest);
            assert_eq!(fp.hashed_bytes, 0);
            fp.took.as_secs_f64() * 1e3
        })
        .collect();
    let max = warm.iter().copied().fold(0.0, f64::max);
    println!(
        "sparse dir, {} files, {:.1} GB: cold {:.2} s; warm re-verify median {:.2} ms, max {:.2} ms (20 runs)",
        cold.files,
        cold.bytes as f64 / 1e9,
        cold.took.as_secs_f64(),
        median(warm),
        max
    );
    std::fs::remove_dir_all(&root).unwrap();
}
