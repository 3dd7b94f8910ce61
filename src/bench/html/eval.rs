//! The report's evaluation section: each set's score, and item by item which answers were
//! right — the candidate's beside production's on the same items, when it was compared.

use std::fmt::Write;

use super::svg::escape;
use super::{name_of, BenchResult};

/// A cell: right, wrong (with why), or not asked.
fn cell(right: Option<bool>, why: &str) -> String {
    match right {
        Some(true) => "<td class=\"pass\" data-right=\"1\">right</td>".into(),
        Some(false) => format!(
            "<td class=\"fail\" data-right=\"0\" title=\"{}\">wrong</td>",
            escape(why)
        ),
        None => "<td>-</td>".into(),
    }
}

pub(super) fn section(h: &mut String, results: &[&BenchResult]) {
    for r in results {
        let Some(e) = &r.eval else { continue };
        let c = e.candidate();
        let _ = write!(
            h,
            "<h2>Evaluation: {}</h2><p>{}/{} right ({:.1}%), {:.0} items per minute</p><table><tr><th>set</th><th>items</th><th>right</th><th>accuracy</th><th>not answered</th></tr>",
            escape(&name_of(r)),
            c.right(),
            c.total(),
            c.accuracy_pct(),
            c.items_per_minute()
        );
        for s in c.sets() {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{}</td></tr>",
                escape(s.set()),
                s.items(),
                s.right(),
                s.accuracy_pct(),
                s.failed()
            );
        }
        h.push_str("</table>");
        if let Some(p) = e.paired() {
            let _ = write!(h, "<p>{}</p>", escape(&p.describe()));
        } else if let Some(why) = e.production_missing() {
            let _ = write!(
                h,
                "<p class=\"note\">not compared with production: {}</p>",
                escape(why)
            );
        }
        let theirs = e
            .production()
            .map(crate::eval::Report::answered)
            .unwrap_or_default();
        let compared = e.production().is_some();
        let _ = write!(
            h,
            "<table class=\"eval-items\"><tr><th>item</th><th>prompt</th><th>{}</th>{}<th>answer</th></tr>",
            escape(&name_of(r)),
            if compared { "<th>production</th>" } else { "" }
        );
        for i in c.items() {
            let why = i.failed().or(i.why()).unwrap_or("");
            let mine = if i.failed().is_some() {
                None
            } else {
                Some(i.right())
            };
            let prod = if compared {
                cell(theirs.get(i.key()).copied(), "")
            } else {
                String::new()
            };
            let _ = write!(
                h,
                "<tr data-key=\"{}\"><td>{}</td><td>{}</td>{}{prod}<td>{}</td></tr>",
                escape(i.key()),
                escape(i.key()),
                escape(i.prompt()),
                cell(mine, why),
                escape(i.answer())
            );
        }
        h.push_str("</table>");
    }
}
