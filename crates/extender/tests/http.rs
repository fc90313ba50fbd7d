//! The HTTP client against extender servers started by the tests: upstream's JSON both ways,
//! node-cache capable extenders, errors the extender reports, non-200 answers, `httpTimeout`,
//! `managedResources`, and HTTPS with and without a CA.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{Json, Router, routing::post};
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use parking_lot::Mutex;
use serde_json::{Value, json};
use unisched_extender::{CallRuntime, HttpExtender, NoObserver};
use unisched_framework::{
    NodeInfo, PodInfo,
    config::{Extender as ExtenderConfig, ExtenderManagedResource, ExtenderTlsConfig, GoDuration},
    extender::{Extender, Victims},
};

/// Serves `router` on a runtime of its own (the client's calls block the calling thread).
fn serve(router: Router) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

/// Serves `router` over TLS with a self-signed certificate for `localhost`; returns the address
/// and the certificate's PEM.
fn serve_tls(router: Router) -> (SocketAddr, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = certified.cert.pem();
    let cert = certified.cert.der().clone();
    let key = rustls_pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let acceptor = acceptor.clone();
                let app = router.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service =
                        hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                            let mut app = app.clone();
                            async move { tower::Service::call(&mut app, request).await }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
    });
    (rx.recv().unwrap(), cert_pem)
}

fn extender(config: ExtenderConfig) -> HttpExtender {
    HttpExtender::new(
        &config,
        Arc::new(CallRuntime::new().unwrap()),
        Arc::new(NoObserver),
    )
    .unwrap()
}

fn config(url: String) -> ExtenderConfig {
    ExtenderConfig {
        url_prefix: url,
        filter_verb: "filter".into(),
        prioritize_verb: "prioritize".into(),
        bind_verb: "bind".into(),
        preempt_verb: "preempt".into(),
        weight: 2,
        ..ExtenderConfig::default()
    }
}

fn node(name: &str) -> Arc<NodeInfo> {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    Arc::new(NodeInfo::new(Arc::new(n)))
}

fn pod(name: &str, extended: Option<&str>) -> PodInfo {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    let resources = extended.map(|r| ResourceRequirements {
        limits: Some(BTreeMap::from([(r.to_string(), Quantity("1".into()))])),
        ..ResourceRequirements::default()
    });
    p.spec = Some(PodSpec {
        containers: vec![Container {
            name: "c".into(),
            resources,
            ..Container::default()
        }],
        ..PodSpec::default()
    });
    PodInfo::new(p)
}

fn names(nodes: &[Arc<NodeInfo>]) -> Vec<&str> {
    nodes.iter().map(|n| n.name()).collect()
}

/// What the server received, by verb.
type Seen = Arc<Mutex<BTreeMap<String, Value>>>;

