//! One extender over HTTP: the verbs as POSTs of JSON to `urlPrefix/verb`, each call limited by
//! `httpTimeout` (5 s when unset), answered by a 200 with the verb's JSON; anything else fails
//! the call with upstream's messages.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use k8s_openapi::api::core::v1::Container;
use serde::{Serialize, de::DeserializeOwned};
use unisched_framework::{
    NodeInfo, PodInfo,
    extender::{Extender, ExtenderError, ExtenderFilterOutcome, HostPriority, Victims},
};

use crate::{
    CallRuntime, ExtenderObserver,
    tls::{TlsError, client_config},
    wire,
};

/// upstream's `DefaultExtenderTimeout`.
pub const DEFAULT_EXTENDER_TIMEOUT: Duration = Duration::from_secs(5);

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Why a call to an extender failed; the messages are upstream's where it has one.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The arguments could not be encoded.
    #[error("encoding the {verb} arguments")]
    Encode {
        /// The verb.
        verb: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The request could not be built (a bad URL).
    #[error("Post {url:?}: {source}")]
    Request {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: http::Error,
    },
    /// The connection or the exchange failed.
    #[error("Post {url:?}: {source}")]
    Transport {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No answer within `httpTimeout`.
    #[error("Post {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)")]
    Timeout {
        /// The URL.
        url: String,
    },
    /// An answer other than 200.
    #[error("failed {verb} with extender at URL {url}, code {code}")]
    Status {
        /// The verb.
        verb: String,
        /// The URL.
        url: String,
        /// The HTTP status.
        code: u16,
    },
    /// The answer is not the verb's JSON.
    #[error("decoding the {verb} answer of {url}")]
    Decode {
        /// The verb.
        verb: String,
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The extender answered with an error.
    #[error("{0}")]
    Reported(String),
    /// The filter answer names a node it was not given.
    #[error(
        "extender {extender:?} claims a filtered node {node:?} which is not found in the input node list"
    )]
    UnknownNode {
        /// The extender.
        extender: String,
        /// The node.
        node: String,
    },
    /// The preempt answer names a node that is not in the snapshot.
    #[error("nodeinfo not found for node name {0:?}")]
    UnknownPreemptionNode(String),
    /// The preempt answer names a pod that is not on its node.
    #[error(
        "extender: {extender} claims to preempt pod (UID: {uid}) on node: {node}, but the pod is not found on that node"
    )]
    UnknownVictim {
        /// The extender.
        extender: String,
        /// The pod's UID.
        uid: String,
        /// The node.
        node: String,
    },
    /// A verb the extender does not configure.
    #[error("preempt verb is not defined for extender {0} but run into ProcessPreemption")]
    NoPreemptVerb(String),
    /// A bind without a bind verb.
    #[error("unexpected empty bindVerb in extender")]
    NoBindVerb,
    /// The call's task ended without an answer (the process is shutting down).
    #[error("the extender call was cancelled")]
    Cancelled,
}

impl From<CallError> for ExtenderError {
    fn from(e: CallError) -> Self {
        ExtenderError::new(e)
    }
}

/// Why an extender could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Its TLS settings.
    #[error("extender {url}")]
    Tls {
        /// The extender's URL prefix.
        url: String,
        /// Why.
        #[source]
        source: TlsError,
    },
}

/// An extender reached over HTTP(S).
pub struct HttpExtender {
    url_prefix: String,
    filter_verb: String,
    prioritize_verb: String,
    bind_verb: String,
    preempt_verb: String,
    weight: i64,
    node_cache_capable: bool,
    managed_resources: BTreeSet<String>,
    ignorable: bool,
    timeout: Duration,
    client: HttpsClient,
    runtime: Arc<CallRuntime>,
    observer: Arc<dyn ExtenderObserver>,
}

impl std::fmt::Debug for HttpExtender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpExtender")
            .field("url_prefix", &self.url_prefix)
            .finish_non_exhaustive()
    }
}

impl HttpExtender {
    /// The extender `config` describes; its calls run on `runtime` and are reported to `observer`.
    pub fn new(
        config: &unisched_framework::config::Extender,
        runtime: Arc<CallRuntime>,
        observer: Arc<dyn ExtenderObserver>,
    ) -> Result<Self, BuildError> {
        let tls_error = |source| BuildError::Tls {
            url: config.url_prefix.clone(),
            source,
        };
        let (tls, server_name) = client_config(config).map_err(tls_error)?;
        let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
        let builder = builder.https_or_http();
        let connector = match server_name {
            Some(name) => builder
                .with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
                .enable_http1()
                .build(),
            None => builder.enable_http1().build(),
        };
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let timeout = if config.http_timeout.0.is_zero() {
            DEFAULT_EXTENDER_TIMEOUT
        } else {
            config.http_timeout.0
        };
        Ok(HttpExtender {
            url_prefix: config.url_prefix.clone(),
            filter_verb: config.filter_verb.clone(),
            prioritize_verb: config.prioritize_verb.clone(),
            bind_verb: config.bind_verb.clone(),
            preempt_verb: config.preempt_verb.clone(),
            weight: config.weight,
            node_cache_capable: config.node_cache_capable,
            managed_resources: config.managed_resources.iter().map(|r| r.name.clone()).collect(),
            ignorable: config.ignorable,
            timeout,
            client,
            runtime,
            observer,
        })
    }

