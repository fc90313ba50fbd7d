//! Request routing and the REST verbs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::ServerConfig;
use super::discovery;
use super::openapi;
use super::table::{IncludeObject, partial_object_metadata, table, wants_metadata, wants_table};
use crate::error::{StoreError, success_status};
use crate::patch::Patch;
use crate::registry::{KindId, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{
    DeleteOptions, Deletion, ListOptions, ObjectRef, Propagation, Store, Subscription, WatchOptions,
};
use crate::util::{get_str, parse_query};

pub(crate) struct AppState {
    pub(crate) store: Store,
    pub(crate) config: ServerConfig,
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
    pub(crate) server_address: String,
    pub(crate) faults: super::Faults,
    pub(crate) openapi: super::openapi::Cache,
    pub(crate) tokens: crate::auth::TokenAuthority,
}

type Query = HashMap<String, String>;

fn json_bytes(code: StatusCode, bytes: Bytes) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

pub(super) fn json_value(code: StatusCode, v: &Value) -> Response {
    json_bytes(code, Bytes::from(serde_json::to_vec(v).unwrap_or_default()))
}

pub(super) fn error_response(e: &StoreError) -> Response {
    let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = json_value(code, &e.to_status());
    // kube-apiserver repeats a Status's retryAfterSeconds as the Retry-After header.
    if let Some(secs) = e.retry_after_seconds() {
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
    }
    r
}

/// One object, or only its metadata when the client asked for `as=PartialObjectMetadata` (as
/// client-go's metadata client and unisched's claim writes do: the reply of a write is mostly
/// read for its new resourceVersion).
fn object_response(code: StatusCode, o: &ObjectRef, headers: &HeaderMap) -> Response {
    if wants_metadata(accept(headers)) {
        return json_value(code, &partial_object_metadata(o, true));
    }
    json_bytes(code, o.json_bytes().clone())
}

/// The one handler: routes by path, then by method.
pub(crate) async fn dispatch(
    State(app): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(code) = app.faults.take(super::faults::Stage::Before, &method, uri.path()) {
        return injected_fault(code);
    }
    if let Some((delay, _held)) = app.faults.hold(&method, uri.path()) {
        tokio::time::sleep(delay).await;
    }
    let response = handle(&app, &method, &uri, &headers, body).await;
    // A response lost after commit: only for requests that succeeded (a failed one changed nothing).
    if response.status().is_success()
        && let Some(code) = app
            .faults
            .take(super::faults::Stage::AfterCommit, &method, uri.path())
    {
        return injected_fault(code);
    }
    response
}

fn injected_fault(code: u16) -> Response {
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected fault: {code}"), "reason": super::faults::reason_for(code), "code": code,
    });
    json_value(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &status,
    )
}

async fn handle(
    app: &Arc<AppState>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let query: Query = parse_query(uri.query().unwrap_or_default()).into_iter().collect();
    let segs: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let registry = app.store.registry();
    let not_found = || error_response(&StoreError::UnknownResource(uri.path().to_string()));
    match segs.as_slice() {
        ["version"] => json_value(StatusCode::OK, &discovery::version()),
        ["healthz" | "livez" | "readyz", ..] => (StatusCode::OK, "ok").into_response(),
        ["api"] => json_value(StatusCode::OK, &discovery::api_versions(&app.server_address)),
        ["apis"] => json_value(StatusCode::OK, &discovery::api_group_list(registry)),
        ["api", "v1"] => match discovery::resource_list(registry, "", "v1") {
            Some(v) => json_value(StatusCode::OK, &v),
            None => not_found(),
        },
        ["apis", group] => match discovery::api_group(registry, group) {
            Some(v) => json_value(StatusCode::OK, &v),
            None => not_found(),
        },
        ["apis", group, version] => match discovery::resource_list(registry, group, version) {
            Some(v) => json_value(StatusCode::OK, &v),
            None => not_found(),
        },
        ["openapi", "v2"] if !openapi::v2_acceptable(accept(headers)) => json_value(
            StatusCode::NOT_ACCEPTABLE,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("only application/json is served for /openapi/v2 (asked for {})", accept(headers)),
                "reason": "NotAcceptable", "code": 406}),
        ),
        ["openapi", "v2"] => openapi_document(app, uri, || Some(openapi::v2(registry))),
        ["openapi", "v3"] => openapi_document(app, uri, || Some(openapi::v3_root(registry))),
        ["openapi", "v3", "api", version] => {
            openapi_document(app, uri, || openapi::v3_gv(registry, "", version))
        }
        ["openapi", "v3", "apis", group, version] => {
            openapi_document(app, uri, || openapi::v3_gv(registry, group, version))
        }
        [
            "api",
            "v1",
            "namespaces",
            namespace,
            "serviceaccounts",
            name,
            "token",
        ] if *method == Method::POST => super::reviews::token_request(app, namespace, name, headers, &body),
        ["apis", "authentication.k8s.io", "v1", "tokenreviews"] if *method == Method::POST => {
            super::reviews::token_review(app, headers, &body)
        }
        ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] if *method == Method::POST => {
            super::reviews::subject_access_review(app, headers, &body)
        }
        ["api", "v1", rest @ ..] => resource(app, "", "v1", rest, method, &query, headers, body).await,
        ["apis", group, version, rest @ ..] => {
            resource(app, group, version, rest, method, &query, headers, body).await
        }
        _ => not_found(),
    }
}

