//! Table tests of the admission checks.

use serde_json::json;

use super::pods::check_port_name;
use super::*;

fn causes(f: fn(&Value, &mut Vec<Cause>), v: Value) -> Vec<String> {
    let mut out = Vec::new();
    f(&v, &mut out);
    out.into_iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

fn claim(requests: Value) -> Value {
    json!({"spec": {"devices": {"requests": requests}}})
}

#[test]
fn claim_rules() {
    let exact = |extra: Value| {
        let mut e = json!({"deviceClassName": "gpu"});
        if let (Value::Object(m), Value::Object(x)) = (&mut e, extra) {
            m.extend(x);
        }
        e
    };
    let table: Vec<(Value, Option<&str>)> = vec![
        (claim(json!([{"name": "a", "exactly": exact(json!({}))}])), None),
        (
            claim(json!([{"name": "a", "exactly": exact(json!({"allocationMode": "All", "count": 2}))}])),
            Some(
                "spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'",
            ),
        ),
        // A count of 0 is "not set" (kube-apiserver defaults it to 1), and 33 is accepted
        // there too: an allocation of more than 32 devices is refused only when written.
        (
            claim(json!([{"name": "a", "exactly": exact(json!({"count": 0}))}])),
            None,
        ),
        (
            claim(json!([{"name": "a", "exactly": exact(json!({"count": 33}))}])),
            None,
        ),
        (
            claim(json!([{"name": "a", "exactly": exact(json!({"allocationMode": "All", "count": 0}))}])),
            None,
        ),
        (
            claim(json!([{"name": "a", "exactly": exact(json!({"count": -1}))}])),
            Some("spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater than zero"),
        ),
        (
            claim(
                json!([{"name": "a", "exactly": exact(json!({}))}, {"name": "a", "exactly": exact(json!({"count": 2}))}]),
            ),
            Some(
                r#"spec.devices.requests[1]: Duplicate value: {"name":"a","exactly":{"deviceClassName":"gpu","count":2}}"#,
            ),
        ),
        (
            claim(
                json!([{"name": "a", "exactly": exact(json!({})), "firstAvailable": [{"name": "x", "deviceClassName": "gpu"}]}]),
            ),
            Some(
                "spec.devices.requests[0]: Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
            ),
        ),
        (
            claim(json!([{"name": "A_b", "exactly": exact(json!({}))}])),
            Some("spec.devices.requests[0].name: Invalid value: \"A_b\""),
        ),
        (
            claim(json!([{"name": "a", "firstAvailable": [
                {"name": "x", "deviceClassName": "gpu"}, {"name": "x", "deviceClassName": "gpu"}]}])),
            Some(
                r#"spec.devices.requests[0].firstAvailable[1]: Duplicate value: {"name":"x","deviceClassName":"gpu"}"#,
            ),
        ),
        (
            claim(json!([{"name": "a"}])),
            Some("spec.devices.requests[0]: Required value: exactly one of"),
        ),
        (
            claim(
                json!([{"name": "a", "exactly": exact(json!({"selectors": [{"cel": {"expression": "device.driver == "}}]}))}]),
            ),
            Some(
                "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: \"device.driver == \": compilation failed",
            ),
        ),
        (
            claim(
                json!([{"name": "a", "exactly": exact(json!({"selectors": [{"cel": {"expression": "device.driver == \"x\""}}]}))}]),
            ),
            None,
        ),
        (
            claim(Value::Array(
                (0..33)
                    .map(|i| json!({"name": format!("r{i}"), "exactly": exact(json!({}))}))
                    .collect(),
            )),
            Some("spec.devices.requests: Too many: 33: must have at most 32 items"),
        ),
    ];
    for (v, want) in table {
        let got = causes(check_resource_claim, v.clone());
        match want {
            None => assert!(got.is_empty(), "{v}: {got:?}"),
            Some(w) => assert!(got.iter().any(|g| g.starts_with(w)), "{v}: want {w}, got {got:?}"),
        }
    }
}

/// Whole answers, order included, as kube-apiserver 1.37.2 gave them for the same objects
/// (`kubectl create --dry-run=server`).
#[test]
fn claim_and_class_causes_come_in_kube_apiservers_order() {
    let label = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
                 and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
                 regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
                     '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', \
                     regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    let not_a_request = "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'";
    let c_ident = "a valid C identifier must start with alphabetic character or '_', followed by a string \
                   of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex \
                   used for validation is '[A-Za-z_][A-Za-z0-9_]*')";
    let r = "spec.devices.requests";
    let cases: Vec<(Value, Vec<String>)> = vec![
        (
            claim(json!([{"name": "R", "exactly": {"deviceClassName": "gpu", "count": 0}},
                         {"name": "R", "exactly": {"deviceClassName": "", "allocationMode": "All", "count": 2}}])),
            vec![
                format!("{r}[0].name: Invalid value: \"R\": {label}"),
                format!("{r}[1].name: Invalid value: \"R\": {label}"),
                format!("{r}[1].exactly.deviceClassName: Required value"),
                format!("{r}[1].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'"),
                format!(
                    r#"{r}[1]: Duplicate value: {{"name":"R","exactly":{{"deviceClassName":"","allocationMode":"All","count":2}}}}"#
                ),
            ],
        ),
        (
            claim(json!([{"name": "a", "firstAvailable": [
                {"name": "x", "deviceClassName": "gpu"},
                {"name": "x", "deviceClassName": "Bad_Class", "allocationMode": "Foo"}]}])),
            vec![
                format!(
                    r#"{r}[0].firstAvailable[1]: Duplicate value: {{"name":"x","deviceClassName":"Bad_Class","allocationMode":"Foo"}}"#
                ),
                format!("{r}[0].firstAvailable[1].deviceClassName: Invalid value: \"Bad_Class\": {subdomain}"),
                format!(
                    "{r}[0].firstAvailable[1].allocationMode: Unsupported value: \"Foo\": supported values: \"All\", \"ExactCount\""
                ),
            ],
        ),
        (
            json!({"spec": {"devices": {
                "requests": [{"name": "a", "exactly": {"deviceClassName": "gpu"}}],
                "constraints": [{"requests": ["zz"], "matchAttribute": "bad attr"}],
                "config": [{"requests": ["q"], "opaque": {"driver": "d.io", "parameters": "x"}}]}}}),
            vec![
                format!("spec.devices.constraints[0].requests[0]: Invalid value: \"zz\": {not_a_request}"),
                format!("spec.devices.config[0].requests[0]: Invalid value: \"q\": {not_a_request}"),
                "spec.devices.config[0].opaque.parameters: Invalid value: \"<value omitted>\": must be a valid JSON object"
                    .to_string(),
                format!("spec.devices.constraints[0].matchAttribute: Invalid value: \"bad attr\": {c_ident}"),
                "spec.devices.constraints[0].matchAttribute: Invalid value: \"bad attr\": a fully qualified name must be a domain and a name separated by a slash".to_string(),
            ],
        ),
    ];
    for (v, want) in cases {
        assert_eq!(causes(check_resource_claim, v.clone()), want, "{v}");
    }
    let class =
        json!({"spec": {"selectors": [{}], "config": [{"opaque": {"driver": "", "parameters": {}}}]}});
    assert_eq!(
        causes(check_device_class, class),
        [
            "spec.selectors[0].cel: Required value",
            "spec.config[0].opaque.driver: Required value"
        ]
    );
}

#[test]
fn template_and_class_paths() {
    let t = json!({"spec": {"spec": {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "", "allocationMode": "Some"}}]}}}});
    let got = causes(check_resource_claim_template, t);
    assert!(
        got.contains(&"spec.spec.devices.requests[0].exactly.deviceClassName: Required value".to_string()),
        "{got:?}"
    );
    assert!(
        got.iter().any(|g| g.starts_with(
            "spec.spec.devices.requests[0].exactly.allocationMode: Unsupported value: \"Some\""
        )),
        "{got:?}"
    );
    let c = json!({"spec": {"selectors": [{"cel": {"expression": "device.attributes["}}]}});
    let got = causes(check_device_class, c);
    assert_eq!(got.len(), 1);
    assert!(
        got[0].starts_with("spec.selectors[0].cel.expression: Invalid value"),
        "{got:?}"
    );
}

