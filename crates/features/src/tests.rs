//! Table tests of `--feature-gates` parsing, in the cases upstream's own gate tests cover, plus
//! unisched's refusals.

use std::collections::BTreeMap;

use super::*;

fn err(flag: &str) -> String {
    FeatureGates::parse(flag).expect_err(flag).to_string()
}

#[test]
fn the_empty_flag_gives_upstream_defaults_except_unisched_deviations() {
    let gates = FeatureGates::parse("").unwrap();
    // Upstream defaults at 1.37: a GA locked gate, a beta-on gate, an alpha-off gate.
    assert!(gates.enabled("DynamicResourceAllocation"));
    assert!(gates.enabled("PodLevelResources"));
    assert!(!gates.enabled("CompositePodGroup"));
    assert!(
        FeatureGates::parse("CompositePodGroup=true")
            .unwrap()
            .enabled("CompositePodGroup"),
        "implemented both ways"
    );
    // unisched's deliberate differences: KEP-5517 and the workload gates.
    assert!(gates.enabled("DRANodeAllocatableResources"));
    assert!(gates.enabled("TopologyAwareWorkloadScheduling"));
    assert!(gates.enabled("GenericWorkload"));
    assert_eq!(known_gate("GenericWorkload").map(|g| g.default), Some(false));
    assert_eq!(
        known_gate("DRANodeAllocatableResources").map(|g| g.default),
        Some(false)
    );
    assert!(gates.explicit().is_empty());
    assert_eq!(gates.to_string(), "");
}

#[test]
fn flag_errors_read_as_upstream_prints_them() {
    let cases: &[(&str, &str)] = &[
        ("PodLevelResources", "missing bool value for PodLevelResources"),
        (
            "PodLevelResources=maybe",
            "invalid value of PodLevelResources=maybe, err: strconv.ParseBool: parsing \"maybe\": invalid syntax",
        ),
        ("NoSuchGate=true", "unrecognized feature gate: NoSuchGate"),
        (
            "DynamicResourceAllocation=false",
            "cannot set feature gate DynamicResourceAllocation to false, feature is locked to true",
        ),
        (
            "InPlacePodVerticalScaling=false",
            "cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true",
        ),
        // A gate the kubelet reads, enabled without the gate it depends on.
        (
            "InPlacePodVerticalScalingExclusiveCPUs=true,InPlacePodVerticalScaling=false",
            "cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true",
        ),
    ];
    for (flag, want) in cases {
        assert_eq!(&err(flag), want, "--feature-gates={flag}");
    }
}

#[test]
fn a_dependency_left_disabled_is_named() {
    // DRADeviceTaints is GA but not locked at 1.37, so turning it off is allowed upstream and
    // makes DRADeviceTaintRules (which needs it) invalid when that one is on.
    let mut settings = BTreeMap::new();
    settings.insert("DRADeviceTaintRules".to_string(), true);
    settings.insert("DRADeviceTaints".to_string(), false);
    let e = FeatureGates::from_settings(settings).unwrap_err();
    assert_eq!(
        e,
        FeatureGateError::DisabledDependency {
            name: "DRADeviceTaintRules".into(),
            disabled: vec!["DRADeviceTaints".into()],
        }
    );
    assert_eq!(
        e.to_string(),
        "DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]"
    );
}

#[test]
fn several_errors_are_aggregated_in_brackets() {
    let got = err("DynamicResourceAllocation=false,InPlacePodVerticalScaling=false");
    assert_eq!(
        got,
        "[cannot set feature gate DynamicResourceAllocation to false, feature is locked to true, \
         cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true]"
    );
}

#[test]
fn gates_other_components_read_are_accepted_and_have_no_scheduler_meaning() {
    let gates = FeatureGates::parse("KubeletPodResourcesGet=true, APIResponseCompression = false").unwrap();
    assert!(!gates.enabled("APIResponseCompression"));
    assert_eq!(
        gates.to_string(),
        "APIResponseCompression=false,KubeletPodResourcesGet=true"
    );
    assert!(
        SCHEDULER_GATES
            .iter()
            .all(|(n, _)| *n != "APIResponseCompression")
    );
}

