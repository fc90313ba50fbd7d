//! Table tests for `Quantity`, derived from apimachinery's parsing and canonicalisation rules
//! (`pkg/api/resource/quantity.go`) and the cases its own tests exercise.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use proptest::prelude::*;
use unisched_resource::{Format, Quantity, QuantityError};

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

/// input → canonical `String()` form.
const CANONICAL: &[(&str, &str)] = &[
    // zeros, in every format
    ("0", "0"),
    ("0n", "0"),
    ("0u", "0"),
    ("0m", "0"),
    ("0Ki", "0"),
    ("0k", "0"),
    ("0Mi", "0"),
    ("0G", "0"),
    ("0Ti", "0"),
    ("-0", "0"),
    ("+0", "0"),
    ("000", "0"),
    ("0e5", "0"),
    // apimachinery's scanner accepts these and reads them as zero
    (".", "0"),
    ("-.", "0"),
    ("-", "0"),
    ("+", "0"),
    ("Ki", "0"),
    ("m", "0"),
    ("e3", "0"),
    // binary suffixes
    ("1Ki", "1Ki"),
    ("8Ki", "8Ki"),
    ("7Mi", "7Mi"),
    ("6Gi", "6Gi"),
    ("5Ti", "5Ti"),
    ("4Pi", "4Pi"),
    ("3Ei", "3Ei"),
    ("1Ei", "1Ei"),
    ("10Ti", "10Ti"),
    ("100Ti", "100Ti"),
    ("100Mi", "100Mi"),
    ("1024Mi", "1Gi"),
    ("1048576Ki", "1Gi"),
    ("1023Ki", "1023Ki"),
    ("1025Ki", "1025Ki"),
    ("+1Ki", "1Ki"),
    ("-1Ki", "-1Ki"),
    // binary amounts that are not whole multiples, or below 1024, print as decimal
    ("1.5Gi", "1536Mi"),
    ("-1.5Gi", "-1536Mi"),
    ("0.5Mi", "512Ki"),
    ("1.5Ki", "1536"),
    ("0.5Ki", "512"),
    ("-0.5Ki", "-512"),
    ("100.035Ki", "102435840m"),
    ("0.05Gi", "53687091200m"),
    ("0.025Ti", "27487790694400m"),
    (".001Ki", "1024m"),
    (".000001Ki", "1024u"),
    (".000000001Ki", "1024n"),
    (".000000000001Ki", "2n"),
    ("0.000000000001Ki", "2n"),
    // binary values above 2^63-1 are capped
    ("8Ei", "9223372036854775807"),
    ("9Ei", "9223372036854775807"),
    ("-9Ei", "-9223372036854775807"),
    ("9223372036854775807Ki", "9223372036854775807"),
    (
        "100000000000000000000000000000000000000000Ei",
        "9223372036854775807",
    ),
    // decimal SI
    ("1", "1"),
    ("9", "9"),
    ("5n", "5n"),
    ("4u", "4u"),
    ("3m", "3m"),
    ("1k", "1k"),
    ("8k", "8k"),
    ("50k", "50k"),
    ("7M", "7M"),
    ("6G", "6G"),
    ("5T", "5T"),
    ("40T", "40T"),
    ("300T", "300T"),
    ("2P", "2P"),
    ("1E", "1E"),
    ("12E", "12E"),
    ("1000M", "1G"),
    ("1000", "1k"),
    ("1025", "1025"),
    ("1536", "1536"),
    ("1000m", "1"),
    ("-1000m", "-1"),
    ("1100m", "1100m"),
    ("1.5", "1500m"),
    ("0.5", "500m"),
    ("0.001", "1m"),
    ("0.0005k", "500m"),
    ("0.005", "5m"),
    ("0.05", "50m"),
    ("0.00050k", "500m"),
    ("0.00500", "5m"),
    ("0.05000", "50m"),
    ("0.50000", "500m"),
    ("100.035k", "100035"),
    ("10.035M", "10035k"),
    ("9.01", "9010m"),
    ("8.1k", "8100"),
    ("7.123456M", "7123456"),
    ("6.987654321G", "6987654321"),
    ("5.444T", "5444G"),
    ("40.1T", "40100G"),
    ("300.2T", "300200G"),
    ("2.5P", "2500T"),
    ("1.01E", "1010P"),
    ("0.1m", "100u"),
    (".001", "1m"),
    (".0001k", "100m"),
    (".5", "500m"),
    ("1.", "1"),
    ("1.G", "1G"),
    ("+1.5", "1500m"),
    // precision that float-based parsers lose
    ("12345678901234567890", "12345678901234567890"),
    ("9223372036854775807", "9223372036854775807"),
    ("9223372036854775808", "9223372036854775808"),
    ("-9223372036854775808", "-9223372036854775808"),
    ("123456789.123456789", "123456789123456789n"),
    // rounding up to the nano unit
    ("3.001n", "4n"),
    ("0.0000000001", "1n"),
    ("0.0000000005", "1n"),
    ("0.00000000050", "1n"),
    ("0.9n", "1n"),
    ("0.00000012345", "124n"),
    ("0.00000012354", "124n"),
    ("-0.9n", "-1n"),
    // decimal exponent
    ("1E-3", "1e-3"),
    ("1e3", "1e3"),
    ("1E6", "1e6"),
    ("1e9", "1e9"),
    ("1E12", "1e12"),
    ("1e15", "1e15"),
    ("1E18", "1e18"),
    ("1e14", "100e12"),
    ("1e13", "10e12"),
    ("1e+3", "1e3"),
    ("1e0", "1"),
    ("0.5e0", "500e-3"),
    ("0.5e-1", "50e-3"),
    ("0.5e-2", "5e-3"),
    ("1.2e3", "1200"),
    ("1.3E+6", "1300e3"),
    ("1.40e9", "1400e6"),
    ("1.53E12", "1530e9"),
    ("1.6e15", "1600e12"),
    ("1.7E18", "1700e15"),
    ("80e-3", "80e-3"),
    ("1.1E-9", "2e-9"),
    ("0.5e-9", "1e-9"),
    ("1e-20", "1e-9"),
    ("1e-9223372036854775808", "1e-9"),
    ("1e21", "1e21"),
    ("-1e3", "-1e3"),
    // deliberate deviation: apimachinery prints this as "1" (no suffix above E); we keep E
    ("1000E", "1000E"),
];

