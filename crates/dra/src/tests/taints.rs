//! Device taints and tolerations.

use super::*;

#[test]
fn taints_table() {
    let n = "n";
    let tainted = |effect: &str| {
        slice("s", GPU, n, n)
            .device(dev("t").taint("maintenance", "soon", effect))
            .device(dev("ok"))
    };
    run(vec![
        case(
            "NoSchedule taint skipped",
            n,
            fx(vec![tainted("NoSchedule")], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["ok"]]),
        ),
        case(
            "NoExecute taint skipped",
            n,
            fx(vec![tainted("NoExecute")], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["ok"]]),
        ),
        case(
            "None effect ignored",
            n,
            fx(vec![tainted("None")], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "unknown effect ignored",
            n,
            fx(vec![tainted("Whatever")], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "tolerated by key and value",
            n,
            fx(
                vec![tainted("NoSchedule")],
                vec![one(req("r", "gpu").tolerate(
                    "maintenance",
                    "Equal",
                    "soon",
                    "NoSchedule",
                ))],
            ),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "tolerated by Exists",
            n,
            fx(
                vec![tainted("NoExecute")],
                vec![one(req("r", "gpu").tolerate("maintenance", "Exists", "", ""))],
            ),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "tolerated by empty key and Exists",
            n,
            fx(
                vec![tainted("NoExecute")],
                vec![one(req("r", "gpu").tolerate("", "Exists", "", ""))],
            ),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "wrong value does not tolerate",
            n,
            fx(
                vec![tainted("NoSchedule")],
                vec![one(req("r", "gpu").count(2).tolerate(
                    "maintenance",
                    "Equal",
                    "later",
                    "",
                ))],
            ),
            Expect::Unsched("tainted"),
        ),
        case(
            "wrong effect does not tolerate",
            n,
            fx(
                vec![tainted("NoExecute")],
                vec![one(req("r", "gpu").count(2).tolerate(
                    "maintenance",
                    "Exists",
                    "",
                    "NoSchedule",
                ))],
            ),
            Expect::UnschedMsg("maintenance=soon:NoExecute"),
        ),
    ]);
    // Tolerations are recorded in the result.
    let f = fx(
        vec![tainted("NoSchedule")],
        vec![one(req("r", "gpu").count(2).tolerate(
            "maintenance",
            "Exists",
            "",
            "",
        ))],
    );
    let res = f.allocate(&node(n)).unwrap();
    for r in res[0].devices.as_ref().unwrap().results.as_ref().unwrap() {
        assert_eq!(
            r.tolerations.as_ref().unwrap()[0].key.as_deref(),
            Some("maintenance")
        );
    }
    // DeviceTaintRules.
    use k8s_openapi::api::resource::v1::{
        DeviceTaint, DeviceTaintRule, DeviceTaintRuleSpec, DeviceTaintSelector,
    };
    let mut s = gpus(n, 2).build();
    let rule = DeviceTaintRule {
        spec: DeviceTaintRuleSpec {
            device_selector: Some(DeviceTaintSelector {
                device: Some("gpu-0".into()),
                ..Default::default()
            }),
            taint: DeviceTaint {
                key: "broken".into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            },
        },
        ..Default::default()
    };
    let no_selector = DeviceTaintRule {
        spec: DeviceTaintRuleSpec {
            device_selector: None,
            ..rule.spec.clone()
        },
        ..Default::default()
    };
    crate::apply_device_taint_rules(&mut s, &[rule.clone(), rule, no_selector]);
    let devices = s.spec.devices.as_ref().unwrap();
    assert_eq!(devices[0].taints.as_ref().map(Vec::len), Some(1));
    assert!(devices[1].taints.is_none());
    let f = Fixture {
        slices: vec![s],
        classes: vec![class("gpu", GPU)],
        claims: vec![one(req("r", "gpu")).build()],
        ..Default::default()
    };
    check(
        "DeviceTaintRule applied",
        &f.allocate(&node(n)),
        &Expect::Devices(vec![vec!["gpu-1"]]),
    );
}
