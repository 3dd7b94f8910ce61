//! Prometheus' exposition formats for the front door's and the simulated engine's
//! `/metrics`, written by one encoder, prometheus-client's: the text format 0.0.4 that
//! scrapers read unless they ask for more, OpenMetrics 1.0 when a scraper's `Accept` names
//! it. Each side keeps its figures as it counts them (the door's per-token path is not
//! the encoder's business) and hands them over at each scrape (`Exposed`): the names,
//! labels, values and bounds are theirs; every line is the encoder's.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use hyper::header::{HeaderMap, ACCEPT};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    prometheus_text, text, DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, MetricEncoder,
    NoLabelSet,
};
pub(crate) use prometheus_client::metrics::MetricType as Kind;
use prometheus_client::registry::Registry;

/// A series' labels, in the order they are written.
pub(crate) type Labels<'a> = [(&'a str, &'a str)];

/// The format a page is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The text format 0.0.4: what the door and vLLM have always answered.
    Text,
    /// OpenMetrics 1.0, for a scraper that asks for it.
    OpenMetrics,
}

impl Format {
    /// What a scraper's `Accept` asks for: OpenMetrics when it names
    /// `application/openmetrics-text` with a weight above 0 (Prometheus does, before the
    /// text format), else the text format.
    pub(crate) fn asked(headers: &HeaderMap) -> Format {
        let named = |range: &str| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        };
        let asked = headers
            .get_all(ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(named);
        match asked {
            true => Format::OpenMetrics,
            false => Format::Text,
        }
    }

    /// The page's `Content-Type`.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            // As it always was (the crate's constant adds `; charset=utf-8`).
            Format::Text => "text/plain; version=0.0.4",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// What one side puts on a page: its families, each written as the page is.
pub(crate) trait Exposed: Send + Sync + 'static {
    fn expose(&self, page: &mut Page<'_>) -> fmt::Result;
}

impl<T: Exposed + ?Sized> Exposed for Arc<T> {
    fn expose(&self, page: &mut Page<'_>) -> fmt::Result {
        self.as_ref().expose(page)
    }
}

/// The page in `format`: each part's families in turn.
pub(crate) fn encode(format: Format, parts: Vec<Box<dyn Exposed>>) -> String {
    let mut registry = Registry::default();
    for part in parts {
        registry.register_collector(Box::new(Part(part)));
    }
    let mut out = String::new();
    let wrote = match format {
        Format::Text => prometheus_text::encode(&mut out, &registry),
        Format::OpenMetrics => text::encode(&mut out, &registry),
    };
    // Writing to a String fails only where an `expose` made up an error of its own.
    wrote.expect("a page is written to a String");
    out
}

/// One part of a page, as the encoder collects it at each scrape.
struct Part(Box<dyn Exposed>);

impl fmt::Debug for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("exposition::Part")
    }
}

impl Collector for Part {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        self.0.expose(&mut Page(encoder))
    }
}

/// A page being written.
pub(crate) struct Page<'a>(DescriptorEncoder<'a>);

impl Page<'_> {
    /// A family, under its HELP and TYPE; its series follow. A counter is named without
    /// its `_total`, which the encoder writes.
    pub(crate) fn family<'s>(
        &'s mut self,
        name: &'s str,
        help: &str,
        kind: Kind,
    ) -> Result<Family<'s>, fmt::Error> {
        debug_assert!(
            kind != Kind::Counter || !name.ends_with("_total"),
            "{name}: the encoder adds _total"
        );
        Ok(Family(self.0.encode_descriptor(name, help, None, kind)?))
    }
}

/// One family's series.
pub(crate) struct Family<'a>(MetricEncoder<'a>);

impl Family<'_> {
    pub(crate) fn counter(
        &mut self,
        labels: &Labels<'_>,
        value: impl EncodeCounterValue,
    ) -> fmt::Result {
        self.0
            .encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&value, None)
    }

    pub(crate) fn gauge(
        &mut self,
        labels: &Labels<'_>,
        value: impl EncodeGaugeValue,
    ) -> fmt::Result {
        self.0.encode_family(&labels)?.encode_gauge(&value)
    }

    /// A histogram: each bound with the observations in its bucket alone (above the bound
    /// before it), `count` observations in all (those above the last bound too), and
    /// their sum.
    pub(crate) fn histogram(
        &mut self,
        labels: &Labels<'_>,
        buckets: impl Iterator<Item = (f64, u64)>,
        count: u64,
        sum: f64,
    ) -> fmt::Result {
        let mut buckets: Vec<(f64, u64)> = buckets.collect();
        let within: u64 = buckets.iter().map(|(_, n)| n).sum();
        buckets.push((f64::INFINITY, count.saturating_sub(within)));
        self.0
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(sum, count, &buckets, None::<&HashMap<usize, _>>)
    }
}