#[test]
fn parse_to_canonical_string() {
    let mut failures = Vec::new();
    for (input, want) in CANONICAL {
        match Quantity::parse(input) {
            Ok(got) if got.to_string() == *want => {}
            Ok(got) => failures.push(format!(
                "{input:?}: got {got:?} = {:?}, want {want:?}",
                got.to_string()
            )),
            Err(e) => failures.push(format!("{input:?}: error {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(CANONICAL.len() >= 60);
}

#[test]
fn canonical_strings_are_fixed_points() {
    for (_, want) in CANONICAL {
        assert_eq!(q(want).to_string(), *want, "canonical {want:?} must print itself");
    }
}

#[test]
fn parsed_values_are_exact() {
    let cases: &[(&str, i128)] = &[
        ("1Ki", 1024 * 1_000_000_000),
        ("1.5Gi", 1_610_612_736 * 1_000_000_000),
        ("12345678901234567890", 12_345_678_901_234_567_890 * 1_000_000_000),
        ("9223372036854775807", 9_223_372_036_854_775_807 * 1_000_000_000),
        ("1E", 1_000_000_000_000_000_000 * 1_000_000_000),
        ("1Ei", (1i128 << 60) * 1_000_000_000),
        ("8Ei", i128::from(i64::MAX) * 1_000_000_000),
        ("1n", 1),
        ("100m", 100_000_000),
    ];
    for (input, nanos) in cases {
        assert_eq!(q(input).nanos(), *nanos, "{input}");
    }
}

#[test]
fn formats_are_kept() {
    let cases: &[(&str, Format)] = &[
        ("1", Format::DecimalSI),
        ("1k", Format::DecimalSI),
        ("1Ki", Format::BinarySI),
        ("0Ki", Format::BinarySI),
        ("1.5Ki", Format::BinarySI),
        ("1e3", Format::DecimalExponent),
        ("1E", Format::DecimalSI),
        // a non-zero binary amount below one becomes decimal
        ("0.000000000001Ki", Format::DecimalSI),
        ("0.5Ki", Format::BinarySI),
    ];
    for (input, format) in cases {
        assert_eq!(q(input).format(), *format, "{input}");
    }
}

#[test]
fn invalid_inputs_are_rejected() {
    let syntax = [
        "1.1.M", "1+1.0M", "0.1am", "aoeu", " 1", "1 ", "1e3.5", "1e1e1", "1KiB", "1_000", "0x10", "1,5",
        "1/2", "∞", "1Ki ", "\t1",
    ];
    for s in syntax {
        assert!(
            matches!(Quantity::parse(s), Err(QuantityError::InvalidSyntax(_))),
            "{s:?}: {:?}",
            Quantity::parse(s)
        );
    }
    let suffix = [
        "0.1mi",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        "1K",
        "1ki",
        "1e",
        "1E+",
        "1Mi3",
        "1mm",
        "--1",
        "1e99999999999999999999",
    ];
    for s in suffix {
        assert!(
            matches!(Quantity::parse(s), Err(QuantityError::UnknownSuffix { .. })),
            "{s:?}: {:?}",
            Quantity::parse(s)
        );
    }
    assert_eq!(Quantity::parse(""), Err(QuantityError::Empty));
    for s in [
        "1e99",
        "99999999999999999999999999999999999999999",
        "1000000000000000000000000000000E",
        "-1e40",
    ] {
        assert!(
            matches!(Quantity::parse(s), Err(QuantityError::OutOfRange(_))),
            "{s:?}: {:?}",
            Quantity::parse(s)
        );
    }
}

#[test]
fn errors_name_the_text() {
    let e = Quantity::parse("1.1.M").unwrap_err();
    assert!(e.to_string().contains("1.1.M"), "{e}");
    let e = Quantity::parse("1K").unwrap_err();
    assert!(e.to_string().contains("\"K\""), "{e}");
}

#[test]
fn value_and_milli_value_round_up() {
    let cases: &[(&str, i64, i64)] = &[
        ("1.1", 2, 1100),
        ("1m", 1, 1),
        ("0.1m", 1, 1),
        ("1n", 1, 1),
        ("100m", 1, 100),
        ("1", 1, 1000),
        ("1Gi", 1_073_741_824, 1_073_741_824_000),
        ("1.5Gi", 1_610_612_736, 1_610_612_736_000),
        ("0", 0, 0),
        ("-1.1", -2, -1100),
        ("-0.1m", -1, -1),
        ("9223372036854775807", i64::MAX, i64::MAX),
        ("12345678901234567890", i64::MAX, i64::MAX),
        ("-12345678901234567890", i64::MIN, i64::MIN),
        ("9Ei", i64::MAX, i64::MAX),
        ("1E", 1_000_000_000_000_000_000, i64::MAX),
        ("9.01", 10, 9010),
        ("1e-3", 1, 1),
    ];
    for (input, value, milli) in cases {
        let v = q(input);
        assert_eq!(v.value(), *value, "value({input})");
        assert_eq!(v.milli_value(), *milli, "milli_value({input})");
    }
}

#[test]
fn constructors() {
    assert_eq!(Quantity::from_i64(5).to_string(), "5");
    assert_eq!(Quantity::from_i64(1000).to_string(), "1k");
    assert_eq!(Quantity::from_i64(-3).to_string(), "-3");
    assert_eq!(Quantity::from_milli(1500).to_string(), "1500m");
    assert_eq!(Quantity::from_milli(2000).to_string(), "2");
    assert_eq!(Quantity::from_milli(100).to_string(), "100m");
    assert_eq!(Quantity::new(1 << 30, Format::BinarySI).to_string(), "1Gi");
    assert_eq!(Quantity::new(1000, Format::DecimalExponent).to_string(), "1e3");
    assert_eq!(Quantity::new(i64::MAX, Format::BinarySI).value(), i64::MAX);
    assert_eq!(Quantity::new(i64::MIN, Format::DecimalSI).value(), i64::MIN);
    assert_eq!(Quantity::default(), Quantity::from_i64(0));
    assert!(Quantity::default().is_zero());
    assert_eq!(Quantity::default().format(), Format::DecimalSI);
    assert!(q("-1m").is_negative());
    assert!(!q("1m").is_negative());
}

#[test]
fn api_round_trip() {
    let api = ApiQuantity("1.5Gi".to_string());
    let v = Quantity::from_api(&api).unwrap();
    assert_eq!(v.to_api(), ApiQuantity("1536Mi".to_string()));
    // JSON decoding in apimachinery trims whitespace
    assert_eq!(
        Quantity::from_api(&ApiQuantity(" 1 ".to_string())).unwrap(),
        q("1")
    );
    assert!(Quantity::from_api(&ApiQuantity("x".to_string())).is_err());
    assert!(Quantity::from_api(&ApiQuantity(String::new())).is_err());
    let via_try: Quantity = (&api).try_into().unwrap();
    assert_eq!(via_try, v);
    let back: ApiQuantity = (&v).into();
    assert_eq!(back.0, "1536Mi");
    let from_str: Quantity = "100m".parse().unwrap();
    assert_eq!(from_str, Quantity::from_milli(100));
}

#[test]
fn serde_as_canonical_string() {
    let v: Quantity = serde_json::from_str("\"1024Mi\"").unwrap();
    assert_eq!(serde_json::to_string(&v).unwrap(), "\"1Gi\"");
    assert!(serde_json::from_str::<Quantity>("\"nope\"").is_err());
}

#[test]
fn arithmetic() {
    let add = |a: &str, b: &str| q(a).checked_add(&q(b)).unwrap().to_string();
    let sub = |a: &str, b: &str| q(a).checked_sub(&q(b)).unwrap().to_string();
    assert_eq!(add("1", "500m"), "1500m");
    assert_eq!(add("1Gi", "1Gi"), "2Gi");
    assert_eq!(add("1Gi", "1"), "1073741825");
    assert_eq!(add("0", "1Gi"), "1Gi", "adding to zero takes the other format");
    assert_eq!(add("0Ki", "1k"), "1k");
    assert_eq!(add("1k", "1Ki"), "2024");
    assert_eq!(add("1e3", "1e3"), "2e3");
    assert_eq!(add("12345678901234567890", "1"), "12345678901234567891");
    assert_eq!(add("0.1n", "0.1n"), "2n");
    assert_eq!(sub("1Gi", "1Gi"), "0");
    assert_eq!(sub("1Gi", "512Mi"), "512Mi");
    assert_eq!(sub("1", "1Ki"), "-1023");
    assert_eq!(sub("0", "1Ki"), "-1Ki");
    assert_eq!(sub("1", "1m"), "999m");
    assert_eq!((&q("1") + &q("1m")).to_string(), "1001m");
    assert_eq!((&q("1") - &q("1m")).to_string(), "999m");

    let max = Quantity::from_nanos(i128::MAX, Format::DecimalSI);
    assert!(max.checked_add(&q("1n")).is_none());
    assert!(q("-1n").checked_sub(&max).is_some());
    assert!(
        Quantity::from_nanos(i128::MIN, Format::DecimalSI)
            .checked_sub(&q("1n"))
            .is_none()
    );
    assert_eq!(&max + &q("1"), max, "operators saturate");

    let mul = |a: &str, b: &str| q(a).checked_mul(&q(b)).unwrap().to_string();
    assert_eq!(mul("2", "500m"), "1");
    assert_eq!(mul("500m", "500m"), "250m");
    assert_eq!(mul("1Gi", "3"), "3Gi");
    assert_eq!(mul("3", "1Gi"), "3221225472", "the format is the receiver's");
    assert_eq!(mul("1n", "1n"), "1n", "rounds up to the nano unit");
    assert_eq!(mul("-1n", "1n"), "-1n");
    assert_eq!(mul("0", "12345678901234567890"), "0");
    assert_eq!(mul("1E", "1k"), "1000E");
    assert_eq!(mul("1.5", "1.5"), "2250m");
    assert!(q("1E").checked_mul(&q("1E")).is_none());

    assert_eq!(q("1Gi").mul_i64(3).unwrap().to_string(), "3Gi");
    assert_eq!(q("250m").mul_i64(4).unwrap().to_string(), "1");
    assert_eq!(q("250m").mul_i64(-4).unwrap().to_string(), "-1");
    assert!(max.mul_i64(2).is_none());

    let div = |a: &str, b: &str| q(a).checked_div_ceil(&q(b));
    assert_eq!(div("10", "3"), Some(4));
    assert_eq!(div("9", "3"), Some(3));
    assert_eq!(div("1Gi", "1Mi"), Some(1024));
    assert_eq!(div("1Gi", "1000Mi"), Some(2));
    assert_eq!(div("1", "300m"), Some(4));
    assert_eq!(div("0", "5"), Some(0));
    assert_eq!(div("-10", "3"), Some(-3));
    assert_eq!(div("10", "-3"), Some(-3));
    assert_eq!(div("-10", "-3"), Some(4));
    assert_eq!(div("1", "0"), None);
    assert_eq!(div("1", "0Ki"), None);
    assert_eq!(
        Quantity::from_nanos(i128::MIN, Format::DecimalSI).checked_div_ceil(&q("-1n")),
        None
    );

    assert_eq!(q("1Ki").checked_neg().unwrap().to_string(), "-1Ki");
}

#[test]
fn ordering_and_equality_across_formats() {
    assert_eq!(q("1Gi"), q("1073741824"));
    assert_eq!(q("1"), q("1000m"));
    assert_eq!(q("1e3"), q("1k"));
    assert_eq!(q("1k"), q("1000"));
    assert_eq!(q("0.5Ki"), q("512"));
    assert_eq!(q("0"), q("0Ki"));
    assert_eq!(q("0"), q("-0"));
    assert!(q("1Ki") > q("1k"));
    assert!(q("1Mi") < q("1.1M"));
    assert!(q("1n") > q("0"));
    assert!(q("-1n") < q("0"));
    assert!(q("12345678901234567891") > q("12345678901234567890"));
    assert!(q("9Ei") == q("8Ei"));
    assert!(q("1E") > q("1Pi"));
    assert!(q("1Ei") > q("1E"));

    let mut v: Vec<Quantity> = ["1Gi", "1G", "1e9", "999999999", "1", "500m", "-1", "0", "1Ki"]
        .iter()
        .map(|s| q(s))
        .collect();
    v.sort();
    let sorted: Vec<String> = v.iter().map(ToString::to_string).collect();
    assert_eq!(
        sorted,
        ["-1", "0", "500m", "1", "1Ki", "999999999", "1G", "1e9", "1Gi"]
    );

    let set: HashSet<Quantity> = ["1Gi", "1073741824", "1024Mi", "1048576Ki", "1.073741824G"]
        .iter()
        .map(|s| q(s))
        .collect();
    assert_eq!(set.len(), 1);
    let set: HashSet<Quantity> = ["1", "1000m", "1e0", "0.001k", "1000000000n"]
        .iter()
        .map(|s| q(s))
        .collect();
    assert_eq!(set.len(), 1);
}

fn any_format() -> impl Strategy<Value = Format> {
    prop_oneof![
        Just(Format::DecimalSI),
        Just(Format::BinarySI),
        Just(Format::DecimalExponent)
    ]
}

/// Quantities as they can come out of parsing: binary ones within the 2^63-1 cap.
fn any_quantity() -> impl Strategy<Value = Quantity> {
    let cap = i128::from(i64::MAX) * 1_000_000_000;
    let nanos = prop_oneof![
        any::<i64>().prop_map(i128::from),
        any::<i64>().prop_map(|v| i128::from(v) * 1_000_000_000),
        (any::<i32>(), 0u32..7).prop_map(|(v, p)| i128::from(v) * (1i128 << (10 * p)) * 1_000_000_000),
        (any::<i32>(), 0u32..28).prop_map(|(v, p)| i128::from(v) * 10i128.pow(p)),
        any::<i128>(),
    ];
    (nanos, any_format()).prop_map(move |(n, f)| {
        let n = if f == Format::BinarySI {
            n.clamp(-cap, cap)
        } else {
            n
        };
        Quantity::from_nanos(n, f)
    })
}

proptest! {
    #[test]
    fn display_parses_back_to_the_same_value(v in any_quantity()) {
        let s = v.to_string();
        let back = Quantity::parse(&s).map_err(|e| TestCaseError::fail(format!("{s:?}: {e}")))?;
        prop_assert_eq!(&back, &v, "{}", s);
        // The printed form is canonical for the format it reads back as.
        let again = back.to_string();
        prop_assert_eq!(Quantity::parse(&again).map(|q| q.to_string()), Ok(again.clone()));
    }

    #[test]
    fn add_sub_round_trip(a in any_quantity(), b in any_quantity()) {
        if let Some(sum) = a.checked_add(&b) {
            prop_assert_eq!(sum.checked_sub(&b), Some(a.clone()));
            prop_assert_eq!(b.checked_add(&a).map(|q| q.nanos()), Some(sum.nanos()));
        }
        if let Some(diff) = a.checked_sub(&b) {
            prop_assert_eq!(diff.checked_add(&b), Some(a.clone()));
        }
    }

    #[test]
    fn ordering_matches_nanos(a in any_quantity(), b in any_quantity()) {
        prop_assert_eq!(a.cmp(&b), a.nanos().cmp(&b.nanos()));
        prop_assert_eq!(a == b, a.nanos() == b.nanos());
    }

    #[test]
    fn integers_parse_exactly(v in any::<i64>()) {
        let parsed = Quantity::parse(&v.to_string()).unwrap();
        prop_assert_eq!(parsed.value(), v);
        prop_assert_eq!(&parsed, &Quantity::from_i64(v));
        prop_assert_eq!(parsed.to_string(), Quantity::from_i64(v).to_string());
    }

    #[test]
    fn milli_parse_exactly(m in any::<i64>()) {
        let parsed = Quantity::parse(&format!("{m}m")).unwrap();
        prop_assert_eq!(parsed.milli_value(), m);
        prop_assert_eq!(parsed, Quantity::from_milli(m));
    }

    #[test]
    fn parser_never_panics(s in "[+-]?[0-9.]{0,25}[eEinumkKMGTP]{0,3}[-+]?[0-9]{0,22}") {
        if let Ok(v) = Quantity::parse(&s) {
            let again = Quantity::parse(&v.to_string()).unwrap();
            prop_assert_eq!(again, v);
        }
    }

    #[test]
    fn parser_never_panics_on_anything(s in "\\PC{0,40}") {
        let _ = Quantity::parse(&s);
    }

    #[test]
    fn value_rounds_away_from_zero(n in any::<i128>()) {
        let v = Quantity::from_nanos(n, Format::DecimalSI);
        let exact = n / 1_000_000_000;
        let rem = n % 1_000_000_000;
        let want = if rem > 0 { exact + 1 } else if rem < 0 { exact - 1 } else { exact };
        let want = i64::try_from(want).unwrap_or(if want < 0 { i64::MIN } else { i64::MAX });
        prop_assert_eq!(v.value(), want);
    }
}
