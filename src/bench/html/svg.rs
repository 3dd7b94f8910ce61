//! Inline SVG charts, drawn here so the report needs no script library and no network:
//! lines over a numeric x axis (distributions as CDFs, curves over load or depth) and
//! grouped bars. Every drawn mark carries `data-mark`, which the report's check counts.

use std::fmt::Write;

pub(crate) const COLORS: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1",
];

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(crate) struct Series {
    pub(in crate::bench) name: String,
    pub(in crate::bench) points: Vec<(f64, f64)>,
    /// Dashed (a second kind of the same result, e.g. warm beside cold).
    pub(in crate::bench) dashed: bool,
}

pub(crate) struct Chart<'a> {
    pub(in crate::bench) id: &'a str,
    pub(in crate::bench) title: &'a str,
    pub(in crate::bench) x_label: &'a str,
    pub(in crate::bench) y_label: &'a str,
    pub(in crate::bench) series: Vec<Series>,
    /// Vertical markers: (x, label), e.g. the knee.
    pub(in crate::bench) marks: Vec<(f64, String)>,
}

const W: f64 = 560.0;
const H: f64 = 320.0;
/// Legend line height.
const LINE: f64 = 13.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 48.0;

/// A "nice" step for about five ticks over `span`.
fn step(span: f64) -> f64 {
    let raw = (span / 5.0).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn fmt_tick(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

struct Axes {
    x0: f64,
    x1: f64,
    y1: f64,
    /// The plot's top: below the title and one legend line per series.
    top: f64,
}

impl Axes {
    fn px(&self, x: f64) -> f64 {
        LEFT + (x - self.x0) / (self.x1 - self.x0).max(1e-9) * (W - LEFT - RIGHT)
    }
    fn py(&self, y: f64) -> f64 {
        H - BOTTOM - y / self.y1.max(1e-9) * (H - self.top - BOTTOM)
    }
}

fn frame(svg: &mut String, c: &Chart, a: &Axes, x_ticks: bool) {
    let _ = write!(
        svg,
        "<svg class=\"chart\" id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"11\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"{LEFT}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>",
        escape(c.id),
        escape(c.title)
    );
    let ys = step(a.y1);
    let mut y = 0.0;
    while y <= a.y1 + 1e-9 {
        let py = a.py(y);
        let _ = write!(svg, "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", W - RIGHT, LEFT - 4.0, py + 4.0, fmt_tick(y));
        y += ys;
    }
    let xs = step(a.x1 - a.x0);
    let mut x = (a.x0 / xs).ceil() * xs;
    while x_ticks && x <= a.x1 + 1e-9 {
        let px = a.px(x);
        let _ = write!(svg, "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\"/><text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>", H - BOTTOM, H - BOTTOM + 4.0, H - BOTTOM + 16.0, fmt_tick(x));
        x += xs;
    }
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text><text transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0,
        escape(c.x_label),
        (a.top + H - BOTTOM) / 2.0,
        escape(c.y_label)
    );
}

fn top_for(entries: usize) -> f64 {
    TOP + LINE * entries as f64 + 6.0
}

/// One line per series under the title, long names cut.
fn legend(svg: &mut String, names: &[(String, bool)]) {
    for (i, (name, dashed)) in names.iter().enumerate() {
        let name: String = if name.chars().count() > 70 {
            name.chars().take(69).chain(['…']).collect()
        } else {
            name.clone()
        };
        let x = LEFT + 8.0;
        let y = TOP - 4.0 + i as f64 * LINE;
        let dash = if *dashed {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        };
        let _ = write!(svg, "<line x1=\"{x:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>", x + 16.0, COLORS[i % COLORS.len()], x + 20.0, y + 4.0, escape(&name));
    }
}

/// A line chart; None when there is nothing to draw.
pub(crate) fn lines(c: &Chart) -> Option<String> {
    let all: Vec<(f64, f64)> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    if all.is_empty() {
        return None;
    }
    let x0 = all
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .min(0.0);
    let x1 = all
        .iter()
        .map(|p| p.0)
        .chain(c.marks.iter().map(|m| m.0))
        .fold(f64::NEG_INFINITY, f64::max);
    let y1 = all.iter().map(|p| p.1).fold(0.0, f64::max) * 1.15;
    let a = Axes {
        x0,
        x1: if x1 > x0 { x1 } else { x0 + 1.0 },
        y1: if y1 > 0.0 { y1 } else { 1.0 },
        top: top_for(c.series.len()),
    };
    let mut svg = String::new();
    frame(&mut svg, c, &a, true);
    for (i, s) in c.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", a.px(x), a.py(y)))
            .collect();
        let dash = if s.dashed {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        };
        let _ = write!(svg, "<polyline data-mark=\"1\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>", pts.join(" "));
        for &(x, y) in s.points.iter().filter(|_| s.points.len() <= 40) {
            let _ = write!(svg, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"><title>{}: {} → {}</title></circle>", a.px(x), a.py(y), escape(&s.name), fmt_tick(x), fmt_tick(y));
        }
    }
    for (i, (x, label)) in c.marks.iter().enumerate() {
        let px = a.px(*x);
        let _ = write!(svg, "<line data-mark=\"1\" x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#c00\">{}</text>", a.top, H - BOTTOM, px + 4.0, a.top + 12.0 + 12.0 * i as f64, escape(label));
    }
    legend(
        &mut svg,
        &c.series
            .iter()
            .map(|s| (s.name.clone(), s.dashed))
            .collect::<Vec<_>>(),
    );
    svg.push_str("</svg>");
    Some(svg)
}