/// An OpenAPI document (built once, then served from the cache), or 404.
fn openapi_document(app: &AppState, uri: &Uri, make: impl FnOnce() -> Option<Value>) -> Response {
    match app.openapi.get_or_build(uri.path(), make) {
        Some(bytes) => json_bytes(StatusCode::OK, bytes),
        None => error_response(&StoreError::UnknownResource(uri.path().to_string())),
    }
}

struct Target<'a> {
    kind: KindId,
    rt: &'a ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn route<'a>(app: &'a AppState, group: &str, version: &str, rest: &[&str]) -> Option<Target<'a>> {
    let registry = app.store.registry();
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if registry
                .by_gvr(group, version, plural)
                .is_some_and(|k| registry.get(k).namespaced) =>
        {
            let mut r = vec![*plural];
            r.extend_from_slice(tail);
            (Some((*ns).to_string()), r)
        }
        other => (None, other.to_vec()),
    };
    let (plural, name, sub) = match rest.as_slice() {
        [p] => (*p, None, None),
        [p, n] => (*p, Some((*n).to_string()), None),
        [p, n, s] => (*p, Some((*n).to_string()), Some((*s).to_string())),
        _ => return None,
    };
    let kind = registry.by_gvr(group, version, plural)?;
    let rt = registry.get(kind);
    if !rt.namespaced && namespace.is_some() {
        return None;
    }
    if rt.namespaced && namespace.is_none() && name.is_some() {
        return None;
    }
    if let Some(s) = &sub
        && !rt.has_subresource(s)
    {
        return None;
    }
    Some(Target {
        kind,
        rt,
        namespace,
        name,
        sub,
    })
}

fn flag(q: &Query, key: &str) -> bool {
    q.get(key).is_some_and(|v| v == "true" || v == "1")
}

fn dry_run(q: &Query) -> bool {
    q.get("dryRun").is_some_and(|v| v == "All")
}

pub(super) fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, StoreError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if ct.contains("protobuf") {
        return super::protobuf::decode(body);
    }
    if ct.contains("cbor") {
        return Err(StoreError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, \
             application/yaml (got {ct})"
        )));
    }
    if ct.contains("yaml") {
        return serde_yaml::from_slice(body)
            .map_err(|e| StoreError::BadRequest(format!("error decoding YAML: {e}")));
    }
    serde_json::from_slice(body).map_err(|e| StoreError::BadRequest(format!("error decoding JSON body: {e}")))
}

