//! Human units in recipes: durations (`90s`, `6m`) and sizes (`16g`, `512m`).
//!
//! Both keep the text the user wrote so `recipes show` echoes it back unchanged.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A duration written as a number with a unit: `ms`, `s`, `m`, `h` (`1m30s` also works).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HumanDuration(pub(crate) Duration);

/// The longest duration sparkctl takes: loading a model, a benchmark or a simulated delay
/// never needs more than a day, and anything this large is a typo (`18446744073709551616s`
/// once panicked converting to a `Duration`).
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// The largest size: 1024 TiB, far past any memory or shm size, and safely inside the
/// engine's signed 64-bit byte counts.
pub(crate) const MAX_SIZE: u64 = 1 << 50;

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "`{text}` is not a duration; write e.g. `90s`, `6m` or `250ms`"
            ));
        }
        let number: f64 = rest[..digits].parse().map_err(|_| {
            format!("`{text}` is not a duration; write e.g. `90s`, `6m` or `250ms`")
        })?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("`{text}` has no unit; write e.g. `{number}s`")),
            other => {
                return Err(format!(
                    "`{text}` is not a duration: `{}` is not a unit; use ms, s, m or h (e.g. `6m`)",
                    other.trim()
                ))
            }
        };
        rest = &rest[unit_len..];
        let too_long = || format!("`{text}` is longer than the most sparkctl accepts (24h)");
        let part = Duration::try_from_secs_f64(number * scale).map_err(|_| too_long())?;
        total = total
            .checked_add(part)
            .filter(|t| *t <= MAX_DURATION)
            .ok_or_else(too_long)?;
    }
    Ok(total)
}

pub(crate) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".into()
    } else if ms % 3_600_000 == 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Lower-case hex of a digest (`sha256:` + this is how sparkctl prints hashes).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Seconds since the Unix epoch, now.
pub(crate) fn unix_now() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// `2026-11-23T01:50:07Z` for a Unix time in seconds (UTC; no time-zone database needed).
pub(crate) fn utc_stamp(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `3h12m`, `4m05s`, `12s`: how long something has run, for tables.
pub(crate) fn format_uptime(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl std::str::FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(HumanDuration)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text)
            .map(HumanDuration)
            .map_err(de::Error::custom)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl JsonSchema for HumanDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$",
            "description": "a duration such as 90s, 6m, 250ms or 1m30s",
            "examples": ["6m", "90s"]
        })
    }
}

/// A byte size written like Docker's `--shm-size`: `16g`, `512m`, `1024k`, or bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteSize(pub(crate) u64);

pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, scale) = match t.char_indices().last() {
        Some((i, 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'm')) => (&t[..i], 1u64 << 20),
        Some((i, 'g')) => (&t[..i], 1u64 << 30),
        Some((i, 't')) => (&t[..i], 1u64 << 40),
        _ => (t, 1),
    };
    let n = digits
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{text}` is not a size; write e.g. `16g` or `512m`"))?;
    n.checked_mul(scale)
        .filter(|n| *n <= MAX_SIZE)
        .ok_or_else(|| format!("`{text}` is larger than the most sparkctl accepts (1024t)"))
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n == 0 {
            return f.write_str("0");
        }
        for (unit, shift) in [("t", 40), ("g", 30), ("m", 20), ("k", 10)] {
            if n % (1 << shift) == 0 {
                return write!(f, "{}{unit}", n >> shift);
            }
        }
        write!(f, "{n}")
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_size(&text).map(ByteSize).map_err(de::Error::custom)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> Cow<'static, str> {
        "ByteSize".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^[0-9]+[kKmMgGtT]?[bB]?$",
            "description": "a size such as 16g or 512m",
            "examples": ["16g"]
        })
    }
}

/// Now, as `utc_stamp` writes it.
pub(crate) fn now_utc() -> String {
    utc_stamp(unix_now().as_secs())
}

/// The 12-character form `docker ps` shows of an id or digest (`sha256:` dropped).
pub(crate) fn short_id(id: &str) -> &str {
    let id = id.strip_prefix("sha256:").unwrap_or(id);
    &id[..id.len().min(12)]
}

/// A digest shortened as `sha256:` and 12 characters.
pub(crate) fn short_digest(digest: &str) -> String {
    format!("sha256:{}", short_id(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps_match_the_calendar() {
        assert_eq!(utc_stamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_stamp(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_stamp(1_795_398_607), "2026-11-23T01:50:07Z");
    }

    #[test]
    fn durations_parse_and_print_back() {
        assert_eq!(parse_duration("6m").unwrap(), Duration::from_secs(360));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(format_duration(Duration::from_secs(360)), "6m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert!(parse_duration("6").unwrap_err().contains("no unit"));
        assert!(parse_duration("6d")
            .unwrap_err()
            .contains("`d` is not a unit"));
        assert!(parse_duration("fast").is_err());
        // Out of range is an error, never a panic.
        let inf = format!("{}s", "9".repeat(400));
        for huge in [
            "18446744073709551616s",
            &inf,
            "25h",
            "99999999999999999999h",
            "12h13h",
        ] {
            assert!(parse_duration(huge).unwrap_err().contains("24h"), "{huge}");
        }
        assert_eq!(parse_duration("24h").unwrap(), MAX_DURATION);
    }

    #[test]
    fn sizes_parse_and_print_back() {
        assert_eq!(parse_size("16g").unwrap(), 16 << 30);
        assert_eq!(parse_size("512MB").unwrap(), 512 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(ByteSize(16 << 30).to_string(), "16g");
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("16777215t").unwrap_err().contains("1024t"));
        assert!(parse_size("99999999999999999999").is_err());
    }
}
