//! Lenient JSON values for the fields of trace events.
//!
//! In: any JSON value. Out: a [`Scalar`]: absent, a number as written
//! ([`Num`]), a string, an array of non-negative integers, or "something
//! else". Deserializing a `Scalar` never fails on a type mismatch, so one
//! odd field cannot abort the stream; callers decide what is usable.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// A JSON number as written: unsigned, negative or float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    U(u64),
    I(i64),
    F(f64),
}

/// One leniently read JSON value of an event field.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) enum Scalar {
    /// The field was not present (or was `null`).
    #[default]
    Absent,
    Num(Num),
    Str(String),
    /// An array; its non-negative integer elements (others are dropped).
    Ints(Vec<u64>),
    /// Anything else (bool, object): present but unusable.
    Other,
}

impl Scalar {
    pub(crate) fn num(&self) -> Option<Num> {
        match self {
            Self::Num(n) => Some(*n),
            _ => None,
        }
    }

    /// A non-negative integer (or integral float) value.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self.num()? {
            Num::U(u) => Some(u),
            Num::I(i) => u64::try_from(i).ok(),
            Num::F(f) if f >= 0.0 && f.fract() == 0.0 && f < 1.8e19 => Some(f as u64),
            Num::F(_) => None,
        }
    }

    /// Like [`Self::as_u64`], but also reads the trailing digits of a string
    /// (old traces name GPU threads `"stream 7"`).
    pub(crate) fn as_u64_loose(&self) -> Option<u64> {
        match self {
            Self::Str(s) => {
                let digits = s.trim_end().rsplit(|c: char| !c.is_ascii_digit()).next()?;
                digits.parse().ok()
            }
            _ => self.as_u64(),
        }
    }

    /// Any number as `f64`.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self.num()? {
            Num::U(u) => Some(u as f64),
            Num::I(i) => Some(i as f64),
            Num::F(f) => Some(f),
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A rank list: a JSON array of integers or a string like `"[0, 1]"`.
    pub(crate) fn as_ranks(&self) -> Option<Vec<u32>> {
        match self {
            Self::Ints(v) => v.iter().map(|&r| u32::try_from(r).ok()).collect(),
            Self::Str(s) => {
                let inner = s.trim().strip_prefix('[')?.strip_suffix(']')?;
                if inner.trim().is_empty() {
                    return Some(Vec::new());
                }
                inner.split(',').map(|r| r.trim().parse().ok()).collect()
            }
            _ => None,
        }
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar::Num(Num::I(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar::Num(Num::U(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar::Num(Num::F(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
        Ok(Scalar::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Absent)
    }
    fn visit_none<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Absent)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Scalar, D::Error> {
        Scalar::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element::<Scalar>()? {
            if let Some(v) = item.as_u64() {
                out.push(v);
            }
        }
        Ok(Scalar::Ints(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}
