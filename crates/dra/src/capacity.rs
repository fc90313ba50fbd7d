//! Consumable capacity (KEP-5075): how much of each device capacity one allocation consumes.
//!
//! For every capacity of a device the consumed amount is:
//! * the requested amount, rounded up according to the capacity's `requestPolicy` (`validRange`:
//!   at least `min`, then up to `min + n·step`; `validValues`: the smallest valid value that is at
//!   least the request);
//! * without a request: the policy's `default`, or the whole capacity value.
//!
//! A request that names a capacity the device does not have, or whose rounded amount violates the
//! policy (above `max`, off the step grid, not one of the valid values), makes the device
//! ineligible. All arithmetic is exact (no `Value()` rounding), which matches upstream for integer
//! quantities and behaves like `DRAFractionalCapacityRange` for fractional ones.

use unisched_resource::Quantity;

/// A parsed `requestPolicy`.
#[derive(Clone, Debug, Default)]
pub struct CapacityPolicy {
    /// `default`.
    pub default: Option<Quantity>,
    /// `validValues`, ascending.
    pub valid_values: Vec<Quantity>,
    /// `validRange`.
    pub range: Option<CapacityRange>,
}

/// A parsed `validRange`.
#[derive(Clone, Debug)]
pub struct CapacityRange {
    /// `min`.
    pub min: Quantity,
    /// `max`.
    pub max: Option<Quantity>,
    /// `step` (ignored when zero).
    pub step: Option<Quantity>,
}

/// One parsed device capacity.
#[derive(Clone, Debug)]
pub struct PreparedCapacity {
    /// Qualified name as published (possibly without domain).
    pub name: String,
    /// Total amount.
    pub value: Quantity,
    /// Request policy, if any.
    pub policy: Option<CapacityPolicy>,
}

/// Why a device cannot serve a capacity request at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapacityMismatch {
    /// The request names a capacity the device does not have.
    Unknown(String),
    /// The (rounded) amount violates the capacity's request policy.
    PolicyViolation(String),
}

fn nonzero(q: &Option<Quantity>) -> Option<&Quantity> {
    q.as_ref().filter(|q| !q.is_zero())
}

fn round_up(request: &Quantity, policy: Option<&CapacityPolicy>) -> Quantity {
    let Some(policy) = policy else {
        return request.clone();
    };
    if let Some(range) = &policy.range {
        if *request < range.min {
            return range.min.clone();
        }
        let Some(step) = nonzero(&range.step) else {
            return request.clone();
        };
        let rounded = request
            .checked_sub(&range.min)
            .and_then(|above| above.checked_div_ceil(step))
            .and_then(|n| i64::try_from(n).ok())
            .and_then(|n| step.mul_i64(n))
            .and_then(|steps| range.min.checked_add(&steps));
        // On overflow keep the request; the policy check below then rejects it if needed.
        return rounded.unwrap_or_else(|| request.clone());
    }
    policy
        .valid_values
        .iter()
        .find(|v| *request <= **v)
        .cloned()
        .unwrap_or_else(|| request.clone())
}

fn violates(amount: &Quantity, policy: Option<&CapacityPolicy>) -> bool {
    let Some(policy) = policy else { return false };
    if policy.default.as_ref() == Some(amount) {
        return false;
    }
    if let Some(range) = &policy.range {
        if range.max.as_ref().is_some_and(|max| amount > max) {
            return true;
        }
        if let Some(step) = nonzero(&range.step) {
            let on_grid = amount
                .checked_sub(&range.min)
                .is_some_and(|above| above.nanos() % step.nanos() == 0);
            return !on_grid;
        }
        return false;
    }
    if !policy.valid_values.is_empty() {
        return !policy.valid_values.contains(amount);
    }
    false
}

/// The amount of each device capacity (in the order of `capacities`) that a request with the
/// given capacity requests consumes, or why the device cannot serve it.
pub fn consumed_capacity(
    capacities: &[PreparedCapacity],
    requests: &[(String, Quantity)],
) -> Result<Vec<Quantity>, CapacityMismatch> {
    if let Some((name, _)) = requests
        .iter()
        .find(|(name, _)| !capacities.iter().any(|c| c.name == *name))
    {
        return Err(CapacityMismatch::Unknown(name.clone()));
    }
    let mut out = Vec::with_capacity(capacities.len());
    for cap in capacities {
        let amount = match requests.iter().find(|(name, _)| *name == cap.name) {
            Some((_, requested)) => round_up(requested, cap.policy.as_ref()),
            None => cap
                .policy
                .as_ref()
                .and_then(|p| p.default.clone())
                .unwrap_or_else(|| cap.value.clone()),
        };
        if violates(&amount, cap.policy.as_ref()) {
            return Err(CapacityMismatch::PolicyViolation(cap.name.clone()));
        }
        out.push(amount);
    }
    Ok(out)
}

