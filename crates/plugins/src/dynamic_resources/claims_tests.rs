//! Table tests for the PodGroup claim rules: upstream's BindTo, IsForPod and IsReservedForPod
//! cases (dynamic-resource-allocation's resourceclaim tests), written as ours.

use k8s_openapi::api::core::v1::{Pod, PodResourceClaim, PodSchedulingGroup, PodSpec};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimConsumerReference, ResourceClaimStatus};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, PodGroupResourceClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::*;

const NS: &str = "my-namespace";
const POD: &str = "my-pod";
const POD_UID: &str = "pod-uid";
const GROUP: &str = "my-podgroup";
const GROUP_UID: &str = "podgroup-uid";
const ENTRY: &str = "my-claim";
const CLAIM: &str = "my-resource-claim";

fn pod(group: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some(NS.into()),
            name: Some(POD.into()),
            uid: Some(POD_UID.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            scheduling_group: group.map(|g| PodSchedulingGroup {
                pod_group_name: Some(g.into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn entry(name: &str, claim: Option<&str>, template: Option<&str>) -> PodResourceClaim {
    PodResourceClaim {
        name: name.into(),
        resource_claim_name: claim.map(Into::into),
        resource_claim_template_name: template.map(Into::into),
    }
}

fn group_claim(name: &str, claim: Option<&str>, template: Option<&str>) -> PodGroupResourceClaim {
    PodGroupResourceClaim {
        name: name.into(),
        resource_claim_name: claim.map(Into::into),
        resource_claim_template_name: template.map(Into::into),
    }
}

fn group(ns: &str, name: &str, claims: Vec<PodGroupResourceClaim>) -> PodGroup {
    let mut g = PodGroup {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(GROUP_UID.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    g.spec.resource_claims = Some(claims);
    g
}

fn pod_reservation() -> ResourceClaimConsumerReference {
    ResourceClaimConsumerReference {
        api_group: None,
        name: POD.into(),
        resource: "pods".into(),
        uid: POD_UID.into(),
    }
}

fn group_reservation() -> ResourceClaimConsumerReference {
    ResourceClaimConsumerReference {
        api_group: Some(SCHEDULING_GROUP.into()),
        name: GROUP.into(),
        resource: "podgroups".into(),
        uid: GROUP_UID.into(),
    }
}

#[test]
fn a_claim_entry_is_bound_to_the_pod_or_its_pod_group_as_upstream() {
    type Case = (
        &'static str,
        Option<PodGroup>,
        PodResourceClaim,
        Result<ResourceClaimConsumerReference, &'static str>,
    );
    let by_name = || entry(ENTRY, Some(CLAIM), None);
    let cases: Vec<Case> = vec![
        (
            "unsupported API in Pod",
            None,
            entry(ENTRY, None, None),
            Err("Pod my-namespace/my-pod claim my-claim: unsupported ResourceClaim source"),
        ),
        (
            "pod claim with resourceClaimName",
            None,
            by_name(),
            Ok(pod_reservation()),
        ),
        (
            "pod claim with template",
            None,
            entry(ENTRY, None, Some(CLAIM)),
            Ok(pod_reservation()),
        ),
        (
            "claim name matching the PodGroup",
            Some(group(NS, GROUP, vec![group_claim(ENTRY, Some(CLAIM), None)])),
            by_name(),
            Ok(group_reservation()),
        ),
        (
            "template matching the PodGroup",
            Some(group(NS, GROUP, vec![group_claim(ENTRY, None, Some(CLAIM))])),
            entry(ENTRY, None, Some(CLAIM)),
            Ok(group_reservation()),
        ),
        (
            "wrong PodGroup namespace",
            Some(group("not-my-namespace", GROUP, vec![])),
            by_name(),
            Err(
                "Pod my-namespace/my-pod belongs to PodGroup my-namespace/my-podgroup, not PodGroup not-my-namespace/my-podgroup",
            ),
        ),
        (
            "wrong PodGroup name",
            Some(group(NS, "not-my-podgroup", vec![])),
            by_name(),
            Err(
                "Pod my-namespace/my-pod belongs to PodGroup my-namespace/my-podgroup, not PodGroup my-namespace/not-my-podgroup",
            ),
        ),
        (
            "no matching claim in the PodGroup",
            Some(group(
                NS,
                GROUP,
                vec![
                    group_claim("not-my-claim", Some(CLAIM), None),
                    group_claim("nor-my-claim", Some(CLAIM), None),
                ],
            )),
            by_name(),
            Ok(pod_reservation()),
        ),
        (
            "the matching claim among others",
            Some(group(
                NS,
                GROUP,
                vec![
                    group_claim("not-my-claim", Some(CLAIM), None),
                    group_claim("nor-my-claim", Some(CLAIM), None),
                    group_claim(ENTRY, Some(CLAIM), None),
                ],
            )),
            by_name(),
            Ok(group_reservation()),
        ),
        (
            "resourceClaimName mismatch",
            Some(group(
                NS,
                GROUP,
                vec![group_claim(ENTRY, Some("not-my-resource-claim"), None)],
            )),
            by_name(),
            Ok(pod_reservation()),
        ),
        (
            "template name mismatch",
            Some(group(
                NS,
                GROUP,
                vec![group_claim(ENTRY, None, Some("not-my-resource-claim"))],
            )),
            entry(ENTRY, None, Some(CLAIM)),
            Ok(pod_reservation()),
        ),
        (
            "same name, claim in the pod, template in the group",
            Some(group(NS, GROUP, vec![group_claim(ENTRY, None, Some(CLAIM))])),
            by_name(),
            Ok(pod_reservation()),
        ),
        (
            "a group entry with neither source",
            Some(group(NS, GROUP, vec![group_claim("odd", None, None)])),
            by_name(),
            Err("PodGroup my-namespace/my-podgroup claim odd: unsupported ResourceClaim source"),
        ),
    ];
    let p = pod(Some(GROUP));
    for (name, g, e, want) in cases {
        let got = Consumer::for_claim(&p, POD_UID, g.as_ref(), &e).map(|c| c.reference());
        assert_eq!(got, want.map_err(String::from), "{name}");
    }
    // A pod outside any group, given a group, is refused with upstream's words.
    let got = Consumer::for_claim(
        &pod(None),
        POD_UID,
        Some(&group(NS, GROUP, vec![])),
        &entry(ENTRY, Some(CLAIM), None),
    );
    assert_eq!(
        got,
        Err("Pod my-namespace/my-pod does not belong to a PodGroup".to_string())
    );
}

fn claim_owned_by(kind: &str, api_version: &str, name: &str, uid: &str, ns: &str) -> ResourceClaim {
    ResourceClaim {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(CLAIM.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: name.into(),
                uid: uid.into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn a_generated_claim_is_for_the_pod_or_with_group_claims_for_its_pod_group() {
    let in_group = pod(Some(GROUP));
    let alone = pod(None);
    let by_pod = claim_owned_by("Pod", "v1", POD, POD_UID, NS);
    let by_group = claim_owned_by("PodGroup", "scheduling.k8s.io/v1beta1", GROUP, GROUP_UID, NS);
    let by_future_version = claim_owned_by("PodGroup", "scheduling.k8s.io/v2", GROUP, GROUP_UID, NS);
    let by_other_group = claim_owned_by("PodGroup", "scheduling.k8s.io/v1beta1", "other", GROUP_UID, NS);
    let by_other_api = claim_owned_by("PodGroup", "example.com/v1", GROUP, GROUP_UID, NS);
    let by_other_kind = claim_owned_by("Workload", "scheduling.k8s.io/v1beta1", GROUP, GROUP_UID, NS);
    let elsewhere = claim_owned_by("Pod", "v1", POD, POD_UID, "other-namespace");
    // (case, pod, claim, accept group owner, want)
    let cases: Vec<(&str, &Pod, &ResourceClaim, bool, bool)> = vec![
        ("owned by the pod", &alone, &by_pod, false, true),
        (
            "owned by the pod, group claims on",
            &in_group,
            &by_pod,
            true,
            true,
        ),
        ("other namespace", &alone, &elsewhere, true, false),
        (
            "owned by the group, group claims off",
            &in_group,
            &by_group,
            false,
            false,
        ),
        ("owned by the group", &in_group, &by_group, true, true),
        (
            "owned by the group, another API version",
            &in_group,
            &by_future_version,
            true,
            true,
        ),
        (
            "owned by the group, pod in no group",
            &alone,
            &by_group,
            true,
            false,
        ),
        ("owned by another group", &in_group, &by_other_group, true, false),
        (
            "owned by a PodGroup of another API group",
            &in_group,
            &by_other_api,
            true,
            false,
        ),
        ("owned by a Workload", &in_group, &by_other_kind, true, false),
    ];
    for (name, p, c, accept, want) in cases {
        assert_eq!(is_for_pod(p, c, accept), want, "{name}");
    }
    // The messages of a refused generated claim.
    let r = ClaimRef {
        pod_claim_name: ENTRY.into(),
        claim_name: CLAIM.into(),
        must_check_owner: true,
    };
    let err = check(&in_group, &r, Some(Arc::new(by_other_group.clone())), true).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ResourceClaim my-namespace/my-resource-claim was not created for Pod my-namespace/my-pod (neither Pod nor PodGroup my-podgroup is the owner)"
    );
    let err = check(&in_group, &r, Some(Arc::new(by_group.clone())), false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ResourceClaim my-namespace/my-resource-claim was not created for Pod my-namespace/my-pod (Pod is not owner)"
    );
    assert!(check(&in_group, &r, Some(Arc::new(by_group)), true).is_ok());
}

fn reserved(entries: Vec<ResourceClaimConsumerReference>) -> ResourceClaim {
    ResourceClaim {
        status: Some(ResourceClaimStatus {
            reserved_for: Some(entries),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_claim_reserved_for_the_pod_group_counts_as_reserved_for_its_pods_with_group_claims() {
    let in_group = pod(Some(GROUP));
    let alone = pod(None);
    let mut other_group = group_reservation();
    other_group.name = "other".into();
    let mut core_pods_named_like_group = group_reservation();
    core_pods_named_like_group.api_group = None;
    core_pods_named_like_group.resource = "pods".into();
    core_pods_named_like_group.uid = "someone".into();
    // (case, pod, claim, accept group, want)
    let cases: Vec<(&str, &Pod, ResourceClaim, bool, bool)> = vec![
        ("nobody", &in_group, reserved(vec![]), true, false),
        ("the pod", &alone, reserved(vec![pod_reservation()]), false, true),
        (
            "the group, group claims on",
            &in_group,
            reserved(vec![group_reservation()]),
            true,
            true,
        ),
        (
            "the group, group claims off",
            &in_group,
            reserved(vec![group_reservation()]),
            false,
            false,
        ),
        (
            "the group, pod in no group",
            &alone,
            reserved(vec![group_reservation()]),
            true,
            false,
        ),
        (
            "another group",
            &in_group,
            reserved(vec![other_group]),
            true,
            false,
        ),
        (
            "a pod named like the group",
            &in_group,
            reserved(vec![core_pods_named_like_group]),
            true,
            false,
        ),
        ("no status", &in_group, ResourceClaim::default(), true, false),
    ];
    for (name, p, c, accept, want) in cases {
        assert_eq!(is_reserved_for_pod(&c, p, POD_UID, accept), want, "{name}");
    }
}
