//! Trace timestamps (microseconds, integer or float) to nanoseconds.
//!
//! In: a `ts` or `dur` value as written in the trace. Out: whole
//! nanoseconds, or `None` for negative, non-finite or overflowing values.
//!
//! Old traces write integer microseconds since the Unix epoch; newer ones
//! write floats with three decimals (nanosecond precision) relative to
//! `baseTimeNanoseconds`. A float is split into its integer and fractional
//! microseconds before scaling, so values below 2^43 µs (the relative
//! timestamps of new traces) keep exact nanoseconds: the fraction is exact
//! in `f64` and only it is scaled and rounded. No HTA-style rounding to
//! whole microseconds is applied: the result keeps nanosecond precision.

use super::raw::Num;

/// Microseconds to nanoseconds (rounded to the nearest ns).
pub(crate) fn us_to_ns(v: Num) -> Option<u64> {
    match v {
        Num::U(u) => u.checked_mul(1000),
        Num::I(i) => u64::try_from(i).ok()?.checked_mul(1000),
        Num::F(f) => {
            // 1.8e16 µs = 1.8e19 ns is just under u64::MAX (1.84e19).
            if !f.is_finite() || !(0.0..1.8e16).contains(&f) {
                return None;
            }
            let whole = f.floor();
            let frac_ns = ((f - whole) * 1000.0).round() as u64;
            (whole as u64).checked_mul(1000)?.checked_add(frac_ns)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_floats() {
        assert_eq!(
            us_to_ns(Num::U(1_694_128_201_426_674)),
            Some(1_694_128_201_426_674_000)
        );
        assert_eq!(us_to_ns(Num::I(5)), Some(5_000));
        assert_eq!(us_to_ns(Num::I(-5)), None);
        assert_eq!(us_to_ns(Num::F(30669.0)), Some(30_669_000));
        assert_eq!(us_to_ns(Num::F(2636.669)), Some(2_636_669));
        assert_eq!(us_to_ns(Num::F(0.9996)), Some(1_000));
        assert_eq!(us_to_ns(Num::F(-0.5)), None);
        assert_eq!(us_to_ns(Num::F(f64::NAN)), None);
        assert_eq!(us_to_ns(Num::F(f64::INFINITY)), None);
        assert_eq!(us_to_ns(Num::U(u64::MAX / 10)), None);
    }

    #[test]
    fn relative_float_timestamps_keep_exact_nanoseconds() {
        // Real values from the HTA nccl_parser and TraceLens MI300 traces.
        for (text, ns) in [
            ("4458676416788.066", 4_458_676_416_788_066u64),
            ("4458677009853.422", 4_458_677_009_853_422),
            ("3743411222862.936", 3_743_411_222_862_936),
            ("1365627949863.953", 1_365_627_949_863_953),
            ("3743411225136.592", 3_743_411_225_136_592),
        ] {
            let f: f64 = text.parse().unwrap();
            assert_eq!(us_to_ns(Num::F(f)), Some(ns), "{text}");
        }
        // Exhaustive over the three decimals at a large offset.
        for milli in 0..1000u64 {
            let text = format!("4458676416788.{milli:03}");
            let f: f64 = text.parse().unwrap();
            assert_eq!(
                us_to_ns(Num::F(f)),
                Some(4_458_676_416_788_000 + milli),
                "{text}"
            );
        }
    }
}