fn accept(headers: &HeaderMap) -> &str {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    app: &Arc<AppState>,
    group: &str,
    version: &str,
    rest: &[&str],
    method: &Method,
    q: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let Some(t) = route(app, group, version, rest) else {
        return error_response(&StoreError::UnknownResource(format!("/{}", rest.join("/"))));
    };
    // Any request may read the resource (a PATCH reads before it writes).
    app.store.before_read(t.kind);
    let res = match (&t.name, t.sub.as_deref(), method.clone()) {
        (None, None, Method::GET) if flag(q, "watch") => return watch(app, &t, q, headers),
        (None, None, Method::GET) => list(app, &t, q, headers),
        (None, None, Method::POST) => create(app, &t, q, headers, &body),
        (None, None, Method::DELETE) => delete_collection(app, &t, q),
        (Some(n), None | Some("status"), Method::GET) => get(app, &t, n, q, headers),
        (Some(n), sub @ (None | Some("status")), Method::PUT) => {
            update(app, &t, n, sub.is_some(), q, headers, &body)
        }
        (Some(n), sub @ (None | Some("status")), Method::PATCH) => {
            patch(app, &t, n, sub.is_some(), q, headers, &body)
        }
        (Some(n), None, Method::DELETE) => delete(app, &t, n, q, headers, &body),
        (Some(n), Some("eviction"), Method::POST) => evict(app, &t, n, q, headers, &body),
        (Some(n), Some("binding"), Method::POST) => bind(app, &t, n, headers, &body),
        _ => Err(StoreError::MethodNotAllowed(format!(
            "the server does not allow this method on the requested resource ({method})"
        ))),
    };
    match res {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn ns_of<'t>(t: &'t Target<'_>) -> &'t str {
    t.namespace.as_deref().unwrap_or_default()
}

fn list_options(q: &Query) -> Result<ListOptions, StoreError> {
    Ok(ListOptions {
        label_selector: LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or_default())?,
        field_selector: FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or_default())?,
        limit: match q.get("limit").filter(|l| !l.is_empty()) {
            Some(l) => Some(
                l.parse::<usize>()
                    .map_err(|_| StoreError::BadRequest(format!("invalid limit {l:?}")))?,
            ),
            None => None,
        },
        continue_token: q.get("continue").cloned(),
        resource_version: q.get("resourceVersion").cloned(),
        resource_version_match: q.get("resourceVersionMatch").cloned(),
    })
}

fn list(app: &AppState, t: &Target<'_>, q: &Query, headers: &HeaderMap) -> Result<Response, StoreError> {
    let opts = list_options(q)?;
    let list = app.store.list_in(t.kind, t.namespace.as_deref(), &opts)?;
    let mut meta = json!({"resourceVersion": list.resource_version.to_string()});
    if let Some(c) = &list.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(r) = list.remaining_item_count {
        meta["remainingItemCount"] = json!(r);
    }
    if wants_table(accept(headers)) {
        let include = IncludeObject::parse(q.get("includeObject").map(String::as_str));
        return Ok(json_value(
            StatusCode::OK,
            &table(t.rt, &list.items, include, meta, true),
        ));
    }
    let mut out =
        Vec::with_capacity(128 + list.items.iter().map(|i| i.json_bytes().len() + 1).sum::<usize>());
    out.extend_from_slice(b"{\"kind\":");
    out.extend_from_slice(&serde_json::to_vec(t.rt.list_kind).unwrap_or_default());
    out.extend_from_slice(b",\"apiVersion\":");
    out.extend_from_slice(&serde_json::to_vec(t.rt.api_version).unwrap_or_default());
    out.extend_from_slice(b",\"metadata\":");
    out.extend_from_slice(&serde_json::to_vec(&meta).unwrap_or_default());
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in list.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item.json_bytes());
    }
    out.extend_from_slice(b"]}");
    Ok(json_bytes(StatusCode::OK, Bytes::from(out)))
}

fn get(
    app: &AppState,
    t: &Target<'_>,
    name: &str,
    q: &Query,
    headers: &HeaderMap,
) -> Result<Response, StoreError> {
    let o = app.store.get_in(t.kind, ns_of(t), name)?;
    if wants_table(accept(headers)) {
        let include = IncludeObject::parse(q.get("includeObject").map(String::as_str));
        let meta = json!({"resourceVersion": o.resource_version().to_string()});
        return Ok(json_value(
            StatusCode::OK,
            &table(t.rt, &[o], include, meta, true),
        ));
    }
    Ok(object_response(StatusCode::OK, &o, headers))
}

/// How a write treats fields its kind does not declare (`fieldValidation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and say so in `Warning` headers (the server default).
    Warn,
    /// Refuse the write (400), as kubectl asks by default.
    Strict,
}

