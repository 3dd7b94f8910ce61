//! A try's HTML report (`STATE/tries/ID.html`): its variants' table — what each changed,
//! its verdict, its figures against variant 0, or why it measured nothing — above the
//! benchmark report of every variant that measured (charts side by side, as `bench
//! compare` draws them). One file, nothing loaded from elsewhere.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::compare;
use super::Trial;
use crate::bench::html::svg::escape;
use crate::bench::result::BenchResult;
use crate::error::Result;

/// Writes the report beside the try's record; its path.
pub(crate) fn write(trial: &Trial, state: &crate::state::StateDir) -> Result<PathBuf> {
    let results: Vec<BenchResult> = (trial.variants.iter())
        .filter_map(|v| v.measured.as_ref()?.bench.as_ref())
        .filter_map(|p| serde_json::from_slice(&std::fs::read(p).ok()?).ok())
        .collect();
    let refs: Vec<&BenchResult> = results.iter().collect();
    let title = format!("sparkctl try {} ({})", trial.recipe, trial.id);
    let html = crate::bench::html::report_with(Some((&title, &variants(trial))), &refs);
    let path = trial.path(state)?.with_extension("html");
    crate::state::write_atomic(&path, html.as_bytes())?;
    Ok(path)
}

/// The variants' table: one row each, measured or not.
fn variants(trial: &Trial) -> String {
    let mut h = String::from(
        "<h2>Variants</h2><table><tr><th>#</th><th>variant</th><th>changes</th><th>verdict</th>\
         <th>TTFT p50 ms</th><th>decode p50 tok/s</th><th>decode vs base</th><th>TTFT vs base</th>\
         <th>eval</th><th>start s</th><th>held GB</th></tr>",
    );
    let f = |v: Option<f64>, d: usize| v.map_or("–".into(), |x| format!("{x:.d$}"));
    for v in &trial.variants {
        let (decode, ttft) = compare::against_base(trial, v);
        let _ = write!(
            h,
            "<tr data-variant=\"{}\"><td>{}</td><td>{}</td><td>{}</td>",
            v.index,
            v.index,
            escape(&v.name),
            escape(&v.label)
        );
        match &v.measured {
            Some(m) if m.failed.is_none() => {
                let verdict = m.verdict.map_or("–".into(), |x| x.to_string());
                let _ = write!(
                    h,
                    "<td class=\"{verdict}\">{verdict}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    f(m.ttft_p50_ms, 1),
                    f(m.decode_tps_p50, 1),
                    decode,
                    ttft,
                    m.eval_accuracy_pct.map_or("–".into(), |a| format!("{a:.0}%")),
                    f(m.start_s, 1),
                    f(m.held_gb, 2)
                );
            }
            Some(m) => {
                let why = m.failed.as_deref().unwrap_or_default();
                let _ = write!(
                    h,
                    "<td class=\"fail\">failed</td><td colspan=\"7\">{}</td></tr>",
                    escape(&why.chars().take(400).collect::<String>())
                );
            }
            None => h.push_str("<td colspan=\"8\">not measured</td></tr>"),
        }
    }
    h.push_str("</table>");
    for m in trial.variants.iter().filter_map(|v| v.measured.as_ref()) {
        if let Some(line) = &m.eval_vs_base {
            let _ = write!(h, "<p class=\"note\">Evaluation: {}</p>", escape(line));
        }
    }
    let _ = match compare::pick(trial) {
        Some(i) => write!(
            h,
            "<p>The pick (best decode p50 among the variants that passed every gate): variant \
             {i}, {}. A difference against variant 0 is called only where the {} runs' 95% \
             intervals do not overlap.</p>",
            escape(&trial.variants[i].label),
            trial.repeat
        ),
        None => write!(h, "<p class=\"fail\">No variant passed every gate.</p>"),
    };
    h
}