/// Grouped bars: one group per label, one bar per series (None: no bar).
pub(crate) fn bars(
    id: &str,
    title: &str,
    y_label: &str,
    names: &[String],
    groups: &[(String, Vec<Option<f64>>)],
) -> Option<String> {
    let max = groups
        .iter()
        .flat_map(|g| g.1.iter().flatten())
        .fold(0.0_f64, |m, v| m.max(*v));
    if groups.is_empty() || max <= 0.0 {
        return None;
    }
    let a = Axes {
        x0: 0.0,
        x1: 1.0,
        y1: max * 1.15,
        top: top_for(names.len()),
    };
    let c = Chart {
        id,
        title,
        x_label: "",
        y_label,
        series: Vec::new(),
        marks: Vec::new(),
    };
    let mut svg = String::new();
    frame(&mut svg, &c, &a, false);
    let slot = (W - LEFT - RIGHT) / groups.len() as f64;
    let bar = (slot * 0.8 / names.len().max(1) as f64).min(40.0);
    for (g, (label, values)) in groups.iter().enumerate() {
        let gx = LEFT + g as f64 * slot + slot * 0.1;
        for (i, v) in values.iter().enumerate() {
            let Some(v) = v else { continue };
            let (x, y) = (gx + i as f64 * bar, a.py(*v));
            let _ = write!(svg, "<rect data-mark=\"1\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {}</title></rect>", bar - 2.0, H - BOTTOM - y, COLORS[i % COLORS.len()], escape(&names[i]), fmt_tick(*v));
        }
        // Slanted, so long level names do not run into each other.
        let (lx, ly) = (gx + slot * 0.5, H - BOTTOM + 12.0);
        let _ = write!(
            svg,
            "<text x=\"{lx:.1}\" y=\"{ly:.1}\" font-size=\"9\" text-anchor=\"end\" transform=\"rotate(-20 {lx:.1} {ly:.1})\">{}</text>",
            escape(label)
        );
    }
    legend(
        &mut svg,
        &names.iter().map(|n| (n.clone(), false)).collect::<Vec<_>>(),
    );
    svg.push_str("</svg>");
    Some(svg)
}

/// The empirical CDF of `values`: (value, % at or below).
pub(crate) fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    // At most ~200 points: enough for the eye, small for the file.
    let every = (v.len() / 200).max(1);
    v.iter()
        .enumerate()
        .filter(|(i, _)| i % every == 0 || *i + 1 == v.len())
        .map(|(i, x)| (*x, (i + 1) as f64 / n * 100.0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_escape_their_text_and_mark_what_they_draw() {
        let c = Chart {
            id: "t",
            title: "a <b> & c",
            x_label: "x",
            y_label: "y",
            series: vec![Series {
                name: "s\"1".into(),
                points: vec![(0.0, 1.0), (2.0, 3.0)],
                dashed: false,
            }],
            marks: vec![(1.0, "knee".into())],
        };
        let svg = lines(&c).unwrap();
        assert!(svg.contains("a &lt;b&gt; &amp; c") && svg.contains("s&quot;1"));
        assert_eq!(svg.matches("data-mark").count(), 2);
        assert!(lines(&Chart {
            series: Vec::new(),
            ..c
        })
        .is_none());
        assert_eq!(step(97.0), 20.0);
        assert_eq!(cdf(&[3.0, 1.0, 2.0, 4.0]).last(), Some(&(4.0, 100.0)));
    }
}