    /// POSTs `args` to `verb` and decodes the answer, within the timeout; the call runs on the
    /// extenders' runtime while this thread waits.
    fn send<A: Serialize, R: DeserializeOwned + Send + 'static>(
        &self,
        verb: &str,
        args: &A,
    ) -> Result<R, CallError> {
        let body = serde_json::to_vec(args).map_err(|source| CallError::Encode {
            verb: verb.to_string(),
            source,
        })?;
        let url = format!("{}/{verb}", self.url_prefix.trim_end_matches('/'));
        let request = http::Request::post(&url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|source| CallError::Request {
                url: url.clone(),
                source,
            })?;
        let client = self.client.clone();
        let timeout = self.timeout;
        let verb_owned = verb.to_string();
        let began = Instant::now();
        let call = async move {
            let exchange = async {
                let response = client.request(request).await.map_err(|e| CallError::Transport {
                    url: url.clone(),
                    source: Box::new(e),
                })?;
                let code = response.status().as_u16();
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| CallError::Transport {
                        url: url.clone(),
                        source: Box::new(e),
                    })?
                    .to_bytes();
                Ok::<_, CallError>((code, body))
            };
            let (code, body) = tokio::time::timeout(timeout, exchange)
                .await
                .map_err(|_| CallError::Timeout { url: url.clone() })??;
            if code != 200 {
                return Err(CallError::Status {
                    verb: verb_owned,
                    url,
                    code,
                });
            }
            serde_json::from_slice(&body).map_err(|source| CallError::Decode {
                verb: verb_owned,
                url,
                source,
            })
        };
        let result = self.runtime.run(call).unwrap_or(Err(CallError::Cancelled));
        self.observer
            .call_finished(&self.url_prefix, verb, result.is_ok(), began.elapsed());
        result
    }

    fn has_managed_resources(&self, containers: &[Container]) -> bool {
        containers.iter().filter_map(|c| c.resources.as_ref()).any(|r| {
            r.requests
                .iter()
                .chain(r.limits.iter())
                .flat_map(|m| m.keys())
                .any(|name| self.managed_resources.contains(name))
        })
    }

    /// The filter and prioritize arguments: whole nodes, or only names with a node cache.
    fn node_args<'a>(&self, pod: &'a PodInfo, nodes: &'a [Arc<NodeInfo>]) -> wire::ExtenderArgs<'a> {
        if self.node_cache_capable {
            wire::ExtenderArgs {
                pod: &pod.pod,
                nodes: None,
                node_names: Some(nodes.iter().map(|n| n.name()).collect()),
            }
        } else {
            wire::ExtenderArgs {
                pod: &pod.pod,
                nodes: Some(wire::NodeListOut {
                    metadata: serde_json::Map::new(),
                    items: nodes
                        .iter()
                        .filter_map(|n| n.node().map(|n| n.as_ref()))
                        .collect(),
                }),
                node_names: None,
            }
        }
    }
}

impl Extender for HttpExtender {
    fn name(&self) -> &str {
        &self.url_prefix
    }

    fn is_ignorable(&self) -> bool {
        self.ignorable
    }

    fn is_interested(&self, pod: &PodInfo) -> bool {
        if self.managed_resources.is_empty() {
            return true;
        }
        let Some(spec) = pod.pod.spec.as_ref() else {
            return false;
        };
        self.has_managed_resources(&spec.containers)
            || spec
                .init_containers
                .as_deref()
                .is_some_and(|c| self.has_managed_resources(c))
    }

    fn is_filter(&self) -> bool {
        !self.filter_verb.is_empty()
    }

    fn is_prioritizer(&self) -> bool {
        !self.prioritize_verb.is_empty()
    }

    fn is_binder(&self) -> bool {
        !self.bind_verb.is_empty()
    }

    fn supports_preemption(&self) -> bool {
        !self.preempt_verb.is_empty()
    }

