//! Binding conditions and the exact shape of the `AllocationResult`.

use super::*;

#[test]
fn binding_conditions_table() {
    let n = "n";
    let slices = || {
        vec![
            slice("a", GPU, n, "a-pool").device(dev("needs-binding").binding_conditions(&["Ready"])),
            slice("b", GPU, n, "b-pool").device(dev("plain")),
        ]
    };
    run(vec![
        case(
            "pools with binding conditions are tried last",
            n,
            fx(slices(), vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["plain"]]),
        ),
        case(
            "and used when needed",
            n,
            fx(slices(), vec![one(req("r", "gpu").count(2))]),
            Expect::Devices(vec![vec!["plain", "needs-binding"]]),
        ),
    ]);
    let res = fx(slices(), vec![one(req("r", "gpu").count(2))])
        .allocate(&node(n))
        .unwrap();
    let results = res[0].devices.as_ref().unwrap().results.as_ref().unwrap();
    assert_eq!(results[0].binding_conditions, None);
    assert_eq!(results[1].binding_conditions, Some(vec!["Ready".to_string()]));
    assert_eq!(
        results[1].binding_failure_conditions,
        Some(vec!["Failed".to_string()])
    );
    let mut f = fx(slices(), vec![one(req("r", "gpu").count(2))]);
    f.features.binding_conditions = false;
    check(
        "feature off: not selectable",
        &f.allocate(&node(n)),
        &Expect::Unsched("not-enough-devices"),
    );
}

#[test]
fn result_format_table() {
    let n = "n";
    // Node selector: node-local slice -> matchFields on the node name.
    let res = fx(vec![gpus(n, 1)], vec![one(req("r", "gpu"))])
        .allocate(&node(n))
        .unwrap();
    let sel = res[0].node_selector.as_ref().unwrap();
    let f = &sel.node_selector_terms[0].match_fields.as_ref().unwrap()[0];
    assert_eq!(
        (f.key.as_str(), f.operator.as_str(), f.values.clone()),
        ("metadata.name", "In", Some(vec![n.to_string()]))
    );
    // allNodes -> no node selector.
    let res = fx(
        vec![slice("x", GPU, "z", "x").all_nodes().device(dev("d"))],
        vec![one(req("r", "gpu"))],
    )
    .allocate(&node(n))
    .unwrap();
    assert_eq!(res[0].node_selector, None);
    // bindsToNode on an allNodes device -> pinned to the node.
    let res = fx(
        vec![
            slice("x", GPU, "z", "x")
                .all_nodes()
                .device(dev("d").binds_to_node()),
        ],
        vec![one(req("r", "gpu"))],
    )
    .allocate(&node(n))
    .unwrap();
    assert!(res[0].node_selector.is_some());

    // Request names, admin access and configuration.
    let mut f = fx(
        vec![gpus(n, 4)],
        vec![
            claim("ns", "c")
                .request(req("a", "gpu"))
                .request(first_available(
                    "b",
                    vec![req("x", "cfg").count(9), req("y", "cfg")],
                ))
                .request(req("adm", "gpu").admin())
                .config(GPU, &[], serde_json::json!({"all": true}))
                .config(GPU, &["b/y"], serde_json::json!({"sub": true}))
                .config(GPU, &["b/x"], serde_json::json!({"unused": true}))
                .config(GPU, &["a", "b", "adm"], serde_json::json!({"every": true})),
        ],
    );
    f.classes.push(with_class_config(
        class("cfg", GPU),
        GPU,
        serde_json::json!({"class": true}),
    ));
    let res = f.allocate(&node(n)).unwrap();
    let d = res[0].devices.as_ref().unwrap();
    let results = d.results.as_ref().unwrap();
    let names: Vec<(&str, &str, Option<bool>)> = results
        .iter()
        .map(|r| (r.request.as_str(), r.device.as_str(), r.admin_access))
        .collect();
    assert_eq!(
        names,
        vec![
            ("a", "gpu-0", None),
            ("b/y", "gpu-1", None),
            ("adm", "gpu-2", Some(true))
        ]
    );
    let config = d.config.as_ref().unwrap();
    let summary: Vec<(&str, Option<Vec<String>>, String)> = config
        .iter()
        .map(|c| {
            (
                c.source.as_str(),
                c.requests.clone(),
                c.opaque.as_ref().unwrap().parameters.0.to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "FromClass",
                Some(vec!["b/y".to_string()]),
                r#"{"class":true}"#.to_string()
            ),
            ("FromClaim", None, r#"{"all":true}"#.to_string()),
            (
                "FromClaim",
                Some(vec!["b/y".to_string()]),
                r#"{"sub":true}"#.to_string()
            ),
            ("FromClaim", None, r#"{"every":true}"#.to_string()),
        ]
    );
    // Empty claims produce empty results.
    let res = fx(vec![gpus(n, 1)], vec![claim("ns", "empty")])
        .allocate(&node(n))
        .unwrap();
    assert_eq!(
        res[0].devices.as_ref().unwrap().results.as_ref().map(Vec::len),
        Some(0)
    );
}
