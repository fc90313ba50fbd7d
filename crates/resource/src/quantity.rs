//! `Quantity`: an exact Kubernetes resource quantity.
//!
//! Kubernetes writes amounts as strings such as `100m`, `1.5Gi` or `1e3`. The scheduler has to read
//! them exactly as the API server does, because a rounding difference of one byte is the difference
//! between "fits" and "Insufficient memory". Crates that go through `f64` (or truncate before
//! scaling) get `1.5Gi` or `9223372036854775807` wrong, so this module implements apimachinery's
//! `resource.Quantity` semantics from scratch.
//!
//! # Representation
//!
//! Apimachinery rounds every parsed value *up* (away from zero) to a whole number of nano-units
//! (10⁻⁹), so every value it can hold is an integer count of nano-units. We store exactly that: an
//! `i128` of nano-units plus the [`Format`] the value was written in. That makes equality, ordering
//! and hashing trivially consistent (they only look at the number), addition and subtraction exact,
//! and leaves room for about ±1.7·10²⁹ units — far beyond the 2⁶³−1 that apimachinery documents
//! as its limit. Inputs that do not fit are rejected with [`QuantityError::OutOfRange`]; nothing in
//! here panics on input.
//!
//! # Rules followed (apimachinery `ParseQuantity` / `String`)
//!
//! * Grammar: optional sign, digits with an optional `.` (`1.`, `.5` and even `.` are accepted),
//!   then a suffix: decimal SI (`n u m "" k M G T P E`), binary SI (`Ki Mi Gi Ti Pi Ei`) or an
//!   exponent (`e`/`E` followed by a signed integer). A missing number reads as zero, as in
//!   apimachinery's scanner (`-`, `.`, `Ki` all parse as 0). No whitespace (callers decoding JSON trim
//!   first, as apimachinery's JSON decoder does — see [`Quantity::from_api`]).
//! * Values are rounded up to the next nano-unit; a non-zero `BinarySI` amount below one switches to
//!   `DecimalSI`; `BinarySI` magnitudes above 2⁶³−1 are capped at 2⁶³−1.
//! * The canonical string keeps the parsed format and picks the largest suffix that keeps the
//!   mantissa an integer: `1.5Gi` → `1536Mi`, `1000m` → `1`, `0.5` → `500m`, `1e3` → `1e3`.
//!   A `BinarySI` value is shown as `DecimalSI` when its magnitude is below 1024 or it is not a whole
//!   number (`.001Ki` → `1024m`).
//!
//! # Deliberate deviations
//!
//! * Apimachinery prints a `DecimalSI` amount whose exponent is above 18 (for example `1000E`) with
//!   no suffix at all, which reads back as a different number. We print it with the `E` suffix and
//!   a larger mantissa (`1000E`), so `parse(display(q)) == q` always holds.
//! * Apimachinery truncates exponents to 32 bits (`1e4294967296` parses as `1`); we treat such
//!   exponents numerically (out of range, or rounded up to `1n` for huge negative exponents).
//! * Apimachinery accepts arbitrarily large `DecimalSI`/`DecimalExponent` values; ours stop at about
//!   1.7·10²⁹ and report [`QuantityError::OutOfRange`] beyond that.
//! * [`Quantity::value`] and [`Quantity::milli_value`] round away from zero (apimachinery's int64
//!   path); apimachinery's big-decimal path rounds negative values toward +∞ instead.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

