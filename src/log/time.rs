//! `%t` and `%{FORMAT}t`: the time a request was received, always in UTC.
//!
//! The calendar breakdown and the `%t` text are cached per second in a [`Calendar`], so a busy
//! log does the date arithmetic about once a second rather than once a line.

use super::num::{push_u64, push_u64_padded, saturate};
use std::time::{SystemTime, UNIX_EPOCH};

/// How a time escape prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TimeFormat {
    /// `%t`: `[10/Oct/2000:13:55:36 +0000]`
    Clf,
    /// Seconds since the epoch.
    Sec,
    /// Milliseconds since the epoch.
    Msec,
    /// Microseconds since the epoch.
    Usec,
    /// The millisecond part, three digits.
    MsecFrac,
    /// The microsecond part, six digits.
    UsecFrac,
    /// A `strftime` pattern, pre-split into parts.
    Strftime(Box<[Strf]>),
}

/// One part of a compiled `strftime` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Strf {
    Literal(Box<[u8]>),
    Field(Field),
}

/// The `strftime` conversions that do not depend on a locale or on week numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Year,
    Century,
    Year2,
    Month,
    MonthAbbr,
    MonthName,
    Day,
    DaySpace,
    Hour,
    HourSpace,
    Hour12,
    Hour12Space,
    Minute,
    Second,
    AmPm,
    WeekdayAbbr,
    WeekdayName,
    /// `%u`: Monday is 1, Sunday 7.
    WeekdayMon1,
    /// `%w`: Sunday is 0.
    WeekdaySun0,
    /// `%j`: 001-366.
    YearDay,
    Epoch,
    TzOffset,
    TzName,
}

/// Parses the argument of `%{...}t`.
pub(crate) fn parse(arg: &str) -> Result<TimeFormat, String> {
    Ok(match arg {
        "sec" => TimeFormat::Sec,
        "msec" => TimeFormat::Msec,
        "usec" => TimeFormat::Usec,
        "msec_frac" => TimeFormat::MsecFrac,
        "usec_frac" => TimeFormat::UsecFrac,
        _ => TimeFormat::Strftime(compile_strftime(arg)?),
    })
}

/// The per-log calendar: the last second logged, broken down and as `%t` text.
#[derive(Debug, Default)]
pub(crate) struct Calendar {
    second: Option<u64>,
    tm: Tm,
    clf: Vec<u8>,
}

impl Calendar {
    fn at(&mut self, second: u64) -> (&Tm, &[u8]) {
        if self.second != Some(second) {
            self.tm = Tm::from_epoch(second);
            self.clf.clear();
            push_clf(&mut self.clf, &self.tm);
            self.second = Some(second);
        }
        (&self.tm, &self.clf)
    }
}

