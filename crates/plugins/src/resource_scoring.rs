//! The arithmetic that turns per-resource utilisation into a node score, shared by every
//! resource scorer: NodeResourcesFit and NodeResourcesBalancedAllocation over node allocatable,
//! DeviceResources over DRA devices (upstream `least_allocated.go`, `most_allocated.go`,
//! `requested_to_capacity_ratio.go`, `balanced_allocation.go`).
//!
//! It lives outside both plugin modules so that neither imports the other's internals: the
//! scorers agree on the shapes (a RequestedToCapacityRatio shape means the same thing to both), not
//! on each other's data.

use unisched_framework::MAX_NODE_SCORE;

/// Highest score of a `requestedToCapacityRatio` shape point (upstream `MaxCustomPriorityScore`);
/// shapes are scaled from it to the node score range.
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;

/// How per-resource utilisation becomes a node score.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// `(capacity − requested) × 100 / capacity`, weighted mean.
    LeastAllocated,
    /// `min(requested, capacity) × 100 / capacity`, weighted mean.
    MostAllocated,
    /// A broken-linear function of utilisation; points are `(utilization, score × 10)`.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
    /// `(1 − standard deviation of the utilisation fractions) × 100`.
    Balanced,
}

impl Strategy {
    /// The ratio strategy from user shape points (scores 0..10 scaled to 0..100).
    pub(crate) fn ratio(shape: &[(i32, i32)]) -> Strategy {
        let scale = MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE;
        Strategy::RequestedToCapacityRatio(
            shape
                .iter()
                .map(|(u, s)| (i64::from(*u), i64::from(*s) * scale))
                .collect(),
        )
    }
}

/// Upstream `BuildBrokenLinearFunction`: the first point's score below it, the last point's above
/// it, integer interpolation between.
pub(crate) fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for (i, &(u, s)) in shape.iter().enumerate() {
        if p <= u {
            if i == 0 {
                return s;
            }
            let (pu, ps) = shape[i - 1];
            return ps + (s - ps) * (p - pu) / (u - pu);
        }
    }
    shape.last().map_or(0, |&(_, s)| s)
}

fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    scaled_ratio(capacity - requested, MAX_NODE_SCORE, capacity)
}

fn most_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    // Pods without requests count with the non-zero defaults, which can exceed the capacity.
    let requested = requested.clamp(0, capacity);
    scaled_ratio(requested, MAX_NODE_SCORE, capacity)
}

fn utilization_percent(requested: i64, capacity: i64) -> i64 {
    scaled_ratio(requested, 100, capacity)
}

/// `value × scale / capacity`, truncated toward zero, without overflow. The product fits an
/// `i64` for every real quantity, and a 64-bit division is several times cheaper than the
/// 128-bit one (a library call) that Score paid for every node and resource; the wide form is
/// kept for products that do not fit.
fn scaled_ratio(value: i64, scale: i64, capacity: i64) -> i64 {
    match value
        .checked_mul(scale)
        .and_then(|product| product.checked_div(capacity))
    {
        Some(quotient) => quotient,
        None => ((i128::from(value) * i128::from(scale)) / i128::from(capacity)) as i64,
    }
}

/// Scores one node from `(requested, allocatable, weight)` per resource. Entries with zero
/// allocatable are ignored.
pub(crate) fn score_vector(strategy: &Strategy, entries: &[(i64, i64, i64)]) -> i64 {
    score_entries(strategy, entries.iter().copied())
}

/// [`score_vector`] over any re-iterable sequence of entries (no buffer needed).
pub(crate) fn score_entries(
    strategy: &Strategy,
    entries: impl Iterator<Item = (i64, i64, i64)> + Clone,
) -> i64 {
    let live = entries.filter(|(_, alloc, _)| *alloc != 0);
    match strategy {
        Strategy::LeastAllocated | Strategy::MostAllocated => {
            let (mut sum, mut weights) = (0i64, 0i64);
            for (req, alloc, w) in live {
                let s = if *strategy == Strategy::LeastAllocated {
                    least_requested(req, alloc)
                } else {
                    most_requested(req, alloc)
                };
                sum += s * w;
                weights += w;
            }
            if weights == 0 { 0 } else { sum / weights }
        }
        Strategy::RequestedToCapacityRatio(shape) => {
            let (mut sum, mut weights) = (0i64, 0i64);
            for (req, alloc, w) in live {
                let p = if req > alloc {
                    100
                } else {
                    utilization_percent(req, alloc)
                };
                let s = broken_linear(shape, p);
                if s > 0 {
                    sum += s * w;
                    weights += w;
                }
            }
            if weights == 0 {
                0
            } else {
                (sum as f64 / weights as f64).round() as i64
            }
        }
        Strategy::Balanced => {
            let fraction = |(req, alloc, _): (i64, i64, i64)| (req as f64 / alloc as f64).min(1.0);
            let n = live.clone().count();
            let std = match n {
                0 | 1 => 0.0,
                2 => {
                    let mut it = live.map(fraction);
                    let (a, b) = (it.next().unwrap_or(0.0), it.next().unwrap_or(0.0));
                    ((a - b) / 2.0).abs()
                }
                _ => {
                    let mean = live.clone().map(fraction).sum::<f64>() / n as f64;
                    (live.map(fraction).map(|f| (f - mean) * (f - mean)).sum::<f64>() / n as f64).sqrt()
                }
            };
            ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
        }
    }
}

