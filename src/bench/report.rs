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

/// A and B side by side per case: TTFT p50 (ms) and decode tok/s p50, and B/A.
pub fn compare_table(a: &BenchResult, b: &BenchResult, table: &mut comfy_table::Table) {
    let name = |r: &BenchResult| {
        r.target
            .recipe
            .clone()
            .unwrap_or_else(|| r.target.url.clone())
    };
    table.set_header(vec![
        "CASE".to_string(),
        format!("TTFT {}", name(a)),
        format!("TTFT {}", name(b)),
        "B/A".to_string(),
        format!("DECODE {}", name(a)),
        format!("DECODE {}", name(b)),
        "B/A".to_string(),
    ]);
    for ca in &a.cases {
        let cb = b.cases.iter().find(|c| c.case == ca.case);
        let ta = ca.ttft_ms.as_ref().map(|s| s.p50);
        let tb = cb.and_then(|c| c.ttft_ms.as_ref()).map(|s| s.p50);
        let da = ca.decode_tps.as_ref().map(|s| s.p50);
        let db = cb.and_then(|c| c.decode_tps.as_ref()).map(|s| s.p50);
        let ratio = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) if x > 0.0 => format!("{:.2}x", y / x),
            _ => "-".into(),
        };
        table.add_row(vec![
            ca.case.clone(),
            fmt(ta, 1),
            fmt(tb, 1),
            ratio(ta, tb),
            fmt(da, 1),
            fmt(db, 1),
            ratio(da, db),
        ]);
        // Multi-turn growth, turn by turn.
        if ca.ttft_p50_per_turn_ms.len() > 1 {
            for (i, t) in ca.ttft_p50_per_turn_ms.iter().enumerate() {
                let tb = cb.and_then(|c| c.ttft_p50_per_turn_ms.get(i).copied());
                table.add_row(vec![
                    format!("  turn {}", i + 1),
                    fmt(Some(*t), 1),
                    fmt(tb, 1),
                    ratio(Some(*t), tb),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
            }
        }
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