impl FieldValidation {
    fn parse(q: &Query) -> Result<Self, StoreError> {
        match q.get("fieldValidation").map(String::as_str) {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(StoreError::BadRequest(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// Applies `fieldValidation` to a written object: `Ok` carries the warnings to send.
fn check_fields(t: &Target<'_>, mode: FieldValidation, obj: &Value) -> Result<Vec<String>, StoreError> {
    if mode == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    judge_unknown(t, mode, &(t.rt.unknown_fields)(obj))
}

/// Strict: an error naming every unknown field; otherwise the warnings to send.
fn judge_unknown(
    t: &Target<'_>,
    mode: FieldValidation,
    unknown: &[String],
) -> Result<Vec<String>, StoreError> {
    let list: Vec<String> = unknown.iter().map(|u| format!("unknown field {u:?}")).collect();
    if mode == FieldValidation::Strict && !list.is_empty() {
        return Err(StoreError::BadRequest(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            list.join(", "),
            kind = t.rt.kind,
            version = t.rt.version,
        )));
    }
    Ok(list)
}

/// Adds one RFC 7234 `Warning` header (code 299, as kube-apiserver sends) per warning.
fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {}", serde_json::to_string(w).unwrap_or_default());
        if let Ok(v) = header::HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

fn create(
    app: &AppState,
    t: &Target<'_>,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, StoreError> {
    let obj = parse_body(headers, body)?;
    let warnings = check_fields(t, FieldValidation::parse(q)?, &obj)?;
    let o = app
        .store
        .create_in(t.kind, t.namespace.as_deref(), obj, dry_run(q))?;
    Ok(with_warnings(
        object_response(StatusCode::CREATED, &o, headers),
        &warnings,
    ))
}

fn update(
    app: &AppState,
    t: &Target<'_>,
    name: &str,
    status: bool,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, StoreError> {
    let obj = parse_body(headers, body)?;
    let warnings = check_fields(t, FieldValidation::parse(q)?, &obj)?;
    let o = app
        .store
        .update_in(t.kind, ns_of(t), name, obj, status, dry_run(q))?;
    Ok(with_warnings(
        object_response(StatusCode::OK, &o, headers),
        &warnings,
    ))
}

fn patch(
    app: &AppState,
    t: &Target<'_>,
    name: &str,
    status: bool,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, StoreError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let p = Patch::from_body(ct, body)?;
    let mode = FieldValidation::parse(q)?;
    // A patch is judged by the fields it adds: those unknown in the result but not in the stored
    // object. That costs a dry run, so it happens only when the client asks for a mode.
    let warnings = if q.contains_key("fieldValidation") && mode != FieldValidation::Ignore {
        let before = match app.store.get_in(t.kind, ns_of(t), name) {
            Ok(o) => (t.rt.unknown_fields)(&o.to_value()),
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e),
        };
        let (preview, _) = app.store.patch_in(t.kind, ns_of(t), name, &p, status, true)?;
        let added: Vec<String> = (t.rt.unknown_fields)(&preview.to_value())
            .into_iter()
            .filter(|u| !before.contains(u))
            .collect();
        judge_unknown(t, mode, &added)?
    } else {
        Vec::new()
    };
    let (o, created) = app
        .store
        .patch_in(t.kind, ns_of(t), name, &p, status, dry_run(q))?;
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(with_warnings(object_response(code, &o, headers), &warnings))
}

/// A DELETE's body (`DeleteOptions` as JSON, YAML or protobuf; empty is `{}`).
fn delete_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, StoreError> {
    Ok(if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else if body.starts_with(super::protobuf::MAGIC) {
        super::protobuf::decode(body)?
    } else {
        parse_body(headers, body)
            .map_err(|e| StoreError::BadRequest(format!("error decoding DeleteOptions: {e}")))?
    })
}

/// What kube-apiserver warns about when a batch/v1 Job is deleted without a propagation policy:
/// its pods are orphaned by default.
const JOB_ORPHAN_WARNING: &str = "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning";

/// Whether a delete of `rt` says nothing of dependents and orphans them by default (batch/v1
/// Jobs, for compatibility): then the options become `Orphan` and the answer carries a warning.
fn orphans_by_default(rt: &ResourceType, q: &Query, b: &Value) -> bool {
    rt.is("batch", "Job")
        && q.get("propagationPolicy").is_none_or(String::is_empty)
        && get_str(b, &["propagationPolicy"]).is_none_or(str::is_empty)
        && b.get("orphanDependents").is_none_or(Value::is_null)
}

fn delete_options_from(q: &Query, b: &Value) -> Result<DeleteOptions, StoreError> {
    let b = b.clone();
    let policy = q
        .get("propagationPolicy")
        .cloned()
        .or_else(|| get_str(&b, &["propagationPolicy"]).map(str::to_string))
        .or_else(|| match b.get("orphanDependents").and_then(Value::as_bool) {
            Some(true) => Some("Orphan".into()),
            _ => None,
        });
    let propagation = match policy.as_deref() {
        None | Some("") | Some("Background") => Propagation::Background,
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        Some(other) => {
            return Err(StoreError::BadRequest(format!(
                "propagationPolicy {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )));
        }
    };
    let body_dry = b
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "All"));
    Ok(DeleteOptions {
        propagation,
        precondition_uid: get_str(&b, &["preconditions", "uid"]).map(str::to_string),
        precondition_resource_version: get_str(&b, &["preconditions", "resourceVersion"]).map(str::to_string),
        dry_run: dry_run(q) || body_dry,
    })
}

fn delete(
    app: &AppState,
    t: &Target<'_>,
    name: &str,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, StoreError> {
    let body = delete_body(headers, body)?;
    let mut opts = delete_options_from(q, &body)?;
    let warnings: Vec<String> = if orphans_by_default(t.rt, q, &body) {
        opts.propagation = Propagation::Orphan;
        vec![JOB_ORPHAN_WARNING.to_string()]
    } else {
        Vec::new()
    };
    let response = match app.store.delete_in(t.kind, ns_of(t), name, &opts)? {
        Deletion::Removed(o) => object_response(StatusCode::OK, &o, headers),
        Deletion::Pending(o) => object_response(StatusCode::ACCEPTED, &o, headers),
    };
    Ok(with_warnings(response, &warnings))
}

fn delete_collection(app: &AppState, t: &Target<'_>, q: &Query) -> Result<Response, StoreError> {
    let mut opts = list_options(q)?;
    opts.limit = None;
    opts.continue_token = None;
    let mut dopts = delete_options_from(q, &json!({}))?;
    let mut warnings = Vec::new();
    if orphans_by_default(t.rt, q, &json!({})) {
        dopts.propagation = Propagation::Orphan;
        warnings.push(JOB_ORPHAN_WARNING.to_string());
    }
    let list = app.store.list_in(t.kind, t.namespace.as_deref(), &opts)?;
    let mut items = Vec::new();
    for o in &list.items {
        match app.store.delete_in(t.kind, o.namespace(), o.name(), &dopts) {
            Ok(d) => items.push(d.object().to_value()),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    let rv = app.store.resource_version();
    Ok(with_warnings(
        json_value(
            StatusCode::OK,
            &json!({"kind": t.rt.list_kind, "apiVersion": t.rt.api_version, "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
        ),
        &warnings,
    ))
}

/// `pods/{name}/eviction` (policy/v1 or v1beta1 `Eviction`): deletes the pod with the eviction's
/// `deleteOptions` if its PodDisruptionBudget allows (see [`Store::evict`]). A `dryRun` on the
/// request and one in the body must agree, as upstream.
fn evict(
    app: &AppState,
    t: &Target<'_>,
    name: &str,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, StoreError> {
    let eviction = parse_body(headers, body)?;
    if get_str(&eviction, &["metadata", "name"]).unwrap_or_default() != name {
        return Err(StoreError::BadRequest(
            "name in URL does not match name in Eviction object".into(),
        ));
    }
    let body_options = eviction.get("deleteOptions").cloned().unwrap_or(json!({}));
    if body_options.get("ignoreStoreReadErrorWithClusterBreakingPotential") == Some(&json!(true)) {
        return Err(StoreError::invalid(
            "Eviction",
            name,
            "deleteOptions.ignoreStoreReadErrorWithClusterBreakingPotential",
            "Invalid value: true: can not be set for pod eviction, try after removing the option",
        ));
    }
    let body_dry_run = body_options
        .get("dryRun")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty());
    if let (Some(in_body), Some(in_query)) = (body_dry_run, q.get("dryRun"))
        && in_body
            .iter()
            .map(|x| x.as_str().unwrap_or_default())
            .ne([in_query.as_str()])
    {
        return Err(StoreError::Internal(format!(
            "Non-matching dry-run options in request and content: [{in_query}] and [{}]",
            in_body
                .iter()
                .map(|x| x.as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" ")
        )));
    }
    let opts = delete_options_from(q, &body_options)?;
    app.store.evict(ns_of(t), name, &opts)?;
    Ok(json_value(StatusCode::CREATED, &success_status(201)))
}

fn bind(
    app: &AppState,
    t: &Target<'_>,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, StoreError> {
    let b = parse_body(headers, body)?;
    app.store.bind_in(ns_of(t), name, &b)?;
    Ok(json_value(StatusCode::CREATED, &success_status(201)))
}

// ----- watch -----

struct WatchState {
    sub: Subscription,
    rt: ResourceType,
    bookmarks: bool,
    bookmark_every: Duration,
    next_bookmark: tokio::time::Instant,
    deadline: tokio::time::Instant,
    shutdown: tokio::sync::watch::Receiver<bool>,
    drops: tokio::sync::watch::Receiver<u64>,
    initial_end_pending: bool,
    table: Option<IncludeObject>,
    done: bool,
}

fn push_event(buf: &mut Vec<u8>, event_type: &str, object: &[u8]) {
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(event_type.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    buf.extend_from_slice(object);
    buf.extend_from_slice(b"}\n");
}

impl WatchState {
    fn bookmark(&self, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": self.sub.position().to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta});
        let mut buf = Vec::new();
        push_event(
            &mut buf,
            "BOOKMARK",
            &serde_json::to_vec(&obj).unwrap_or_default(),
        );
        Bytes::from(buf)
    }

    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        loop {
            if self.initial_end_pending && self.sub.initial_events_left() == 0 {
                self.initial_end_pending = false;
                if self.bookmarks {
                    return Some(self.bookmark(true));
                }
            }
            match self.sub.poll_batch(512) {
                Err(e) => {
                    self.done = true;
                    let mut buf = Vec::new();
                    push_event(
                        &mut buf,
                        "ERROR",
                        &serde_json::to_vec(&e.to_status()).unwrap_or_default(),
                    );
                    return Some(Bytes::from(buf));
                }
                Ok(batch) if !batch.is_empty() => {
                    let mut buf =
                        Vec::with_capacity(batch.iter().map(|e| e.object.json_bytes().len() + 32).sum());
                    for ev in &batch {
                        match self.table {
                            Some(include) => {
                                let meta =
                                    json!({"resourceVersion": ev.object.resource_version().to_string()});
                                let t =
                                    table(&self.rt, std::slice::from_ref(&ev.object), include, meta, false);
                                push_event(
                                    &mut buf,
                                    ev.event_type.as_str(),
                                    &serde_json::to_vec(&t).unwrap_or_default(),
                                );
                            }
                            None => push_event(&mut buf, ev.event_type.as_str(), ev.object.json_bytes()),
                        }
                    }
                    return Some(Bytes::from(buf));
                }
                Ok(_) => {}
            }
            tokio::select! {
                r = self.sub.changed() => {
                    if r.is_err() {
                        return None;
                    }
                }
                _ = tokio::time::sleep_until(self.next_bookmark), if self.bookmarks => {
                    self.next_bookmark = tokio::time::Instant::now() + self.bookmark_every;
                    self.sub.catch_up();
                    return Some(self.bookmark(false));
                }
                _ = tokio::time::sleep_until(self.deadline) => {
                    self.done = true;
                    return None;
                }
                _ = self.shutdown.changed() => {
                    self.done = true;
                    return None;
                }
                _ = self.drops.changed() => {
                    self.done = true;
                    return None;
                }
            }
        }
    }
}

fn watch(app: &AppState, t: &Target<'_>, q: &Query, headers: &HeaderMap) -> Response {
    let setup = || -> Result<WatchState, StoreError> {
        let lo = list_options(q)?;
        let send_initial = match q.get("sendInitialEvents").map(String::as_str) {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => None,
        };
        let opts = WatchOptions {
            label_selector: lo.label_selector,
            field_selector: lo.field_selector,
            resource_version: q.get("resourceVersion").cloned(),
            send_initial_events: send_initial,
        };
        let sub = app.store.watch_in(t.kind, t.namespace.as_deref(), &opts)?;
        let timeout = match q.get("timeoutSeconds").filter(|s| !s.is_empty()) {
            Some(s) => Duration::from_secs(
                s.parse::<u64>()
                    .map_err(|_| StoreError::BadRequest(format!("invalid timeoutSeconds {s:?}")))?,
            ),
            None => app.config.watch_timeout,
        };
        let now = tokio::time::Instant::now();
        let table = wants_table(accept(headers))
            .then(|| IncludeObject::parse(q.get("includeObject").map(String::as_str)));
        Ok(WatchState {
            sub,
            rt: t.rt.clone(),
            bookmarks: flag(q, "allowWatchBookmarks"),
            bookmark_every: app.config.bookmark_interval.max(Duration::from_millis(10)),
            next_bookmark: now + app.config.bookmark_interval,
            deadline: now + timeout,
            shutdown: app.shutdown.clone(),
            drops: app.faults.drop_signal(),
            initial_end_pending: send_initial == Some(true),
            table,
            done: false,
        })
    };
    let state = match setup() {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        st.next_chunk()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), st))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}