/// An extender that keeps node `a` (rejecting `b`, and `c` as unresolvable), scores `b`
/// highest, binds, and keeps the preemption candidates it is given; it records every request.
fn recording_extender(seen: Seen) -> Router {
    let s1 = seen.clone();
    let s2 = seen.clone();
    let s3 = seen.clone();
    let s4 = seen;
    Router::new()
        .route(
            "/ext/filter",
            post(move |Json(args): Json<Value>| async move {
                s1.lock().insert("filter".into(), args.clone());
                if args["NodeNames"].is_array() {
                    return Json(json!({"NodeNames": ["a"], "FailedNodes": {"b": "b is full"}, "FailedAndUnresolvableNodes": {"c": "c never"}}));
                }
                let items: Vec<Value> = args["Nodes"]["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|n| n["metadata"]["name"] == "a")
                    .cloned()
                    .collect();
                Json(json!({"Nodes": {"items": items}, "FailedNodes": {"b": "b is full"}, "FailedAndUnresolvableNodes": {"c": "c never"}, "Error": ""}))
            }),
        )
        .route(
            "/ext/prioritize",
            post(move |Json(args): Json<Value>| async move {
                s2.lock().insert("prioritize".into(), args);
                Json(json!([{"Host": "a", "Score": 1}, {"Host": "b", "Score": 9}]))
            }),
        )
        .route(
            "/ext/bind",
            post(move |Json(args): Json<Value>| async move {
                s3.lock().insert("bind".into(), args);
                Json(json!({"Error": ""}))
            }),
        )
        .route(
            "/ext/preempt",
            post(move |Json(args): Json<Value>| async move {
                s4.lock().insert("preempt".into(), args.clone());
                let kept: BTreeMap<String, Value> = match args["NodeNameToMetaVictims"].as_object() {
                    Some(m) => m.clone().into_iter().collect(),
                    None => args["NodeNameToVictims"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(n, v)| {
                            let pods: Vec<Value> = v["Pods"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|p| json!({"UID": p["metadata"]["uid"]}))
                                .collect();
                            (n.clone(), json!({"Pods": pods, "NumPDBViolations": v["NumPDBViolations"]}))
                        })
                        .collect(),
                };
                Json(json!({"NodeNameToMetaVictims": kept}))
            }),
        )
}

#[test]
fn the_verbs_speak_upstream_json() {
    let seen = Seen::default();
    let addr = serve(recording_extender(seen.clone()));
    let ext = extender(config(format!("http://{addr}/ext/")));
    let nodes = vec![node("a"), node("b"), node("c")];
    let p = pod("p", None);

    let out = ext.filter(&p, &nodes).unwrap();
    assert_eq!(names(&out.feasible), ["a"]);
    assert!(
        Arc::ptr_eq(&out.feasible[0], &nodes[0]),
        "the scheduler's own node info is kept"
    );
    assert_eq!(
        out.failed,
        BTreeMap::from([("b".to_string(), "b is full".to_string())])
    );
    assert_eq!(
        out.failed_and_unresolvable,
        BTreeMap::from([("c".to_string(), "c never".to_string())])
    );
    let args = seen.lock()["filter"].clone();
    assert_eq!(args["Pod"]["metadata"]["name"], "p");
    assert_eq!(args["Nodes"]["items"].as_array().unwrap().len(), 3);
    assert_eq!(args["NodeNames"], Value::Null);

    let (scores, weight) = ext.prioritize(&p, &nodes).unwrap();
    assert_eq!(weight, 2);
    assert_eq!(
        scores
            .iter()
            .map(|s| (s.host.as_str(), s.score))
            .collect::<Vec<_>>(),
        [("a", 1), ("b", 9)]
    );

    ext.bind(&p, "a").unwrap();
    assert_eq!(
        seen.lock()["bind"],
        json!({"PodName": "p", "PodNamespace": "ns", "PodUID": "uid-p", "Node": "a"})
    );

    // Preemption: whole victims go out, UIDs come back and are resolved on their node.
    let victim = Arc::new(pod("v", None));
    let mut with_victim = NodeInfo::new(nodes[0].node().unwrap().clone());
    with_victim.add_pod(victim.clone());
    let with_victim = Arc::new(with_victim);
    let victims = BTreeMap::from([(
        "a".to_string(),
        Victims {
            pods: vec![victim.clone()],
            num_pdb_violations: 1,
        },
    )]);
    let lookup = |n: &str| (n == "a").then(|| with_victim.clone());
    let kept = ext.process_preemption(&p, victims, &lookup).unwrap();
    assert_eq!(kept["a"].pods[0].uid, "uid-v");
    assert_eq!(kept["a"].num_pdb_violations, 1);
    let args = seen.lock()["preempt"].clone();
    assert_eq!(args["NodeNameToVictims"]["a"]["Pods"][0]["metadata"]["name"], "v");
    assert_eq!(args["NodeNameToMetaVictims"], Value::Null);
}

#[test]
fn a_node_cache_capable_extender_gets_names() {
    let seen = Seen::default();
    let addr = serve(recording_extender(seen.clone()));
    let ext = extender(ExtenderConfig {
        node_cache_capable: true,
        ..config(format!("http://{addr}/ext"))
    });
    let nodes = vec![node("a"), node("b"), node("c")];
    let out = ext.filter(&pod("p", None), &nodes).unwrap();
    assert_eq!(names(&out.feasible), ["a"]);
    let args = seen.lock()["filter"].clone();
    assert_eq!(args["NodeNames"], json!(["a", "b", "c"]));
    assert_eq!(args["Nodes"], Value::Null);

    // Victims as UIDs.
    let victim = Arc::new(pod("v", None));
    let mut with_victim = NodeInfo::new(nodes[0].node().unwrap().clone());
    with_victim.add_pod(victim.clone());
    let with_victim = Arc::new(with_victim);
    let victims = BTreeMap::from([(
        "a".to_string(),
        Victims {
            pods: vec![victim],
            num_pdb_violations: 0,
        },
    )]);
    let lookup = |n: &str| (n == "a").then(|| with_victim.clone());
    ext.process_preemption(&pod("p", None), victims, &lookup).unwrap();
    assert_eq!(
        seen.lock()["preempt"]["NodeNameToMetaVictims"],
        json!({"a": {"Pods": [{"UID": "uid-v"}], "NumPDBViolations": 0}})
    );
}

#[test]
fn failures_carry_upstreams_messages() {
    let router = Router::new()
        .route(
            "/ext/filter",
            post(|| async { Json(json!({"Error": "no capacity"})) }),
        )
        .route(
            "/ext/prioritize",
            post(|| async { (http::StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        )
        .route(
            "/ext/bind",
            post(|| async { Json(json!({"Error": "bind refused"})) }),
        )
        .route(
            "/ext/preempt",
            post(|| async { Json(json!({"NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "nobody"}]}}})) }),
        );
    let addr = serve(router);
    let url = format!("http://{addr}/ext");
    let ext = extender(config(url.clone()));
    let nodes = vec![node("a")];
    let p = pod("p", None);
    assert_eq!(ext.filter(&p, &nodes).unwrap_err().to_string(), "no capacity");
    assert_eq!(
        ext.prioritize(&p, &nodes).unwrap_err().to_string(),
        format!("failed prioritize with extender at URL {url}/prioritize, code 500")
    );
    assert_eq!(ext.bind(&p, "a").unwrap_err().to_string(), "bind refused");
    let lookup = |n: &str| (n == "a").then(|| node("a"));
    assert_eq!(
        ext.process_preemption(&p, BTreeMap::new(), &lookup)
            .unwrap_err()
            .to_string(),
        format!(
            "extender: {url} claims to preempt pod (UID: nobody) on node: a, but the pod is not found on that node"
        )
    );
    // Nothing listens: a transport error.
    let closed = extender(config("http://127.0.0.1:1/ext".into()));
    assert!(
        closed
            .filter(&p, &nodes)
            .unwrap_err()
            .to_string()
            .starts_with("Post \"http://127.0.0.1:1/ext/filter\"")
    );
}

#[test]
fn a_slow_extender_times_out_after_http_timeout() {
    let router = Router::new().route(
        "/ext/filter",
        post(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Json(json!({"NodeNames": []}))
        }),
    );
    let addr = serve(router);
    let ext = extender(ExtenderConfig {
        http_timeout: GoDuration(Duration::from_millis(200)),
        ..config(format!("http://{addr}/ext"))
    });
    let began = Instant::now();
    let err = ext.filter(&pod("p", None), &[node("a")]).unwrap_err();
    assert!(began.elapsed() < Duration::from_secs(2), "{:?}", began.elapsed());
    assert!(err.to_string().contains("Client.Timeout exceeded"), "{err}");
}

#[test]
fn managed_resources_decide_interest() {
    let ext = extender(ExtenderConfig {
        managed_resources: vec![ExtenderManagedResource {
            name: "example.com/gpu".into(),
            ignored_by_scheduler: false,
        }],
        ..config("http://127.0.0.1:1".into())
    });
    // upstream's TestIsInterested: no managed resource requested, one in a container, one in an
    // init container.
    assert!(!ext.is_interested(&pod("p", None)));
    assert!(!ext.is_interested(&pod("p", Some("example.com/other"))));
    assert!(ext.is_interested(&pod("p", Some("example.com/gpu"))));
    let mut init = (*pod("p", Some("example.com/gpu")).pod).clone();
    let spec = init.spec.as_mut().unwrap();
    spec.init_containers = Some(std::mem::take(&mut spec.containers));
    spec.containers = vec![Container::default()];
    assert!(ext.is_interested(&PodInfo::new(init)));
    // No managed resources: every pod.
    let all = extender(config("http://127.0.0.1:1".into()));
    assert!(all.is_interested(&pod("p", None)));
}

#[test]
fn https_with_and_without_a_ca() {
    let seen = Seen::default();
    let (addr, cert_pem) = serve_tls(recording_extender(seen));
    let url = format!("https://localhost:{}/ext", addr.port());
    let nodes = vec![node("a"), node("b")];
    let p = pod("p", None);

    // enableHTTPS without a CA: the certificate is not verified, as upstream.
    let insecure = extender(ExtenderConfig {
        enable_https: true,
        ..config(url.clone())
    });
    assert_eq!(names(&insecure.filter(&p, &nodes).unwrap().feasible), ["a"]);

    // With the CA: verified.
    use base64::Engine;
    let ca_data = base64::engine::general_purpose::STANDARD.encode(&cert_pem);
    let verified = extender(ExtenderConfig {
        enable_https: true,
        tls_config: Some(ExtenderTlsConfig {
            ca_data: ca_data.clone(),
            ..ExtenderTlsConfig::default()
        }),
        ..config(url.clone())
    });
    assert_eq!(names(&verified.filter(&p, &nodes).unwrap().feasible), ["a"]);

    // A CA the server's certificate does not chain to: refused.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let wrong = extender(ExtenderConfig {
        tls_config: Some(ExtenderTlsConfig {
            ca_data: base64::engine::general_purpose::STANDARD.encode(other.cert.pem()),
            ..ExtenderTlsConfig::default()
        }),
        ..config(url.clone())
    });
    assert!(wrong.filter(&p, &nodes).is_err());

    // serverName is what the certificate is checked against.
    let named = extender(ExtenderConfig {
        tls_config: Some(ExtenderTlsConfig {
            ca_data,
            server_name: "elsewhere".into(),
            ..ExtenderTlsConfig::default()
        }),
        ..config(url)
    });
    assert!(named.filter(&p, &nodes).is_err());
}
