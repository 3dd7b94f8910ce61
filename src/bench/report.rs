//! What a benchmark leaves: a JSON result with every raw sample and its context, the
//! per-case statistics, gate verdicts, and a side-by-side comparison with an SVG chart.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::client::Sample;
use super::gates::GateResult;

/// DGX Spark's memory bandwidth: the decode roofline for a model of known size.
pub const SPARK_BANDWIDTH_BYTES_PER_S: f64 = 273e9;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

/// Nearest-rank percentiles; None for no values.
pub fn stats(values: &[f64]) -> Option<Stats> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[(((p / 100.0) * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some(Stats {
        n: v.len(),
        p50: at(50.0),
        p90: at(90.0),
        p99: at(99.0),
        min: v[0],
        max: v[v.len() - 1],
    })
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Target {
    pub url: String,
    pub recipe: Option<String>,
    pub recipe_hash: Option<String>,
    pub image: Option<String>,
    /// The image id / digest the server ran on.
    pub image_digest: Option<String>,
    pub model_fingerprint: Option<String>,
    /// The model id the server answered with.
    pub model: String,
    /// From `/version` or `/props`, when the server tells.
    pub server_version: Option<String>,
    pub weights_bytes: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CaseSummary {
    pub case: String,
    pub samples: usize,
    pub failed: usize,
    pub ttft_ms: Option<Stats>,
    /// TTFT p50 per turn (multi-turn growth).
    pub ttft_p50_per_turn_ms: Vec<f64>,
    pub ttfr_ms: Option<Stats>,
    pub decode_tps: Option<Stats>,
    pub itl_ms: Option<Stats>,
    pub e2e_ms: Option<Stats>,
    pub cold_start_ttft_ms: Option<f64>,
    /// Check → % of this case's answers (leak rate for thinking_leak, pass rate otherwise).
    pub checks: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Concurrency {
    pub streams: usize,
    pub requests: usize,
    pub failed: usize,
    pub throughput_tps: f64,
    pub ttft_ms: Option<Stats>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchResult {
    pub sparkctl_version: String,
    pub host: String,
    pub time: String,
    pub target: Target,
    pub suite: String,
    pub warmup: usize,
    pub runs: usize,
    pub cases: Vec<CaseSummary>,
    pub concurrency: Vec<Concurrency>,
    /// Check → % over all measured answers it applies to.
    pub quality: BTreeMap<String, f64>,
    pub ttft_p50_ms: Option<f64>,
    pub decode_tps_p50: Option<f64>,
    /// Decode p50 as a share of the memory-bandwidth bound, where the model size is known.
    pub roofline_share: Option<f64>,
    pub usage_estimated: bool,
    pub gates: Vec<GateResult>,
    /// pass, fail (a gate failed) or error (the run itself failed).
    pub verdict: String,
    pub problems: Vec<String>,
    pub samples: Vec<Sample>,
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

/// Per-case rows of one result.
pub fn case_table(r: &BenchResult, table: &mut comfy_table::Table) {
    table.set_header(vec![
        "CASE",
        "OK",
        "TTFT p50",
        "p90",
        "p99",
        "COLD",
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
            fmt(c.ttft_ms.as_ref().map(|s| s.p50), 1),
            fmt(c.ttft_ms.as_ref().map(|s| s.p90), 1),
            fmt(c.ttft_ms.as_ref().map(|s| s.p99), 1),
            fmt(c.cold_start_ttft_ms, 1),
            fmt(c.decode_tps.as_ref().map(|s| s.p50), 1),
            fmt(c.e2e_ms.as_ref().map(|s| s.p50), 0),
            checks.join(", "),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let s = stats(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!(
            (s.p50, s.p90, s.p99, s.min, s.max, s.n),
            (3.0, 5.0, 5.0, 1.0, 5.0, 5)
        );
        assert!(stats(&[]).is_none());
    }
}