/// A page read back, for comparing two whatever their formatting: its HELP and TYPE
/// lines in order, and each sample by its name and labels (sorted, a bound read as a
/// number).
#[cfg(test)]
#[derive(Debug, PartialEq)]
pub(crate) struct Scrape {
    heads: Vec<String>,
    pub(crate) samples: std::collections::BTreeMap<(String, Vec<(String, String)>), f64>,
}

#[cfg(test)]
impl Scrape {
    pub(crate) fn parse(page: &str) -> Scrape {
        let label = regex::Regex::new(r#"([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)""#).unwrap();
        let mut s = Scrape {
            heads: Vec::new(),
            samples: std::collections::BTreeMap::new(),
        };
        for line in page.lines().filter(|l| !l.is_empty() && *l != "# EOF") {
            if line.starts_with('#') {
                s.heads.push(line.to_string());
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let labels: Vec<(&str, &str)> = label
                .captures_iter(labels)
                .map(|c| (c.get(1).unwrap().as_str(), c.get(2).unwrap().as_str()))
                .collect();
            let key = Scrape::key(name, &labels);
            let old = s.samples.insert(key, value.parse().expect("a number"));
            assert!(old.is_none(), "{line} twice");
        }
        s
    }

    /// The sample `name{labels}`, whatever the labels' order.
    pub(crate) fn get(&self, name: &str, labels: &Labels<'_>) -> Option<f64> {
        self.samples.get(&Scrape::key(name, labels)).copied()
    }

    fn key(name: &str, labels: &Labels<'_>) -> (String, Vec<(String, String)>) {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| {
                let v = match (*k, *v) {
                    ("le", b) if b != "+Inf" => format!("{:?}", b.parse::<f64>().unwrap()),
                    (_, v) => v.to_string(),
                };
                (k.to_string(), v)
            })
            .collect();
        labels.sort();
        (name.to_string(), labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> Format {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, v.parse().unwrap());
        Format::asked(&h)
    }

    #[test]
    fn openmetrics_only_for_a_scraper_that_asks_for_it() {
        // Prometheus' own Accept, then curl's, a browser's, none, a refusal.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(accept(prometheus), Format::OpenMetrics);
        assert_eq!(accept("Application/OpenMetrics-Text"), Format::OpenMetrics);
        assert_eq!(accept("*/*"), Format::Text);
        assert_eq!(
            accept("text/html,application/xhtml+xml,*/*;q=0.8"),
            Format::Text
        );
        assert_eq!(Format::asked(&HeaderMap::new()), Format::Text);
        assert_eq!(
            accept("application/openmetrics-text; q=0, text/plain"),
            Format::Text
        );
        assert_eq!(Format::Text.content_type(), "text/plain; version=0.0.4");
    }

    struct Two;

    impl Exposed for Two {
        fn expose(&self, page: &mut Page<'_>) -> fmt::Result {
            let mut f = page.family("demo_requests", "Requests.", Kind::Counter)?;
            f.counter(&[("code", "200")], 3u64)?;
            f.counter(&[("code", "5\"x")], 1u64)?;
            let mut f = page.family("demo_wait_seconds", "Waits.", Kind::Histogram)?;
            f.histogram(&[], [(0.5, 1), (1.0, 0)].into_iter(), 3, 4.25)
        }
    }

    #[test]
    fn both_formats_hold_the_same_samples_and_only_openmetrics_ends_with_eof() {
        let text = encode(Format::Text, vec![Box::new(Two)]);
        assert_eq!(
            text,
            "# HELP demo_requests_total Requests.\n# TYPE demo_requests_total counter\n\
             demo_requests_total{code=\"200\"} 3\ndemo_requests_total{code=\"5\\\"x\"} 1\n\
             # HELP demo_wait_seconds Waits.\n# TYPE demo_wait_seconds histogram\n\
             demo_wait_seconds_bucket{le=\"0.5\"} 1\ndemo_wait_seconds_bucket{le=\"1\"} 1\n\
             demo_wait_seconds_bucket{le=\"+Inf\"} 3\ndemo_wait_seconds_sum 4.25\n\
             demo_wait_seconds_count 3\n"
        );
        let open = encode(Format::OpenMetrics, vec![Box::new(Two)]);
        assert!(open.ends_with("\n# EOF\n"), "{open}");
        assert!(open.contains("# TYPE demo_requests counter\n"), "{open}");
        assert_eq!(
            Scrape::parse(&open).samples,
            Scrape::parse(&text).samples,
            "{open}"
        );
    }
}
