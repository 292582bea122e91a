//! Wall-clock time, in one place: Unix seconds now, and the UTC stamps the tools put in names.

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// UTC `YYYYmmddHHMMSS` for a Unix time (docs/migrating.md, step 4c's branch stamp).
pub fn utc_stamp(unix: u64) -> String {
    let t = i64::try_from(unix)
        .ok()
        .and_then(|u| time::OffsetDateTime::from_unix_timestamp(u).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// ISO 8601 UTC (`2026-12-04T14:05:09Z`) for a Unix time, for people and event streams.
pub fn iso_utc(unix: u64) -> String {
    let s = utc_stamp(unix);
    format!(
        "{}-{}-{}T{}:{}:{}Z",
        &s[0..4],
        &s[4..6],
        &s[6..8],
        &s[8..10],
        &s[10..12],
        &s[12..14]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps() {
        assert_eq!(utc_stamp(0), "19700101000000");
        assert_eq!(utc_stamp(1_796_212_800), "20261202120000");
        assert_eq!(utc_stamp(1_709_208_000), "20240229120000");
    }
}
