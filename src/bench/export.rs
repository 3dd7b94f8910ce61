//! Per-request rows of a result, for other tools: JSON Lines (one request a line) and CSV
//! (the same columns). Every request of every phase: the suite, load levels, the sweep, depth.
//! `write_all` keeps a result with its report and both exports beside it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::result::BenchResult;
use crate::error::Result;

/// One request, whichever phase sent it. Times in ms; load latencies from the scheduled send.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Row {
    /// suite, load, sweep or depth.
    phase: &'static str,
    /// Case and run (suite), profile (load, sweep), depth and cache (depth).
    what: String,
    index: usize,
    ok: bool,
    warmup: bool,
    scheduled_ms: Option<f64>,
    send_lag_ms: Option<f64>,
    ttft_ms: Option<f64>,
    tpot_ms: Option<f64>,
    e2el_ms: Option<f64>,
    decode_tps: Option<f64>,
    prompt_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    met_slo: Option<bool>,
    error: Option<String>,
}

const COLUMNS: &str = "phase,what,index,ok,warmup,scheduled_ms,send_lag_ms,ttft_ms,tpot_ms,e2el_ms,decode_tps,prompt_tokens,cached_tokens,completion_tokens,met_slo,error";

fn load_rows(phase: &'static str, runs: &[super::load::LoadRun], out: &mut Vec<Row>) {
    for r in runs {
        for x in &r.records {
            out.push(Row {
                phase,
                what: r.profile.to_string(),
                index: x.index,
                ok: x.ok,
                scheduled_ms: Some(x.scheduled_ms),
                send_lag_ms: Some(x.send_lag_ms),
                ttft_ms: x.ttft_ms,
                tpot_ms: x.tpot_ms,
                e2el_ms: Some(x.e2el_ms),
                prompt_tokens: x.prompt_tokens,
                cached_tokens: x.cached_tokens,
                completion_tokens: x.completion_tokens,
                met_slo: x.met_slo,
                error: x.error.clone(),
                ..Default::default()
            });
        }
    }
}

pub(crate) fn rows(r: &BenchResult) -> Vec<Row> {
    let mut out: Vec<Row> = r
        .samples
        .iter()
        .enumerate()
        .map(|(i, s)| Row {
            phase: "suite",
            what: format!(
                "{} repeat {} run {} turn {}",
                s.case,
                s.repeat + 1,
                s.run + 1,
                s.turn
            ),
            index: i,
            ok: s.ok,
            warmup: s.warmup,
            ttft_ms: s.ttft_ms,
            tpot_ms: s.tpot_ms,
            e2el_ms: Some(s.e2e_ms),
            decode_tps: s.decode_tps,
            prompt_tokens: s.prompt_tokens,
            cached_tokens: s.cached_tokens,
            completion_tokens: s.completion_tokens,
            error: s.error.clone(),
            ..Default::default()
        })
        .collect();
    load_rows("load", &r.load, &mut out);
    if let Some(s) = &r.sweep {
        load_rows("sweep", &s.levels, &mut out);
    }
    for p in &r.depth {
        for (i, x) in p.records.iter().enumerate() {
            out.push(Row {
                phase: "depth",
                what: format!("depth {} {:?}", p.depth, p.cache).to_lowercase(),
                index: i,
                ok: x.ok,
                warmup: x.priming,
                ttft_ms: x.ttft_ms,
                decode_tps: x.decode_tps,
                prompt_tokens: x.prompt_tokens,
                cached_tokens: x.cached_tokens,
                error: x.error.clone(),
                ..Default::default()
            });
        }
    }
    out
}

pub(crate) fn jsonl(r: &BenchResult) -> String {
    rows(r)
        .iter()
        .map(|row| serde_json::to_string(row).expect("rows are plain data") + "\n")
        .collect()
}

/// A CSV field: quoted when it holds a comma, quote or line break.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

pub(crate) fn csv(r: &BenchResult) -> String {
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
    let int = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
    let mut out = format!("{COLUMNS}\n");
    for row in rows(r) {
        let cells = [
            row.phase.to_string(),
            field(&row.what),
            row.index.to_string(),
            row.ok.to_string(),
            row.warmup.to_string(),
            opt(row.scheduled_ms),
            opt(row.send_lag_ms),
            opt(row.ttft_ms),
            opt(row.tpot_ms),
            opt(row.e2el_ms),
            opt(row.decode_tps),
            int(row.prompt_tokens),
            int(row.cached_tokens),
            int(row.completion_tokens),
            row.met_slo.map_or(String::new(), |b| b.to_string()),
            field(row.error.as_deref().unwrap_or("")),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// Writes the result and, beside it, its HTML report, JSONL and CSV; the report's path.
pub(crate) fn write_all(path: &Path, result: &BenchResult) -> Result<PathBuf> {
    crate::state::write_json(path, result)?;
    let html = path.with_extension("html");
    crate::state::write_atomic(&html, super::html::report(&[result]).as_bytes())?;
    crate::state::write_atomic(&path.with_extension("jsonl"), jsonl(result).as_bytes())?;
    crate::state::write_atomic(&path.with_extension("csv"), csv(result).as_bytes())?;
    Ok(html)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_commas_and_quotes_are_quoted() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(COLUMNS.split(',').count(), 16);
    }
}
