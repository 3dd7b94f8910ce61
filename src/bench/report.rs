//! A benchmark result for people: per-case tables, a side-by-side comparison, an SVG chart.

use super::result::BenchResult;

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

fn p50(s: &Option<super::result::Stats>) -> Option<f64> {
    s.as_ref().map(|s| s.p50)
}

/// Per-case latency and quality of one result.
pub fn case_table(r: &BenchResult, table: &mut comfy_table::Table) {
    table.set_header(vec![
        "CASE",
        "OK",
        "TTFT p50",
        "p90",
        "p99",
        "TTFO p50",
        "COLD",
        "TPOT p50",
        "ITL p50",
        "ITL p99",
        "DECODE p50",
        "E2E p50",
        "CHECKS",
    ]);
    for c in &r.cases {
        let checks: Vec<String> = c
            .checks
            .iter()
            .map(|(k, v)| format!("{k} {v:.0}%"))
            .collect();
        table.add_row(vec![
            c.case.clone(),
            format!("{}/{}", c.samples - c.failed, c.samples),
            fmt(p50(&c.ttft_ms), 1),
            fmt(c.ttft_ms.as_ref().map(|s| s.p90), 1),
            fmt(c.ttft_ms.as_ref().map(|s| s.p99), 1),
            fmt(p50(&c.ttfo_ms), 1),
            fmt(c.cold_start_ttft_ms, 1),
            fmt(p50(&c.tpot_ms), 2),
            fmt(p50(&c.itl_ms), 2),
            fmt(c.itl_ms.as_ref().map(|s| s.p99), 2),
            fmt(p50(&c.decode_tps), 1),
            fmt(p50(&c.e2e_ms), 0),
            checks.join(", "),
        ]);
    }
}

/// Per-case evidence: what was cached, how tokens came, what the server itself measured.
pub fn evidence_table(r: &BenchResult, table: &mut comfy_table::Table) {
    table.set_header(vec![
        "CASE",
        "CACHE",
        "PROMPT TOK p50",
        "CACHED p50 (max)",
        "TOK/CHUNK",
        "SERVER DECODE p50",
        "CLIENT vs SERVER",
        "TTFT - SERVER PROMPT",
        "RETRIED",
        "BURSTS",
    ]);
    for c in &r.cases {
        table.add_row(vec![
            c.case.clone(),
            match c.cache {
                super::suite::CacheMode::Cold => "cold".into(),
                super::suite::CacheMode::WarmPrefix => "warm-prefix".to_string(),
            },
            fmt(p50(&c.prompt_tokens), 0),
            c.cached_tokens
                .as_ref()
                .map_or("-".into(), |s| format!("{:.0} ({:.0})", s.p50, s.max)),
            fmt(c.tokens_per_chunk, 2),
            fmt(p50(&c.server_decode_tps), 1),
            c.decode_vs_server_pct
                .map_or("-".into(), |v| format!("{v:+.2}%")),
            c.ttft_minus_server_prompt_ms
                .map_or("-".into(), |v| format!("{v:+.1} ms")),
            c.retried.to_string(),
            c.bursts.to_string(),
        ]);
    }
}

/// TTFT and decode of one case (or turn) of one result.
type Pair = (Option<f64>, Option<f64>);