/// Nano-units per unit.
const NANOS_PER_UNIT: i128 = 1_000_000_000;
/// Nano-units per milli-unit.
const NANOS_PER_MILLI: i128 = 1_000_000;
/// The binary-SI cap: apimachinery clamps `BinarySI` magnitudes to 2⁶³−1 units.
const BINARY_CAP_NANOS: i128 = (i64::MAX as i128) * NANOS_PER_UNIT;
/// Decimal SI suffixes by exponent of ten.
const DECIMAL_SUFFIXES: [(i64, &str); 10] = [
    (-9, "n"),
    (-6, "u"),
    (-3, "m"),
    (0, ""),
    (3, "k"),
    (6, "M"),
    (9, "G"),
    (12, "T"),
    (15, "P"),
    (18, "E"),
];
/// Binary SI suffixes by power of 1024.
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// How a quantity is written; kept from the parsed text and reused when it is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// Powers of ten with SI letters: `500m`, `2k`, `1G`.
    #[default]
    DecimalSI,
    /// Powers of 1024: `1Ki`, `1536Mi`.
    BinarySI,
    /// Powers of ten with an explicit exponent: `1e3`, `80e-3`.
    DecimalExponent,
}

/// Why a string is not a valid Kubernetes quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string was empty.
    #[error("quantity is empty")]
    Empty,
    /// The text does not match `[+-]?[0-9.]+[eEinumkKMGTP]*[-+]?[0-9]*`.
    #[error("invalid quantity syntax: {0:?}")]
    InvalidSyntax(String),
    /// The number is fine but the suffix is not one Kubernetes knows.
    #[error("unknown suffix {suffix:?} in quantity {text:?}")]
    UnknownSuffix {
        /// The whole quantity text.
        text: String,
        /// The suffix that was not understood.
        suffix: String,
    },
    /// The value is too large for the exact representation (about ±1.7·10²⁹).
    #[error("quantity {0:?} is out of range")]
    OutOfRange(String),
}

/// An exact Kubernetes quantity.
///
/// Equality, ordering and hashing are by numeric value only: `1Gi == 1073741824` and `1 == 1000m`.
/// [`Display`](fmt::Display) prints apimachinery's canonical form.
#[derive(Clone, Debug, Default)]
pub struct Quantity {
    /// The value in nano-units (10⁻⁹).
    nanos: i128,
    /// The format used for printing.
    format: Format,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}

/// `10^exp` as an `i128`, `None` when it does not fit.
fn pow10(exp: u32) -> Option<i128> {
    10i128.checked_pow(exp)
}

/// Divides rounding away from zero (the divisor is positive).
fn div_away(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d == 0 {
        q
    } else if n > 0 {
        q + 1
    } else {
        q - 1
    }
}

fn saturate_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// The pieces of a quantity string, as apimachinery's scanner splits them.
struct Scanned<'a> {
    negative: bool,
    int_digits: &'a str,
    frac_digits: &'a str,
    suffix: &'a str,
}

