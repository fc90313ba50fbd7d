//! Toleration matching (upstream `Toleration.ToleratesTaint` and `FindMatchingUntoleratedTaint`).

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Taint effect `NoSchedule`.
pub(crate) const NO_SCHEDULE: &str = "NoSchedule";
/// Taint effect `PreferNoSchedule`.
pub(crate) const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
/// Taint effect `NoExecute`.
pub(crate) const NO_EXECUTE: &str = "NoExecute";

/// `-?(0|[1-9][0-9]*)`: the integers the numeric toleration operators accept (no leading zeros).
fn decimal_integer(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let ok = match digits.as_bytes() {
        [] => false,
        [b'0'] => true,
        [first, rest @ ..] => (b'1'..=b'9').contains(first) && rest.iter().all(u8::is_ascii_digit),
    };
    if ok { s.parse().ok() } else { None }
}

/// True when `toleration` tolerates `taint`:
///
/// - an empty effect matches every effect, an empty key every key;
/// - operator `Equal` (or empty) compares values, `Exists` matches any value;
/// - `Gt`/`Lt` (KEP-5471, alpha gate `TaintTolerationComparisonOperators`) compare the values as
///   integers — the taint's value greater / less than the toleration's — and never match when the
///   gate is off or either value is not an integer;
/// - any other operator never matches.
pub fn tolerates_taint(toleration: &Toleration, taint: &Taint, enable_comparison_operators: bool) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && key != taint.key
    {
        return false;
    }
    let tol_value = toleration.value.as_deref().unwrap_or("");
    let taint_value = taint.value.as_deref().unwrap_or("");
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => tol_value == taint_value,
        "Exists" => true,
        op @ ("Gt" | "Lt") if enable_comparison_operators => {
            match (decimal_integer(tol_value), decimal_integer(taint_value)) {
                (Some(tol), Some(node)) => {
                    if op == "Gt" {
                        node > tol
                    } else {
                        node < tol
                    }
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// True when any of `tolerations` tolerates `taint`.
pub(crate) fn tolerations_tolerate(
    tolerations: &[Toleration],
    taint: &Taint,
    enable_comparison_operators: bool,
) -> bool {
    tolerations
        .iter()
        .any(|t| tolerates_taint(t, taint, enable_comparison_operators))
}

/// The first taint that passes `relevant` and that no toleration tolerates.
pub fn find_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    relevant: impl Fn(&Taint) -> bool,
    enable_comparison_operators: bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| relevant(t))
        .find(|t| !tolerations_tolerate(tolerations, t, enable_comparison_operators))
}

/// Only the effects that keep pods off a node: `NoSchedule` and `NoExecute`.
pub(crate) fn do_not_schedule(taint: &Taint) -> bool {
    taint.effect == NO_SCHEDULE || taint.effect == NO_EXECUTE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()).filter(|v: &String| !v.is_empty()),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
        Toleration {
            key: opt(key),
            operator: opt(op),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerates_table() {
        struct Case {
            name: &'static str,
            toleration: Toleration,
            taint: Taint,
            comparison: bool,
            want: bool,
        }
        let cases = [
            Case {
                name: "equal match",
                toleration: tol("k", "Equal", "v", "NoSchedule"),
                taint: taint("k", "v", "NoSchedule"),
                comparison: false,
                want: true,
            },
            Case {
                name: "empty operator is Equal",
                toleration: tol("k", "", "v", ""),
                taint: taint("k", "v", "NoExecute"),
                comparison: false,
                want: true,
            },
            Case {
                name: "value differs",
                toleration: tol("k", "Equal", "v", ""),
                taint: taint("k", "w", "NoSchedule"),
                comparison: false,
                want: false,
            },
            Case {
                name: "effect differs",
                toleration: tol("k", "Exists", "", "NoExecute"),
                taint: taint("k", "v", "NoSchedule"),
                comparison: false,
                want: false,
            },
            Case {
                name: "exists any value",
                toleration: tol("k", "Exists", "", "NoSchedule"),
                taint: taint("k", "v", "NoSchedule"),
                comparison: false,
                want: true,
            },
            Case {
                name: "empty key exists matches all",
                toleration: tol("", "Exists", "", ""),
                taint: taint("any", "x", "NoExecute"),
                comparison: false,
                want: true,
            },
            Case {
                name: "key differs",
                toleration: tol("a", "Exists", "", ""),
                taint: taint("b", "", "NoSchedule"),
                comparison: false,
                want: false,
            },
            Case {
                name: "control plane taint no value",
                toleration: tol(
                    "node-role.kubernetes.io/control-plane",
                    "Exists",
                    "",
                    "NoSchedule",
                ),
                taint: taint("node-role.kubernetes.io/control-plane", "", "NoSchedule"),
                comparison: false,
                want: true,
            },
            Case {
                name: "Gt with gate off",
                toleration: tol("sla", "Gt", "900", ""),
                taint: taint("sla", "950", "NoSchedule"),
                comparison: false,
                want: false,
            },
            Case {
                name: "Gt taint greater",
                toleration: tol("sla", "Gt", "900", ""),
                taint: taint("sla", "950", "NoSchedule"),
                comparison: true,
                want: true,
            },
            Case {
                name: "Gt taint smaller",
                toleration: tol("sla", "Gt", "900", ""),
                taint: taint("sla", "800", "NoSchedule"),
                comparison: true,
                want: false,
            },
            Case {
                name: "Lt taint smaller",
                toleration: tol("sla", "Lt", "900", ""),
                taint: taint("sla", "-5", "NoSchedule"),
                comparison: true,
                want: true,
            },
            Case {
                name: "Gt non-numeric taint",
                toleration: tol("sla", "Gt", "900", ""),
                taint: taint("sla", "high", "NoSchedule"),
                comparison: true,
                want: false,
            },
            Case {
                name: "Gt leading zero",
                toleration: tol("sla", "Gt", "900", ""),
                taint: taint("sla", "0950", "NoSchedule"),
                comparison: true,
                want: false,
            },
            Case {
                name: "unknown operator",
                toleration: tol("k", "Like", "v", ""),
                taint: taint("k", "v", "NoSchedule"),
                comparison: true,
                want: false,
            },
        ];
        for c in cases {
            assert_eq!(
                tolerates_taint(&c.toleration, &c.taint, c.comparison),
                c.want,
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn first_untolerated_do_not_schedule_taint() {
        let taints = vec![
            taint("soft", "", "PreferNoSchedule"),
            taint("a", "1", "NoSchedule"),
            taint("b", "2", "NoExecute"),
        ];
        let found = find_untolerated_taint(&taints, &[tol("a", "Equal", "1", "")], do_not_schedule, false);
        assert_eq!(
            found.map(|t| t.key.as_str()),
            Some("b"),
            "PreferNoSchedule is ignored, a is tolerated"
        );
        let none = find_untolerated_taint(&taints, &[tol("", "Exists", "", "")], do_not_schedule, false);
        assert!(none.is_none(), "a wildcard toleration tolerates all");
    }
}
