//! Delegated authentication and authorization against the simulator, through kube-rs as a
//! component's API client sends them: ServiceAccount tokens from `TokenRequest`, `TokenReview`s
//! that know only those tokens, and `SubjectAccessReview`s decided by the stored RBAC objects.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a failure is a panic.

mod common;

use common::start;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

async fn create_json<K>(api: &Api<K>, value: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), &serde_json::from_value(value).unwrap())
        .await
        .unwrap()
}

async fn token_for(client: &kube::Client, namespace: &str, name: &str, audiences: &[&str]) -> TokenRequest {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audiences.iter().map(|a| a.to_string()).collect()),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
}

async fn review(client: &kube::Client, token: &str, audiences: Option<Vec<String>>) -> TokenReview {
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            audiences,
        },
        ..TokenReview::default()
    };
    reviews.create(&PostParams::default(), &review).await.unwrap()
}

async fn allowed(client: &kube::Client, spec: serde_json::Value) -> bool {
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec
    }))
    .unwrap();
    let answer = reviews.create(&PostParams::default(), &review).await.unwrap();
    let status = answer.status.unwrap();
    assert_ne!(status.denied, Some(true), "RBAC never denies");
    status.allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issued_tokens_authenticate_until_their_account_is_deleted() {
    let (_server, client) = start().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account = create_json(&accounts, json!({"metadata": {"name": "prometheus"}})).await;

    let issued = token_for(&client, "default", "prometheus", &[]).await;
    let status = issued.status.unwrap();
    let token = status.token.unwrap();
    assert!(!token.is_empty());
    let reviewed = review(&client, &token, None).await.status.unwrap();
    assert_eq!(reviewed.authenticated, Some(true), "{reviewed:?}");
    let user = reviewed.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:prometheus")
    );
    assert_eq!(user.uid, account.metadata.uid);
    assert_eq!(
        user.groups.unwrap(),
        [
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ]
    );

    // Audiences: a token is valid only for the audiences it was requested for.
    let scoped = token_for(&client, "default", "prometheus", &["metrics"])
        .await
        .status
        .unwrap();
    let scoped = scoped.token.unwrap();
    let for_api = review(&client, &scoped, None).await.status.unwrap();
    assert_eq!(for_api.authenticated, Some(false));
    let for_metrics = review(&client, &scoped, Some(vec!["metrics".into()]))
        .await
        .status
        .unwrap();
    assert_eq!(for_metrics.authenticated, Some(true));
    assert_eq!(for_metrics.audiences.unwrap(), ["metrics"]);

    // A token nobody issued is not authenticated.
    let unknown = review(&client, "made-up", None).await.status.unwrap();
    assert_eq!(unknown.authenticated, Some(false));
    assert!(unknown.user.is_none());

    // Deleting the account revokes its tokens; a token for a missing account is 404.
    accounts
        .delete("prometheus", &DeleteParams::default())
        .await
        .unwrap();
    let revoked = review(&client, &token, None).await.status.unwrap();
    assert_eq!(revoked.authenticated, Some(false));
    let request = TokenRequest::default();
    let err = accounts
        .create_token_request("prometheus", &PostParams::default(), &request)
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_access_reviews_follow_the_stored_rbac_objects() {
    let (_server, client) = start().await;
    let cluster_roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    let cluster_bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    let role_bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(client.clone(), "default");
    create_json(
        &cluster_roles,
        json!({"metadata": {"name": "metrics-reader"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
    )
    .await;
    create_json(
        &cluster_roles,
        json!({"metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}),
    )
    .await;
    create_json(
        &cluster_bindings,
        json!({"metadata": {"name": "prometheus-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"},
                     {"kind": "Group", "name": "monitors"}]}),
    )
    .await;
    create_json(
        &role_bindings,
        json!({"metadata": {"name": "alice-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pod-reader"},
        "subjects": [{"kind": "User", "name": "alice"}]}),
    )
    .await;

    let metrics = |user: &str, groups: &[&str]| json!({"user": user, "groups": groups, "nonResourceAttributes": {"path": "/metrics", "verb": "get"}});
    let prometheus = "system:serviceaccount:monitoring:prometheus";
    assert!(allowed(&client, metrics(prometheus, &["system:serviceaccounts"])).await);
    assert!(allowed(&client, metrics("bob", &["monitors"])).await);
    assert!(!allowed(&client, metrics("system:serviceaccount:other:prometheus", &[])).await);
    assert!(!allowed(&client, metrics("alice", &["system:authenticated"])).await);
    assert!(allowed(&client, metrics("root", &["system:masters"])).await);
    let configz = json!({"user": prometheus, "nonResourceAttributes": {"path": "/configz", "verb": "get"}});
    assert!(!allowed(&client, configz).await);

    // A RoleBinding grants its ClusterRole's resource rules in its own namespace only.
    let pods = |namespace: &str, verb: &str| json!({"user": "alice", "resourceAttributes": {"namespace": namespace, "verb": verb, "resource": "pods"}});
    assert!(allowed(&client, pods("default", "list")).await);
    assert!(!allowed(&client, pods("kube-system", "list")).await);
    assert!(!allowed(&client, pods("default", "delete")).await);

    // A review must say what is asked, and by whom.
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let empty: SubjectAccessReview = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": "alice"}
    }))
    .unwrap();
    let err = reviews.create(&PostParams::default(), &empty).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 400));
}