/// Splits `s` into sign, integer digits, fraction digits and suffix, with apimachinery's grammar.
fn scan(s: &str) -> Option<Scanned<'_>> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    match b.first() {
        Some(b'-') => {
            negative = true;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    let digits_end = |from: usize| {
        let mut i = from;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let int_end = digits_end(pos);
    let int_digits = s.get(pos..int_end)?;
    pos = int_end;
    let mut frac_digits = "";
    if b.get(pos) == Some(&b'.') {
        let frac_end = digits_end(pos + 1);
        frac_digits = s.get(pos + 1..frac_end)?;
        pos = frac_end;
    }
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if matches!(b.get(pos), Some(b'+' | b'-')) {
        pos += 1;
    }
    pos = digits_end(pos);
    if pos != b.len() {
        return None;
    }
    Some(Scanned {
        negative,
        int_digits,
        frac_digits,
        suffix: s.get(suffix_start..)?,
    })
}

/// The meaning of a suffix: the format, the power of ten and the power of two it multiplies by.
fn interpret_suffix(suffix: &str) -> Option<(Format, i64, u32)> {
    if let Some((exp, _)) = DECIMAL_SUFFIXES.iter().find(|(_, s)| *s == suffix) {
        return Some((Format::DecimalSI, *exp, 0));
    }
    if let Some(i) = BINARY_SUFFIXES.iter().skip(1).position(|s| *s == suffix) {
        // `position` after `skip(1)` is zero-based from "Ki" (2^10).
        let pow2 = u32::try_from((i + 1) * 10).ok()?;
        return Some((Format::BinarySI, 0, pow2));
    }
    let rest = suffix.strip_prefix(['e', 'E'])?;
    // Go's strconv.ParseInt: optional sign, then at least one digit.
    let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let exp = rest.parse::<i64>().ok()?;
    Some((Format::DecimalExponent, exp, 0))
}

/// Multiplies a big-endian decimal digit vector by `2^pow2` in place.
fn double_digits(digits: &mut Vec<u8>, pow2: u32) {
    // Multiply by 2^k in chunks of at most 2^20 so the carry stays in u32 range comfortably.
    let mut left = pow2;
    while left > 0 {
        let step = left.min(20);
        left -= step;
        let factor = 1u64 << step;
        let mut carry = 0u64;
        for d in digits.iter_mut().rev() {
            let v = u64::from(*d) * factor + carry;
            *d = (v % 10) as u8;
            carry = v / 10;
        }
        while carry > 0 {
            digits.insert(0, (carry % 10) as u8);
            carry /= 10;
        }
    }
}

/// Converts `digits × 10^shift` to an integer, rounding up (toward +∞ for this non-negative value).
/// `None` when the result does not fit an `i128`.
fn digits_to_nanos(digits: &[u8], shift: i128) -> Option<i128> {
    let (int_part, has_fraction): (&[u8], bool) = if shift >= 0 {
        (digits, false)
    } else {
        let drop = usize::try_from(shift.unsigned_abs()).unwrap_or(usize::MAX);
        if drop >= digits.len() {
            (&[], digits.iter().any(|d| *d != 0))
        } else {
            let (head, tail) = digits.split_at(digits.len() - drop);
            (head, tail.iter().any(|d| *d != 0))
        }
    };
    let mut v: i128 = 0;
    for d in int_part {
        v = v.checked_mul(10)?.checked_add(i128::from(*d))?;
    }
    if shift > 0 && v != 0 {
        let exp = u32::try_from(shift).ok()?;
        v = v.checked_mul(pow10(exp)?)?;
    }
    if has_fraction {
        v = v.checked_add(1)?;
    }
    Some(v)
}

/// The magnitude in nano-units, rounded up, computed in `i128` for short inputs. `None` when an
/// intermediate value does not fit; the caller then falls back to [`exact_magnitude`].
fn fast_magnitude(scanned: &Scanned<'_>, exp10: i64, pow2: u32) -> Option<i128> {
    let mut m: i128 = 0;
    for c in scanned.int_digits.bytes().chain(scanned.frac_digits.bytes()) {
        m = m.checked_mul(10)?.checked_add(i128::from(c - b'0'))?;
    }
    if m == 0 {
        return Some(0);
    }
    m = m.checked_mul(1i128.checked_shl(pow2)?)?;
    let frac_len = i64::try_from(scanned.frac_digits.len()).ok()?;
    let shift = exp10.checked_add(9)?.checked_sub(frac_len)?;
    if shift >= 0 {
        m.checked_mul(pow10(u32::try_from(shift).ok()?)?)
    } else if shift < -38 {
        // |m| < 10^38 here, so the value is below one nano-unit: round up to one.
        Some(1)
    } else {
        Some(div_away(m, pow10(u32::try_from(-shift).ok()?)?))
    }
}

/// The magnitude in nano-units, rounded up, for inputs of any length (decimal digit arithmetic).
/// `None` when the result does not fit an `i128`.
fn exact_magnitude(scanned: &Scanned<'_>, exp10: i64, pow2: u32) -> Option<i128> {
    // All significant digits, integer and fraction, without leading zeros.
    let mut digits: Vec<u8> = scanned
        .int_digits
        .bytes()
        .chain(scanned.frac_digits.bytes())
        .map(|c| c - b'0')
        .skip_while(|d| *d == 0)
        .collect();
    // Trailing zeros only move the decimal point; dropping them keeps the vector short.
    let frac_len = i128::try_from(scanned.frac_digits.len()).ok()?;
    let mut shift: i128 = i128::from(exp10) + 9 - frac_len;
    while digits.last() == Some(&0) {
        digits.pop();
        shift += 1;
    }
    if digits.is_empty() {
        return Some(0);
    }
    double_digits(&mut digits, pow2);
    digits_to_nanos(&digits, shift)
}

impl Quantity {
    /// Parses a quantity with apimachinery's rules (see the module documentation).
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::Empty);
        }
        let scanned = scan(s).ok_or_else(|| QuantityError::InvalidSyntax(s.to_string()))?;
        let (mut format, exp10, pow2) =
            interpret_suffix(scanned.suffix).ok_or_else(|| QuantityError::UnknownSuffix {
                text: s.to_string(),
                suffix: scanned.suffix.to_string(),
            })?;

        let magnitude =
            fast_magnitude(&scanned, exp10, pow2).or_else(|| exact_magnitude(&scanned, exp10, pow2));
        let magnitude = match magnitude {
            Some(v) => v,
            None if format == Format::BinarySI => BINARY_CAP_NANOS,
            None => return Err(QuantityError::OutOfRange(s.to_string())),
        };
        if magnitude == 0 {
            return Ok(Quantity { nanos: 0, format });
        }
        let magnitude = if format == Format::BinarySI {
            if magnitude < NANOS_PER_UNIT {
                format = Format::DecimalSI;
            }
            magnitude.min(BINARY_CAP_NANOS)
        } else {
            magnitude
        };
        let nanos = if scanned.negative { -magnitude } else { magnitude };
        Ok(Quantity { nanos, format })
    }

    /// Reads an API quantity. Surrounding whitespace is ignored, as apimachinery's JSON decoder does.
    pub fn from_api(q: &ApiQuantity) -> Result<Quantity, QuantityError> {
        Quantity::parse(q.0.trim())
    }

    /// The API form: the canonical string.
    pub fn to_api(&self) -> ApiQuantity {
        ApiQuantity(self.to_string())
    }

    /// `value` whole units in the given format.
    pub fn new(value: i64, format: Format) -> Quantity {
        Quantity {
            nanos: i128::from(value) * NANOS_PER_UNIT,
            format,
        }
    }

    /// `value` whole units, `DecimalSI`.
    pub fn from_i64(value: i64) -> Quantity {
        Quantity::new(value, Format::DecimalSI)
    }

    /// `milli` thousandths of a unit, `DecimalSI`.
    pub fn from_milli(milli: i64) -> Quantity {
        Quantity {
            nanos: i128::from(milli) * NANOS_PER_MILLI,
            format: Format::DecimalSI,
        }
    }

    /// A quantity of `nanos` nano-units in the given format. `BinarySI` is kept as given (no cap).
    pub fn from_nanos(nanos: i128, format: Format) -> Quantity {
        Quantity { nanos, format }
    }

    /// The exact value in nano-units (10⁻⁹).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// The format used when printing.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The same value printed in another format.
    pub fn with_format(mut self, format: Format) -> Quantity {
        self.format = format;
        self
    }

    /// True when the value is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// True when the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The value in whole units, rounded away from zero (`1.1` → 2, `1m` → 1), saturating at the
    /// `i64` bounds.
    pub fn value(&self) -> i64 {
        saturate_i64(div_away(self.nanos, NANOS_PER_UNIT))
    }

    /// The value in milli-units, rounded away from zero (`0.1m` → 1), saturating at the `i64` bounds.
    pub fn milli_value(&self) -> i64 {
        saturate_i64(div_away(self.nanos, NANOS_PER_MILLI))
    }

    /// Exact sum, `None` on overflow. The result keeps `self`'s format unless `self` is zero, in
    /// which case it takes `other`'s (apimachinery `Add`).
    pub fn checked_add(&self, other: &Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_add(other.nanos)?;
        Some(Quantity {
            nanos,
            format: self.result_format(other),
        })
    }

    /// Exact difference, `None` on overflow. Format as for [`Quantity::checked_add`].
    pub fn checked_sub(&self, other: &Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_sub(other.nanos)?;
        Some(Quantity {
            nanos,
            format: self.result_format(other),
        })
    }

    /// Product of two quantities (`2 × 500m = 1`), keeping `self`'s format. Exact whenever the product
    /// is a whole number of nano-units; otherwise rounded away from zero to the next nano-unit, as
    /// parsing would. `None` when the result (or the intermediate product of the two values with
    /// their trailing zeros removed) does not fit.
    pub fn checked_mul(&self, other: &Quantity) -> Option<Quantity> {
        let (a, ea) = strip_tens(self.nanos);
        let (b, eb) = strip_tens(other.nanos);
        let product = a.checked_mul(b)?;
        // nanos = product × 10^(ea+eb) / 10^9
        let exp = i64::from(ea) + i64::from(eb) - 9;
        let nanos = if product == 0 {
            0
        } else if exp >= 0 {
            product.checked_mul(pow10(u32::try_from(exp).ok()?)?)?
        } else {
            div_away(product, pow10(u32::try_from(-exp).ok()?)?)
        };
        Some(Quantity {
            nanos,
            format: self.format,
        })
    }

    /// `self × factor`, exact, keeping the format. `None` on overflow.
    pub fn mul_i64(&self, factor: i64) -> Option<Quantity> {
        let nanos = self.nanos.checked_mul(i128::from(factor))?;
        Some(Quantity {
            nanos,
            format: self.format,
        })
    }

    /// `ceil(self / other)` (toward +∞) as an integer; `None` when `other` is zero or on overflow.
    /// Used for "how many devices/steps are needed to cover this amount".
    pub fn checked_div_ceil(&self, other: &Quantity) -> Option<i128> {
        if other.nanos == 0 {
            return None;
        }
        let q = self.nanos.checked_div(other.nanos)?;
        let r = self.nanos.checked_rem(other.nanos)?;
        if r != 0 && ((r > 0) == (other.nanos > 0)) {
            Some(q + 1)
        } else {
            Some(q)
        }
    }

    /// The negated value, `None` on overflow.
    pub fn checked_neg(&self) -> Option<Quantity> {
        Some(Quantity {
            nanos: self.nanos.checked_neg()?,
            format: self.format,
        })
    }

    fn result_format(&self, other: &Quantity) -> Format {
        if self.nanos == 0 {
            other.format
        } else {
            self.format
        }
    }

    /// Writes the canonical form (apimachinery `Quantity.String()`).
    fn write_canonical(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let abs = self.nanos.unsigned_abs();
        if self.format == Format::BinarySI
            && abs >= 1024 * NANOS_PER_UNIT.unsigned_abs()
            && self.nanos % NANOS_PER_UNIT == 0
        {
            let mut units = self.nanos / NANOS_PER_UNIT;
            let mut power = 0;
            while power < BINARY_SUFFIXES.len() - 1 && units % 1024 == 0 {
                units /= 1024;
                power += 1;
            }
            let suffix = BINARY_SUFFIXES.get(power).copied().unwrap_or("");
            return write!(f, "{units}{suffix}");
        }
        // Decimal: strip factors of ten, then lower the exponent to a multiple of three.
        let (mut mantissa, stripped) = strip_tens(self.nanos);
        let mut exp = i64::from(stripped) - 9;
        let r = exp.rem_euclid(3);
        // Cannot overflow: the stripped zeros are at least `r` (mantissa × 10^r ≤ |nanos|).
        mantissa *= pow10(u32::try_from(r).unwrap_or(0)).unwrap_or(1);
        exp -= r;
        match self.format {
            Format::DecimalExponent => {
                if exp == 0 {
                    write!(f, "{mantissa}")
                } else {
                    write!(f, "{mantissa}e{exp}")
                }
            }
            Format::DecimalSI | Format::BinarySI => {
                if exp > 18 {
                    // No suffix above E: keep E and grow the mantissa (see the module docs).
                    // Cannot overflow: mantissa × 10^(exp-18) < |nanos|.
                    mantissa *= pow10(u32::try_from(exp - 18).unwrap_or(0)).unwrap_or(1);
                    exp = 18;
                }
                let suffix = DECIMAL_SUFFIXES
                    .iter()
                    .find(|(e, _)| *e == exp)
                    .map(|(_, s)| *s)
                    .unwrap_or("");
                write!(f, "{mantissa}{suffix}")
            }
        }
    }
}

