//! One self-contained HTML report for one or more results (candidate beside production,
//! or any N): inline SVG charts, tables, every result's provenance. No script library,
//! no font, no request to anywhere: it opens from a file on an air-gapped machine. A few
//! lines of inline script check the charts drew and say so in `data-rendered`.

mod eval;
pub(crate) mod svg;

use std::fmt::Write;

use super::gates::Metric;
use super::result::BenchResult;
use super::suite::CacheMode;
use svg::{escape, Chart, Series};

/// What names a result in legends: its recipe, else its URL.
pub(crate) fn name_of(r: &BenchResult) -> String {
    r.target
        .recipe
        .clone()
        .unwrap_or_else(|| r.target.url.clone())
}

fn f(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ccc}table{border-collapse:collapse;margin:8px 0;font-size:12px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:12px}.note{color:#744;font-size:12px}.pass{color:#070}.fail{color:#b00}.inconclusive{color:#a60}";

/// Checks every chart drew marks and the page has no missing chart; the test reads the marker.
const SCRIPT: &str = "(function(){var charts=document.querySelectorAll('svg.chart');var empty=0;charts.forEach(function(c){if(!c.querySelector('[data-mark]'))empty++;});document.body.setAttribute('data-rendered',(empty===0&&charts.length>0?'ok:':'incomplete:')+charts.length);})();";

pub(crate) fn report(results: &[&BenchResult]) -> String {
    report_with(None, results)
}

/// The report with `intro` (a title and a section of HTML, written by the caller and
/// escaped there) above the results' own: a try's variants table.
pub(crate) fn report_with(intro: Option<(&str, &str)>, results: &[&BenchResult]) -> String {
    let base: Vec<String> = results.iter().map(|r| name_of(r)).collect();
    // The same target twice (before and after a change): told apart by when they ran.
    let names: Vec<String> = base
        .iter()
        .zip(results)
        .map(|(n, r)| match base.iter().filter(|m| *m == n).count() {
            1 => n.clone(),
            _ => format!("{n} @ {}", r.time),
        })
        .collect();
    let mut h = String::new();
    let title = match intro {
        Some((t, _)) => t.to_string(),
        None => format!("sparkctl bench: {}", names.join(" vs ")),
    };
    let _ = write!(h, "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body><h1>{}</h1>", escape(&title), escape(&title));
    if let Some((_, section)) = intro {
        h.push_str(section);
    }
    summary(&mut h, results, &names);
    h.push_str("<h2>Charts</h2><div class=\"charts\">");
    for chart in charts(results, &names) {
        h.push_str(&chart);
    }
    h.push_str("</div>");
    for r in results {
        load_table(&mut h, r);
        depth_table(&mut h, r);
        gates_table(&mut h, r);
    }
    eval::section(&mut h, results);
    provenance(&mut h, results);
    let _ = writeln!(h, "<script>{SCRIPT}</script></body></html>");
    h
}

fn summary(h: &mut String, results: &[&BenchResult], names: &[String]) {
    h.push_str("<h2>Summary</h2><table><tr><th>result</th><th>verdict</th><th>TTFT p50/p90/p99 ms</th><th>TPOT p50 ms</th><th>ITL p99 ms</th><th>decode p50 tok/s</th><th>goodput req/s</th><th>roofline</th><th>runs</th></tr>");
    for (r, n) in results.iter().zip(names) {
        let m = |x: Metric| r.latency.get(&x);
        let ttft = m(Metric::Ttft).map_or("-".into(), |s| {
            format!("{:.1} / {:.1} / {:.1}", s.p50, s.p90, s.p99)
        });
        let roof = match &r.roofline {
            Some(x) if x.impossible => "IMPOSSIBLE (above the bound)".to_string(),
            Some(x) => x.share.map_or("-".into(), |s| {
                format!("{:.0}% of {:.0} tok/s", s * 100.0, x.bound_tps)
            }),
            None => "model size unknown".into(),
        };
        let ci = r.confidence.get(&Metric::Ttft).map_or(String::new(), |i| {
            format!(
                " (TTFT p50 95% CI {:.1}-{:.1}, CV {:.1}%)",
                i.low,
                i.high,
                i.cv * 100.0
            )
        });
        let _ = write!(h, "<tr><td>{}</td><td class=\"{}\">{}</td><td>{ttft}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} × {}{}</td></tr>", escape(n), r.verdict, r.verdict, f(m(Metric::Tpot).map(|s| s.p50), 2), f(m(Metric::Itl).map(|s| s.p99), 2), f(m(Metric::Decode).map(|s| s.p50), 1), f(r.goodput.map(|g| g.rps), 2), escape(&roof), r.repeat, r.runs, ci);
    }
    h.push_str("</table>");
    for r in results {
        let memory = r.server_side.as_ref().and_then(|s| s.host_memory.as_ref());
        if let Some(m) = memory {
            let _ = write!(
                h,
                "<p class=\"note\">{}: {}</p>",
                escape(&name_of(r)),
                escape(&m.to_string())
            );
        }
        for n in &r.notes {
            let _ = write!(
                h,
                "<p class=\"note\">{}: {}</p>",
                escape(&name_of(r)),
                escape(n)
            );
        }
    }
}

/// One series per result, those with points.
fn per_result(
    results: &[&BenchResult],
    names: &[String],
    pick: &dyn Fn(&BenchResult) -> Vec<(f64, f64)>,
) -> Vec<Series> {
    results
        .iter()
        .zip(names)
        .map(|(r, n)| Series {
            name: n.clone(),
            points: pick(r),
            dashed: false,
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// A figure over a result's measured, complete suite requests.
fn measured(r: &BenchResult, f: &dyn Fn(&super::sample::Sample) -> Vec<f64>) -> Vec<f64> {
    r.samples
        .iter()
        .filter(|s| s.ok && !s.warmup)
        .flat_map(f)
        .collect()
}

fn line(
    id: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: Vec<Series>,
) -> Option<String> {
    svg::lines(&Chart {
        id,
        title,
        x_label,
        y_label,
        series,
        marks: Vec::new(),
    })
}

/// TTFT per turn of the first multi-turn case.
fn per_turn(r: &BenchResult) -> Vec<(f64, f64)> {
    r.cases
        .iter()
        .find(|c| c.ttft_p50_per_turn_ms.len() > 1)
        .map(|c| {
            c.ttft_p50_per_turn_ms
                .iter()
                .enumerate()
                .map(|(i, v)| ((i + 1) as f64, *v))
                .collect()
        })
        .unwrap_or_default()
}

fn charts(results: &[&BenchResult], names: &[String]) -> Vec<String> {
    let ttft = |r: &BenchResult| svg::cdf(&measured(r, &|s| s.ttft_ms.into_iter().collect()));
    let itl = |r: &BenchResult| {
        svg::cdf(&measured(r, &|s| match super::result::per_token_valid(s) {
            true => s.itl_ms.clone(),
            false => Vec::new(),
        }))
    };
    let mut out = Vec::new();
    out.extend(line(
        "ttft-cdf",
        "TTFT distribution (suite, measured runs)",
        "TTFT ms",
        "% of requests at or below",
        per_result(results, names, &ttft),
    ));
    out.extend(line(
        "itl-cdf",
        "ITL distribution (decoding streams)",
        "inter-token latency ms",
        "% of tokens at or below",
        per_result(results, names, &itl),
    ));
    out.extend(line(
        "ttft-turn",
        "TTFT p50 per turn (multi-turn cases)",
        "turn",
        "TTFT p50 ms",
        per_result(results, names, &per_turn),
    ));
    out.extend(depth_chart(results, names));
    out.extend(load_charts(results, names));
    out
}

fn depth_chart(results: &[&BenchResult], names: &[String]) -> Option<String> {
    let mut series = Vec::new();
    for (r, n) in results.iter().zip(names) {
        for cache in [CacheMode::Cold, CacheMode::WarmPrefix] {
            let points: Vec<(f64, f64)> = r
                .depth
                .iter()
                .filter(|p| p.cache == cache)
                .filter_map(|p| Some((p.depth as f64, p.ttft_ms.as_ref()?.p50)))
                .collect();
            let label = if cache == CacheMode::Cold {
                "cold"
            } else {
                "warm"
            };
            series.push(Series {
                name: format!("{n} {label}"),
                points,
                dashed: cache == CacheMode::WarmPrefix,
            });
        }
    }
    series.retain(|s| !s.points.is_empty());
    svg::lines(&Chart {
        id: "ttft-depth",
        title: "TTFT p50 per context depth (cold vs warm cache)",
        x_label: "prior context, tokens",
        y_label: "TTFT p50 ms",
        series,
        marks: Vec::new(),
    })
}

/// Every load level of a result (fixed levels and the sweep's) in level order, by kind.
fn levels(r: &BenchResult) -> Vec<&super::load::LoadRun> {
    let mut v: Vec<&super::load::LoadRun> = r
        .load
        .iter()
        .chain(r.sweep.iter().flat_map(|s| s.levels.iter()))
        .collect();
    v.sort_by(|a, b| a.profile.level().total_cmp(&b.profile.level()));
    v
}

fn load_charts(results: &[&BenchResult], names: &[String]) -> Vec<String> {
    let marks: Vec<(f64, String)> = results
        .iter()
        .filter_map(|r| {
            let s = r.sweep.as_ref()?;
            let unit = if s.kind == super::load::SweepKind::Rate {
                " req/s"
            } else {
                " streams"
            };
            s.knee
                .as_ref()
                .map(|k| (k.level, format!("knee {}{unit}", k.level)))
        })
        .collect();
    // Closed-loop levels count streams, open-loop ones requests/s: one line each.
    let series = |pick: &dyn Fn(&super::load::LoadRun) -> Option<f64>| -> Vec<Series> {
        let mut out = Vec::new();
        for (r, n) in results.iter().zip(names) {
            for (closed, unit) in [(true, "streams"), (false, "req/s")] {
                let points: Vec<(f64, f64)> = levels(r)
                    .iter()
                    .filter(|l| {
                        matches!(l.profile, super::load::Profile::Concurrency { .. }) == closed
                    })
                    .filter_map(|l| Some((l.profile.level(), pick(l)?)))
                    .collect();
                out.push(Series {
                    name: format!("{n} (x: {unit})"),
                    points,
                    dashed: !closed,
                });
            }
        }
        out.retain(|s| !s.points.is_empty());
        out
    };
    let x = "load level (streams or req/s)";
    let mut out = Vec::new();
    out.extend(svg::lines(&Chart {
        id: "throughput",
        title: "Output throughput vs load",
        x_label: x,
        y_label: "tok/s",
        series: series(&|l| Some(l.output_tps)),
        marks: marks.clone(),
    }));
    out.extend(svg::lines(&Chart {
        id: "ttft-load",
        title: "TTFT p50 vs load (from the scheduled send)",
        x_label: x,
        y_label: "TTFT p50 ms",
        series: series(&|l| l.ttft_ms.as_ref().map(|s| s.p50)),
        marks,
    }));
    out.extend(goodput_bars(results, names));
    out
}

/// Goodput per load level, one bar per result.
fn goodput_bars(results: &[&BenchResult], names: &[String]) -> Option<String> {
    let mut groups: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    for (i, r) in results.iter().enumerate() {
        for l in levels(r) {
            let label = l.profile.to_string();
            let at = match groups.iter().position(|g| g.0 == label) {
                Some(p) => p,
                None => {
                    groups.push((label, vec![None; results.len()]));
                    groups.len() - 1
                }
            };
            groups[at].1[i] = l.goodput_rps;
        }
    }
    svg::bars(
        "goodput",
        "Goodput: requests/s meeting the SLO",
        "req/s",
        names,
        &groups,
    )
}

fn load_table(h: &mut String, r: &BenchResult) {
    let all = levels(r);
    if all.is_empty() {
        return;
    }
    let _ = write!(h, "<h2>Load: {}</h2><table><tr><th>profile</th><th>asked req/s</th><th>achieved req/s</th><th>send lag p99 ms</th><th>done/failed</th><th>req/s</th><th>output tok/s</th><th>TTFT p50/p99 ms</th><th>TPOT p50 ms</th><th>goodput req/s (%)</th><th>server queue mean/max</th></tr>", escape(&name_of(r)));
    for l in all {
        let asked = match l.profile {
            super::load::Profile::Rate { rps, .. } => format!("{rps:.2}"),
            _ => "closed loop".into(),
        };
        let queue = l.server.as_ref().map_or("no metrics".into(), |s| {
            format!("{} / {}", f(s.waiting_mean, 1), f(s.waiting_max, 0))
        });
        let _ = write!(h, "<tr><td>{}</td><td>{asked}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{:.2}</td><td>{:.1}</td><td>{} / {}</td><td>{}</td><td>{} ({})</td><td>{queue}</td></tr>", escape(&l.profile.to_string()), f(l.achieved_rps, 3), f(l.send_lag_ms.as_ref().map(|s| s.p99), 2), l.completed, l.failed, l.request_rps, l.output_tps, f(l.ttft_ms.as_ref().map(|s| s.p50), 1), f(l.ttft_ms.as_ref().map(|s| s.p99), 1), f(l.tpot_ms.as_ref().map(|s| s.p50), 2), f(l.goodput_rps, 2), f(l.goodput_pct, 0));
    }
    h.push_str("</table>");
    if let Some(s) = &r.sweep {
        let _ = write!(h, "<p>Sweep: {}</p>", escape(&s.outcome));
    }
    if let Some(slo) = &r.slo {
        let _ = write!(h, "<p>SLO: {}</p>", escape(&slo.to_string()));
    }
}

fn depth_table(h: &mut String, r: &BenchResult) {
    if r.depth.is_empty() {
        return;
    }
    let _ = write!(h, "<h2>Context depth: {}</h2><table><tr><th>depth asked</th><th>cache</th><th>prompt tokens p50</th><th>cached tokens min-max</th><th>TTFT p50 ms</th><th>decode p50 tok/s</th><th>what the server's cache says</th></tr>", escape(&name_of(r)));
    for p in &r.depth {
        let cached = p
            .cached_tokens
            .as_ref()
            .map_or("-".into(), |s| format!("{:.0}-{:.0}", s.min, s.max));
        let _ = write!(h, "<tr><td>{}</td><td>{}</td><td>{}</td><td>{cached}</td><td>{}</td><td>{}</td><td>{}</td></tr>", p.depth, if p.cache == CacheMode::Cold { "cold" } else { "warm" }, f(p.prompt_tokens.as_ref().map(|s| s.p50), 0), f(p.ttft_ms.as_ref().map(|s| s.p50), 1), f(p.decode_tps.as_ref().map(|s| s.p50), 1), escape(&p.verdict));
    }
    h.push_str("</table>");
}

fn gates_table(h: &mut String, r: &BenchResult) {
    if r.gates.is_empty() {
        return;
    }
    let _ = write!(h, "<h2>Gates: {}</h2><table><tr><th>gate</th><th>rule</th><th>value</th><th>95% interval</th><th>outcome</th><th>detail</th></tr>", escape(&name_of(r)));
    for g in &r.gates {
        let outcome = g.outcome.as_str();
        let _ = write!(h, "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{outcome}\">{outcome}</td><td>{}</td></tr>", escape(&g.gate), escape(&g.rule), f(g.value, 1), g.interval.map_or("-".into(), |(a, b)| format!("{a:.1} to {b:.1}")), escape(&g.detail));
    }
    let _ = write!(
        h,
        "</table><p>verdict: <b class=\"{}\">{}</b> ({})</p>",
        r.verdict,
        r.verdict,
        escape(&r.verdict_reason)
    );
}

fn provenance(h: &mut String, results: &[&BenchResult]) {
    h.push_str("<h2>Provenance</h2><table><tr><th>result</th><th>recipe hash</th><th>image digest</th><th>model fingerprint</th><th>model</th><th>engine version</th><th>sparkctl</th><th>host</th><th>time</th><th>suite</th></tr>");
    let o = |v: &Option<String>| escape(v.as_deref().unwrap_or("unknown"));
    for r in results {
        let t = &r.target;
        let _ = write!(h, "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", escape(&name_of(r)), o(&t.recipe_hash), o(&t.image_digest), o(&t.model_fingerprint), escape(&t.model), o(&t.server_version), escape(&r.sparkctl_version), escape(&r.host), escape(&r.time), escape(&r.suite));
    }
    h.push_str("</table>");
}