/// BalancedAllocation's score in upstream 1.37 (read in the 1.37.2 sources): how much placing the pod improves the node's
/// balance. Both balances lie in `[50, 100]` (σ of fractions in `[0, 1]` is at most ½), so their
/// difference lies in `[-50, 50]`; the score maps it back onto `[50, 100]`, 75 meaning "no change".
/// A node the pod leaves as balanced as it found it therefore scores the same whether it is empty
/// or busy, which the older `(1 − σ) × 100` after placement did not.
pub(crate) fn balance_improvement(with_pod: i64, without_pod: i64) -> i64 {
    let half = MAX_NODE_SCORE / 2;
    half + (half + with_pod - without_pod) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_linear_table() {
        struct Case {
            name: &'static str,
            shape: Vec<(i64, i64)>,
            p: i64,
            want: i64,
        }
        let shape = vec![
            (10, 10),
            (20, 20),
            (30, 30),
            (50, 40),
            (60, 50),
            (80, 60),
            (100, 70),
        ];
        let cases = [
            Case {
                name: "below first",
                shape: shape.clone(),
                p: -10,
                want: 10,
            },
            Case {
                name: "at first",
                shape: shape.clone(),
                p: 10,
                want: 10,
            },
            Case {
                name: "between",
                shape: shape.clone(),
                p: 15,
                want: 15,
            },
            Case {
                name: "integer interpolation",
                shape: shape.clone(),
                p: 40,
                want: 35,
            },
            Case {
                name: "at point",
                shape: shape.clone(),
                p: 60,
                want: 50,
            },
            Case {
                name: "rounding down",
                shape: shape.clone(),
                p: 90,
                want: 65,
            },
            Case {
                name: "above last",
                shape: shape.clone(),
                p: 200,
                want: 70,
            },
            Case {
                name: "decreasing",
                shape: vec![(0, 100), (100, 0)],
                p: 33,
                want: 67,
            },
        ];
        for c in cases {
            assert_eq!(broken_linear(&c.shape, c.p), c.want, "{}", c.name);
        }
    }

    #[test]
    fn strategies_table() {
        struct Case {
            name: &'static str,
            strategy: Strategy,
            entries: Vec<(i64, i64, i64)>,
            want: i64,
        }
        let cases = [
            // Upstream least_allocated_test "nothing scheduled, resources requested, differently sized nodes":
            // cpu (3000/4000) -> 25, memory (5000/10000) -> 50 => 37
            Case {
                name: "least basic",
                strategy: Strategy::LeastAllocated,
                entries: vec![(3000, 4000, 1), (5000, 10000, 1)],
                want: 37,
            },
            Case {
                name: "least weighted",
                strategy: Strategy::LeastAllocated,
                entries: vec![(3000, 4000, 3), (5000, 10000, 1)],
                want: 31,
            },
            Case {
                name: "least over capacity",
                strategy: Strategy::LeastAllocated,
                entries: vec![(5000, 4000, 1), (0, 10000, 1)],
                want: 50,
            },
            Case {
                name: "least zero allocatable skipped",
                strategy: Strategy::LeastAllocated,
                entries: vec![(0, 0, 1), (5000, 10000, 1)],
                want: 50,
            },
            Case {
                name: "least nothing allocatable",
                strategy: Strategy::LeastAllocated,
                entries: vec![(1, 0, 1)],
                want: 0,
            },
            Case {
                name: "most basic",
                strategy: Strategy::MostAllocated,
                entries: vec![(3000, 4000, 1), (5000, 10000, 1)],
                want: 62,
            },
            Case {
                name: "most capped",
                strategy: Strategy::MostAllocated,
                entries: vec![(6000, 4000, 1), (5000, 10000, 1)],
                want: 75,
            },
            Case {
                name: "ratio bin packing",
                strategy: Strategy::ratio(&[(0, 0), (100, 10)]),
                entries: vec![(3000, 4000, 1), (5000, 10000, 1)],
                want: 63,
            },
            Case {
                name: "ratio zero scores excluded from weights",
                strategy: Strategy::ratio(&[(0, 0), (100, 10)]),
                entries: vec![(0, 4000, 1), (5000, 10000, 1)],
                want: 50,
            },
            Case {
                name: "ratio over capacity is full",
                strategy: Strategy::ratio(&[(0, 10), (100, 0)]),
                entries: vec![(5000, 4000, 1), (0, 10000, 1)],
                want: 100,
            },
            Case {
                name: "balanced two",
                strategy: Strategy::Balanced,
                entries: vec![(3000, 4000, 1), (5000, 10000, 1)],
                want: 87,
            },
            Case {
                name: "balanced equal",
                strategy: Strategy::Balanced,
                entries: vec![(2000, 4000, 1), (5000, 10000, 1)],
                want: 100,
            },
            Case {
                name: "balanced capped at one",
                strategy: Strategy::Balanced,
                entries: vec![(8000, 4000, 1), (0, 10000, 1)],
                want: 50,
            },
            Case {
                name: "balanced three",
                strategy: Strategy::Balanced,
                entries: vec![(1000, 4000, 1), (5000, 10000, 1), (3, 4, 1)],
                want: 79,
            },
            Case {
                name: "balanced single",
                strategy: Strategy::Balanced,
                entries: vec![(1000, 4000, 1), (0, 0, 1)],
                want: 100,
            },
        ];
        for c in cases {
            assert_eq!(score_vector(&c.strategy, &c.entries), c.want, "{}", c.name);
        }
    }

    mod props {
        use proptest::prelude::{Strategy as Gen, *};

        use super::super::{MAX_NODE_SCORE, Strategy, scaled_ratio, score_vector};

        fn entries() -> impl Gen<Value = Vec<(i64, i64, i64)>> {
            proptest::collection::vec((0i64..1 << 40, 0i64..1 << 40, 1i64..=100), 0..6)
        }

        fn shape() -> impl Gen<Value = Vec<(i32, i32)>> {
            proptest::collection::btree_map(0i32..=100, 0i32..=10, 1..6).prop_map(|m| m.into_iter().collect())
        }

        proptest! {
            #[test]
            fn scores_stay_in_range(e in entries(), s in shape()) {
                for strategy in [Strategy::LeastAllocated, Strategy::MostAllocated, Strategy::Balanced, Strategy::ratio(&s)] {
                    let score = score_vector(&strategy, &e);
                    prop_assert!((0..=MAX_NODE_SCORE).contains(&score), "{strategy:?} {e:?} -> {score}");
                }
            }

            #[test]
            fn scaled_ratio_is_the_exact_wide_quotient(
                value in prop_oneof![0i64..1 << 20, any::<i64>(), Just(i64::MIN)],
                scale in prop_oneof![Just(100i64), Just(MAX_NODE_SCORE), any::<i64>()],
                capacity in prop_oneof![1i64..1 << 20, Just(-1i64), any::<i64>().prop_filter("non-zero", |c| *c != 0)],
            ) {
                let wide = (i128::from(value) * i128::from(scale)) / i128::from(capacity);
                // Only quotients that fit are meaningful to Score (the rest are clamped before).
                prop_assume!(i64::try_from(wide).is_ok());
                prop_assert_eq!(i128::from(scaled_ratio(value, scale, capacity)), wide);
            }

            #[test]
            fn least_and_most_are_complementary_for_one_resource(req in 0i64..1000, cap in 1i64..1000) {
                let least = score_vector(&Strategy::LeastAllocated, &[(req, cap, 1)]);
                let most = score_vector(&Strategy::MostAllocated, &[(req, cap, 1)]);
                if req <= cap {
                    // Both round down, so together they lose at most one point.
                    prop_assert!((99..=100).contains(&(least + most)), "{least} + {most}");
                } else {
                    prop_assert_eq!((least, most), (0, 100));
                }
            }
        }
    }
}