/// Removes the factors of ten from `v`, returning the rest and how many were removed. `0` → `(0, 0)`.
fn strip_tens(mut v: i128) -> (i128, u32) {
    if v == 0 {
        return (0, 0);
    }
    let mut n = 0;
    while v % 10 == 0 {
        v /= 10;
        n += 1;
    }
    (v, n)
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_canonical(f)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl TryFrom<&ApiQuantity> for Quantity {
    type Error = QuantityError;

    fn try_from(q: &ApiQuantity) -> Result<Self, Self::Error> {
        Quantity::from_api(q)
    }
}

impl From<&Quantity> for ApiQuantity {
    fn from(q: &Quantity) -> Self {
        q.to_api()
    }
}

impl std::ops::Add for &Quantity {
    type Output = Quantity;

    /// Saturating sum (at ±1.7·10²⁹ units); use [`Quantity::checked_add`] to detect overflow.
    fn add(self, rhs: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(rhs.nanos),
            format: self.result_format(rhs),
        }
    }
}

impl std::ops::Sub for &Quantity {
    type Output = Quantity;

    /// Saturating difference; use [`Quantity::checked_sub`] to detect overflow.
    fn sub(self, rhs: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(rhs.nanos),
            format: self.result_format(rhs),
        }
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Quantity::parse(s.trim()).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The i128 fast path and the digit-vector path agree whenever the fast path answers.
        #[test]
        fn fast_path_matches_exact_path(
            int in "[0-9]{0,40}",
            frac in "[0-9]{0,40}",
            exp10 in prop_oneof![-60i64..60, Just(i64::MIN), Just(i64::MAX)],
            pow2 in prop_oneof![Just(0u32), Just(10), Just(20), Just(30), Just(40), Just(50), Just(60)],
        ) {
            let scanned = Scanned { negative: false, int_digits: &int, frac_digits: &frac, suffix: "" };
            let exact = exact_magnitude(&scanned, exp10, pow2);
            if let Some(fast) = fast_magnitude(&scanned, exp10, pow2) {
                prop_assert_eq!(Some(fast), exact);
            }
        }
    }

    #[test]
    fn double_digits_multiplies_by_powers_of_two() {
        let mut d = vec![1];
        double_digits(&mut d, 60);
        let s: String = d.iter().map(|x| char::from(b'0' + x)).collect();
        assert_eq!(s, (1u128 << 60).to_string());
        let mut d = vec![9, 9, 9];
        double_digits(&mut d, 45);
        let s: String = d.iter().map(|x| char::from(b'0' + x)).collect();
        assert_eq!(s, (999u128 << 45).to_string());
    }

    #[test]
    fn digits_to_nanos_rounds_up() {
        assert_eq!(digits_to_nanos(&[1, 5], -1), Some(2));
        assert_eq!(digits_to_nanos(&[1, 0], -1), Some(1));
        assert_eq!(digits_to_nanos(&[1], -100), Some(1));
        assert_eq!(digits_to_nanos(&[1], 38), Some(10i128.pow(38)));
        assert_eq!(digits_to_nanos(&[1], 39), None);
        assert_eq!(digits_to_nanos(&[1], i128::MAX), None);
    }
}