#[test]
fn go_boolean_spellings_are_accepted() {
    for (value, want) in [
        ("1", true),
        ("t", true),
        ("TRUE", true),
        ("True", true),
        ("0", false),
        ("F", false),
    ] {
        let gates = FeatureGates::parse(&format!("APIResponseCompression={value}")).unwrap();
        assert_eq!(gates.enabled("APIResponseCompression"), want, "{value}");
    }
}

#[test]
fn scheduler_gates_unisched_does_not_implement_are_refused_by_name() {
    assert_eq!(
        err("InterPodAffinityHostnameFastPath=true"),
        "feature gate InterPodAffinityHostnameFastPath=true is not supported by unisched, which always runs \
         InterPodAffinityHostnameFastPath=false"
    );
    assert_eq!(
        err("DRANodeAllocatableResources=false"),
        "feature gate DRANodeAllocatableResources=false is not supported by unisched, which always runs \
         DRANodeAllocatableResources=true"
    );
    // Setting a scheduler gate to the value unisched runs is fine.
    let gates = FeatureGates::parse("PodLevelResources=true,InterPodAffinityHostnameFastPath=false").unwrap();
    assert!(gates.enabled("PodLevelResources"));
}

#[test]
fn the_workload_gates_switch_and_own_defaults_follow_their_dependencies() {
    let off = FeatureGates::parse("GenericWorkload=false").unwrap();
    assert!(!off.enabled("GenericWorkload"));
    assert!(
        !off.enabled("TopologyAwareWorkloadScheduling"),
        "an untouched unisched default follows its dependency down"
    );
    let tas_off = FeatureGates::parse("TopologyAwareWorkloadScheduling=false").unwrap();
    assert!(tas_off.enabled("GenericWorkload"));
    assert!(!tas_off.enabled("TopologyAwareWorkloadScheduling"));
    assert!(
        err("GenericWorkload=false,TopologyAwareWorkloadScheduling=true")
            .contains("TopologyAwareWorkloadScheduling"),
        "a gate set by the flag keeps upstream's dependency check"
    );
}

#[test]
fn all_alpha_sets_every_unset_alpha_gate_and_explicit_names_win() {
    // AllAlpha=true alone turns on alpha gates whose beta dependencies stay off, as upstream.
    let e = err("AllAlpha=true,GenericWorkload=false");
    assert!(
        e.contains(
            "TopologyAwareWorkloadScheduling is enabled, but depends on features that are disabled: [GenericWorkload]"
        ),
        "{e}"
    );
    // With the dependencies on, the alpha scheduler gates unisched does not implement are refused.
    let e = err("AllAlpha=true,AllBeta=true");
    assert!(
        e.contains("InterPodAffinityHostnameFastPath=true is not supported"),
        "{e}"
    );
    assert!(
        !e.contains("CompositePodGroup=true is not supported"),
        "unisched implements both values: {e}"
    );
    assert!(
        !e.contains("TopologyAwareWorkloadScheduling=true is not supported"),
        "unisched implements both values: {e}"
    );
    // AllBeta=false turns beta gates off, including ones unisched runs on: refused too.
    let e = err("AllBeta=false");
    assert!(e.contains("PodLevelResources=false is not supported"), "{e}");
    // AllAlpha=false would turn off unisched's KEP-5517 gate; naming it wins over AllAlpha.
    assert!(err("AllAlpha=false").contains("DRANodeAllocatableResources=false is not supported"));
    let mut settings = BTreeMap::new();
    settings.insert("AllAlpha".to_string(), false);
    settings.insert("DRANodeAllocatableResources".to_string(), true);
    settings.insert("APIServerWebhookAuthenticationToken".to_string(), true);
    let gates = FeatureGates::from_settings(settings).unwrap();
    assert!(gates.enabled("DRANodeAllocatableResources"));
    assert!(gates.enabled("APIServerWebhookAuthenticationToken"));
    assert!(!gates.enabled("TopologyAwareWorkloadScheduling"));
}