/// Appends `at` in format `f`.
pub(crate) fn push_time(
    out: &mut Vec<u8>,
    f: &TimeFormat,
    at: SystemTime,
    calendar: &mut Calendar,
) {
    // A clock before 1970 is a broken clock; log the epoch rather than fail.
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    match f {
        TimeFormat::Clf => out.extend_from_slice(calendar.at(since.as_secs()).1),
        TimeFormat::Sec => push_u64(out, since.as_secs()),
        TimeFormat::Msec => push_u64(out, saturate(since.as_millis())),
        TimeFormat::Usec => push_u64(out, saturate(since.as_micros())),
        TimeFormat::MsecFrac => push_u64_padded(out, since.subsec_millis().into(), 3, b'0'),
        TimeFormat::UsecFrac => push_u64_padded(out, since.subsec_micros().into(), 6, b'0'),
        TimeFormat::Strftime(parts) => {
            let tm = calendar.at(since.as_secs()).0;
            for part in parts {
                match part {
                    Strf::Literal(text) => out.extend_from_slice(text),
                    Strf::Field(field) => push_field(out, *field, tm),
                }
            }
        }
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A UTC calendar breakdown of one second.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Tm {
    epoch: u64,
    year: u64,
    /// 1-12
    month: u64,
    /// 1-31
    day: u64,
    hour: u64,
    minute: u64,
    second: u64,
    /// 0 is Sunday.
    weekday: u64,
    /// 0-365
    yearday: u64,
}

impl Tm {
    fn from_epoch(secs: u64) -> Tm {
        const CUMULATIVE_DAYS: [u64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let days = secs / 86_400;
        let rem = secs % 86_400;
        let (year, month, day) = civil_from_days(days);
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        let yearday =
            CUMULATIVE_DAYS[(month - 1) as usize] + day - 1 + u64::from(leap && month > 2);
        Tm {
            epoch: secs,
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
            weekday: (days + 4) % 7, // 1970-01-01 was a Thursday
            yearday,
        }
    }
}

/// (year, month 1-12, day 1-31) of the proleptic Gregorian calendar for days since 1970-01-01.
/// Counts in 400-year eras starting on March 1st, so the leap day ends each era's year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = z / 146_097;
    let doe = z % 146_097; // day of era, 0..146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era, 0..399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of year from March 1st
    let mp = (5 * doy + 2) / 153; // month from March, 0..11
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u64::from(month <= 2);
    (year, month, day)
}

/// `[10/Oct/2000:13:55:36 +0000]`
fn push_clf(out: &mut Vec<u8>, tm: &Tm) {
    out.push(b'[');
    push_u64_padded(out, tm.day, 2, b'0');
    out.push(b'/');
    out.extend_from_slice(&MONTHS[(tm.month - 1) as usize].as_bytes()[..3]);
    out.push(b'/');
    push_u64_padded(out, tm.year, 4, b'0');
    out.push(b':');
    push_u64_padded(out, tm.hour, 2, b'0');
    out.push(b':');
    push_u64_padded(out, tm.minute, 2, b'0');
    out.push(b':');
    push_u64_padded(out, tm.second, 2, b'0');
    out.extend_from_slice(b" +0000]");
}

fn push_field(out: &mut Vec<u8>, field: Field, tm: &Tm) {
    let month = MONTHS[(tm.month - 1) as usize].as_bytes();
    let weekday = WEEKDAYS[tm.weekday as usize].as_bytes();
    let hour12 = if tm.hour % 12 == 0 { 12 } else { tm.hour % 12 };
    match field {
        Field::Year => push_u64(out, tm.year),
        Field::Century => push_u64_padded(out, tm.year / 100, 2, b'0'),
        Field::Year2 => push_u64_padded(out, tm.year % 100, 2, b'0'),
        Field::Month => push_u64_padded(out, tm.month, 2, b'0'),
        Field::MonthAbbr => out.extend_from_slice(&month[..3]),
        Field::MonthName => out.extend_from_slice(month),
        Field::Day => push_u64_padded(out, tm.day, 2, b'0'),
        Field::DaySpace => push_u64_padded(out, tm.day, 2, b' '),
        Field::Hour => push_u64_padded(out, tm.hour, 2, b'0'),
        Field::HourSpace => push_u64_padded(out, tm.hour, 2, b' '),
        Field::Hour12 => push_u64_padded(out, hour12, 2, b'0'),
        Field::Hour12Space => push_u64_padded(out, hour12, 2, b' '),
        Field::Minute => push_u64_padded(out, tm.minute, 2, b'0'),
        Field::Second => push_u64_padded(out, tm.second, 2, b'0'),
        Field::AmPm => out.extend_from_slice(if tm.hour < 12 { b"AM" } else { b"PM" }),
        Field::WeekdayAbbr => out.extend_from_slice(&weekday[..3]),
        Field::WeekdayName => out.extend_from_slice(weekday),
        Field::WeekdayMon1 => push_u64(out, if tm.weekday == 0 { 7 } else { tm.weekday }),
        Field::WeekdaySun0 => push_u64(out, tm.weekday),
        Field::YearDay => push_u64_padded(out, tm.yearday + 1, 3, b'0'),
        Field::Epoch => push_u64(out, tm.epoch),
        Field::TzOffset => out.extend_from_slice(b"+0000"),
        Field::TzName => out.extend_from_slice(b"UTC"),
    }
}

/// Splits a `strftime` pattern; composite conversions (`%T`, `%F`, ...) are expanded here.
fn compile_strftime(pattern: &str) -> Result<Box<[Strf]>, String> {
    let mut parts = Vec::new();
    let mut literal = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            let mut buf = [0u8; 4];
            literal.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let Some(conv) = chars.next() else {
            return Err(format!("`%{{{pattern}}}t`: pattern ends with `%`"));
        };
        let fields: &[Field] = match conv {
            '%' => {
                literal.push(b'%');
                continue;
            }
            'Y' => &[Field::Year],
            'C' => &[Field::Century],
            'y' => &[Field::Year2],
            'm' => &[Field::Month],
            'b' | 'h' => &[Field::MonthAbbr],
            'B' => &[Field::MonthName],
            'd' => &[Field::Day],
            'e' => &[Field::DaySpace],
            'H' => &[Field::Hour],
            'k' => &[Field::HourSpace],
            'I' => &[Field::Hour12],
            'l' => &[Field::Hour12Space],
            'M' => &[Field::Minute],
            'S' => &[Field::Second],
            'p' => &[Field::AmPm],
            'a' => &[Field::WeekdayAbbr],
            'A' => &[Field::WeekdayName],
            'u' => &[Field::WeekdayMon1],
            'w' => &[Field::WeekdaySun0],
            'j' => &[Field::YearDay],
            's' => &[Field::Epoch],
            'z' => &[Field::TzOffset],
            'Z' => &[Field::TzName],
            'T' => &[Field::Hour, Field::Minute, Field::Second],
            'R' => &[Field::Hour, Field::Minute],
            'F' => &[Field::Year, Field::Month, Field::Day],
            'D' => &[Field::Month, Field::Day, Field::Year2],
            _ => {
                return Err(format!(
                    "`%{{{pattern}}}t`: strftime conversion `%{conv}` is not supported \
                     (locale and week-number conversions are not)"
                ))
            }
        };
        let separator: &[u8] = match conv {
            'T' | 'R' => b":",
            'F' => b"-",
            _ => b"/",
        };
        for (i, field) in fields.iter().enumerate() {
            if i > 0 {
                literal.extend_from_slice(separator);
            }
            if !literal.is_empty() {
                parts.push(Strf::Literal(std::mem::take(&mut literal).into()));
            }
            parts.push(Strf::Field(*field));
        }
    }
    if !literal.is_empty() {
        parts.push(Strf::Literal(literal.into()));
    }
    Ok(parts.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn clf(secs: u64) -> String {
        let mut v = Vec::new();
        push_clf(&mut v, &Tm::from_epoch(secs));
        String::from_utf8(v).unwrap()
    }

    fn strftime(pattern: &str, secs: u64) -> String {
        let f = parse(pattern).unwrap();
        let mut v = Vec::new();
        push_time(
            &mut v,
            &f,
            UNIX_EPOCH + Duration::from_secs(secs),
            &mut Calendar::default(),
        );
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn formats_clf_dates() {
        assert_eq!(clf(0), "[01/Jan/1970:00:00:00 +0000]");
        assert_eq!(clf(971_185_536), "[10/Oct/2000:13:45:36 +0000]");
        // Leap days, and the day after, in a century leap year and an ordinary one.
        assert_eq!(clf(951_782_400), "[29/Feb/2000:00:00:00 +0000]");
        assert_eq!(clf(951_868_799), "[29/Feb/2000:23:59:59 +0000]");
        assert_eq!(clf(1_709_251_199), "[29/Feb/2024:23:59:59 +0000]");
        assert_eq!(clf(1_709_251_200), "[01/Mar/2024:00:00:00 +0000]");
        assert_eq!(clf(1_735_689_599), "[31/Dec/2024:23:59:59 +0000]");
    }

    #[test]
    fn calendar_advances_one_day_at_a_time() {
        // Walk day by day across several years, including 2000's leap day.
        let mut prev = Tm::from_epoch(10_950 * 86_400); // 1999-12-25, a Saturday
        assert_eq!((prev.weekday, prev.yearday), (6, 358));
        for d in 10_951..12_500 {
            let cur = Tm::from_epoch(d * 86_400);
            let (y, m, day) = (prev.year, prev.month, prev.day);
            assert!(
                [(y, m, day + 1), (y, m + 1, 1), (y + 1, 1, 1)]
                    .contains(&(cur.year, cur.month, cur.day)),
                "{prev:?} -> {cur:?}"
            );
            assert_eq!(cur.weekday, (prev.weekday + 1) % 7);
            let new_year = cur.year != prev.year;
            assert_eq!(cur.yearday, if new_year { 0 } else { prev.yearday + 1 });
            if new_year {
                // 1999 has 365 days, 2000 (a leap year) 366.
                assert_eq!(prev.yearday, if prev.year == 2000 { 365 } else { 364 });
            }
            prev = cur;
        }
    }

    #[test]
    fn formats_strftime_patterns() {
        // 2000-10-10 13:45:36 UTC, a Tuesday, day 284 of a leap year.
        let t = 971_185_536;
        assert_eq!(strftime("%Y/%m/%d:%H:%M:%S", t), "2000/10/10:13:45:36");
        assert_eq!(strftime("%F %T %z %Z", t), "2000-10-10 13:45:36 +0000 UTC");
        assert_eq!(strftime("%D %R", t), "10/10/00 13:45");
        assert_eq!(strftime("%a %A %b %B %h", t), "Tue Tuesday Oct October Oct");
        assert_eq!(
            strftime("%I %l %p %k %u %w %j %C %y", t),
            "01  1 PM 13 2 2 284 20 00"
        );
        assert_eq!(strftime("%s 100%% [%e]", 86_400 * 3), "259200 100% [ 4]");
        assert_eq!(strftime("%I%p %u %a", 3 * 86_400), "12AM 7 Sun");
        assert_eq!(strftime("é%Y", 0), "é1970");
    }

    #[test]
    fn rejects_unsupported_strftime() {
        for bad in ["%c", "%x", "%U", "%G", "%n", "%Y%", "%Q"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse("%Y").is_ok());
        assert!(parse("plain text").is_ok());
    }

    #[test]
    fn calendar_caches_per_second() {
        let mut c = Calendar::default();
        assert_eq!(c.at(0).1, b"[01/Jan/1970:00:00:00 +0000]");
        // Within the same second the cached text is returned without formatting again.
        c.clf = b"cached".to_vec();
        assert_eq!(c.at(0).1, b"cached");
        assert_eq!(c.at(61).1, b"[01/Jan/1970:00:01:01 +0000]");
        assert_eq!(c.at(61).0.minute, 1);
    }

    #[test]
    fn fractions_and_epochs() {
        let at = UNIX_EPOCH + Duration::new(5, 7_008_009);
        let mut c = Calendar::default();
        let mut v = Vec::new();
        for f in [
            TimeFormat::Sec,
            TimeFormat::Msec,
            TimeFormat::Usec,
            TimeFormat::MsecFrac,
            TimeFormat::UsecFrac,
        ] {
            push_time(&mut v, &f, at, &mut c);
            v.push(b' ');
        }
        assert_eq!(v, b"5 5007 5007008 007 007008 ");
    }
}