fn slice_of(key: &str, list: Value) -> Value {
    json!({"spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "generation": 0, "resourceSliceCount": 1},
                    "nodeName": "n1", key: list}})
}

fn slice(devices: Value) -> Value {
    slice_of("devices", devices)
}

fn counter_slice(sets: Value) -> Value {
    slice_of("sharedCounters", sets)
}

/// Every expected message below is kube-apiserver 1.37.2's answer to the same slice
/// (`kubectl create --dry-run=server`).
#[test]
fn slice_rules() {
    let ok = slice(json!([{"name": "d0",
        "attributes": {"model": {"string": "x"}, "gpu.example.com/index": {"int": 0}},
        "capacity": {"memory": {"value": "8Gi"}},
        "consumesCounters": [{"counterSet": "s", "counters": {"mem": {"value": "1Gi"}}}]}]));
    assert_eq!(causes(check_resource_slice, ok), Vec::<String>::new());
    let ok = counter_slice(json!([{"name": "s", "counters": {"mem": {"value": "8Gi"}}}]));
    assert_eq!(causes(check_resource_slice, ok), Vec::<String>::new());
    // Accepted by kube-apiserver too: negative counters and capacities, a driver name in
    // capitals, and a name with two slashes (which it leaves unchecked).
    for ok in [
        counter_slice(json!([{"name": "s", "counters": {"mem": {"value": "-1"}}}])),
        slice(
            json!([{"name": "d", "consumesCounters": [{"counterSet": "s", "counters": {"mem": {"value": "-2"}}}],
                      "capacity": {"mem": {"value": "-1"}}, "attributes": {"a/b/c": {"int": 1}}}]),
        ),
        json!({"spec": {"driver": "GPU.Example.com", "pool": {"name": "n1", "resourceSliceCount": 1},
                        "allNodes": true, "devices": []}}),
    ] {
        assert_eq!(
            causes(check_resource_slice, ok.clone()),
            Vec::<String>::new(),
            "{ok}"
        );
    }
    let table: Vec<(Value, &str)> = vec![
        (slice(json!([{"name": "d0"}, {"name": "d0"}])), "spec.devices[1]: Duplicate value: \"d0\""),
        (slice(json!([{"name": "D0"}])), "spec.devices[0].name: Invalid value: \"D0\""),
        (
            slice(json!([{"name": "d", "attributes": {"a": {"string": "x", "int": 1}}}])),
            "spec.devices[0].attributes[a]: Invalid value: \"{int, string}\": must specify exactly one of: `int`, `bool`, `string`, `version`, `ints`, `bools`, `strings`, `versions`",
        ),
        (
            slice(json!([{"name": "d", "attributes": {"a": {}}}])),
            "spec.devices[0].attributes[a]: Invalid value: \"\": must specify one of: `int`",
        ),
        (
            slice(json!([{"name": "d", "attributes": {"a": {"string": "x".repeat(65)}}}])),
            "spec.devices[0].attributes[a].string: Too long: may not be more than 64 bytes",
        ),
        (
            slice(json!([{"name": "d", "attributes": {"9bad": {"int": 1}}}])),
            "spec.devices[0].attributes: Invalid value: \"9bad\": a valid C identifier",
        ),
        (
            slice(json!([{"name": "d", "capacity": {"Bad_Domain/x": {"value": "1"}}}])),
            "spec.devices[0].capacity: Invalid value: \"Bad_Domain\": a lowercase RFC 1123 subdomain",
        ),
        (
            counter_slice(json!([{"name": "s", "counters": {"Bad": {"value": "1"}}}])),
            "spec.sharedCounters[0].counters: Invalid value: \"Bad\": a lowercase RFC 1123 label",
        ),
        (counter_slice(json!([{"name": "s", "counters": {}}])), "spec.sharedCounters[0].counters: Required value"),
        (
            counter_slice(json!([{"name": "s", "counters": {"c": {"value": "1"}}}, {"name": "s", "counters": {"c": {"value": "1"}}}])),
            r#"spec.sharedCounters[1]: Duplicate value: {"name":"s","counters":{"c":{"value":"1"}}}"#,
        ),
        (
            slice(Value::Array((0..129).map(|i| json!({"name": format!("d{i}")})).collect())),
            "spec.devices: Too many: 129: must have at most 128 items",
        ),
        (
            slice(Value::Array(
                (0..65).map(|i| json!({"name": format!("d{i}"), "taints": [{"key": "k", "effect": "NoSchedule"}]})).collect(),
            )),
            "spec.devices: Too many: 65: must have at most 64 items",
        ),
        (
            slice(json!([{"name": "d", "attributes": (0..33).map(|i| (format!("a{i}"), json!({"int": i}))).collect::<Map<String, Value>>()}])),
            "spec.devices[0]: Invalid value: 33: the total number of attributes and capacities must not exceed 32",
        ),
        (
            json!({"spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "resourceSliceCount": 1},
                            "nodeName": "n1", "devices": [], "sharedCounters": []}}),
            "spec: Invalid value: \"\": only one of `sharedCounters` or `devices` is allowed",
        ),
        (
            json!({"spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "resourceSliceCount": 1}, "devices": []}}),
            "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
        ),
        (
            json!({"spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "resourceSliceCount": 1},
                            "nodeName": "n1", "allNodes": true, "devices": []}}),
            "spec: Invalid value: \"{`nodeName`, `allNodes`}\": exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set",
        ),
    ];
    for (v, want) in table {
        let got = causes(check_resource_slice, v.clone());
        assert!(
            got.iter().any(|g| g.starts_with(want)),
            "want {want}, got {got:?}"
        );
    }
    let bad_pool = json!({"spec": {"driver": "Bad_Driver", "nodeName": "n1",
                                   "pool": {"name": "n1/Bad_Part", "generation": -1, "resourceSliceCount": 0}}});
    let got = causes(check_resource_slice, bad_pool);
    let fields: Vec<&str> = got
        .iter()
        .map(|g| g.split(": ").next().unwrap_or_default())
        .collect();
    assert_eq!(
        fields,
        [
            "spec.driver",
            "spec.pool.name",
            "spec.pool.resourceSliceCount",
            "spec.pool.generation"
        ],
        "{got:?}"
    );
    assert!(
        got[1].starts_with("spec.pool.name: Invalid value: \"Bad_Part\": a lowercase"),
        "{got:?}"
    );
    assert_eq!(
        got[3],
        "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero"
    );
}