    fn filter(&self, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Result<ExtenderFilterOutcome, ExtenderError> {
        if self.filter_verb.is_empty() {
            return Ok(ExtenderFilterOutcome {
                feasible: nodes.to_vec(),
                ..ExtenderFilterOutcome::default()
            });
        }
        let result: wire::ExtenderFilterResult = self.send(&self.filter_verb, &self.node_args(pod, nodes))?;
        if let Some(e) = result.error.filter(|e| !e.is_empty()) {
            return Err(CallError::Reported(e).into());
        }
        let given: BTreeMap<&str, &Arc<NodeInfo>> = nodes.iter().map(|n| (n.name(), n)).collect();
        let feasible = match (self.node_cache_capable, result.node_names, result.nodes) {
            (true, Some(names), _) => names
                .iter()
                .map(|name| {
                    given
                        .get(name.as_str())
                        .map(|n| Arc::clone(n))
                        .ok_or_else(|| CallError::UnknownNode {
                            extender: self.url_prefix.clone(),
                            node: name.clone(),
                        })
                })
                .collect::<Result<Vec<_>, _>>()?,
            // Whole nodes: the scheduler's own view of each (upstream makes a node info from the
            // returned object, which lacks the node's pods; a node it was not given still
            // counts, as there).
            (_, _, Some(list)) => list
                .items
                .into_iter()
                .map(|node| {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    given
                        .get(name.as_str())
                        .map(|n| Arc::clone(n))
                        .unwrap_or_else(|| Arc::new(NodeInfo::new(Arc::new(node))))
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(ExtenderFilterOutcome {
            feasible,
            failed: result.failed_nodes.unwrap_or_default(),
            failed_and_unresolvable: result.failed_and_unresolvable_nodes.unwrap_or_default(),
        })
    }

    fn prioritize(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<(Vec<HostPriority>, i64), ExtenderError> {
        if self.prioritize_verb.is_empty() {
            let zeros = nodes
                .iter()
                .map(|n| HostPriority {
                    host: n.name().to_string(),
                    score: 0,
                })
                .collect();
            return Ok((zeros, 0));
        }
        let result: Vec<wire::HostPriority> =
            self.send(&self.prioritize_verb, &self.node_args(pod, nodes))?;
        let priorities = result
            .into_iter()
            .map(|p| HostPriority {
                host: p.host,
                score: p.score,
            })
            .collect();
        Ok((priorities, self.weight))
    }

    fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ExtenderError> {
        if self.bind_verb.is_empty() {
            return Err(CallError::NoBindVerb.into());
        }
        let args = wire::ExtenderBindingArgs {
            pod_name: pod.name.clone(),
            pod_namespace: pod.namespace.clone(),
            pod_uid: pod.uid.clone(),
            node: node.to_string(),
        };
        let result: wire::ExtenderBindingResult = self.send(&self.bind_verb, &args)?;
        match result.error.filter(|e| !e.is_empty()) {
            Some(e) => Err(CallError::Reported(e).into()),
            None => Ok(()),
        }
    }

    fn process_preemption(
        &self,
        pod: &PodInfo,
        victims: BTreeMap<String, Victims>,
        nodes: &dyn Fn(&str) -> Option<Arc<NodeInfo>>,
    ) -> Result<BTreeMap<String, Victims>, ExtenderError> {
        if self.preempt_verb.is_empty() {
            return Err(CallError::NoPreemptVerb(self.url_prefix.clone()).into());
        }
        let args = if self.node_cache_capable {
            wire::ExtenderPreemptionArgs {
                pod: &pod.pod,
                node_name_to_victims: None,
                node_name_to_meta_victims: Some(
                    victims
                        .iter()
                        .map(|(node, v)| (node.as_str(), meta_victims(v)))
                        .collect(),
                ),
            }
        } else {
            wire::ExtenderPreemptionArgs {
                pod: &pod.pod,
                node_name_to_victims: Some(
                    victims
                        .iter()
                        .map(|(node, v)| {
                            let out = wire::VictimsOut {
                                pods: v.pods.iter().map(|p| p.pod.as_ref()).collect(),
                                num_pdb_violations: v.num_pdb_violations,
                            };
                            (node.as_str(), out)
                        })
                        .collect(),
                ),
                node_name_to_meta_victims: None,
            }
        };
        let result: wire::ExtenderPreemptionResult = self.send(&self.preempt_verb, &args)?;
        let mut out = BTreeMap::new();
        for (node, meta) in result.node_name_to_meta_victims.unwrap_or_default() {
            let info = nodes(&node).ok_or_else(|| CallError::UnknownPreemptionNode(node.clone()))?;
            let pods = meta
                .pods
                .iter()
                .map(|p| {
                    info.pod(&p.uid).cloned().ok_or_else(|| CallError::UnknownVictim {
                        extender: self.url_prefix.clone(),
                        uid: p.uid.clone(),
                        node: node.clone(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            out.insert(
                node,
                Victims {
                    pods,
                    num_pdb_violations: meta.num_pdb_violations,
                },
            );
        }
        Ok(out)
    }
}

/// Victims as the UIDs an extender with its own node cache receives.
pub(crate) fn meta_victims(victims: &Victims) -> wire::MetaVictims {
    wire::MetaVictims {
        pods: victims
            .pods
            .iter()
            .map(|p| wire::MetaPod { uid: p.uid.clone() })
            .collect(),
        num_pdb_violations: victims.num_pdb_violations,
    }
}