#[test]
fn gaps_name_upstream_defaults_unisched_lacks() {
    let gaps = FeatureGates::default().gaps();
    let names: Vec<&str> = gaps.iter().map(|(n, _)| *n).collect();
    assert!(!names.contains(&"NodeDeclaredFeatures"), "{names:?}");
    assert!(names.contains(&"OpportunisticBatching"), "{names:?}");
    assert!(!names.contains(&"NominatedNodeNameForExpectation"), "{names:?}");
    assert!(!names.contains(&"StorageCapacityScoring"), "{names:?}");
    assert!(!names.contains(&"VolumeLimitScaling"), "{names:?}");
    assert!(!names.contains(&"PodLevelResources"), "{names:?}");
    assert!(!names.contains(&"VolumeAttributesClass"), "{names:?}");
    assert!(gaps.iter().all(|(_, upstream_runs)| *upstream_runs));
}

#[test]
fn nominated_node_name_for_expectation_is_on_and_switches_both_ways() {
    assert!(FeatureGates::default().enabled("NominatedNodeNameForExpectation"));
    let off = FeatureGates::parse("NominatedNodeNameForExpectation=false").unwrap();
    assert!(!off.enabled("NominatedNodeNameForExpectation"));
    assert!(
        !off.gaps()
            .iter()
            .any(|(n, _)| *n == "NominatedNodeNameForExpectation")
    );
}

#[test]
fn every_scheduler_gate_and_deviation_is_a_known_gate() {
    for (name, _) in SCHEDULER_GATES {
        assert!(known_gate(name).is_some(), "{name}");
    }
    for (name, value, _) in UNISCHED_DEFAULTS {
        let gate = known_gate(name).unwrap();
        assert_ne!(
            gate.default, *value,
            "{name} is listed as a deviation but matches upstream"
        );
    }
}

#[test]
fn stage_labels_are_upstreams() {
    let labels: Vec<&str> = [Stage::Alpha, Stage::Beta, Stage::Ga, Stage::Deprecated]
        .map(Stage::label)
        .to_vec();
    assert_eq!(labels, ["ALPHA", "BETA", "", "DEPRECATED"]);
    let gates = FeatureGates::default();
    let (_, stage, on) = gates.all().find(|(n, ..)| *n == "GenericWorkload").unwrap();
    assert_eq!((stage, on), (Stage::Beta, true), "a beta gate unisched turns on");
    let (_, stage, on) = gates.all().find(|(n, ..)| *n == "CompositePodGroup").unwrap();
    assert_eq!((stage, on), (Stage::Alpha, false));
}

#[test]
fn taint_toleration_comparison_operators_switch_both_ways() {
    assert!(!FeatureGates::default().enabled("TaintTolerationComparisonOperators"));
    let on = FeatureGates::parse("TaintTolerationComparisonOperators=true").unwrap();
    assert!(on.enabled("TaintTolerationComparisonOperators"));
    let off = FeatureGates::parse("TaintTolerationComparisonOperators=false").unwrap();
    assert!(!off.enabled("TaintTolerationComparisonOperators"));
}

#[test]
fn storage_gates_are_on_by_default_and_switch_both_ways() {
    for gate in ["StorageCapacityScoring", "VolumeLimitScaling"] {
        assert!(FeatureGates::default().enabled(gate), "{gate}: on as upstream");
        let off = FeatureGates::parse(&format!("{gate}=false")).unwrap();
        assert!(!off.enabled(gate), "{gate}");
        let on = FeatureGates::parse(&format!("{gate}=true")).unwrap();
        assert!(on.enabled(gate), "{gate}");
    }
}
