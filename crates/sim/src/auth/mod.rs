//! Who may do what on the simulated control plane: just enough of kube-apiserver's authentication
//! and authorization for a component that *delegates* them (unisched's secure port asks the API
//! server with `TokenReview` and `SubjectAccessReview`, as kube-scheduler does).
//!
//! The simulator itself still serves every request without credentials; these are answers *about*
//! other clients, so that the delegation can be tested end to end against it:
//!
//! - [`tokens`]: ServiceAccount tokens issued through `TokenRequest`
//!   (`POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`) are the only tokens a
//!   `TokenReview` accepts. Any other token is unauthenticated.
//! - [`rbac`]: a `SubjectAccessReview` is decided by the RBAC objects stored in the simulator
//!   (ClusterRoles, ClusterRoleBindings, Roles, RoleBindings), plus the `system:masters` group,
//!   which kube-apiserver allows everything. Without a matching rule the answer is "not allowed".

pub mod rbac;
pub mod tokens;

pub use rbac::{AccessDecision, authorize};
pub use tokens::{IssuedToken, TokenAuthority, TokenUser};