/// Whether `consumed` fits on top of the amounts already in use (`in_use`, one slice per layer,
/// each aligned with `capacities`; missing entries count as zero).
pub fn fits(capacities: &[PreparedCapacity], consumed: &[Quantity], in_use: &[&[Quantity]]) -> bool {
    capacities.iter().enumerate().all(|(i, cap)| {
        let mut total = consumed.get(i).cloned().unwrap_or_default();
        for layer in in_use {
            if let Some(q) = layer.get(i) {
                match total.checked_add(q) {
                    Some(t) => total = t,
                    None => return false,
                }
            }
        }
        total <= cap.value
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn cap(name: &str, value: &str, policy: Option<CapacityPolicy>) -> PreparedCapacity {
        PreparedCapacity {
            name: name.into(),
            value: q(value),
            policy,
        }
    }

    fn range(default: &str, min: &str, max: Option<&str>, step: Option<&str>) -> Option<CapacityPolicy> {
        Some(CapacityPolicy {
            default: Some(q(default)),
            valid_values: vec![],
            range: Some(CapacityRange {
                min: q(min),
                max: max.map(q),
                step: step.map(q),
            }),
        })
    }

    fn values(default: &str, vals: &[&str]) -> Option<CapacityPolicy> {
        Some(CapacityPolicy {
            default: Some(q(default)),
            valid_values: vals.iter().map(|v| q(v)).collect(),
            range: None,
        })
    }

    #[test]
    fn consumed_capacity_table() {
        type Case<'a> = (
            &'a str,
            Vec<PreparedCapacity>,
            Vec<(&'a str, &'a str)>,
            Result<Vec<&'a str>, CapacityMismatch>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "no policy, no request: whole value",
                vec![cap("mem", "10Gi", None)],
                vec![],
                Ok(vec!["10Gi"]),
            ),
            (
                "no policy, request as is",
                vec![cap("mem", "10Gi", None)],
                vec![("mem", "3Gi")],
                Ok(vec!["3Gi"]),
            ),
            (
                "default used without request",
                vec![cap("size", "4Gi", range("2Mi", "2Mi", Some("4Gi"), Some("2Mi")))],
                vec![],
                Ok(vec!["2Mi"]),
            ),
            (
                "below min rounds to min",
                vec![cap("size", "4Gi", range("2Mi", "2Mi", Some("4Gi"), Some("2Mi")))],
                vec![("size", "1Mi")],
                Ok(vec!["2Mi"]),
            ),
            (
                "step rounding",
                vec![cap("size", "4Gi", range("2Mi", "2Mi", Some("4Gi"), Some("2Mi")))],
                vec![("size", "5Mi")],
                Ok(vec!["6Mi"]),
            ),
            (
                "on the grid",
                vec![cap("size", "4Gi", range("2Mi", "2Mi", Some("4Gi"), Some("2Mi")))],
                vec![("size", "256Mi")],
                Ok(vec!["256Mi"]),
            ),
            (
                "above max",
                vec![cap("size", "4Gi", range("2Mi", "2Mi", Some("1Gi"), Some("2Mi")))],
                vec![("size", "2Gi")],
                Err(CapacityMismatch::PolicyViolation("size".into())),
            ),
            (
                "range without step",
                vec![cap("c", "10", range("1", "1", Some("8"), None))],
                vec![("c", "3500m")],
                Ok(vec!["3500m"]),
            ),
            (
                "valid values round up",
                vec![cap("bw", "100G", values("10G", &["10G", "25G", "50G"]))],
                vec![("bw", "20G")],
                Ok(vec!["25G"]),
            ),
            (
                "valid values exceeded",
                vec![cap("bw", "100G", values("10G", &["10G", "25G", "50G"]))],
                vec![("bw", "60G")],
                Err(CapacityMismatch::PolicyViolation("bw".into())),
            ),
            (
                "unknown capacity",
                vec![cap("mem", "1Gi", None)],
                vec![("cores", "1")],
                Err(CapacityMismatch::Unknown("cores".into())),
            ),
            (
                "two capacities",
                vec![
                    cap("a", "4", None),
                    cap("b", "8", range("2", "1", None, Some("1"))),
                ],
                vec![("a", "1")],
                Ok(vec!["1", "2"]),
            ),
        ];
        for (name, caps, reqs, want) in cases {
            let reqs: Vec<(String, Quantity)> = reqs.iter().map(|(n, v)| (n.to_string(), q(v))).collect();
            let got = consumed_capacity(&caps, &reqs);
            let want = want.map(|v| v.iter().map(|s| q(s)).collect::<Vec<_>>());
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn fits_table() {
        let caps = vec![cap("cpu", "8", None), cap("mem", "8Gi", None)];
        assert!(fits(&caps, &[q("4"), q("4Gi")], &[&[q("4"), q("4Gi")]]));
        assert!(!fits(&caps, &[q("4"), q("4Gi")], &[&[q("4")], &[q("1m")]]));
        assert!(!fits(&caps, &[q("1"), q("5Gi")], &[&[q("0"), q("4Gi")]]));
        assert!(fits(&caps, &[q("8"), q("8Gi")], &[]));
    }
}
