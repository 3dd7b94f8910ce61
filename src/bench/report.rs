//! A benchmark result for people: per-case tables, a side-by-side comparison, an SVG chart.

use super::result::{BenchResult, CaseSummary};

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

fn p50(s: &Option<super::result::Stats>) -> Option<f64> {
    s.as_ref().map(|s| s.p50)
}

/// A table with one row per case: each column is its heading and how a case fills it,
/// written side by side so that a column added or moved cannot shift the others.
type Column<'a> = (&'a str, &'a dyn Fn(&CaseSummary) -> String);

fn case_rows(r: &BenchResult, table: &mut comfy_table::Table, columns: &[Column]) {
    table.set_header(columns.iter().map(|(heading, _)| *heading));
    for c in &r.cases {
        table.add_row(columns.iter().map(|(_, cell)| cell(c)));
    }
}

/// Per-case latency and quality of one result.
pub(crate) fn case_table(r: &BenchResult, table: &mut comfy_table::Table) {
    case_rows(
        r,
        table,
        &[
            ("CASE", &|c| c.case.clone()),
            ("OK", &|c| format!("{}/{}", c.samples - c.failed, c.samples)),
            ("TTFT p50", &|c| fmt(p50(&c.ttft_ms), 1)),
            ("p90", &|c| fmt(c.ttft_ms.as_ref().map(|s| s.p90), 1)),
            ("p99", &|c| fmt(c.ttft_ms.as_ref().map(|s| s.p99), 1)),
            ("TTFO p50", &|c| fmt(p50(&c.ttfo_ms), 1)),
            ("COLD", &|c| fmt(c.cold_start_ttft_ms, 1)),
            ("TPOT p50", &|c| fmt(p50(&c.tpot_ms), 2)),
            ("ITL p50", &|c| fmt(p50(&c.itl_ms), 2)),
            ("ITL p99", &|c| fmt(c.itl_ms.as_ref().map(|s| s.p99), 2)),
            ("DECODE p50", &|c| fmt(p50(&c.decode_tps), 1)),
            ("E2E p50", &|c| fmt(p50(&c.e2e_ms), 0)),
            ("CHECKS", &|c| {
                let checks: Vec<String> = c
                    .checks
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.0}%"))
                    .collect();
                checks.join(", ")
            }),
        ],
    );
}

/// Per-case evidence: what was cached, how tokens came, what the server itself measured.
pub(crate) fn evidence_table(r: &BenchResult, table: &mut comfy_table::Table) {
    case_rows(
        r,
        table,
        &[
            ("CASE", &|c| c.case.clone()),
            ("CACHE", &|c| {
                match c.cache {
                    super::suite::CacheMode::Cold => "cold",
                    super::suite::CacheMode::WarmPrefix => "warm-prefix",
                }
                .into()
            }),
            ("PROMPT TOK p50", &|c| fmt(p50(&c.prompt_tokens), 0)),
            ("CACHED p50 (max)", &|c| {
                c.cached_tokens
                    .as_ref()
                    .map_or("-".into(), |s| format!("{:.0} ({:.0})", s.p50, s.max))
            }),
            ("TOK/CHUNK", &|c| fmt(c.tokens_per_chunk, 2)),
            ("SERVER DECODE p50", &|c| fmt(p50(&c.server_decode_tps), 1)),
            ("CLIENT vs SERVER", &|c| {
                c.decode_vs_server_pct
                    .map_or("-".into(), |v| format!("{v:+.2}%"))
            }),
            ("TTFT - SERVER PROMPT", &|c| {
                c.ttft_minus_server_prompt_ms
                    .map_or("-".into(), |v| format!("{v:+.1} ms"))
            }),
            ("RETRIED", &|c| c.retried.to_string()),
            ("BURSTS", &|c| c.bursts.to_string()),
        ],
    );
}

/// TTFT and decode of one case (or turn) of one result.
type Pair = (Option<f64>, Option<f64>);

/// Results side by side per case: TTFT p50 (ms) and decode tok/s p50, each against the
/// first result (×).
pub(crate) fn compare_table(results: &[&BenchResult], table: &mut comfy_table::Table) {
    let name = |r: &BenchResult| {
        r.target
            .recipe
            .clone()
            .unwrap_or_else(|| r.target.url.clone())
    };
    let mut header = vec!["CASE".to_string()];
    for (i, r) in results.iter().enumerate() {
        header.push(format!("TTFT {}", name(r)));
        if i > 0 {
            header.push("×".into());
        }
    }
    for (i, r) in results.iter().enumerate() {
        header.push(format!("DECODE {}", name(r)));
        if i > 0 {
            header.push("×".into());
        }
    }
    table.set_header(header);
    let Some(first) = results.first() else { return };
    let ratio = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) if x > 0.0 => format!("{:.2}x", y / x),
        _ => "-".into(),
    };
    let row = |label: String, pick: &dyn Fn(&BenchResult) -> Pair| {
        let vals: Vec<(Option<f64>, Option<f64>)> = results.iter().map(|r| pick(r)).collect();
        let mut cells = vec![label];
        for (i, v) in vals.iter().enumerate() {
            cells.push(fmt(v.0, 1));
            if i > 0 {
                cells.push(ratio(vals[0].0, v.0));
            }
        }
        for (i, v) in vals.iter().enumerate() {
            cells.push(fmt(v.1, 1));
            if i > 0 {
                cells.push(ratio(vals[0].1, v.1));
            }
        }
        cells
    };
    for ca in &first.cases {
        let find = |r: &BenchResult| r.cases.iter().find(|c| c.case == ca.case).cloned();
        table.add_row(row(ca.case.clone(), &|r| {
            let c = find(r);
            (
                c.as_ref().and_then(|c| p50(&c.ttft_ms)),
                c.as_ref().and_then(|c| p50(&c.decode_tps)),
            )
        }));
        // Multi-turn growth, turn by turn.
        if ca.ttft_p50_per_turn_ms.len() > 1 {
            for i in 0..ca.ttft_p50_per_turn_ms.len() {
                table.add_row(row(format!("  turn {}", i + 1), &|r| {
                    (
                        find(r).and_then(|c| c.ttft_p50_per_turn_ms.get(i).copied()),
                        None,
                    )
                }));
            }
        }
    }
}