#[test]
fn pod_ports() {
    let pod = json!({"spec": {"containers": [{"name": "c", "ports": [
        {"containerPort": 80, "name": "http"},
        {"containerPort": 70000},
        {"containerPort": 81, "protocol": "ICMP"},
        {"containerPort": 82, "name": "http"},
        {"name": "x"},
    ]}]}});
    let got = causes(check_pod_ports, pod);
    assert_eq!(
        got,
        [
            "spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.containers[0].ports[2].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.containers[0].ports[3].name: Duplicate value: \"http\"",
            "spec.containers[0].ports[4].containerPort: Required value",
        ]
    );
    assert!(check_port_name("a-very-long-port-name").is_err());
    assert!(check_port_name("123").is_err());
    assert!(check_port_name("metrics").is_ok());
}

#[test]
fn persistent_volume_attributes_class() {
    let pv = |spec: Value| json!({"spec": spec});
    let csi = json!({"driver": "csi.example.com", "volumeHandle": "v1"});
    // kube-apiserver 1.37.2's answer to a local PV with an attributes class.
    assert_eq!(
        causes(
            check_persistent_volume,
            pv(json!({"volumeAttributesClassName": "gold", "local": {"path": "/mnt"}}))
        ),
        ["spec.csi: Required value: has to be specified when using volumeAttributesClassName"]
    );
    assert!(
        causes(
            check_persistent_volume,
            pv(json!({"volumeAttributesClassName": "gold", "csi": csi}))
        )
        .is_empty()
    );
    assert!(causes(check_persistent_volume, pv(json!({"local": {"path": "/mnt"}}))).is_empty());
    assert_eq!(
        causes(
            check_persistent_volume,
            pv(json!({"volumeAttributesClassName": "", "csi": csi}))
        ),
        ["spec.volumeAttributesClassName: Required value: an empty string is disallowed"]
    );
    let bad = causes(
        check_persistent_volume,
        pv(json!({"volumeAttributesClassName": "Gold_1", "csi": csi})),
    );
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with(
            "spec.volumeAttributesClassName: Invalid value: \"Gold_1\": a lowercase RFC 1123 subdomain"
        ),
        "{bad:?}"
    );
}