/// Results side by side per case: TTFT p50 (ms) and decode tok/s p50, each against the
/// first result (×).
pub fn compare_table(results: &[&BenchResult], table: &mut comfy_table::Table) {
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
pub fn load_table(levels: &[&super::load::LoadRun], table: &mut comfy_table::Table) {
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
pub fn depth_table(r: &BenchResult, table: &mut comfy_table::Table) {
    table.set_header(vec![
        "DEPTH",
        "CACHE",
        "PROMPT TOK p50",
        "CACHED min-max",
        "TTFT p50",
        "DECODE p50",
        "SERVER SAYS",
    ]);
    for p in &r.depth {
        table.add_row(vec![
            p.depth.to_string(),
            if p.cache == super::suite::CacheMode::Cold {
                "cold".into()
            } else {
                "warm".to_string()
            },
            fmt(p50(&p.prompt_tokens), 0),
            p.cached_tokens
                .as_ref()
                .map_or("-".into(), |s| format!("{:.0}-{:.0}", s.min, s.max)),
            fmt(p50(&p.ttft_ms), 1),
            fmt(p50(&p.decode_tps), 1),
            p.verdict.clone(),
        ]);
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One chart row: a label and, per result, its TTFT p50 and decode p50.
struct ChartRow {
    label: String,
    ttft: Vec<Option<f64>>,
    decode: Vec<Option<f64>>,
}

/// Two bar panels: TTFT p50 per case and turn, decode tok/s p50 per case, for each result.
pub fn chart_svg(results: &[&BenchResult]) -> String {
    let colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759"];
    // Rows: every case, and every turn of multi-turn cases.
    let mut rows: Vec<ChartRow> = Vec::new();
    if let Some(first) = results.first() {
        for c in &first.cases {
            let find = |r: &BenchResult| r.cases.iter().find(|x| x.case == c.case).cloned();
            if c.ttft_p50_per_turn_ms.len() > 1 {
                for i in 0..c.ttft_p50_per_turn_ms.len() {
                    let ttft = results
                        .iter()
                        .map(|r| find(r).and_then(|x| x.ttft_p50_per_turn_ms.get(i).copied()))
                        .collect();
                    rows.push(ChartRow {
                        label: format!("{} t{}", c.case, i + 1),
                        ttft,
                        decode: vec![None; results.len()],
                    });
                }
            }
            let ttft = results
                .iter()
                .map(|r| find(r).and_then(|x| x.ttft_ms.map(|s| s.p50)))
                .collect();
            let decode = results
                .iter()
                .map(|r| find(r).and_then(|x| x.decode_tps.map(|s| s.p50)))
                .collect();
            rows.push(ChartRow {
                label: c.case.clone(),
                ttft,
                decode,
            });
        }
    }
    let (label_w, bar_w, row_h, top) =
        (170.0, 360.0, 10.0 * results.len().max(1) as f64 + 8.0, 60.0);
    let height = top + rows.len() as f64 * row_h + 40.0;
    let width = label_w + 2.0 * (bar_w + 40.0) + 20.0;
    let max_of = |pick: &dyn Fn(&ChartRow) -> &Vec<Option<f64>>| {
        rows.iter()
            .flat_map(|r| pick(r).iter().flatten().copied())
            .fold(0.0_f64, f64::max)
            .max(1e-9)
    };
    let (max_ttft, max_dec) = (max_of(&|r| &r.ttft), max_of(&|r| &r.decode));
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{label_w}\" y=\"20\" font-size=\"14\">TTFT p50 (ms)</text>\n<text x=\"{:.0}\" y=\"20\" font-size=\"14\">decode p50 (tok/s)</text>\n",
        label_w + bar_w + 40.0
    );
    for (i, r) in results.iter().enumerate() {
        let name = r
            .target
            .recipe
            .clone()
            .unwrap_or_else(|| r.target.url.clone());
        svg.push_str(&format!(
            "<rect x=\"{:.0}\" y=\"32\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.0}\" y=\"41\">{}</text>\n",
            label_w + i as f64 * 180.0,
            colors[i % colors.len()],
            label_w + i as f64 * 180.0 + 14.0,
            escape(&name)
        ));
    }
    for (
        row,
        ChartRow {
            label,
            ttft,
            decode,
        },
    ) in rows.iter().enumerate()
    {
        let y = top + row as f64 * row_h;
        svg.push_str(&format!(
            "<text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            label_w - 6.0,
            y + row_h / 2.0 + 3.0,
            escape(label)
        ));
        for (panel, (values, max, x0)) in [
            (ttft, max_ttft, label_w),
            (decode, max_dec, label_w + bar_w + 40.0),
        ]
        .into_iter()
        .enumerate()
        {
            for (i, v) in values.iter().enumerate() {
                let Some(v) = v else { continue };
                let w = v / max * bar_w;
                let yb = y + 2.0 + i as f64 * 10.0;
                svg.push_str(&format!(
                    "<rect x=\"{x0:.1}\" y=\"{yb:.1}\" width=\"{w:.1}\" height=\"8\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"8\">{}</text>\n",
                    colors[i % colors.len()],
                    x0 + w + 3.0,
                    yb + 7.0,
                    if panel == 0 { format!("{v:.0}") } else { format!("{v:.1}") }
                ));
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}