/// Load levels: asked and achieved rates, throughput, latency from the scheduled send, goodput.
pub(crate) fn load_table(levels: &[&super::load::LoadRun], table: &mut comfy_table::Table) {
    table.set_header(vec![
        "LOAD",
        "ASKED/s",
        "ACHIEVED/s",
        "LAG p99",
        "OK/FAIL",
        "REQ/s",
        "TOK/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "GOODPUT/s",
        "QUEUE mean",
    ]);
    for l in levels {
        let asked = match l.profile {
            super::load::Profile::Rate { rps, .. } => format!("{rps:.2}"),
            _ => "closed".into(),
        };
        table.add_row(vec![
            l.profile.to_string(),
            asked,
            fmt(l.achieved_rps, 3),
            fmt(l.send_lag_ms.as_ref().map(|s| s.p99), 2),
            format!("{}/{}", l.completed, l.failed),
            format!("{:.2}", l.request_rps),
            format!("{:.1}", l.output_tps),
            fmt(p50(&l.ttft_ms), 1),
            fmt(l.ttft_ms.as_ref().map(|s| s.p99), 1),
            fmt(p50(&l.tpot_ms), 2),
            l.goodput_rps.map_or("-".into(), |g| {
                format!("{g:.2} ({:.0}%)", l.goodput_pct.unwrap_or(0.0))
            }),
            l.server
                .as_ref()
                .map_or("-".into(), |s| fmt(s.waiting_mean, 1)),
        ]);
    }
}

/// Context depths, cold and warm, with the cached tokens that prove which was measured.
pub(crate) fn depth_table(r: &BenchResult, table: &mut comfy_table::Table) {
    const COLUMNS: [&str; 7] = [
        "DEPTH",
        "CACHE",
        "PROMPT TOK p50",
        "CACHED min-max",
        "TTFT p50",
        "DECODE p50",
        "SERVER SAYS",
    ];
    table.set_header(COLUMNS);
    table.add_rows(r.depth.iter().map(|p| {
        let cache = match p.cache {
            super::suite::CacheMode::Cold => "cold",
            super::suite::CacheMode::WarmPrefix => "warm",
        };
        vec![
            p.depth.to_string(),
            cache.to_string(),
            fmt(p50(&p.prompt_tokens), 0),
            p.cached_tokens
                .as_ref()
                .map_or("-".into(), |s| format!("{:.0}-{:.0}", s.min, s.max)),
            fmt(p50(&p.ttft_ms), 1),
            fmt(p50(&p.decode_tps), 1),
            p.verdict.clone(),
        ]
    }));
}

/// Two bar panels: TTFT p50 per case and turn, decode tok/s p50 per case, for each result.
pub(crate) fn chart_svg(results: &[&BenchResult]) -> String {
    let names: Vec<String> = results.iter().map(|r| super::html::name_of(r)).collect();
    let mut ttft: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    let mut decode: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    let find = |r: &BenchResult, case: &str| r.cases.iter().find(|x| x.case == case).cloned();
    for c in results.first().map_or(&[][..], |r| &r.cases[..]) {
        // Every turn of a multi-turn case, then the case.
        for i in (0..c.ttft_p50_per_turn_ms.len()).filter(|_| c.ttft_p50_per_turn_ms.len() > 1) {
            let v = results
                .iter()
                .map(|r| find(r, &c.case).and_then(|x| x.ttft_p50_per_turn_ms.get(i).copied()))
                .collect();
            ttft.push((format!("{} t{}", c.case, i + 1), v));
        }
        let pick = |f: fn(&CaseSummary) -> Option<f64>| -> Vec<Option<f64>> {
            results
                .iter()
                .map(|r| find(r, &c.case).and_then(|x| f(&x)))
                .collect()
        };
        ttft.push((c.case.clone(), pick(|x| p50(&x.ttft_ms))));
        decode.push((c.case.clone(), pick(|x| p50(&x.decode_tps))));
    }
    let a = super::html::svg::bars("ttft", "TTFT p50 (ms)", "ms", &names, &ttft);
    let b = super::html::svg::bars("decode", "decode p50 (tok/s)", "tok/s", &names, &decode);
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1120\" height=\"320\">{}<g transform=\"translate(560 0)\">{}</g></svg>\n",
        a.unwrap_or_default(),
        b.unwrap_or_default()
    )
}
